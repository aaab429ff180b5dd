"""Faults under a PostgreSQL log: killed connections, a server restarting under load, bad input.

A connection killed before its transaction's commit leaves nothing behind and the append is
retried on a new connection; one broken while the commit is in flight raises `StorageError`
(whichever way the commit went), and repeating the append with its idempotency keys stores it
exactly once. Writers that keep appending with retries through a `fast` and an `immediate`
restart lose no acknowledged append. Every mistake a user can make when opening a log is a
typed one-line error that never shows the password.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
from pgserver import PASSWORD, start_server
from pgworkers import Worker, check_entry, schema_fixture, wait_until, workers_fixture
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from eventlog import run_started_entry
from eventlog.errors import (
    InvalidArgumentError,
    LogClosedError,
    StoreConnectionError,
    StoreLocationError,
    StoreVersionError,
)
from eventlog.postgres_log import SCHEMA_VERSION, PostgresEventLog
from search.persistent_index import PersistentIndex as LmdbIndex

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below

UNKNOWN_OUTCOME = 'may or may not have been applied'


def backends(dsn: str, where: str) -> list[int]:
    """Client backends whose `pg_stat_activity` row matches the SQL condition `where`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND {where}"  # type: ignore[arg-type]
        ).fetchall()
    return [int(row[0]) for row in rows]


def terminate(dsn: str, pid: int) -> None:
    """End backend `pid` as an administrator would, and wait until it is gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute('SELECT pg_terminate_backend(%s)', (pid,)).fetchone() == (True,)
    wait_until(lambda: pid not in backends(dsn, 'TRUE'), f'backend {pid} is gone')


def retries(worker: Worker) -> list[str]:
    return [line for line in worker.output if line.startswith('retry ')]


async def only_victim_entries(log: PostgresEventLog, seed: int) -> None:
    """The log holds the seed entries and the victim worker's one run, each entry once, chained."""
    entries = await log.entries()
    assert [e.seq for e in entries] == list(range(1, seed + 4))
    assert [e.kind for e in entries[seed:]] == ['run_started', 'message', 'run_finished']
    assert [e.run_id for e in entries if e.kind == 'run_started'].count('victim-run-0') == 1
    report = await log.verify()
    assert report.ok, report.problems


# -- a connection killed during an append ----------------------------------------------------------


async def test_a_connection_killed_before_the_commit_leaves_nothing_and_the_append_is_retried(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='seed'))
        writer = workers('append', pg_dsn, schema, 'c', 'victim', '1', '--hold-at', '0')
        _, held_seq, pid = writer.expect('held').split()
        assert held_seq == '2'
        terminate(pg_dsn, int(pid))
        assert await log.last_seq() == 1
        assert await log.entries(after_seq=1) == []
        assert await log.get_run('victim-run-0') is None
        writer.send()
        writer.finish()  # no --retry: a StorageError would have ended the worker with a failure
        assert writer.acks() == [(2, 's:victim-run-0'), (3, 'm:0'), (4, 'f:victim-run-0')]
        await only_victim_entries(log, 1)
    finally:
        log.close()


async def test_a_commit_cut_before_it_completed_is_a_storage_error_and_applies_nothing(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    """A deferred trigger holds the writer's COMMIT on an advisory lock the test holds; the test
    kills the writer's backend while it waits there, inside COMMIT."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='seed'))
        admin.execute(
            f'CREATE FUNCTION "{schema}".stall() RETURNS trigger LANGUAGE plpgsql AS '  # type: ignore[arg-type]
            '$$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$'
        )
        admin.execute(
            f'CREATE CONSTRAINT TRIGGER stall AFTER INSERT ON "{schema}".entries '  # type: ignore[arg-type]
            f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".stall()'
        )
        admin.execute('SELECT pg_advisory_lock(4242)')
        writer = workers('append', pg_dsn, schema, 'c', 'victim', '1', '--idem', '--retry', '--wait')
        writer.expect('ready')
        writer.send()
        committing = "query = 'COMMIT' AND wait_event = 'advisory'"
        wait_until(lambda: len(backends(pg_dsn, committing)) == 1, 'the writer waits inside its COMMIT')
        terminate(pg_dsn, backends(pg_dsn, committing)[0])
        assert await log.last_seq() == 1
        assert await log.get_run('victim-run-0') is None
        admin.execute('SELECT pg_advisory_unlock(4242)')
        writer.finish()
        [retry] = retries(writer)
        assert retry.startswith('retry StorageError: ') and UNKNOWN_OUTCOME in retry
        assert writer.acks() == [(2, 's:victim-run-0'), (3, 'm:0'), (4, 'f:victim-run-0')]
        await only_victim_entries(log, 1)
    finally:
        admin.close()
        log.close()


async def test_an_append_after_every_pooled_connection_was_killed_is_retried_on_a_new_one(
    pg_dsn: str, schema: str
) -> None:
    dsn = make_conninfo(pg_dsn, application_name=f'pool_{schema}')
    log = PostgresEventLog(dsn, schema=schema, pool_size=4)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        while log._pool.get_stats()['pool_size'] < 4:  # pyright: ignore[reportPrivateUsage]
            await asyncio.gather(*(log.entries() for _ in range(8)))
        pooled = f"application_name = 'pool_{schema}'"
        wait_until(lambda: len(backends(pg_dsn, pooled)) == 4, 'four pooled connections are open')
        for pid in backends(pg_dsn, pooled):
            terminate(pg_dsn, pid)
        assert await log.append(run_started_entry(conversation_id='c', run_id='r2')) == 2
        assert [e.run_id for e in await log.entries()] == ['r', 'r2']
    finally:
        log.close()


class CommitCutter:
    """A TCP relay to the server that, once `armed`, passes the next COMMIT on, waits for the
    server's answer (the commit is durable by then) and drops it with the connection."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.armed = threading.Event()
        self.cut = threading.Event()
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> int:
        return int(self.listener.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(('127.0.0.1', self.port))
            self.sockets += [client, server]
            drop = threading.Event()
            threading.Thread(target=self._upstream, args=(client, server, drop), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, drop), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if self.armed.is_set() and b'COMMIT\x00' in data:
                    self.armed.clear()
                    drop.set()
                server.sendall(data)
        except OSError:
            pass
        self._close(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket, drop: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if drop.is_set():
                    self.cut.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        self._close(client, server)

    @staticmethod
    def _close(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._close(*self.sockets)


@pytest.fixture
def cutter(pg_dsn: str) -> Iterator[CommitCutter]:
    relay = CommitCutter(int(conninfo_to_dict(pg_dsn)['port'] or 5432))
    yield relay
    relay.close()


async def test_a_commit_applied_whose_answer_was_lost_is_a_storage_error_and_a_repeat_finds_it(
    pg_dsn: str, schema: str, workers: Callable[..., Worker], cutter: CommitCutter
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='seed'))
        relayed = make_conninfo(pg_dsn, host='127.0.0.1', port=str(cutter.address))
        writer = workers('append', relayed, schema, 'c', 'victim', '1', '--idem', '--retry', '--wait')
        writer.expect('ready')
        cutter.armed.set()
        writer.send()
        writer.finish()
        assert cutter.cut.is_set()
        [retry] = retries(writer)
        assert retry.startswith('retry StorageError: ') and UNKNOWN_OUTCOME in retry
        # The first attempt committed seq 2; the repeat found it by its idempotency key.
        assert writer.acks() == [(2, 's:victim-run-0'), (3, 'm:0'), (4, 'f:victim-run-0')]
        await only_victim_entries(log, 1)
    finally:
        log.close()


# -- the server restarting under load --------------------------------------------------------------


async def test_writers_lose_no_acknowledged_append_through_fast_and_immediate_restarts() -> None:
    server = start_server()
    started: list[Worker] = []
    try:
        dsn = server.dsn()
        PostgresEventLog(dsn, schema='load').close()
        names = ['w0', 'w1', 'w2']
        for name in names:
            flags = ('--idem', '--retry', '--wait', '--until-stdin')
            started.append(Worker('append', dsn, 'load', 'shared', name, '1000000', *flags))
        writers = started
        for writer in writers:
            writer.expect('ready')
        for writer in writers:
            writer.send()

        def more_acks(step: int) -> None:
            for writer in writers:
                goal = len(writer.acks()) + step
                writer.wait_for(lambda output, goal=goal: sum(line.startswith('ack') for line in output) >= goal)

        more_acks(5)
        server.restart('fast')
        more_acks(20)
        server.restart('immediate')
        more_acks(20)
        for writer in writers:
            writer.send('stop')
        acked: dict[int, tuple[str, str]] = {}
        for name, writer in zip(names, writers, strict=True):
            writer.finish()
            labels = [label for _, label in writer.acks()]
            assert len(labels) == len(set(labels)), f'{name} acknowledged an entry twice'
            for seq, label in writer.acks():
                assert seq not in acked
                acked[seq] = (name, label)
        log = PostgresEventLog(dsn, schema='load', create=False)
        try:
            report = await log.verify()
            assert report.ok, report.problems
            entries = await log.entries()
            # Appends commit concurrently and claim their seqs first: one cut by a restart may
            # leave its seqs unused (a gap), never an entry twice or out of order.
            assert [e.seq for e in entries] == sorted({e.seq for e in entries})
            assert sorted(acked) == [e.seq for e in entries]
            for entry in entries:
                check_entry(entry, *acked[entry.seq], 'shared')
            assert all(run.status == 'completed' for run in await log.list_runs())
        finally:
            log.close()
    finally:
        for writer in started:
            writer.stop()
        server.destroy()


# -- typed one-line errors -------------------------------------------------------------------------


def one_line(exc: BaseException, *secrets: str) -> str:
    message = str(exc)
    assert message and '\n' not in message, message
    for secret in (PASSWORD, *secrets):
        assert secret not in message, message
    return message


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    'dsn',
    [
        'not a connection string',
        'postgresql://postgres:top-sekrit@127.0.0.1:notaport/postgres',
        'host=127.0.0.1 password=top-sekrit bogus_option=1',
        "host=127.0.0.1 password='top-sekrit",
    ],
)
def test_an_unparsable_dsn_is_an_invalid_argument(dsn: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        PostgresEventLog(dsn)
    assert 'not a PostgreSQL connection string' in one_line(caught.value, 'top-sekrit')


def test_a_server_that_is_not_there_is_a_connection_error() -> None:
    port = free_port()
    with pytest.raises(StoreConnectionError) as caught:
        PostgresEventLog(f'postgresql://postgres:top-sekrit@127.0.0.1:{port}/postgres')
    message = one_line(caught.value, 'top-sekrit')
    assert f'postgresql://postgres@127.0.0.1:{port}/postgres' in message


def test_a_wrong_password_is_a_connection_error_without_the_password(pg_dsn: str) -> None:
    wrong = make_conninfo(pg_dsn, password='wrong-sekrit')
    with pytest.raises(StoreConnectionError) as caught:
        PostgresEventLog(wrong)
    assert 'password authentication failed' in one_line(caught.value, 'wrong-sekrit')


def test_a_missing_schema_without_create_is_a_location_error(pg_dsn: str, schema: str) -> None:
    with pytest.raises(StoreLocationError) as caught:
        PostgresEventLog(pg_dsn, schema=schema, create=False)
    assert schema in one_line(caught.value)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute('SELECT 1 FROM pg_namespace WHERE nspname = %s', (schema,)).fetchone() is None


def test_a_newer_schema_version_is_a_version_error(pg_dsn: str, schema: str) -> None:
    PostgresEventLog(pg_dsn, schema=schema).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".schema_version SET version = version + 1')  # type: ignore[arg-type]
    with pytest.raises(StoreVersionError) as caught:
        PostgresEventLog(pg_dsn, schema=schema)
    assert f'schema version {SCHEMA_VERSION + 1}' in one_line(caught.value)


def test_a_user_without_privileges_gets_a_location_error(pg_dsn: str, schema: str, pg_schemas: list[str]) -> None:
    role = f'{schema}_reader'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'limited-sekrit'")  # type: ignore[arg-type]
    try:
        limited = make_conninfo(pg_dsn, user=role, password='limited-sekrit')
        with pytest.raises(StoreLocationError) as caught:
            PostgresEventLog(limited, schema=schema)
        assert 'cannot be created or used' in one_line(caught.value, 'limited-sekrit')
        PostgresEventLog(pg_dsn, schema=schema).close()  # made by a user who may
        with pytest.raises(StoreLocationError) as caught:
            PostgresEventLog(limited, schema=schema)
        one_line(caught.value, 'limited-sekrit')
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY {role}')  # type: ignore[arg-type]
            conn.execute(f'DROP ROLE {role}')  # type: ignore[arg-type]


async def test_a_closed_log_raises_log_closed(pg_dsn: str, schema: str) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    index = LmdbIndex(log)
    log.close()
    log.close()
    with pytest.raises(LogClosedError) as caught:
        await log.append(run_started_entry(conversation_id='c', run_id='r2'))
    one_line(caught.value)
    with pytest.raises(LogClosedError):
        await log.entries()
    with pytest.raises(LogClosedError):
        await log.verify()
    with pytest.raises(LogClosedError):
        index.catch_up()
