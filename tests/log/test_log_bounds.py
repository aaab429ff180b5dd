"""Integer bounds: every seq-like integer the log takes is checked against `MAX_SEQ`, an
import cannot move the store's next `seq` out of reach, and payloads that cannot be encoded
raise typed errors instead of struct, overflow or pydantic serialization errors."""

from __future__ import annotations

import io
from typing import Any

import msgspec
import pytest
from logtools import add_run, exchange
from pydantic_ai.messages import ModelResponse, ToolCallPart
from transfertools import Crafted

from eventlog import (
    MAX_SEQ,
    InvalidArgumentError,
    InvalidPayloadError,
    LogFullError,
    NewEntry,
    compaction_entry,
    encode_message,
    message_entry,
    run_finished_entry,
    run_started_entry,
)
from eventlog import _engine as engine
from eventlog._transfer import IMPORT_MAX_SEQ
from eventlog.entries import ForkInfo
from eventlog.log import EventLogBase

HUGE = 2**64


def _one_message_export(seq: int) -> bytes:
    crafted = Crafted()
    crafted.add(seq, 'c', 'run_started', b'{}', run_id='r')
    crafted.add(seq + 1, 'c', 'message', encode_message(exchange(1)[0]), run_id='r', parent=seq)
    return crafted.export()


async def test_max_seq_is_exact_in_json() -> None:
    assert MAX_SEQ == 2**53 - 1
    assert float(MAX_SEQ) == MAX_SEQ  # every JSON reader holds it exactly
    assert IMPORT_MAX_SEQ < MAX_SEQ


@pytest.mark.parametrize('value', [HUGE, 2**64 - 1, MAX_SEQ + 1, -1, 0])
async def test_seq_arguments_out_of_bounds_are_typed_errors(log: EventLogBase, value: int) -> None:
    seqs = await add_run(log, 'a', 'r1', exchange(1))
    with pytest.raises(InvalidArgumentError):
        await log.get_entry(value)
    with pytest.raises(InvalidArgumentError):
        await log.branch(value)
    with pytest.raises(InvalidArgumentError):
        await log.fork('a', at_seq=value)
    with pytest.raises(InvalidArgumentError):
        await log.append(run_started_entry(conversation_id='b', run_id='r2', parent=value))
    if value > 0:
        with pytest.raises(InvalidArgumentError):
            await log.entries(after_seq=value)
        with pytest.raises(InvalidArgumentError):
            await log.entries(limit=value)
    # The largest accepted values answer normally.
    assert await log.get_entry(MAX_SEQ) is None
    assert await log.entries(after_seq=MAX_SEQ) == []
    assert len(await log.entries(limit=MAX_SEQ)) == len(seqs) + 2
    assert await log.branch(MAX_SEQ) == []
    with pytest.raises(InvalidArgumentError, match='not an entry'):
        await log.fork('a', at_seq=MAX_SEQ)


async def test_an_import_near_2_64_is_refused_and_the_store_stays_writable(log: EventLogBase) -> None:
    await add_run(log, 'a', 'r1', exchange(1))
    before = await log.last_seq()
    for seq in (2**64 - 2, 2**63, IMPORT_MAX_SEQ):
        with pytest.raises(InvalidArgumentError, match=f'outside 1..{IMPORT_MAX_SEQ}'):
            await log.import_(io.BytesIO(_one_message_export(seq)))
    assert await log.last_seq() == before
    await add_run(log, 'a', 'r2', exchange(2))
    assert (await log.verify()).ok


async def test_an_import_at_the_import_bound_leaves_room_to_append(log: EventLogBase) -> None:
    assert await log.import_(io.BytesIO(_one_message_export(IMPORT_MAX_SEQ - 1))) == 2
    assert await log.last_seq() == IMPORT_MAX_SEQ
    seqs = await add_run(log, 'c', 'r2', exchange(2))
    assert seqs[0] == IMPORT_MAX_SEQ + 2
    assert (await log.verify()).ok


async def test_appending_past_max_seq_is_a_typed_error(log: EventLogBase) -> None:
    start = run_started_entry(conversation_id='c', run_id='r')
    # Only a store written by other means could get here; place an entry at the bound directly.
    await log._write(lambda txn: engine.append_entries(txn, [start], seq_hints=[MAX_SEQ]))  # pyright: ignore[reportPrivateUsage]
    assert await log.last_seq() == MAX_SEQ
    with pytest.raises(LogFullError):
        await log.append(message_entry(exchange(1)[0], conversation_id='c', run_id='r'))
    assert await log.last_seq() == MAX_SEQ
    assert [e.seq for e in await log.entries()] == [MAX_SEQ]
    assert (await log.verify()).ok


async def test_integers_inside_payloads_are_bounded(log: EventLogBase) -> None:
    seqs = await add_run(log, 'c', 'r', exchange(1), finish=False)
    with pytest.raises(InvalidArgumentError, match='usage'):
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed', usage={'n': HUGE}))
    with pytest.raises(InvalidArgumentError, match='usage'):
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed', usage={'n': -1}))
    summary = exchange(9)[1]
    with pytest.raises(InvalidArgumentError, match='replaced'):
        await log.append(compaction_entry(conversation_id='c', run_id='r', replaced=[HUGE], summary=[summary]))
    with pytest.raises(InvalidArgumentError, match='fork'):
        await log.append(
            NewEntry(
                conversation_id='f',
                kind='forked_from',
                payload=msgspec.json.encode(ForkInfo('c', HUGE)),
                parent=seqs[0],
            )
        )
    # The run is still open and takes its real finish.
    await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed', usage={'n': MAX_SEQ}))
    run = await log.get_run('r')
    assert run is not None and run.usage == {'n': MAX_SEQ}
    assert (await log.verify()).ok


async def test_a_crafted_import_with_huge_usage_or_fork_point_is_refused(log: EventLogBase) -> None:
    crafted = Crafted()
    crafted.add(1, 'c', 'run_started', b'{}', run_id='r')
    crafted.add(2, 'c', 'run_finished', b'{"status":"completed","usage":{"n":18446744073709551616}}', run_id='r')
    with pytest.raises(InvalidArgumentError, match='usage'):
        await log.import_(io.BytesIO(crafted.export()))
    assert await log.last_seq() == 0
    await add_run(log, 'a', 'r1', exchange(1))


def _nested(depth: int) -> dict[str, Any]:
    args: dict[str, Any] = {}
    inner = args
    for _ in range(depth):
        inner['a'] = {}
        inner = inner['a']
    return args


async def test_a_message_pydantic_cannot_serialize_is_a_typed_error(log: EventLogBase) -> None:
    deep = ModelResponse(parts=[ToolCallPart(tool_name='t', args=_nested(1000))])
    with pytest.raises(InvalidPayloadError, match='cannot be serialized'):
        message_entry(deep, conversation_id='c', run_id='r')
    with pytest.raises(InvalidPayloadError):
        compaction_entry(conversation_id='c', run_id='r', replaced=[1], summary=[deep])
    with pytest.raises(InvalidPayloadError):
        run_started_entry(conversation_id='c', run_id='r', metadata={'k': object()})  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidPayloadError):
        run_started_entry(conversation_id='c', run_id='r', agent_name='\ud800')
    await add_run(log, 'c', 'r', exchange(1))
    with pytest.raises(InvalidPayloadError):
        await log.set_title('c', 'bad \ud800 title')
    # A shallower structure still goes through.
    shallow = ModelResponse(parts=[ToolCallPart(tool_name='t', args=_nested(50))])
    await log.append(run_started_entry(conversation_id='c', run_id='r2'))
    await log.append(message_entry(shallow, conversation_id='c', run_id='r2'))
