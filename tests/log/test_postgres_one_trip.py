"""Appends in one round trip on PostgreSQL: a handle that wrote the records an append reads last
sends BEGIN, the writers' lock, a guard, the writes and the COMMIT in one pipeline.

Round trips are counted on the client (a statement sent on its own is one, a pipeline is one).
A guard that fails (another handle or process appended in between) leaves nothing written, and
the append is made on the two-round-trip path; the log is then exactly what an LMDB log fed the
same entries holds (same seqs, timestamps, payloads and chain hashes).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_worker import turn_entry
from pgworkers import Worker, lock_waiters, schema_fixture, wait_until, workers_fixture
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import LmdbEventLog, NewEntry, message_entry, run_finished_entry, run_started_entry
from eventlog.log import EventLogBase
from eventlog.postgres_log import PostgresEventLog

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below

BASE = datetime(2026, 3, 1, tzinfo=UTC)


class RoundTrips:
    """Counts the round trips psycopg makes: a statement executed outside a pipeline, or a pipeline."""

    def __init__(self) -> None:
        self.count = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def _add(self) -> None:
        with self._lock:
            self.count += 1

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        execute = psycopg.Cursor.execute
        pipeline = psycopg.Connection.pipeline
        trips = self

        def counted_execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
            if not getattr(trips._local, 'piped', False):  # pyright: ignore[reportPrivateUsage]
                trips._add()  # pyright: ignore[reportPrivateUsage]
            return execute(self, *args, **kwargs)

        @contextmanager
        def counted_pipeline(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
            trips._add()  # pyright: ignore[reportPrivateUsage]
            trips._local.piped = True  # pyright: ignore[reportPrivateUsage]
            try:
                with pipeline(self, *args, **kwargs) as piped:
                    yield piped
            finally:
                trips._local.piped = False  # pyright: ignore[reportPrivateUsage]

        monkeypatch.setattr(psycopg.Cursor, 'execute', counted_execute)
        monkeypatch.setattr(psycopg.Connection, 'pipeline', counted_pipeline)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    trips = RoundTrips()
    trips.install(monkeypatch)
    return trips


def trips(log: PostgresEventLog) -> dict[str, int]:
    return dict(log._trips)  # pyright: ignore[reportPrivateUsage]


def request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=BASE)], timestamp=BASE)


def stamped(entry: NewEntry, number: int) -> NewEntry:
    return replace(entry, timestamp=BASE + timedelta(seconds=number))


async def same_log(log: EventLogBase, twin: EventLogBase) -> None:
    """`log` holds exactly what `twin` holds: entries (with hashes), runs and conversations."""
    assert await log.entries() == await twin.entries()
    assert await log.list_runs() == await twin.list_runs()
    assert await log.list_conversations() == await twin.list_conversations()
    report = await log.verify()
    assert report.ok, report.problems


async def test_steady_appends_take_one_round_trip_each(pg_dsn: str, schema: str, round_trips: RoundTrips) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        await log.append(message_entry(request('warm'), conversation_id='c', run_id='r'))
        before = round_trips.count
        for i in range(20):
            await log.append(message_entry(request(f'm{i}'), conversation_id='c', run_id='r'))
        assert round_trips.count - before == 20
        # An agent run as the capability appends it: a new run continuing the last response (its
        # start and request in one batch), the response, the end, each with an idempotency key
        # never recorded before.
        tip = await log.last_seq()
        before = round_trips.count
        for run in range(5):
            run_id = f'agent-{run}'
            await log.append_many(
                [
                    run_started_entry(conversation_id='c', run_id=run_id, idempotency_key='s', parent=tip),
                    message_entry(request('q'), conversation_id='c', run_id=run_id, idempotency_key='q'),
                ]
            )
            tip = await log.append(message_entry(request('a'), conversation_id='c', run_id=run_id, idempotency_key='a'))
            await log.append(
                run_finished_entry(conversation_id='c', run_id=run_id, status='completed', idempotency_key='f')
            )
        assert round_trips.count - before == 15
        assert trips(log)['guard failed'] == 0
        # The switch the bench uses: the same appends on the two-round-trip path.
        log._one_trip = False  # pyright: ignore[reportPrivateUsage]
        before = round_trips.count
        for i in range(10):
            await log.append(message_entry(request(f'n{i}'), conversation_id='c', run_id='r'))
        assert round_trips.count - before == 20
        report = await log.verify()
        assert report.ok and report.entries_checked == 2 + 20 + 5 * 4 + 10
    finally:
        log.close()


async def test_an_idempotent_repeat_through_one_round_trip_answers_the_first_seq(
    pg_dsn: str, schema: str, round_trips: RoundTrips
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        entry = message_entry(request('once'), conversation_id='c', run_id='r', idempotency_key='k')
        first = await log.append(entry)
        done = trips(log)['one']
        before = round_trips.count
        assert await log.append(entry) == first
        assert await log.append_many([entry]) == [first]
        assert round_trips.count - before == 2
        assert trips(log)['one'] == done + 2
        assert [e.seq for e in await log.entries()] == [1, 2]
        assert await log.last_seq() == 2
    finally:
        log.close()


async def test_a_failed_guard_leaves_nothing_written(
    pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    log = PostgresEventLog(pg_dsn, schema=schema)
    other = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        await log.append(message_entry(request('mine'), conversation_id='c', run_id='r'))
        await other.append(message_entry(request('theirs'), conversation_id='c', run_id='r'))

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError('the two-trip path is not taken in this test')

        log._write_two_trips = refuse  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        with pytest.raises(RuntimeError, match='two-trip path'):
            await log.append(message_entry(request('lost'), conversation_id='c', run_id='r'))
        assert trips(log)['guard failed'] == 1
        # An expected event: nothing in the application's log (psycopg would warn about the
        # aborted pipeline if the guard's error were still on its way out of the pipeline block).
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert [e.seq for e in await other.entries()] == [1, 2, 3]
        assert await other.last_seq() == 3
        run = await other.get_run('r')
        assert run is not None and run.message_count == 2
        del log._write_two_trips  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        assert await log.append(message_entry(request('again'), conversation_id='c', run_id='r')) == 4
        assert (await log.verify()).ok
    finally:
        log.close()
        other.close()


async def test_two_handles_taking_turns_on_one_conversation_equal_an_lmdb_log(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    handles = [PostgresEventLog(pg_dsn, schema=schema), PostgresEventLog(pg_dsn, schema=schema)]
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    rng = random.Random(7)
    number = 0
    try:
        for who in (0, 1):
            for log in (handles[who], twin):
                await log.append(
                    stamped(run_started_entry(conversation_id='c', run_id=f'r{who}', idempotency_key='s'), 0)
                )
        for turn in range(24):
            who = turn % 2
            for _ in range(rng.randint(1, 6)):
                number += 1
                entry = stamped(
                    message_entry(
                        request(f'{who}:{number}'), conversation_id='c', run_id=f'r{who}', idempotency_key=f'k{number}'
                    ),
                    number,
                )
                seq = await handles[who].append(entry)
                assert await twin.append(entry) == seq
                if rng.random() < 0.3:  # a repeat, answered with the first seq
                    assert await handles[who].append(entry) == seq
                    assert await twin.append(entry) == seq
        for who in (0, 1):
            counts = trips(handles[who])
            assert counts['guard failed'] >= 1
            assert counts['one'] >= 1
        await same_log(handles[0], twin)
    finally:
        for log in handles:
            log.close()
        twin.close()


async def test_two_processes_taking_turns_on_one_conversation_equal_an_lmdb_log(
    pg_dsn: str, schema: str, tmp_path: Path, workers: Callable[..., Worker]
) -> None:
    PostgresEventLog(pg_dsn, schema=schema).close()
    names = ['p0', 'p1']
    procs = [workers('turns', pg_dsn, schema, 'shared', name) for name in names]
    for proc in procs:
        proc.expect('ready')
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    rng = random.Random(11)
    number = 0
    started = [False, False]
    last_trips: list[list[int]] = [[], []]
    try:
        for turn in range(16):
            who = turn % 2
            numbers = list(range(number, number + rng.randint(2, 7)))
            number = numbers[-1] + 1
            procs[who].send(','.join(map(str, numbers)))
            for n in numbers:
                _, seq, got = procs[who].expect('ack').split()
                assert int(got) == n
                entry = turn_entry('shared', names[who], n, not started[who])
                started[who] = True
                assert await twin.append(entry) == int(seq)
            last_trips[who] = [int(part) for part in procs[who].expect('trips').split()[1:]]
        for who in (0, 1):
            one, guard_failed, _ = last_trips[who]
            assert guard_failed >= 1
            assert one >= 1
            procs[who].send('')
            procs[who].finish()
        log = PostgresEventLog(pg_dsn, schema=schema)
        try:
            await same_log(log, twin)
        finally:
            log.close()
    finally:
        twin.close()


async def test_the_guard_sees_a_commit_made_while_it_waited_for_the_lock(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    """The guard's snapshot starts after the lock is granted: a writer that held the lock and
    committed while this handle's one-trip append waited for it makes the guard fail."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='mine'))
        await log.append(message_entry(request('warm'), conversation_id='c', run_id='mine'))
        assert trips(log)['one'] == 1
        holder = workers('append', pg_dsn, schema, 'c', 'held', '1', '--hold-at', '0')
        _, held_seq, held_pid = holder.expect('held').split()
        assert held_seq == '3'
        pending = asyncio.create_task(log.append(message_entry(request('waits'), conversation_id='c', run_id='mine')))
        await asyncio.to_thread(
            wait_until, lambda: [p for p in lock_waiters(pg_dsn, schema) if p != int(held_pid)] != [], 'a lock waiter'
        )
        assert not pending.done()
        holder.send()
        holder.finish()
        seq = await pending
        acked = [s for s, _ in holder.acks()]
        assert acked[0] == 3
        assert seq not in acked and seq > 3
        assert trips(log)['guard failed'] == 1
        entries = await log.entries()
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


async def test_other_writes_through_the_handle_drop_the_cache(pg_dsn: str, schema: str) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        seqs = [await log.append(message_entry(request(f'm{i}'), conversation_id='c', run_id='r')) for i in range(3)]
        assert trips(log)['one'] == 3
        await log.erase('c', where=lambda e: e.seq == seqs[0], reason='test', scrub=False)
        assert log._known == {}  # pyright: ignore[reportPrivateUsage]
        await log.append(message_entry(request('after'), conversation_id='c', run_id='r'))
        assert trips(log)['one'] == 3
        await log.fork('c', at_seq=seqs[-1], new_conversation_id='c2')
        assert log._known == {}  # pyright: ignore[reportPrivateUsage]
        await log.delete_conversation('c2')
        assert log._known == {}  # pyright: ignore[reportPrivateUsage]
        await log.append(message_entry(request('later'), conversation_id='c', run_id='r'))
        await log.append(message_entry(request('last'), conversation_id='c', run_id='r'))
        assert trips(log)['one'] == 4
        assert trips(log)['guard failed'] == 0
        assert (await log.verify()).ok
    finally:
        log.close()


# -- a connection lost with the whole append in flight ----------------------------------------------


def kill(dsn: str, pid: int) -> None:
    """End backend `pid` as an administrator would, and wait until it is gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute('SELECT pg_terminate_backend(%s)', (pid,)).fetchone() == (True,)
        gone = 'SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)'
        wait_until(lambda: conn.execute(gone, (pid,)).fetchone() == (True,), f'backend {pid} is gone')


async def warm(log: PostgresEventLog) -> None:
    """A run and two messages: the last append took one round trip."""
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append(message_entry(request('one'), conversation_id='c', run_id='r'))
    await log.append(message_entry(request('two'), conversation_id='c', run_id='r'))
    assert trips(log)['one'] == 2


async def only_once(log: PostgresEventLog, texts: list[str]) -> None:
    """The log holds the run and one message per text, each once, in order, chained."""
    entries = await log.entries()
    assert [e.seq for e in entries] == list(range(1, len(texts) + 2))
    bodies = [e.payload for e in entries if e.kind == 'message']
    assert [text.encode() in body for text, body in zip(texts, bodies, strict=True)] == [True] * len(texts)
    report = await log.verify()
    assert report.ok, report.problems


async def test_a_one_trip_append_whose_backend_dies_waiting_for_the_lock_is_made_again(
    pg_dsn: str, schema: str
) -> None:
    """The pipeline (COMMIT included) is in flight while the append waits for the writers' lock.
    Its server process is gone and the log's last seq is below the entry's: it never committed,
    so the append is made again instead of reporting an unknown outcome."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        await warm(log)
        admin.execute('BEGIN')
        admin.execute(f'LOCK TABLE "{schema}".entries IN EXCLUSIVE MODE')  # type: ignore[arg-type]
        pending = asyncio.create_task(log.append(message_entry(request('three'), conversation_id='c', run_id='r')))
        await asyncio.to_thread(wait_until, lambda: len(lock_waiters(pg_dsn, schema)) == 1, 'the append waits')
        [waiter] = lock_waiters(pg_dsn, schema)
        await asyncio.to_thread(kill, pg_dsn, waiter)
        admin.execute('COMMIT')
        assert await pending == 4
        assert trips(log)['one'] == 2  # the lost attempt is not counted: the two-trip path made it
        await only_once(log, ['one', 'two', 'three'])
    finally:
        admin.close()
        log.close()


async def test_a_one_trip_append_killed_inside_its_commit_is_made_again(pg_dsn: str, schema: str) -> None:
    """A deferred trigger holds the COMMIT on an advisory lock the test holds; the test ends the
    append's server process there. Nothing committed, the process is gone: made again."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        await warm(log)
        admin.execute(
            f'CREATE FUNCTION "{schema}".stall() RETURNS trigger LANGUAGE plpgsql AS '  # type: ignore[arg-type]
            '$$ BEGIN PERFORM pg_advisory_xact_lock(4343); RETURN NULL; END $$'
        )
        admin.execute(
            f'CREATE CONSTRAINT TRIGGER stall AFTER INSERT ON "{schema}".entries '  # type: ignore[arg-type]
            f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".stall()'
        )
        admin.execute('SELECT pg_advisory_lock(4343)')
        pending = asyncio.create_task(log.append(message_entry(request('three'), conversation_id='c', run_id='r')))
        committing = (
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND wait_event = 'advisory' "
            'AND pid <> pg_backend_pid()'
        )
        await asyncio.to_thread(
            wait_until, lambda: len(admin.execute(committing).fetchall()) == 1, 'the append waits in its COMMIT'
        )
        [(pid,)] = admin.execute(committing).fetchall()
        await asyncio.to_thread(kill, pg_dsn, int(pid))
        admin.execute('SELECT pg_advisory_unlock(4343)')
        assert await pending == 4
        await only_once(log, ['one', 'two', 'three'])
    finally:
        admin.close()
        log.close()


async def test_a_one_trip_append_that_committed_but_lost_its_answer_returns_its_seq(pg_dsn: str, schema: str) -> None:
    """A relay passes the pipeline on and drops the server's answer with the connection: the
    entry it wrote is in the log as it wrote it, so the append returns its seq (no error, no
    second copy)."""
    from test_postgres_faults import CommitCutter

    relay = CommitCutter(int(psycopg.conninfo.conninfo_to_dict(pg_dsn)['port'] or 5432))
    log = PostgresEventLog(
        psycopg.conninfo.make_conninfo(pg_dsn, host='127.0.0.1', port=str(relay.address)), schema=schema
    )
    try:
        await warm(log)
        relay.armed.set()
        assert await log.append(message_entry(request('three'), conversation_id='c', run_id='r')) == 4
        assert relay.cut.is_set()
        await only_once(log, ['one', 'two', 'three'])
        assert await log.append(message_entry(request('four'), conversation_id='c', run_id='r')) == 5
    finally:
        log.close()
        relay.close()


async def test_failed_guards_leave_nothing_in_the_applications_log(
    pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two handles appending by turns to their own conversations make each other's one-trip
    appends fail (the log's last seq moved outside their window): an expected event, so psycopg must not warn about the pipeline
    the failed guard aborted."""
    caplog.set_level(logging.WARNING)
    first = PostgresEventLog(pg_dsn, schema=schema)
    second = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await first.append(run_started_entry(conversation_id='a', run_id='ra'))
        await second.append(run_started_entry(conversation_id='b', run_id='rb'))
        for turn in range(6):
            for _ in range(3):
                await first.append(message_entry(request(f'a{turn}'), conversation_id='a', run_id='ra'))
            for _ in range(3):
                await second.append(message_entry(request(f'b{turn}'), conversation_id='b', run_id='rb'))
        # (the counter outside the window of the variants fails like a guard: `window missed`)
        failed = [trips(log)['guard failed'] + trips(log)['window missed'] for log in (first, second)]
        assert sum(failed) >= 2
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert (await first.verify()).ok
    finally:
        first.close()
        second.close()
