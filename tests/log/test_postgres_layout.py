"""Layout 2 of a PostgreSQL log: appends to different conversations commit while another is held
open, followers wait for the held one, and a schema of layout 1 is migrated in place.

The held writer is a real process stopped inside its write transaction (`pg_worker.py append
--hold-at`). Layout 1 comes two ways: a schema turned back to what the code before layout 2 left
(no `tx` column, no counter, the last seq in META, version 1), and a store written by that code
itself (extracted from git at `LAYOUT_1_COMMIT` and run in a process of its own, which keeps its
handle open while the new code migrates the schema and must then be refused).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from logtools import exchange
from pgworkers import Worker, lock_waiters, schema_fixture, wait_until, workers_fixture
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import message_entry, run_finished_entry, run_started_entry
from eventlog._keys import META_LAST_SEQ, seq_key
from eventlog.entries import MAX_SEQ
from eventlog.errors import CorruptStoreError
from eventlog.postgres_log import SCHEMA_VERSION, PostgresEventLog

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below


def request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


async def test_an_append_to_another_conversation_commits_while_one_is_held_and_followers_wait_for_it(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        assert await log.append(run_started_entry(conversation_id='b', run_id='rb')) == 1
        held = workers('append', pg_dsn, schema, 'a', 'held', '1', '--hold-at', '0')
        _, held_seq, held_pid = held.expect('held').split()
        assert held_seq == '2'
        # Another conversation: committed at once, with the next seq, while seq 2 is held open.
        other = await asyncio.wait_for(log.append(message_entry(exchange(1)[0], conversation_id='b', run_id='rb')), 20)
        assert other == 3
        assert (await log.get_entry(3)) is not None
        # Followers see nothing past the held seq until it commits: 3 is not settled.
        assert await log.last_seq() == 1
        assert [e.seq for e in await log.entries()] == [1]
        # The held conversation: a writer there waits for its lock.
        same = asyncio.create_task(log.append(run_started_entry(conversation_id='a', run_id='ra')))
        await asyncio.to_thread(
            wait_until, lambda: [p for p in lock_waiters(pg_dsn, schema) if p != int(held_pid)] != [], 'a waiter on a'
        )
        assert not same.done()
        held.send()
        held.finish()
        later = await asyncio.wait_for(same, 20)
        acked = [seq for seq, _ in held.acks()]
        assert acked[0] == 2 and later > 3
        assert [e.seq for e in await log.entries()] == sorted({1, 3, later, *acked})
        assert (await log.verify()).ok
    finally:
        log.close()


async def test_a_run_lease_is_taken_while_an_append_is_held_and_a_fork_waits_for_it(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    """A lease takes its run's lock only; a store-wide write (a fork) waits for appends in flight."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='b', run_id='rb'))
        held = workers('append', pg_dsn, schema, 'a', 'held', '1', '--hold-at', '0')
        _, held_seq, held_pid = held.expect('held').split()
        lease = await asyncio.wait_for(log.take_run_lease('rb', 'me', 30), 20)
        lease = await asyncio.wait_for(log.renew_run_lease(lease, 30), 20)
        fork = asyncio.create_task(log.fork('b', at_seq=1, new_conversation_id='b2'))
        await asyncio.to_thread(
            wait_until, lambda: [p for p in lock_waiters(pg_dsn, schema) if p != int(held_pid)] != [], 'the fork waits'
        )
        assert not fork.done()
        held.send()
        held.finish()
        assert await asyncio.wait_for(fork, 20) == 'b2'
        record = await log.get_conversation('b2')
        assert record is not None and record.first_seq > int(held_seq)
        assert await asyncio.wait_for(log.release_run_lease(lease), 20)
        assert (await log.verify()).ok
    finally:
        log.close()


async def test_an_append_given_a_seq_taken_already_fails_and_overwrites_nothing(pg_dsn: str, schema: str) -> None:
    """The counter set back (a fault: it never goes back below a committed entry): the append
    that claims a taken seq is refused, typed, and the entry there stays as it was."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        await log.append(message_entry(exchange(1)[0], conversation_id='c', run_id='r'))
        before = await log.entries()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'SELECT setval(\'"{schema}".seq_counter\', 1)')  # type: ignore[arg-type]
        with pytest.raises(CorruptStoreError, match='behind its entries'):
            await log.append(message_entry(exchange(2)[0], conversation_id='c', run_id='r'))
        assert await log.entries() == before
        # The refused append moved the counter past the entry it found: the next one goes on.
        assert await log.append(message_entry(exchange(2)[0], conversation_id='c', run_id='r')) == 3
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


def to_layout_1(dsn: str, schema: str) -> int:
    """Make `schema` what the code before layout 2 left: returns its last seq."""
    q = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute(f'SELECT last_value FROM {q}.seq_counter').fetchone()  # type: ignore[arg-type]
        assert row is not None
        last = int(row[0])
        conn.execute(f'ALTER TABLE {q}.entries DROP COLUMN tx')  # type: ignore[arg-type]
        conn.execute(f'DROP TRIGGER entries_kept ON {q}.entries')  # type: ignore[arg-type]
        conn.execute(f'DROP FUNCTION {q}.claim_seqs, {q}.release_seqs, {q}.entries_kept')  # type: ignore[arg-type]
        conn.execute(f'DROP SEQUENCE {q}.seq_counter')  # type: ignore[arg-type]
        conn.execute(f'UPDATE {q}.meta SET v = %s WHERE k = %s', (seq_key(last), META_LAST_SEQ))  # type: ignore[arg-type]
        conn.execute(f'UPDATE {q}.schema_version SET version = 1')  # type: ignore[arg-type]
    return last


async def test_a_schema_of_layout_1_is_migrated_in_place(pg_dsn: str, schema: str) -> None:
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r', idempotency_key='s'))
        keyed = message_entry(exchange(1)[0], conversation_id='c', run_id='r', idempotency_key='k')
        first = await log.append(keyed)
        await log.append_many([message_entry(m, conversation_id='c', run_id='r') for m in exchange(2)])
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed'))
        await log.fork('c', at_seq=first, new_conversation_id='d')
        before = await log.entries()
        runs, conversations = await log.list_runs(), await log.list_conversations()
    finally:
        log.close()
    last = to_layout_1(pg_dsn, schema)
    assert last == before[-1].seq

    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            q = f'"{schema}"'
            assert conn.execute(f'SELECT version FROM {q}.schema_version').fetchall() == [(SCHEMA_VERSION,)]  # type: ignore[arg-type]
            # A writer of layout 1 still running would find the log full and write nothing.
            stop = conn.execute(f'SELECT v FROM {q}.meta WHERE k = %s', (META_LAST_SEQ,)).fetchone()  # type: ignore[arg-type]
            assert stop == (seq_key(MAX_SEQ),)
        assert await log.entries() == before
        assert await log.list_runs() == runs
        assert await log.list_conversations() == conversations
        assert await log.last_seq() == last
        # Appends go on after the last seq; an old idempotency key still answers its first seq.
        assert await log.append(keyed) == first
        assert await log.append(run_started_entry(conversation_id='c', run_id='r2')) == last + 1
        assert [e.seq for e in await log.entries(after_seq=last)] == [last + 1]
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()
    # Opening again finds layout 2 and changes nothing.
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        assert await log.last_seq() == last + 1
    finally:
        log.close()


LAYOUT_1_COMMIT = '1d3c2619999330f99996c3ed087b070c1fb99909'
"""The last commit whose code writes layout 1 (the store-wide lock, the last seq in META)."""

_OLD_WRITER = """
import asyncio, sys
from eventlog import message_entry, run_started_entry
from eventlog.errors import LogFullError
from eventlog.postgres_log import PostgresEventLog, SCHEMA_VERSION
from pydantic_ai.messages import ModelRequest, UserPromptPart

def request(text):
    return ModelRequest(parts=[UserPromptPart(text)])

async def main(dsn, schema):
    assert SCHEMA_VERSION == 1
    log = PostgresEventLog(dsn, schema=schema, pool_size=1)
    await log.append(run_started_entry(conversation_id='c', run_id='r', idempotency_key='s'))
    for i in range(3):
        await log.append(message_entry(request(f'old {i}'), conversation_id='c', run_id='r', idempotency_key=f'k{i}'))
    seqs = await log.append_many([run_started_entry(conversation_id='d', run_id='r2'),
                                  message_entry(request('other'), conversation_id='d', run_id='r2')])
    print('wrote', ' '.join(f'{e.seq}:{e.hash.hex()}' for e in await log.entries()), flush=True)
    sys.stdin.readline()  # the new code migrates the schema meanwhile
    try:
        await log.append(message_entry(request('late'), conversation_id='c', run_id='r'))
        print('appended', flush=True)
    except LogFullError:
        print('refused', flush=True)
    log.close()

asyncio.run(main(*sys.argv[1:]))
"""


def layout_1_code(into: Path) -> Path | None:
    """The `eventlog` package of `LAYOUT_1_COMMIT`, extracted under `into`; `None` outside a git
    checkout holding that commit."""
    root = Path(__file__).resolve().parents[2]
    try:
        archive = subprocess.run(
            ['git', '-C', str(root), 'archive', LAYOUT_1_COMMIT, 'eventlog'], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    into.mkdir()
    subprocess.run(['tar', '-x', '-C', str(into)], input=archive.stdout, check=True)
    return into


async def test_a_store_written_by_the_layout_1_code_is_migrated_and_its_running_writer_stopped(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    code = layout_1_code(tmp_path / 'old')
    if code is None:
        pytest.skip(f'not a git checkout holding {LAYOUT_1_COMMIT[:7]}: the layout-1 code cannot be run')
    old = subprocess.Popen(
        [sys.executable, '-c', _OLD_WRITER, pg_dsn, schema],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=code,
        env={**os.environ, 'PYTHONPATH': str(code)},
    )
    assert old.stdin is not None and old.stdout is not None
    try:
        line = await asyncio.to_thread(old.stdout.readline)
        assert line.startswith('wrote '), line
        written = [(int(seq), digest) for seq, digest in (part.split(':') for part in line.split()[1:])]
        assert [seq for seq, _ in written] == [1, 2, 3, 4, 5, 6]
        log = PostgresEventLog(pg_dsn, schema=schema)  # migrates the schema the old process has open
        try:
            assert [(e.seq, e.hash.hex()) for e in await log.entries()] == written
            old.stdin.write('\n')
            old.stdin.flush()
            assert (await asyncio.to_thread(old.stdout.readline)).strip() == 'refused'
            assert await log.last_seq() == 6
            keyed = message_entry(request('old 1'), conversation_id='c', run_id='r', idempotency_key='k1')
            assert await log.append(keyed) == 3
            assert await log.append(message_entry(request('new'), conversation_id='c', run_id='r')) == 7
            assert [e.seq for e in await log.entries(after_seq=6)] == [7]
            report = await log.verify()
            assert report.ok, report.problems
        finally:
            log.close()
    finally:
        old.stdin.close()
        assert old.wait(30) == 0
