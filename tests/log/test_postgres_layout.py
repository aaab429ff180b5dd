"""Layout 2 of a PostgreSQL log: appends to different conversations commit while another is held
open, followers wait for the held one, and a schema of layout 1 is migrated in place.

The held writer is a real process stopped inside its write transaction (`pg_worker.py append
--hold-at`); the layout-1 schema is made as the code before layout 2 left it (no `tx` column,
no counter, the last seq in META, version 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
from logtools import exchange
from pgworkers import Worker, lock_waiters, schema_fixture, wait_until, workers_fixture

from eventlog import message_entry, run_finished_entry, run_started_entry
from eventlog._keys import META_LAST_SEQ, seq_key
from eventlog.entries import MAX_SEQ
from eventlog.postgres_log import SCHEMA_VERSION, PostgresEventLog

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below


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


def to_layout_1(dsn: str, schema: str) -> int:
    """Make `schema` what the code before layout 2 left: returns its last seq."""
    q = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute(f'SELECT last_value FROM {q}.seq_counter').fetchone()  # type: ignore[arg-type]
        assert row is not None
        last = int(row[0])
        conn.execute(f'ALTER TABLE {q}.entries DROP COLUMN tx')  # type: ignore[arg-type]
        conn.execute(f'DROP FUNCTION {q}.claim_seqs, {q}.release_seqs')  # type: ignore[arg-type]
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
