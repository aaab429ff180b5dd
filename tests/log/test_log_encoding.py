"""The bytes the log stores and exports for every kind of entry are pinned.

A store holding one entry of each kind (written by the engine with fixed timestamps) is
dumped table by table, with its export, and compared with `fixtures/kinds-golden.json`,
written by the code before the keyspace and entry shapes were restructured. Any change to a
key layout, a codec, a record's encoding or the export's lines shows up here as a diff.
Regenerate the fixture only for a deliberate format change (`python -m tests.log.test_log_encoding`).
"""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from eventlog import _transfer
from eventlog._engine import append_entries, init_format
from eventlog._storage import TABLE_NAMES, MemoryTables, MemoryTxn
from eventlog.entries import (
    KINDS,
    CompactionInfo,
    ErasureInfo,
    ForkInfo,
    NewEntry,
    RecalledHit,
    RecallInfo,
    SavedInfo,
    StoreLink,
    TitleInfo,
    durable_step_entry,
    encode_info,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
)

GOLDEN = Path(__file__).with_name('fixtures') / 'kinds-golden.json'
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
_MESSAGE = b'{"parts":[{"content":"hi","timestamp":"2026-01-02T03:04:05Z","part_kind":"user-prompt"}],"kind":"request"}'
_SUMMARY = b'{"parts":[{"content":"sum","part_kind":"text"}],"kind":"response"}'


def _at(entry: NewEntry, minutes: int) -> NewEntry:
    return NewEntry(
        conversation_id=entry.conversation_id,
        kind=entry.kind,
        run_id=entry.run_id,
        payload=entry.payload,
        parent=entry.parent,
        idempotency_key=entry.idempotency_key,
        inherited=entry.inherited,
        timestamp=T0 + timedelta(minutes=minutes),
    )


def _build() -> MemoryTables:
    """A store with every kind of entry, idempotency keys of both sorts, a fork and a tombstone."""
    tables = MemoryTables()
    steps: list[list[NewEntry]] = [
        [
            run_started_entry(
                conversation_id='c1', run_id='r1', agent_name='a', metadata={'k': 'v'}, idempotency_key='s'
            ),
            NewEntry(conversation_id='c1', run_id='r1', kind='message', payload=_MESSAGE, idempotency_key='m1'),
            NewEntry(conversation_id='c1', run_id='r1', kind='message', payload=_MESSAGE, inherited=True),
            tool_effect_entry(conversation_id='c1', run_id='r1', tool_call_id='t', tool_name='n', status='completed'),
        ],
        [
            NewEntry(
                conversation_id='c1',
                run_id='r1',
                kind='compaction',
                payload=encode_info(CompactionInfo(replaced=[2, 3], summary=[msgspec.Raw(_SUMMARY)])),
            ),
            run_finished_entry(conversation_id='c1', run_id='r1', status='completed', usage={'requests': 1}),
        ],
        [
            NewEntry(conversation_id='c1', kind='title', payload=encode_info(TitleInfo('T')), idempotency_key='ti'),
            NewEntry(conversation_id='c1', kind='archived'),
            NewEntry(conversation_id='c1', kind='unarchived'),
        ],
        [
            NewEntry(
                conversation_id='c2',
                kind='forked_from',
                payload=encode_info(ForkInfo(conversation_id='c1', seq=2)),
                parent=2,
            ),
            run_started_entry(conversation_id='c2', run_id='r2', parent=2),
            NewEntry(conversation_id='c2', run_id='r2', kind='message', payload=_MESSAGE),
        ],
        [run_started_entry(conversation_id='c3', run_id='r3')],
        [NewEntry(conversation_id='c3', kind='deleted')],
        [NewEntry(conversation_id='c1', kind='erasure', payload=encode_info(ErasureInfo(seqs=[3], reason='r')))],
        [
            run_started_entry(conversation_id='c4', run_id='r4'),
            durable_step_entry(
                conversation_id='c4',
                run_id='r4',
                step=1,
                name='a__model.request',
                result=b'{"parts":[],"kind":"response"}',
                idempotency_key='durable:1',
            ),
        ],
        [
            NewEntry(
                conversation_id='c2',
                run_id='r2',
                kind='recall',
                payload=encode_info(
                    RecallInfo(
                        query='q',
                        mode='bm25',
                        hits=[RecalledHit(run_id='r1', position=0, score=1.5, seq=2)],
                        text='<recalled_history>hi</recalled_history>',
                        tokens=13,
                        max_tokens=100,
                    )
                ),
                idempotency_key='recall:0',
            ),
        ],
        [
            NewEntry(
                conversation_id='c1',
                kind='saved',
                payload=encode_info(
                    SavedInfo(
                        revision='rev-1',
                        head='e1',
                        scope='user-1',
                        branches=['e0'],
                        usage={'requests': 1},
                        deferred={'calls': ['t'], 'approvals': [], 'metadata': {}},
                        updated_at=datetime(2025, 1, 1, tzinfo=UTC),
                        links=[StoreLink('e0', None, 2), StoreLink('e1', 'e0', 2)],
                    )
                ),
            ),
        ],
    ]
    minute = 0
    for step in steps:
        txn = MemoryTxn(tables)
        init_format(txn)
        batch: list[NewEntry] = []
        for entry in step:
            batch.append(_at(entry, minute))
            minute += 1
        append_entries(txn, batch, allow_internal=True)
    return tables


def dump() -> dict[str, Any]:
    """Every table's items as hex, and the export's lines."""
    tables = _build()
    out: dict[str, Any] = {}
    for table, name in TABLE_NAMES.items():
        data = tables.tables[table].data
        out[name.decode()] = [[key.hex(), data[key].hex()] for key in sorted(data)]
    export = b''.join(_transfer.export_lines(MemoryTxn(tables), None))
    out['export'] = export.decode().splitlines()
    return out


def test_the_store_holds_every_kind() -> None:
    tables = _build()
    kinds = {
        json.loads(line)['kind']
        for line in b''.join(_transfer.export_lines(MemoryTxn(tables), None)).splitlines()[1:-1]
    }
    # A `shred` entry exists only in an encrypted store (tests/log/test_encryption.py); the plain
    # store's bytes here stay those of the golden file.
    assert kinds == set(KINDS) - {'shred'}


def test_stored_and_exported_bytes_of_every_kind_are_unchanged() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = dump()
    for name in golden:
        assert now[name] == golden[name], f'the bytes of {name} changed'
    assert set(now) == set(golden)


if __name__ == '__main__':  # pragma: no cover - regenerates the fixture
    GOLDEN.write_text(json.dumps(dump(), indent=1) + '\n')


def test_encode_message_writes_the_adapters_bytes() -> None:
    """`encode_message`'s direct path (one serializer per message class) writes exactly what
    pydantic-ai's `ModelMessagesTypeAdapter` writes, for every part kind, for bytes inside a
    value typed `Any` (which only the adapter's config encodes as base64), and for messages it
    leaves to the adapter (a subclass, a `kind` not the class's own)."""
    from dataclasses import dataclass

    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse, TextPart, ToolReturnPart

    from eventlog.entries import _SERIALIZERS, encode_message  # pyright: ignore[reportPrivateUsage]
    from tests.search.searchtools import every_part_kind

    @dataclass(repr=False)
    class Subclassed(ModelResponse):
        pass

    odd_kind = ModelResponse(parts=[TextPart('kind edited')])
    odd_kind.kind = 'request'  # pyright: ignore[reportAttributeAccessIssue]
    messages = [
        *every_part_kind(),
        ModelRequest(parts=[ToolReturnPart('raw', {'bytes': b'\x00\xff', 'nan': float('nan')}, tool_call_id='c')]),
        Subclassed(parts=[TextPart('a subclass')]),
    ]
    for message in messages:
        assert encode_message(message) == ModelMessagesTypeAdapter.dump_json([message])[1:-1]
    assert {ModelRequest, ModelResponse} <= set(_SERIALIZERS), 'the direct path is off: every message pays the union'
    assert _SERIALIZERS[ModelResponse][0] == 'response'
    # A `kind` that is not its class's goes through the tagged union, which fails on it or not as the adapter does.
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # pydantic warns that the value is not the branch's class
        assert encode_message(odd_kind) == ModelMessagesTypeAdapter.dump_json([odd_kind])[1:-1]
