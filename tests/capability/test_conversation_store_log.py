"""What `EventLogConversationStore` adds over an end-of-run store, checked in the log itself.

Each message is stored once (with `EventLogPersistence` recording the runs, the store links what
the capability appended), replay stays exact, a stale save writes nothing, a delete erases what
no fork shares from the store's files, `verify` rebuilds and checks the store's index, an export
carries the records, and a PostgreSQL schema of the previous layout is read or migrated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip('pydantic_ai.conversation_store', reason='the conversation store needs pydantic-ai-slim 2.66+')

from _helpers import chat_model, dump
from backends import BACKENDS, ENCRYPTED_BACKENDS, make_log, postgres_dsn, schema_for
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict

from capability import EventLogConversationStore, EventLogPersistence
from eventlog import InMemoryEventLog, InvalidArgumentError, LmdbEventLog, NewEntry
from eventlog._keys import Table, store_record_key
from eventlog.log import EventLogBase

ALL = [*BACKENDS, *ENCRYPTED_BACKENDS]


async def _turn(store: EventLogConversationStore, agent: Agent[None, str], cid: str, prompt: str) -> object:
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)
    return result


async def _message_count(log: EventLogBase, cid: str) -> int:
    return len(await log.entries(conversation_id=cid, kinds=['message']))


@pytest.mark.parametrize('backend', ALL)
async def test_with_the_capability_each_message_is_stored_once(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    try:
        store = EventLogConversationStore(log)
        agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
        results = [await _turn(store, agent, 'c', prompt) for prompt in ['hello', 'call lookup paris', 'and then?']]
        loaded = await store.load('c')
        assert loaded is not None
        assert dump(loaded.messages) == dump(results[-1].all_messages())  # type: ignore[attr-defined]
        assert await _message_count(log, 'c') == len(loaded.messages) == 8
        for result in results:  # replay of each run is exact
            run_id = result.run_id  # type: ignore[attr-defined]
            assert await log.run_messages_json(run_id) == dump(result.all_messages())  # type: ignore[attr-defined]
        # The store wrote no run of its own: every message is the capability's.
        runs = await log.list_runs(conversation_id='c')
        assert [run.run_id for run in runs] == [r.run_id for r in results]  # type: ignore[attr-defined]
        # Regenerate the last answer: a new answer, on a branch; the old one stays. pydantic-ai
        # sends the trailing request again with a new timestamp, and the log keeps what each run
        # sent, so that copy is the regenerating run's own (replay stays exact); the store's
        # history links the request it had.
        record = await store.read_record('c')
        assert record is not None
        branch = await store.branch('c', at=len(loaded.messages) - 1, expected_revision=record.revision)
        regenerated = await agent.run(conversation=branch)
        saved = await store.save(regenerated)
        assert [type(entry.message).__name__ for entry in saved] == ['ModelResponse']
        assert await _message_count(log, 'c') == 10
        sent = await log.entries(run_id=regenerated.run_id, kinds=['message'])
        assert [entry.inherited for entry in sent] == [False, False]
        assert sent[0].payload != dump([loaded.messages[-2]])[1:-1]  # re-stamped by pydantic-ai
        reloaded = await store.load('c')
        assert reloaded is not None
        assert dump(reloaded.messages[:-1]) == dump(loaded.messages[:-1])
        record = await store.read_record('c')
        assert record is not None and len(record.branches) == 1
        assert await log.run_messages_json(regenerated.run_id) == dump(regenerated.all_messages())
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


@pytest.mark.parametrize('backend', ALL)
async def test_without_the_capability_the_store_records_the_runs(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    try:
        store = EventLogConversationStore(log)
        agent = Agent(chat_model())
        results = [await _turn(store, agent, 'plain', prompt) for prompt in ['one', 'call lookup x', 'three']]
        assert await _message_count(log, 'plain') == 8
        for result in results:
            # The store appends a run's messages under the run's own id, so replay finds it.
            run_id = result.run_id  # type: ignore[attr-defined]
            assert await log.run_messages_json(run_id) == dump(result.all_messages())  # type: ignore[attr-defined]
        assert dump(await log.context('plain')) == dump(results[-1].all_messages())  # type: ignore[attr-defined]
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


@pytest.mark.parametrize('backend', BACKENDS)
async def test_a_stale_save_writes_nothing(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    try:
        store = EventLogConversationStore(log)
        agent = Agent(chat_model())
        await _turn(store, agent, 's', 'first')
        one = await store.load('s')
        two = await store.load('s')
        assert one is not None and two is not None
        await store.save(await agent.run('from one', conversation=one))
        before = await log.last_seq()
        with pytest.raises(ConversationConflict):
            await store.save(await agent.run('from two', conversation=two))
        assert await log.last_seq() == before
        with pytest.raises(ConversationConflict):  # creating one that exists
            await store.save(Conversation(conversation_id='s', messages=[]))
        assert await log.last_seq() == before
    finally:
        log.close()


async def test_saved_entries_are_the_stores_own(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    with pytest.raises(InvalidArgumentError, match='conversation store'):
        await log.append(NewEntry(conversation_id='x', kind='saved', payload=b'{}'))


def _tokens_in(directory: Path, *tokens: str) -> set[str]:
    data = b''.join(path.read_bytes() for path in directory.rglob('*.mdb'))
    return {token for token in tokens if token.encode() in data}


async def test_delete_erases_from_the_files_what_no_fork_shares(tmp_path: Path) -> None:
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        store = EventLogConversationStore(log)
        agent = Agent(chat_model())
        await _turn(store, agent, 'src', 'shared-token-alpha')
        await _turn(store, agent, 'src', 'private-token-beta')
        fork = await store.fork('src', at=2, new_conversation_id='fork')
        await store.save(await agent.run('fork-token-gamma', conversation=fork))
        assert _tokens_in(path, 'shared-token-alpha', 'private-token-beta') == {
            'shared-token-alpha',
            'private-token-beta',
        }
        await store.delete('src')
        assert await store.load('src') is None
        forked = await store.load('fork')
        assert forked is not None and len(forked.messages) == 4
        assert 'shared-token-alpha' in dump(forked.messages).decode()
        assert _tokens_in(path, 'shared-token-alpha', 'private-token-beta', 'fork-token-gamma') == {
            'shared-token-alpha',
            'fork-token-gamma',
        }
        await store.delete('fork')
        assert _tokens_in(path, 'shared-token-alpha', 'private-token-beta', 'fork-token-gamma') == set()
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


@pytest.mark.parametrize('backend', BACKENDS)
async def test_verify_rebuilds_the_store_index(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    try:
        store = EventLogConversationStore(log)
        await _turn(store, Agent(chat_model()), 'v', 'hi')
        assert (await log.verify()).ok
        log._write_sync(lambda txn: txn.delete(Table.STORE, store_record_key('v')))  # pyright: ignore[reportPrivateUsage]
        report = await log.verify()
        assert not report.ok
        assert [p.code for p in report.problems] == ['index-key']
        assert 'conversation store' in report.problems[0].reason
    finally:
        log.close()


async def test_an_export_carries_the_records(tmp_path: Path) -> None:
    source = InMemoryEventLog()
    store = EventLogConversationStore(source)
    agent = Agent(chat_model(), capabilities=[EventLogPersistence(source)])
    for prompt in ['one', 'two']:
        await _turn(store, agent, 'e', prompt)
    await store.fork('e', at=2, new_conversation_id='ef')
    target = LmdbEventLog(tmp_path / 'copy.lmdb')
    try:
        # A store with entries of its own first, so the import's seqs differ from the source's.
        await _turn(EventLogConversationStore(target), Agent(chat_model()), 'other', 'x')
        await source.export(tmp_path / 'out.jsonl')
        await target.import_(tmp_path / 'out.jsonl')
        copied = EventLogConversationStore(target)
        for cid in ['e', 'ef']:
            want = await store.load_entries(cid)
            got = await copied.load_entries(cid)
            assert want is not None and got is not None
            assert [(x.id, x.parent_id, dump([x.message])) for x in got] == [
                (x.id, x.parent_id, dump([x.message])) for x in want
            ]
            assert (await copied.read_record(cid)) == (await store.read_record(cid))
        assert (await target.verify()).ok
    finally:
        target.close()


async def test_the_postgres_layout_before_the_store_is_read_and_migrated(tmp_path: Path) -> None:
    import psycopg

    from eventlog.postgres_log import SCHEMA_VERSION, PostgresEventLog

    assert SCHEMA_VERSION == 3
    dsn = postgres_dsn()
    schema = schema_for(tmp_path / 'old')
    log = PostgresEventLog(dsn, schema=schema)
    await Agent(chat_model(), capabilities=[EventLogPersistence(log)]).run('before', conversation_id='old')
    log.close()
    with psycopg.connect(dsn, autocommit=True) as conn:  # as layout 2 left it: no store table
        conn.execute(f'DROP TABLE "{schema}".store'.encode())
        conn.execute(f'UPDATE "{schema}".schema_version SET version = 2'.encode())
    reader = PostgresEventLog(dsn, schema=schema, read_only=True)
    try:
        assert await EventLogConversationStore(reader).list_conversations() == []
        assert await EventLogConversationStore(reader).load('old') is None
        assert len(await reader.context('old')) == 2
        assert (await reader.verify()).ok
    finally:
        reader.close()
    writer = PostgresEventLog(dsn, schema=schema)
    try:
        await _turn(EventLogConversationStore(writer), Agent(chat_model()), 'later', 'after')
        assert [r.conversation_id for r in await EventLogConversationStore(writer).list_conversations()] == ['later']
    finally:
        writer.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT version FROM "{schema}".schema_version'.encode()).fetchall() == [(3,)]
