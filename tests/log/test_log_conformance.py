"""The conformance suite: every backend of the `EventLog` protocol passes these tests."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from backends import BACKENDS, ENCRYPTED_BACKENDS
from logtools import add_run, exchange, tool_exchange
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from eventlog import (
    ConversationNotFound,
    EventLog,
    InvalidArgumentError,
    InvalidPayloadError,
    LogClosedError,
    NewEntry,
    RunNotFound,
    compaction_entry,
    message_entry,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
    top_level_runs,
)
from eventlog.log import EventLogBase

dump = ModelMessagesTypeAdapter.dump_json


@pytest.fixture(params=[*BACKENDS, *ENCRYPTED_BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend, and the persistent ones encrypted (docs/encryption.md)."""
    return request.param


async def test_backend_satisfies_protocol(log: EventLogBase) -> None:
    assert isinstance(log, EventLog)


async def test_disk_size_is_a_byte_count(log: EventLogBase, backend: str) -> None:
    await add_run(log, 'c1', 'r1', exchange(1))
    size = log.disk_size()
    assert isinstance(size, int)
    assert size == 0 if backend == 'memory' else size > 0


async def test_seq_is_strictly_increasing_and_global(log: EventLogBase) -> None:
    a = await add_run(log, 'c1', 'r1', exchange(1))
    b = await add_run(log, 'c2', 'r2', exchange(2))
    c = await log.append_many(
        [run_started_entry(conversation_id='c1', run_id='r3')]
        + [message_entry(m, conversation_id='c1', run_id='r3') for m in exchange(3)]
    )
    seqs = a + b + c
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert await log.last_seq() == c[-1]
    every = [e.seq for e in await log.entries()]
    assert every == sorted(every) and len(every) == len(set(every))


async def test_replay_is_byte_exact(log: EventLogBase) -> None:
    messages = exchange(1, 'héllo wörld ✓ 日本語') + tool_exchange(2)
    await add_run(log, 'c', 'r', messages)
    assert await log.run_messages_json('r') == dump(messages)
    assert dump(await log.run_messages('r')) == dump(messages)
    payloads = [e.payload for e in await log.entries(run_id='r', kinds=['message'])]
    assert b'[' + b','.join(payloads) + b']' == dump(messages)


async def test_runs_interleaved_with_other_traffic_replay_exactly(log: EventLogBase) -> None:
    """A run's entries are read in order from its stretch of the log when they make up most of
    it, else looked up through its conversation's index; both give the run's entries only."""
    await log.append(run_started_entry(conversation_id='quiet', run_id='sparse'))
    await log.append(run_started_entry(conversation_id='quiet', run_id='twin'))
    await log.append(run_started_entry(conversation_id='busy', run_id='noise'))
    sparse: list[ModelMessage] = []
    twin: list[ModelMessage] = []
    for i in range(6):
        # 'sparse' gets one exchange between bursts of 80 entries of another conversation, and
        # 'twin', a run of the same conversation, takes turns with it.
        sparse += exchange(i, 'sparse')
        await log.append_many(
            [message_entry(m, conversation_id='quiet', run_id='sparse') for m in exchange(i, 'sparse')]
        )
        twin += exchange(i, 'twin')
        await log.append_many([message_entry(m, conversation_id='quiet', run_id='twin') for m in exchange(i, 'twin')])
        await log.append_many(
            [message_entry(m, conversation_id='busy', run_id='noise') for j in range(40) for m in exchange(j)]
        )
    await log.append(run_started_entry(conversation_id='quiet', run_id='dense'))
    dense: list[ModelMessage] = []
    for i in range(6):
        # 'dense' has two foreign entries after each exchange: read in order, filtered.
        dense += exchange(i, 'dense')
        await log.append_many([message_entry(m, conversation_id='quiet', run_id='dense') for m in exchange(i, 'dense')])
        await log.append_many([message_entry(m, conversation_id='busy', run_id='noise') for m in exchange(100 + i)])
    sparse_run, dense_run = await log.get_run('sparse'), await log.get_run('dense')
    assert sparse_run is not None and dense_run is not None
    assert sparse_run.last_seq - sparse_run.start_seq > 2 * sparse_run.entry_count + 64  # looked up
    assert dense_run.entry_count < dense_run.last_seq - dense_run.start_seq + 1 < 2 * dense_run.entry_count  # in order
    assert dump(await log.run_messages('sparse')) == dump(sparse)
    assert dump(await log.run_messages('twin')) == dump(twin)
    assert dump(await log.run_messages('dense')) == dump(dense)
    assert [e.run_id for e in await log.entries(run_id='sparse')] == ['sparse'] * (1 + len(sparse))
    assert [e.run_id for e in await log.entries(run_id='dense')] == ['dense'] * (1 + len(dense))
    # Runs continuing each one replay the history through the same reads.
    for name, run, history in (('after-sparse', sparse_run, sparse), ('after-dense', dense_run, dense)):
        await log.append(run_started_entry(conversation_id='quiet', run_id=name, parent=run.last_seq))
        await log.append_many([message_entry(m, conversation_id='quiet', run_id=name) for m in exchange(99)])
        assert dump(await log.run_messages(name)) == dump([*history, *exchange(99)])


async def test_idempotency_key_returns_first_seq_and_writes_nothing(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='c', run_id='r', idempotency_key='start'))
    msg = exchange(1)[0]
    first = await log.append(message_entry(msg, conversation_id='c', run_id='r', idempotency_key='m0'))
    before = await log.last_seq()
    again = await log.append(message_entry(msg, conversation_id='c', run_id='r', idempotency_key='m0'))
    assert again == first
    assert await log.last_seq() == before
    # Also inside one batch, and for the run's start.
    batch = await log.append_many(
        [
            run_started_entry(conversation_id='c', run_id='r', idempotency_key='start'),
            message_entry(msg, conversation_id='c', run_id='r', idempotency_key='m1'),
            message_entry(msg, conversation_id='c', run_id='r', idempotency_key='m1'),
        ]
    )
    assert batch[1] == batch[2]
    assert len(await log.entries(run_id='r', kinds=['message'])) == 2
    # Keys are scoped per run: the same key in another run is a new entry.
    await log.append(run_started_entry(conversation_id='c', run_id='r2'))
    other = await log.append(message_entry(msg, conversation_id='c', run_id='r2', idempotency_key='m0'))
    assert other != first
    # A batch that starts its run, repeated whole and in part: the first seqs, nothing written.
    fresh = [
        run_started_entry(conversation_id='c', run_id='r3', idempotency_key='s3'),
        message_entry(msg, conversation_id='c', run_id='r3', idempotency_key='k'),
    ]
    seqs = await log.append_many(fresh)
    last = await log.last_seq()
    assert await log.append_many(fresh) == seqs
    assert await log.append(fresh[1]) == seqs[1]
    assert await log.last_seq() == last


async def test_threaded_runs_reference_their_parent_instead_of_copying(log: EventLogBase) -> None:
    first = exchange(1)
    seqs = await add_run(log, 'c', 'r1', first)
    second = exchange(2)
    await add_run(log, 'c', 'r2', second, parent=seqs[-1])
    assert len(await log.entries(kinds=['message'])) == 4
    assert await log.run_messages_json('r2') == dump(first + second)
    run2 = await log.get_run('r2')
    assert run2 is not None and run2.branch_parent == seqs[-1]
    # The tree: a third run branching from the first message only.
    third = exchange(3)
    await add_run(log, 'c', 'r3', third, parent=seqs[0])
    assert await log.run_messages_json('r3') == dump(first[:1] + third)
    assert await log.transcript_json('c') == dump(first + second + third)


async def test_run_and_conversation_records_follow_appends(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='c', run_id='r', agent_name='helper', metadata={'team': 'a'}))
    run = await log.get_run('r')
    assert run is not None
    assert (run.status, run.agent_name, run.metadata, run.conversation_id) == ('running', 'helper', {'team': 'a'}, 'c')
    for m in exchange(1):
        await log.append(message_entry(m, conversation_id='c', run_id='r'))
    await log.append(
        tool_effect_entry(conversation_id='c', run_id='r', tool_call_id='t', tool_name='x', status='started')
    )
    await log.append(
        run_finished_entry(conversation_id='c', run_id='r', status='failed', error='boom', usage={'input_tokens': 7})
    )
    run = await log.get_run('r')
    assert run is not None
    assert (run.status, run.error, run.usage, run.message_count) == ('failed', 'boom', {'input_tokens': 7}, 2)
    assert run.finished_at is not None and run.finished_at >= run.started_at
    conv = await log.get_conversation('c')
    assert conv is not None
    assert (conv.run_count, conv.message_count, conv.entry_count) == (1, 2, 5)
    with pytest.raises(InvalidArgumentError, match='finished'):
        await log.append(message_entry(exchange(2)[0], conversation_id='c', run_id='r'))


async def test_list_runs_in_start_order_with_filters(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='a', run_id='r1'))
    await log.append(run_started_entry(conversation_id='b', run_id='r2', parent_run_id='r1'))
    await log.append(run_started_entry(conversation_id='a', run_id='r3', parent_run_id='r1'))
    assert [r.run_id for r in await log.list_runs()] == ['r1', 'r2', 'r3']
    assert [r.run_id for r in await log.list_runs(conversation_id='a')] == ['r1', 'r3']
    assert [r.run_id for r in await log.list_runs(parent_run_id='r1')] == ['r2', 'r3']
    assert [r.run_id for r in await log.list_runs(conversation_id='a', parent_run_id='r1')] == ['r3']
    assert await log.list_runs(conversation_id='nope') == []


async def test_entries_filters_and_after_seq(log: EventLogBase) -> None:
    await add_run(log, 'a', 'r1', exchange(1))
    await add_run(log, 'b', 'r2', exchange(2))
    everything = await log.entries()
    assert {e.conversation_id for e in await log.entries(conversation_id='a')} == {'a'}
    assert {e.run_id for e in await log.entries(run_id='r2')} == {'r2'}
    assert {e.kind for e in await log.entries(kinds=['run_started'])} == {'run_started'}
    middle = everything[3].seq
    assert [e.seq for e in await log.entries(after_seq=middle)] == [e.seq for e in everything if e.seq > middle]
    assert len(await log.entries(limit=2)) == 2
    assert [e.seq for e in await log.entries(conversation_id='b', after_seq=middle)] == [
        e.seq for e in everything if e.seq > middle and e.conversation_id == 'b'
    ]


async def test_compaction_context_and_transcript(log: EventLogBase) -> None:
    originals = exchange(1) + exchange(2)
    seqs = await add_run(log, 'c', 'r', originals, finish=False)
    summary = ModelRequest(parts=[UserPromptPart('Summary: asked two questions')])
    await log.append(compaction_entry(conversation_id='c', run_id='r', replaced=seqs[:2], summary=[summary]))
    later = exchange(3)
    for m in later:
        await log.append(message_entry(m, conversation_id='c', run_id='r'))
    # Replay and transcript hold the originals only; the context has the summary in their place.
    assert await log.run_messages_json('r') == dump(originals + later)
    assert await log.transcript_json('c') == dump(originals + later)
    assert dump(await log.context('c')) == dump([summary, *originals[2:], *later])
    # A second compaction can replace the first summary too.
    summary2 = ModelRequest(parts=[UserPromptPart('Summary: three questions')])
    compaction_seq = (await log.entries(kinds=['compaction']))[0].seq
    await log.append(
        compaction_entry(conversation_id='c', run_id='r', replaced=[compaction_seq, *seqs[2:]], summary=[summary2])
    )
    assert dump(await log.context('c')) == dump([summary2, *later])
    conv = await log.get_conversation('c')
    assert conv is not None and conv.compaction_count == 2


async def test_context_of_a_new_run_follows_the_latest_run(log: EventLogBase) -> None:
    seqs = await add_run(log, 'c', 'r1', exchange(1))
    await add_run(log, 'c', 'r2', exchange(2), parent=seqs[-1])
    assert dump(await log.context('c')) == dump(exchange(1) + exchange(2))


async def test_fork_references_history_and_stays_separate(log: EventLogBase) -> None:
    seqs = await add_run(log, 'src', 'r1', exchange(1) + exchange(2))
    fork_id = await log.fork('src', at_seq=seqs[1], new_conversation_id='fork')
    assert fork_id == 'fork'
    assert await log.transcript_json('fork') == dump(exchange(1))
    assert dump(await log.context('fork')) == dump(exchange(1))
    # No message was copied.
    assert len(await log.entries(kinds=['message'])) == 4
    fork_tip = (await log.entries(conversation_id='fork'))[-1].seq
    await add_run(log, 'fork', 'rf', exchange(9), parent=fork_tip)
    await add_run(log, 'src', 'r2', exchange(3), parent=seqs[-1])
    assert await log.run_messages_json('rf') == dump(exchange(1) + exchange(9))
    assert await log.transcript_json('fork') == dump(exchange(1) + exchange(9))
    assert await log.transcript_json('src') == dump(exchange(1) + exchange(2) + exchange(3))
    conv = await log.get_conversation('fork')
    assert conv is not None and conv.forked_from is not None
    assert (conv.forked_from.conversation_id, conv.forked_from.seq) == ('src', seqs[1])
    default_fork = await log.fork('src')
    assert await log.transcript_json(default_fork) == dump(exchange(1) + exchange(2) + exchange(3))
    with pytest.raises(InvalidArgumentError, match='not an entry'):
        await log.fork('src', at_seq=fork_tip)
    with pytest.raises(InvalidArgumentError, match='already exists'):
        await log.fork('src', new_conversation_id='fork')
    with pytest.raises(ConversationNotFound):
        await log.fork('missing')


async def test_title_archive_unarchive(log: EventLogBase) -> None:
    await add_run(log, 'a', 'r1', exchange(1))
    await add_run(log, 'b', 'r2', exchange(2))
    await log.set_title('a', 'Deploy plan')
    conv = await log.get_conversation('a')
    assert conv is not None and conv.title == 'Deploy plan'
    await log.archive('a')
    assert [c.conversation_id for c in await log.list_conversations()] == ['b']
    assert [c.conversation_id for c in await log.list_conversations(include_archived=True)] == ['a', 'b']
    await log.unarchive('a')
    assert [c.conversation_id for c in await log.list_conversations()] == ['a', 'b']
    with pytest.raises(ConversationNotFound):
        await log.set_title('nope', 'x')
    with pytest.raises(ConversationNotFound):
        await log.archive('nope')


async def test_delete_removes_everything_and_leaves_a_tombstone(log: EventLogBase) -> None:
    await add_run(log, 'keep', 'rk', exchange(1))
    await log.append(run_started_entry(conversation_id='gone', run_id='rg', idempotency_key='s'))
    await log.append(message_entry(exchange(7, 'secret')[0], conversation_id='gone', run_id='rg'))
    last = await log.last_seq()
    removed = await log.delete_conversation('gone')
    assert removed == 2
    # The removed entries were the log's last: their seqs stay used, the tombstone follows them.
    assert [e.seq for e in await log.entries(conversation_id='gone')] == [last + 1]
    assert await log.last_seq() == last + 1
    assert await log.get_conversation('gone') is None
    assert await log.get_run('rg') is None
    assert [c.conversation_id for c in await log.list_conversations(include_archived=True)] == ['keep']
    remaining = await log.entries(conversation_id='gone')
    assert [(e.kind, e.payload, e.run_id) for e in remaining] == [('deleted', b'', None)]
    assert all(b'secret' not in e.payload for e in await log.entries())
    with pytest.raises(ConversationNotFound):
        await log.transcript('gone')
    assert await log.context('gone') == []  # as for a conversation never recorded: nothing to continue
    with pytest.raises(RunNotFound):
        await log.run_messages('rg')
    assert (await log.verify()).ok
    # The id can be used again; its chain continues from the tombstone.
    await add_run(log, 'gone', 'rg2', exchange(8))
    assert await log.transcript_json('gone') == dump(exchange(8))
    assert (await log.verify()).ok
    with pytest.raises(ConversationNotFound):
        await log.delete_conversation('never')


async def test_export_import_round_trip(log: EventLogBase, tmp_path: Path, backend: str) -> None:
    from backends import make_log

    seqs = await add_run(log, 'a', 'r1', exchange(1, 'ünïcode') + tool_exchange(2))
    await add_run(log, 'a', 'r2', exchange(3), parent=seqs[-1])
    await log.fork('a', at_seq=seqs[1], new_conversation_id='f')
    await log.set_title('a', 'Title')
    await add_run(log, 'gone', 'rg', exchange(4))
    await log.delete_conversation('gone')
    await log.archive('f')
    buffer = io.BytesIO()
    count = await log.export(buffer)
    assert count == len(await log.entries())
    target = make_log(backend, tmp_path / 'copy')
    try:
        if backend in ENCRYPTED_BACKENDS:
            # An encrypted store exports its sealed payloads (verifiable, not importable elsewhere);
            # a plain export imported into one is sealed (tests/log/test_encryption.py).
            with pytest.raises(InvalidArgumentError, match='sealed payload'):
                await target.import_(io.BytesIO(buffer.getvalue()))
            assert await target.last_seq() == 0
            return
        assert await target.import_(io.BytesIO(buffer.getvalue())) == count
        for conv in await log.list_conversations(include_archived=True):
            assert await target.transcript_json(conv.conversation_id) == await log.transcript_json(conv.conversation_id)
            assert await target.context_payloads(conv.conversation_id) == await log.context_payloads(
                conv.conversation_id
            )
        assert await target.run_messages_json('r2') == await log.run_messages_json('r2')
        report = await target.verify()
        assert report.ok, report
        assert [e.hash for e in await target.entries()] == [e.hash for e in await log.entries()]
        again = io.BytesIO()
        await target.export(again)
        assert again.getvalue() == buffer.getvalue()
        with pytest.raises(InvalidArgumentError, match='already exists'):
            await target.import_(io.BytesIO(buffer.getvalue()))
    finally:
        target.close()


async def test_export_of_one_conversation_includes_history_it_references(log: EventLogBase, tmp_path: Path) -> None:
    seqs = await add_run(log, 'a', 'r1', exchange(1))
    await log.fork('a', at_seq=seqs[-1], new_conversation_id='f')
    await add_run(log, 'b', 'r2', exchange(2))
    path = tmp_path / 'f.jsonl'
    await log.export(path, conversation_ids=['f'])
    lines = path.read_bytes().splitlines()
    conversations = {msgspec.json.decode(line)['conversation_id'] for line in lines[1:-1]}
    assert conversations == {'a', 'f'}
    with pytest.raises(ConversationNotFound):
        await log.export(tmp_path / 'x.jsonl', conversation_ids=['nope'])


async def test_import_refuses_an_altered_export(log: EventLogBase, tmp_path: Path, backend: str) -> None:
    await add_run(log, 'a', 'r1', exchange(1, 'original'))
    buffer = io.BytesIO()
    await log.export(buffer)
    from eventlog import InMemoryEventLog

    target = InMemoryEventLog()
    tampered = buffer.getvalue().replace(b'original', b'forged!!')
    if backend in ENCRYPTED_BACKENDS:  # the text is sealed: one byte of the sealed payload is changed
        assert b'original' not in buffer.getvalue()
        lines = buffer.getvalue().split(b'\n')
        cut = lines[2].index(b'"sealed:') + 20
        lines[2] = lines[2][:cut] + (b'B' if lines[2][cut : cut + 1] == b'A' else b'A') + lines[2][cut + 1 :]
        tampered = b'\n'.join(lines)
    with pytest.raises(InvalidArgumentError, match='hash check'):
        await target.import_(io.BytesIO(tampered))
    dropped = b'\n'.join(line for i, line in enumerate(buffer.getvalue().split(b'\n')) if i != 2)
    with pytest.raises(InvalidArgumentError, match='hash check'):
        await target.import_(io.BytesIO(dropped))
    with pytest.raises(InvalidArgumentError, match='not an eventlog export'):
        await target.import_(io.BytesIO(b'{"hello": 1}\n'))
    assert await target.last_seq() == 0


async def test_verify_passes_on_a_healthy_log(log: EventLogBase) -> None:
    await add_run(log, 'a', 'r1', exchange(1))
    await add_run(log, 'b', 'r2', tool_exchange(2))
    report = await log.verify()
    assert report.ok and report.problems == []
    assert report.entries_checked == len(await log.entries())
    assert report.conversations_checked == 2


# --- bad input: a clear typed error, and nothing changes ----------------------------------


def _msg() -> bytes:
    return ModelMessagesTypeAdapter.dump_json([ModelResponse(parts=[TextPart('x')])])[1:-1]


@pytest.mark.parametrize(
    ('entry', 'error', 'match'),
    [
        (NewEntry(conversation_id='', kind='message', run_id='r', payload=b'{}'), InvalidArgumentError, 'empty'),
        (NewEntry(conversation_id='c' * 201, kind='message', run_id='r'), InvalidArgumentError, 'longer than'),
        (NewEntry(conversation_id=42, kind='title'), InvalidArgumentError, 'must be a string'),  # type: ignore[arg-type]
        (NewEntry(conversation_id='c', kind='message', run_id='r\x00x'), InvalidArgumentError, 'control'),
        (NewEntry(conversation_id='c', kind='nonsense', run_id='r'), InvalidArgumentError, 'unknown entry kind'),
        (NewEntry(conversation_id='c', kind='message'), InvalidArgumentError, 'needs a run_id'),
        (NewEntry(conversation_id='c', kind='title', run_id='r'), InvalidArgumentError, 'takes no run_id'),
        (NewEntry(conversation_id='c', kind='message', run_id='r', payload='text'), InvalidPayloadError, 'bytes'),  # type: ignore[arg-type]
        (NewEntry(conversation_id='c', kind='message', run_id='r', payload=b'not json'), InvalidPayloadError, 'not a'),
        (NewEntry(conversation_id='c', kind='message', run_id='r', payload=b'{"kind":"x"}'), InvalidPayloadError, None),
        (
            NewEntry(conversation_id='c', kind='message', run_id='r', payload=_msg() + b',' + _msg()),
            InvalidPayloadError,
            None,
        ),
        (NewEntry(conversation_id='c', kind='run_finished', run_id='r', payload=b'{}'), InvalidPayloadError, None),
        (NewEntry(conversation_id='c', kind='message', run_id='r', idempotency_key=''), InvalidArgumentError, 'empty'),
        (NewEntry(conversation_id='c', kind='deleted'), InvalidArgumentError, 'delete_conversation'),
        (
            NewEntry(conversation_id='c', kind='message', run_id='unknown', payload=_msg()),
            RunNotFound,
            'has not started',
        ),
        (NewEntry(conversation_id='c', kind='run_started', run_id='r2', parent=999), InvalidArgumentError, 'parent'),
        (
            NewEntry(conversation_id='other', kind='message', run_id='r', payload=_msg()),
            InvalidArgumentError,
            'belongs to',
        ),
        (NewEntry(conversation_id='c', kind='run_started', run_id='r'), InvalidArgumentError, 'already started'),
    ],
)
async def test_bad_input_raises_and_changes_nothing(
    log: EventLogBase, entry: NewEntry, error: type[Exception], match: str | None
) -> None:
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append(message_entry(exchange(1)[0], conversation_id='c', run_id='r'))
    before = [e.hash for e in await log.entries()]
    records = (await log.get_run('r'), await log.get_conversation('c'))
    with pytest.raises(error, match=match):
        await log.append(entry)
    # A bad entry in a batch rolls the whole batch back.
    good = message_entry(exchange(2)[0], conversation_id='c', run_id='r')
    with pytest.raises(error):
        await log.append_many([good, entry])
    assert [e.hash for e in await log.entries()] == before
    assert (await log.get_run('r'), await log.get_conversation('c')) == records


async def test_non_entry_argument_is_refused(log: EventLogBase) -> None:
    with pytest.raises(InvalidArgumentError, match='NewEntry'):
        await log.append({'kind': 'message'})  # type: ignore[arg-type]


async def test_naive_timestamp_is_refused(log: EventLogBase) -> None:
    with pytest.raises(InvalidArgumentError, match='timezone'):
        await log.append(
            NewEntry(conversation_id='c', kind='run_started', run_id='r', payload=b'{}', timestamp=datetime(2026, 1, 1))
        )
    seq = await log.append(
        NewEntry(
            conversation_id='c',
            kind='run_started',
            run_id='r',
            payload=b'{}',
            timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    entry = await log.get_entry(seq)
    assert entry is not None and entry.timestamp == datetime(2026, 1, 1, tzinfo=UTC)


async def test_readers_reject_bad_arguments(log: EventLogBase) -> None:
    with pytest.raises(InvalidArgumentError):
        await log.run_messages('')
    with pytest.raises(InvalidArgumentError):
        await log.entries(kinds=['bogus'])
    with pytest.raises(InvalidArgumentError):
        await log.entries(after_seq=-1)
    with pytest.raises(InvalidArgumentError):
        await log.get_entry(0)
    with pytest.raises(RunNotFound):
        await log.run_messages('missing')
    with pytest.raises(ConversationNotFound):
        await log.transcript('missing')
    assert await log.get_run('missing') is None
    assert await log.get_conversation('missing') is None


async def test_context_of_an_unknown_conversation_is_empty(log: EventLogBase) -> None:
    """Every form of `context` gives nothing for a conversation never recorded (an agent starts it
    from scratch); the readers of what was recorded, and the writes that need it, still refuse it."""
    await add_run(log, 'other', 'r1', exchange(1))
    assert await log.context('new') == []
    assert await log.context_payloads('new') == []
    assert [b async for b in log.iter_context_payloads('new')] == []
    assert [b async for b in log.iter_context_messages('new')] == []
    assert [b async for b in log.iter_context_heads('new', payload_limit=10)] == []
    with pytest.raises(ConversationNotFound):
        await log.transcript('new')
    with pytest.raises(ConversationNotFound):
        await log.fork('new')
    with pytest.raises(InvalidArgumentError):
        await log.context('')
    assert await log.get_conversation('new') is None  # reading created nothing


async def _nested_run(log: EventLogBase, conversation_id: str, run_id: str, parent_run_id: str, i: int) -> list[int]:
    """A run started inside run `parent_run_id` (a sub-agent), recorded under `conversation_id`."""
    started = run_started_entry(conversation_id=conversation_id, run_id=run_id, parent_run_id=parent_run_id)
    await log.append(started)
    seqs = [await log.append(message_entry(m, conversation_id=conversation_id, run_id=run_id)) for m in exchange(i)]
    await log.append(run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'))
    return seqs


async def test_a_nested_run_never_becomes_the_context(log: EventLogBase) -> None:
    """A sub-agent's run recorded under its parent's conversation id, inside the parent's tool call,
    is not what the conversation continues from; one in a conversation of its own is that one's."""
    outer = tool_exchange(1)
    await log.append(run_started_entry(conversation_id='c', run_id='p'))
    seqs = [await log.append(message_entry(m, conversation_id='c', run_id='p')) for m in outer[:2]]
    await _nested_run(log, 'c', 's1', 'p', 2)  # inside the tool call, same conversation
    await _nested_run(log, 'c', 's2', 's1', 3)  # a sub-agent of the sub-agent
    await _nested_run(log, 'own', 's3', 'p', 4)  # a sub-agent with a conversation of its own
    seqs += [await log.append(message_entry(m, conversation_id='c', run_id='p')) for m in outer[2:]]
    await log.append(run_finished_entry(conversation_id='c', run_id='p', status='completed'))
    await _nested_run(log, 'c', 's4', 'p', 5)  # recorded after its parent ended: still nested
    assert dump(await log.context('c')) == dump(outer)
    assert b'[' + b','.join(await log.context_payloads('c')) + b']' == dump(outer)
    assert [seq for b in [b async for b in log.iter_context_messages('c')] for seq, _ in b] == seqs
    assert dump(await log.context('own')) == dump(exchange(4))
    runs = await log.list_runs(conversation_id='c')
    assert [r.run_id for r in runs] == ['p', 's1', 's2', 's4']
    assert [r.run_id for r in top_level_runs(runs)] == ['p']
    assert [r.run_id for r in top_level_runs(await log.list_runs())] == ['p', 's3']
    assert [r.run_id for r in await log.list_runs(parent_run_id='p')] == ['s1', 's3', 's4']
    # Every original message once, in the order recorded: the sub-agents' inside the tool call.
    transcript = outer[:2] + exchange(2) + exchange(3) + outer[2:] + exchange(5)
    assert await log.transcript_json('c') == dump(transcript)
    # A fork by default takes the main line's last message; a top-level run continuing from it
    # becomes the context.
    forked = await log.fork('c')
    assert dump(await log.context(forked)) == dump(outer)
    await add_run(log, 'c', 'p2', exchange(6), parent=seqs[-1])
    assert dump(await log.context('c')) == dump(outer + exchange(6))
    assert (await log.verify()).ok


async def test_closed_log_refuses_calls(log: EventLogBase) -> None:
    log.close()
    with pytest.raises(LogClosedError):
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
    with pytest.raises(LogClosedError):
        await log.entries()


async def test_async_context_manager_closes(backend: str, tmp_path: Path) -> None:
    from backends import make_log

    async with make_log(backend, tmp_path) as opened:
        await opened.append(run_started_entry(conversation_id='c', run_id='r'))
    with pytest.raises(LogClosedError):
        await opened.last_seq()
