"""Many writers on one PostgreSQL log: total order, hash chains, idempotency keys, search, schema creation.

Every writer, follower and searcher below that stands for another machine is a real process
(`pg_worker.py`, see `pgworkers`) with its own `PostgresEventLog` and
connection pool, on the tests' real server.
Processes are synchronised through their pipes and the server's own views
(`pg_locks`), never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import psycopg.errors
import pytest
from pg_worker import message, message_text
from pgworkers import Worker, check_entry, lock_waiters, schema_fixture, wait_until, workers_fixture

from eventlog import message_entry, run_started_entry
from eventlog.postgres_log import SCHEMA_VERSION, PostgresEventLog
from search import SearchEngine, SearchOptions
from search.persistent_index import PersistentIndex as LmdbIndex

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below


async def test_a_writer_holding_its_seq_makes_the_next_writer_and_the_follower_wait(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        assert await log.append(run_started_entry(conversation_id='c', run_id='seed')) == 1
        follower = workers('follow', pg_dsn, schema, '7')
        follower.expect('ready')
        first = workers('append', pg_dsn, schema, 'c', 'first', '1', '--hold-at', '0')
        _, held_seq, held_pid = first.expect('held').split()
        assert held_seq == '2'
        second = workers('append', pg_dsn, schema, 'c', 'second', '1')
        second.expect('ready')
        wait_until(lambda: lock_waiters(pg_dsn, schema) != [], 'the second writer waits for the writers lock')
        assert int(held_pid) not in lock_waiters(pg_dsn, schema)
        # Seq 2 is taken but not committed: nobody sees past 1, and the second writer cannot commit.
        assert await log.last_seq() == 1
        assert await log.entries(after_seq=1) == []
        assert not [line for line in second.output if line.startswith('ack')]
        assert set(follower.output) <= {'ready', 'seen 1'}
        first.send()
        first.finish()
        second.finish()
        assert [line for line in follower.finish() if line.startswith('seen')] == [f'seen {n}' for n in range(1, 8)]
        assert first.acks()[0] == (2, 's:first-run-0')
        assert min(seq for seq, _ in second.acks()) > 2
        assert sorted(seq for seq, _ in first.acks() + second.acks()) == list(range(2, 8))
        assert [e.seq for e in await log.entries()] == list(range(1, 8))
        assert (await log.verify()).ok
    finally:
        log.close()


async def test_four_processes_appending_to_one_conversation_keep_one_chain_and_every_ack(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    names = ['w0', 'w1', 'w2', 'w3']
    per_worker = 40
    total = len(names) * (per_worker + 2 * (per_worker // 10))
    PostgresEventLog(pg_dsn, schema=schema).close()
    follower = workers('follow', pg_dsn, schema, str(total))
    writers = {name: workers('append', pg_dsn, schema, 'shared', name, str(per_worker), '--wait') for name in names}
    for worker in (follower, *writers.values()):
        worker.expect('ready')
    for worker in writers.values():
        worker.send()
    acked: dict[int, tuple[str, str]] = {}
    for name, worker in writers.items():
        worker.finish()
        for seq, label in worker.acks():
            assert seq not in acked, f'seq {seq} acknowledged twice'
            acked[seq] = (name, label)
    assert sorted(acked) == list(range(1, total + 1))
    assert [line for line in follower.finish() if line.startswith('seen')] == [f'seen {n}' for n in range(1, total + 1)]
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        report = await log.verify()
        assert report.ok, report.problems
        assert report.entries_checked == total
        entries = await log.entries()
        assert [e.seq for e in entries] == list(range(1, total + 1))
        for entry in entries:
            check_entry(entry, *acked[entry.seq], 'shared')
        conv = await log.get_conversation('shared')
        assert conv is not None
        assert (conv.entry_count, conv.message_count, conv.run_count) == (total, per_worker * len(names), 16)
        for run in await log.list_runs(conversation_id='shared'):
            assert run.status == 'completed'
            assert run.entry_count == 12
    finally:
        log.close()


async def test_idempotency_keys_hold_across_processes(pg_dsn: str, schema: str, workers: Callable[..., Worker]) -> None:
    keys = [f'k{n}' for n in range(30)]
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='idem', run_id='shared'))
        procs = [workers('idem', pg_dsn, schema, ','.join(keys[n * 7 :] + keys[: n * 7])) for n in range(4)]
        for proc in procs:
            proc.expect('ready')
        for proc in procs:
            proc.send()
        answers = [{label: seq for seq, label in proc.acks()} for proc in procs if proc.finish()]
        assert all(answer == answers[0] for answer in answers)
        assert sorted(answers[0]) == sorted(keys)
        assert sorted(answers[0].values()) == list(range(2, 32))
        messages = await log.entries(conversation_id='idem', kinds=['message'])
        assert len(messages) == len(keys)
        for entry in messages:
            assert entry.idempotency_key is not None
            assert answers[0][entry.idempotency_key] == entry.seq
            assert message_text('idem', int(entry.idempotency_key[1:])).encode() in entry.payload
        assert (await log.verify()).ok
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert conn.execute(f'SELECT count(*) FROM "{schema}".idem').fetchone() == (len(keys),)
            primary = conn.execute(
                'SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = %s',
                (f'"{schema}".idem', 'p'),
            ).fetchall()
            assert primary == [('PRIMARY KEY (k)',)]
            row = conn.execute(f'SELECT k, v FROM "{schema}".idem LIMIT 1').fetchone()
            assert row is not None
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(f'INSERT INTO "{schema}".idem (k, v) VALUES (%s, %s)', (row[0], b'\0' * 8))
        again = await log.append(
            message_entry(message('idem', 3), conversation_id='idem', run_id='shared', idempotency_key='k3')
        )
        assert again == answers[0]['k3']
        assert await log.last_seq() == 31
    finally:
        log.close()


async def test_a_search_on_another_machine_sees_a_message_once_its_append_committed(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        # Calls of worker alpha: run 0 is 12 single appends (0-11), run 1 starts (12) and appends
        # messages 10 and 11 in one batch (13): held before its commit.
        writer = workers('append', pg_dsn, schema, 'talk', 'alpha', '12', '--hold-at', '13')
        _, held_seq, _ = writer.expect('held').split()
        index = LmdbIndex(log)
        engine = SearchEngine(index, SearchOptions())
        before = await engine.find('marker10', scope='all', conversation_id=None)
        assert before.outcome == 'no_match'
        assert before.documents == 10
        assert await log.last_seq() == int(held_seq) - 1
        writer.send()
        writer.finish()
        after = await engine.find('marker10', scope='all', conversation_id=None)
        assert after.outcome == 'found'
        assert [(hit.seq, hit.run_id, hit.position) for hit in after.hits] == [(int(held_seq), 'alpha-run-1', 0)]
        queries = ['marker10', 'deploy server', 'cache budget quota', 'alpha note', 'rollback latency invoice']
        incremental = [await engine.find(q, scope='all', conversation_id=None) for q in queries]
        index.rebuild()
        rebuilt = [await engine.find(q, scope='all', conversation_id=None) for q in queries]

        def shown(results: list[object]) -> list[list[tuple[float, str, int, int | None]]]:
            return [[(h.score, h.run_id, h.position, h.seq) for h in r.hits] for r in results]  # type: ignore[attr-defined]

        assert shown(rebuilt) == shown(incremental)
        assert sum(len(r.hits) for r in rebuilt) > 5
        assert [r.documents for r in rebuilt] == [12] * len(queries)
        assert index.verify() == []
    finally:
        log.close()


async def test_processes_opening_a_fresh_schema_at_once_create_it_once(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    procs = [workers('open', pg_dsn, schema) for _ in range(6)]
    for proc in procs:
        proc.expect('ready')
    for proc in procs:
        proc.send()
    seqs = sorted(proc.acks()[0][0] for proc in procs if proc.finish())
    assert seqs == list(range(1, 7))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall() == [(SCHEMA_VERSION,)]
        # Everything was created by one transaction: one creator, however many raced.
        creators = conn.execute(
            'SELECT DISTINCT c.xmin::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace '
            "WHERE n.nspname = %s AND c.relkind = 'r' UNION SELECT xmin::text FROM pg_namespace WHERE nspname = %s",
            (schema, schema),
        ).fetchall()
        assert len(creators) == 1, creators
    log = PostgresEventLog(pg_dsn, schema=schema, create=False)
    try:
        assert len(await log.list_runs(conversation_id='opened')) == 6
        assert (await log.verify()).ok
    finally:
        log.close()


async def test_processes_opening_and_catching_up_one_search_index_at_once_apply_each_entry_once(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        for run in range(3):
            run_id = f'r{run}'
            batch = [run_started_entry(conversation_id='c', run_id=run_id)]
            batch += [message_entry(message('c', run * 10 + i), conversation_id='c', run_id=run_id) for i in range(10)]
            await log.append_many(batch)
        procs = [workers('index', pg_dsn, schema) for _ in range(4)]
        for proc in procs:
            proc.expect('ready')
        for proc in procs:
            proc.send()
        read = [proc.acks()[0][0] for proc in procs if proc.finish()]
        assert sum(read) == await log.last_seq() == 33
        index = LmdbIndex(log)
        assert index.state().position == 33
        assert index.verify() == []
        hits = (await SearchEngine(index).find('marker25', scope='all', conversation_id=None)).hits
        assert [(hit.run_id, hit.position) for hit in hits] == [('r2', 5)]
    finally:
        log.close()
