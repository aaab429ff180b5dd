"""Erasure, retention and their guarantees on every backend: the chain still verifies, replay
returns placeholders, and the erased bytes are gone from the store's files and the search index."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import msgspec
import psycopg
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from eventlog import (
    ConversationNotFound,
    Entry,
    ErasureInfo,
    InvalidArgumentError,
    LmdbEventLog,
    NewEntry,
    RetentionPolicy,
    RunNotFound,
    message_entry,
    parse_age,
)
from eventlog._erase import ERASED_METADATA_KEY
from eventlog._keys import Table, body_digest, encode_body, encode_erased_body, seq_key
from eventlog._read import get_body
from eventlog.log import EventLogBase
from search.index_format import INDEX_PROJECTION
from search.persistent_index import PersistentIndex as LmdbIndex
from tests.log.logtools import add_run, at, exchange, tool_exchange

SECRET = 'zqxsecretvalue'
"""A distinctive word written into messages and searched for in the raw store files."""


async def _seeded(log: EventLogBase) -> dict[str, list[int]]:
    """Two runs of `c1` (the first with the secret and a tool exchange) and one of `c2`."""
    first = await add_run(log, 'c1', 'r1', [*exchange(1, SECRET), *tool_exchange(2)])
    run = await log.get_run('r1')
    assert run is not None
    second = await add_run(log, 'c1', 'r2', exchange(3, 'kept words'), parent=run.last_seq)
    other = await add_run(log, 'c2', 'r3', exchange(4, 'other conversation'))
    return {'r1': first, 'r2': second, 'r3': other}


async def test_erase_run_keeps_chain_and_replays_placeholders(log: EventLogBase) -> None:
    seqs = await _seeded(log)
    before = {e.seq: e.hash for e in await log.entries()}
    conv_before = await log.get_conversation('c1')
    assert conv_before is not None

    done = await log.erase('c1', run_id='r1', reason='ticket 42', by='dpo@example.com')

    assert done.seqs == seqs['r1']
    assert done.erasure_seq is not None and done.scrubbed and done.scrub_error is None
    assert done.payload_bytes > 0
    entries = {e.seq: e for e in await log.entries()}
    # Every entry keeps its hash; only the erased ones are marked.
    assert all(entries[seq].hash == digest for seq, digest in before.items())
    assert {seq for seq, e in entries.items() if e.erased} == set(seqs['r1'])
    assert all(SECRET.encode() not in e.payload for e in entries.values())
    record = entries[done.erasure_seq]
    assert record.kind == 'erasure' and record.run_id is None
    info = msgspec.json.decode(record.payload, type=ErasureInfo)
    assert info == ErasureInfo(seqs=seqs['r1'], run_id='r1', reason='ticket 42', by='dpo@example.com')
    # The conversation's head moved only by the erasure entry itself.
    conv = await log.get_conversation('c1')
    assert conv is not None and conv.head_hash == record.hash and conv.entry_count == conv_before.entry_count + 1
    report = await log.verify()
    assert report.ok, report.problems

    # Replay: the later run's record holds placeholders of the same roles, then its own messages.
    replay = await log.run_messages('r2')
    assert [type(m) for m in replay] == [type(m) for m in [*exchange(1), *tool_exchange(2), *exchange(3)]]
    placeholders = replay[:6]
    for message in placeholders:
        assert message.metadata == {ERASED_METADATA_KEY: done.erasure_seq}
        assert SECRET not in repr(message)
    # The tool exchange keeps its skeleton, so the history stays well formed for a model.
    call = placeholders[3].parts[0]
    ret = placeholders[4].parts[0]
    assert isinstance(call, ToolCallPart) and (call.tool_name, call.tool_call_id, call.args) == ('lookup', 'c2', {})
    assert isinstance(ret, ToolReturnPart) and (ret.tool_name, ret.tool_call_id) == ('lookup', 'c2')
    assert replay[6:] == exchange(3, 'kept words')
    # The JSON pydantic-ai loads, and the transcript and context read the same placeholders.
    assert ModelMessagesTypeAdapter.validate_json(await log.run_messages_json('r2')) == replay
    assert await log.transcript('c1') == replay
    assert await log.context('c1') == replay
    # An agent continues from the erased history without failing.
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart('fine')])

    result = await Agent(FunctionModel(model)).run('go on', message_history=await log.context('c1'))
    assert result.output == 'fine' and seen[0][:6] == placeholders

    # Appends after the erasure chain from its entry, and everything still verifies.
    await add_run(log, 'c1', 'r4', exchange(5), parent=(await log.get_run('r2') or pytest.fail('missing')).last_seq)
    assert (await log.verify()).ok
    # The other conversation is untouched.
    assert await log.transcript('c2') == exchange(4, 'other conversation')


async def test_erase_with_predicate_and_twice(log: EventLogBase) -> None:
    seqs = await _seeded(log)

    def secret_only(entry: Entry) -> bool:
        return SECRET.encode() in entry.payload

    done = await log.erase('c1', where=secret_only)
    assert done.seqs == seqs['r1'][:2]
    again = await log.erase('c1', where=secret_only)
    assert again.seqs == [] and again.erasure_seq is None and not again.scrubbed
    whole = await log.erase('c1')
    assert whole.seqs == [*seqs['r1'][2:], *seqs['r2']]  # the already erased two are skipped
    assert (await log.verify()).ok
    assert all(e.erased for e in await log.entries(conversation_id='c1', kinds=['message']))
    kinds = [e.kind for e in await log.entries(conversation_id='c1', kinds=['erasure'])]
    assert kinds == ['erasure', 'erasure']


async def test_erase_bad_input_changes_nothing(log: EventLogBase) -> None:
    await _seeded(log)
    last = await log.last_seq()
    with pytest.raises(ConversationNotFound, match="no conversation 'nope'"):
        await log.erase('nope')
    with pytest.raises(RunNotFound, match="no run 'r3' in conversation 'c1'"):
        await log.erase('c1', run_id='r3')
    with pytest.raises(RunNotFound):
        await log.erase('c1', run_id='missing')
    with pytest.raises(InvalidArgumentError, match='where must be a callable'):
        await log.erase('c1', where='kind == message')  # type: ignore[arg-type]

    def broken(entry: Entry) -> bool:
        raise KeyError('boom')

    with pytest.raises(InvalidArgumentError, match='the where predicate failed on entry 2: KeyError'):
        await log.erase('c1', where=broken)
    with pytest.raises(InvalidArgumentError, match='must return a bool, it returned str'):
        await log.erase('c1', where=lambda entry: 'yes')  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidArgumentError, match='reason must be a string'):
        await log.erase('c1', reason='x' * 1001)
    with pytest.raises(InvalidArgumentError, match='use erase'):
        await log.append(NewEntry(conversation_id='c1', kind='erasure', payload=b'{"seqs":[2]}'))
    await log.delete_conversation('c2')
    with pytest.raises(ConversationNotFound):
        await log.erase('c2')
    assert await log.last_seq() == last + 1  # only the tombstone
    assert not any(e.erased for e in await log.entries())


async def test_verify_finds_erasure_outside_erase(log: EventLogBase) -> None:
    seqs = await _seeded(log)
    target = seqs['r2'][0]

    def mark(txn: object) -> None:
        body = get_body(txn, target)  # type: ignore[arg-type]
        assert body is not None
        value = txn.get(Table.ENTRIES, seq_key(target))  # type: ignore[attr-defined]
        digest = body_digest(value[:-32])  # kept, as erase keeps it: the chain still links
        txn.put(Table.ENTRIES, seq_key(target), encode_erased_body(body, digest) + value[-32:])  # type: ignore[attr-defined]

    log._write_sync(mark)  # pyright: ignore[reportPrivateUsage]
    report = await log.verify()
    assert not report.ok
    assert [(p.code, p.seq) for p in report.problems] == [('erasure-unrecorded', target)]

    # An erasure recorded, then the original content put back: verify says so.
    done = await log.erase('c1', run_id='r1', scrub=False)
    original = (await log.entries(run_id='r1', kinds=['message']))[0]
    assert original.erased

    def restore(txn: object) -> None:
        body = get_body(txn, original.seq)  # type: ignore[arg-type]
        assert body is not None
        payload = message_entry(exchange(1, SECRET)[0], conversation_id='c1', run_id='r1').payload
        txn.put(  # type: ignore[attr-defined]
            Table.ENTRIES,
            seq_key(original.seq),
            encode_body(msgspec.structs.replace(body, payload=payload)) + original.hash,
        )

    log._write_sync(restore)  # pyright: ignore[reportPrivateUsage]
    report = await log.verify()
    codes = {(p.code, p.seq) for p in report.problems}
    assert ('erasure-incomplete', original.seq) in codes
    assert done.erasure_seq is not None


async def test_export_marks_erased_entries_and_import_refuses_them(log: EventLogBase) -> None:
    seqs = await _seeded(log)
    await log.erase('c1', run_id='r1')
    out = io.BytesIO()
    count = await log.export(out)
    lines = [msgspec.json.decode(line) for line in out.getvalue().splitlines()[1:-1]]
    assert count == len(lines)
    assert [line['seq'] for line in lines if line.get('erased')] == seqs['r1']
    assert SECRET.encode() not in out.getvalue()
    from eventlog import InMemoryEventLog

    target = InMemoryEventLog()
    with pytest.raises(InvalidArgumentError, match=f'seq {seqs["r1"][0]}\\) was erased in the source store'):
        await target.import_(io.BytesIO(out.getvalue()))
    assert await target.last_seq() == 0
    # Only the other conversation (no erased entries) imports fine.
    part = io.BytesIO()
    await log.export(part, conversation_ids=['c2'])
    assert await target.import_(io.BytesIO(part.getvalue())) == 4


async def test_search_index_drops_erased_terms(log: EventLogBase) -> None:
    await _seeded(log)
    index = LmdbIndex.for_log(log)
    index.catch_up()

    def terms() -> bytes:
        return b''.join(
            k + v
            for table in INDEX_PROJECTION.tables
            for k, v in log.read_projection(INDEX_PROJECTION, lambda r, _, t=table: list(r.scan(t)))
        )

    assert SECRET.encode() in terms()  # the check below can fail
    await log.erase('c1', run_id='r1')
    index.catch_up()
    assert SECRET.encode() not in terms()
    assert b'kept' in terms() and b'other' in terms()
    assert index.verify() == []
    after = terms()
    index.rebuild()
    assert terms() == after  # the index kept incrementally equals one rebuilt from the erased log


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return sorted(p for p in root.rglob('*') if p.is_file() and needle in p.read_bytes())


async def test_erased_bytes_gone_from_lmdb_files(tmp_path: Path) -> None:
    store = tmp_path / 'store'
    log = LmdbEventLog(store)
    try:
        await _seeded(log)
        LmdbIndex.for_log(log).catch_up()
        await log.erase('c1', run_id='r1', scrub=False)
        # Erased but not scrubbed: the freed pages (and the index, not caught up) still hold it.
        assert _files_holding(store, SECRET.encode()) == [store / 'data.mdb']
        assert await log.scrub() is None
        assert _files_holding(store, SECRET.encode()) == []
        assert (await log.verify()).ok
        assert b'kept words' in await log.transcript_json('c1')
    finally:
        log.close()
    assert _files_holding(store, SECRET.encode()) == []


async def test_scrub_reports_a_busy_lmdb_store(tmp_path: Path) -> None:
    store = tmp_path / 'store'
    log = LmdbEventLog(store)
    other = LmdbEventLog(store)
    try:
        await _seeded(log)
        done = await log.erase('c1', run_id='r1')
        assert not done.scrubbed
        assert done.scrub_error is not None and 'open through another handle' in done.scrub_error
        assert _files_holding(store, SECRET.encode()) == [store / 'data.mdb']
        other.close()
        assert await log.scrub() is None
        assert _files_holding(store, SECRET.encode()) == []
    finally:
        other.close()
        log.close()


async def test_erased_bytes_gone_from_postgres_table_files() -> None:
    from pgserver import start_server

    from eventlog.postgres_log import PostgresEventLog

    server = start_server()
    try:
        dsn = server.dsn()
        log = PostgresEventLog(dsn, schema='erasure')
        try:
            await _seeded(log)
            LmdbIndex.for_log(log).catch_up()

            def table_files() -> list[Path]:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute('CHECKPOINT')
                return [p for p in _files_holding(server.data / 'base', SECRET.encode())]

            assert table_files()  # written to the table files: the check below can fail
            await log.erase('c1', run_id='r1', scrub=False)
            assert table_files()  # dead row versions (and the index's terms) still hold it
            assert await log.scrub() is None
            assert table_files() == []
            assert (await log.verify()).ok
            assert SECRET.encode() not in await log.transcript_json('c1')
        finally:
            log.close()
    finally:
        server.destroy()


# --- retention --------------------------------------------------------------------------------


async def test_retention_erases_what_is_older(log: EventLogBase) -> None:
    seqs = await _seeded(log)  # entries stamped now by the log
    assert len(seqs['r1']) == 6
    # Entries are appended now (the log stamps them); an explicit stamp makes them old.
    await log.append(NewEntry(conversation_id='c3', run_id='r5', kind='run_started', timestamp=at(0)))
    old = await log.append(
        NewEntry(
            conversation_id='c3',
            run_id='r5',
            kind='message',
            timestamp=at(1),
            payload=message_entry(exchange(9, SECRET)[0], conversation_id='c3', run_id='r5').payload,
        )
    )
    fresh = await log.append(message_entry(exchange(10)[0], conversation_id='c3', run_id='r5'))
    real_now = (await log.get_entry(fresh) or pytest.fail('missing')).timestamp

    policy = RetentionPolicy(max_age='30d', conversations={'c2': timedelta(days=3650)})
    dry = await log.retain(policy, dry_run=True, now=real_now)
    assert dry.dry_run and dry.erased == {'c3': 1} and dry.deleted == {}
    assert not any(e.erased for e in await log.entries())

    report = await log.retain(policy, now=real_now)
    assert report.erased == {'c3': 1} and report.total == 1 and report.scrubbed
    assert [e.seq for e in await log.entries() if e.erased] == [old]
    erasure = (await log.entries(kinds=['erasure']))[0]
    assert msgspec.json.decode(erasure.payload, type=ErasureInfo).reason == 'retention: older than 30d'
    assert (await log.verify()).ok


async def test_retention_deletes_whole_conversations(log: EventLogBase) -> None:
    await _seeded(log)
    conv = await log.get_conversation('c2')
    assert conv is not None
    later = conv.updated_at + timedelta(days=2)
    policy = RetentionPolicy(max_age='1d', conversations={'c1': '30d'}, action='delete')
    dry = await log.retain(policy, dry_run=True, now=later)
    assert dry.deleted == {'c2': 4} and dry.erased == {}
    assert await log.get_conversation('c2') is not None
    report = await log.retain(policy, now=later)
    assert report.deleted == {'c2': 4}
    assert await log.get_conversation('c2') is None and await log.get_conversation('c1') is not None
    assert (await log.verify()).ok


@pytest.mark.parametrize(
    ('text', 'seconds'),
    [('30d', 30 * 86400), ('12h', 12 * 3600), ('90m', 5400), ('2w', 14 * 86400), ('1d12h', 36 * 3600), ('45s', 45)],
)
def test_parse_age(text: str, seconds: int) -> None:
    assert parse_age(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize('text', ['', '30', 'd30', '30x', '-5d', '0d', '3.5d', '30 days', '1d 2'])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_age(text)
    assert '\n' not in str(info.value)


def test_retention_policy_refuses_bad_values() -> None:
    with pytest.raises(InvalidArgumentError, match='needs max_age or at least one conversation'):
        RetentionPolicy()
    with pytest.raises(InvalidArgumentError, match='max_age must be a positive timedelta'):
        RetentionPolicy(max_age=timedelta(0))
    with pytest.raises(InvalidArgumentError, match="action must be 'erase' or 'delete'"):
        RetentionPolicy(max_age='1d', action='shred')  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match='is not an age'):
        RetentionPolicy(conversations={'c1': 'soon'})


async def test_placeholder_for_messages_the_log_never_decoded(log: EventLogBase) -> None:
    """A request with only a system prompt, a response with text and thinking: roles kept."""
    from pydantic_ai.messages import SystemPromptPart, ThinkingPart

    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart(f'be {SECRET}', timestamp=at(1)), UserPromptPart('hi', timestamp=at(1))]),
        ModelResponse(parts=[ThinkingPart(SECRET), TextPart(SECRET)], timestamp=at(2), model_name='m1'),
    ]
    await add_run(log, 'c9', 'r9', messages)
    done = await log.erase('c9')
    replay = await log.run_messages('r9')
    request, response = replay
    assert isinstance(request, ModelRequest) and [p.part_kind for p in request.parts] == [
        'system-prompt',
        'user-prompt',
    ]
    assert isinstance(response, ModelResponse) and [p.part_kind for p in response.parts] == ['text']
    assert response.model_name == 'm1' and response.timestamp == at(2)
    assert SECRET not in repr(replay) and str(done.erasure_seq) in repr(replay)


# --- with signed checkpoints (docs/audit.md) ---------------------------------------------------


async def test_checkpoints_made_before_an_erasure_still_verify(log: EventLogBase, tmp_path: Path) -> None:
    from eventlog.checkpoint import Signer, verify_export

    signer = Signer.generate()
    await _seeded(log)
    before = tmp_path / 'checkpoint-before.json'
    await log.checkpoint(signer, path=before)
    await log.erase('c1', run_id='r1')
    report = await log.verify(checkpoints=[before], public_key=signer.public_key)
    assert report.ok, report.problems
    # An erasure does not let a rewritten history pass: an erased entry's stored hash still counts.
    erased = (await log.entries(run_id='r1', kinds=['message']))[0]
    kept: list[bytes] = []

    def rehash(txn: object) -> None:
        value = txn.get(Table.ENTRIES, seq_key(erased.seq))  # type: ignore[attr-defined]
        kept.append(value)
        txn.put(Table.ENTRIES, seq_key(erased.seq), value[:-32] + bytes(32))  # type: ignore[attr-defined]

    log._write_sync(rehash)  # pyright: ignore[reportPrivateUsage]
    report = await log.verify(checkpoints=[before], public_key=signer.public_key)
    assert ('checkpoint-mismatch', erased.seq) in {(p.code, p.seq) for p in report.problems}
    log._write_sync(lambda txn: txn.put(Table.ENTRIES, seq_key(erased.seq), kept[0]))  # pyright: ignore[reportPrivateUsage]
    assert (await log.verify(checkpoints=[before], public_key=signer.public_key)).ok
    # A signed export of the erased store checks on a machine without the store.
    evidence = tmp_path / 'evidence.jsonl'
    await log.export(evidence, signed=True, signer=signer)
    assert SECRET.encode() not in evidence.read_bytes()
    assert verify_export(evidence, signer.public_key).ok
