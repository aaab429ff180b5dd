"""Speculative one-trip appends on PostgreSQL: writers on different conversations each append in
one round trip although the log's counter moves between their appends.

A handle runs its append's engine against its cache once per candidate last `seq` of a window
(how far the counter moved at its recent appends), sends every variant's writes in the one
pipeline, and `claim_seqs_in` takes the seqs only when the counter is in the window, naming the
variant whose writes apply. The log must then be exactly what an LMDB log fed the same entries
in the same order holds (same seqs, bytes and chain hashes), whichever variant applied; a
counter outside the window must write nothing, be tried once more from where the claim said it
was, then fall back to two round trips, and still write the right bytes;
and a connection lost with the pipeline in flight must be resolved whichever variant committed.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgworkers import lock_waiters, schema_fixture, wait_until, workers_fixture
from test_postgres_one_trip import kill, request, same_log, stamped, trips

from eventlog import LmdbEventLog, NewEntry, message_entry, run_started_entry
from eventlog.postgres_log import PostgresEventLog

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below


def opened(pg_dsn: str, schema: str) -> PostgresEventLog:
    """A handle that tries every window of variants: on a loopback server a round trip is too
    short for the handle to find several variants worth their CPU (`_variant_ms`)."""
    log = PostgresEventLog(pg_dsn, schema=schema)
    log._variant_ms = 1e-6  # pyright: ignore[reportPrivateUsage]
    return log


async def both(handle: PostgresEventLog, twin: LmdbEventLog, entry: NewEntry) -> int:
    """Append `entry` through `handle` and to the LMDB twin; they must give it the same seq."""
    seq = await handle.append(entry)
    assert await twin.append(entry) == seq
    return seq


async def start(handles: list[PostgresEventLog], twin: LmdbEventLog) -> None:
    for n, handle in enumerate(handles):
        await both(handle, twin, stamped(run_started_entry(conversation_id=f'c{n}', run_id=f'r{n}'), 0))


def say(n: int, number: int, key: bool = False) -> NewEntry:
    entry = message_entry(
        request(f'{n}:{number}'),
        conversation_id=f'c{n}',
        run_id=f'r{n}',
        idempotency_key=f'k{number}' if key else None,
    )
    return stamped(entry, number)


async def test_handles_taking_turns_on_their_own_conversations_append_in_one_round_trip(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    """Three handles, each on its own conversation, take turns of random length: the counter
    moves by a varying amount between a handle's appends, yet most appends take one round trip
    (with several variants), and the log equals an LMDB log fed the same entries."""
    handles = [opened(pg_dsn, schema) for _ in range(3)]
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    rng = random.Random(29)
    number = 0
    try:
        await start(handles, twin)
        for _ in range(40):
            for n, handle in enumerate(handles):
                for _ in range(rng.choice((1, 1, 1, 2))):
                    number += 1
                    keyed = rng.random() < 0.2
                    seq = await both(handle, twin, say(n, number, keyed))
                    if keyed and rng.random() < 0.5:  # a repeat: answered with the first seq, nothing claimed
                        assert await both(handle, twin, say(n, number, keyed)) == seq
        for handle in handles:
            counts = trips(handle)
            appends = sum(counts[name] for name in ('one', 'two'))
            assert counts['one'] >= appends // 2, counts
            assert counts['speculative'] >= appends // 2, counts
            assert counts['variants'] > counts['one'] + counts['window missed'], counts  # windows of several
            assert counts['guard failed'] == 0, counts
        await same_log(handles[0], twin)
    finally:
        for handle in handles:
            handle.close()
        twin.close()


async def test_a_counter_outside_the_window_is_tried_again_from_where_the_claim_said_then_falls_back(
    pg_dsn: str, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two handles alternate (each sees the counter one past its last seq), then a third appends
    a burst: the next append's window misses the counter, nothing of its variants is written, and
    a second try from where the claim said the counter was appends it in one round trip. When a
    second burst lands between the two tries, the second misses too and the two-trip path
    appends it. Each time at the right seq: the log equals the LMDB twin."""
    handles = [opened(pg_dsn, schema) for _ in range(3)]
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    number = 0
    try:
        await start(handles, twin)
        for _ in range(12):
            for n in (0, 1):
                number += 1
                await both(handles[n], twin, say(n, number))
        before = trips(handles[0])
        assert before['speculative'] >= 5, before
        for _ in range(20):
            number += 1
            await both(handles[2], twin, say(2, number))
        number += 1
        await both(handles[0], twin, say(0, number))
        after = trips(handles[0])
        assert after['window missed'] == before['window missed'] + 1, (before, after)
        assert after['one'] == before['one'] + 1, (before, after)
        assert after['two'] == before['two'], (before, after)
        await same_log(handles[0], twin)

        # A second burst between the two tries: both miss, the two-trip path appends.
        for _ in range(4):
            for n in (0, 1):
                number += 1
                await both(handles[n], twin, say(n, number))
        burst: list[NewEntry] = []
        try_one_trip = handles[0]._try_one_trip  # pyright: ignore[reportPrivateUsage]

        def burst_between(*args: Any, shift: int = 0) -> Any:
            if shift:
                for count in range(15):
                    entry = say(2, 1000 + count)
                    asyncio.run(handles[2].append(entry))  # (in the append's worker thread)
                    burst.append(entry)
            return try_one_trip(*args, shift=shift)

        monkeypatch.setattr(handles[0], '_try_one_trip', burst_between)
        for _ in range(20):
            number += 1
            await both(handles[2], twin, say(2, number))
        before = trips(handles[0])
        number += 1
        seq = await handles[0].append(say(0, number))
        for entry in burst:
            await twin.append(entry)
        assert await twin.append(say(0, number)) == seq
        after = trips(handles[0])
        assert len(burst) == 15
        assert after['window missed'] == before['window missed'] + 2, (before, after)
        assert after['two'] == before['two'] + 1, (before, after)
        assert after['guard failed'] == before['guard failed'], (before, after)
        await same_log(handles[1], twin)
    finally:
        for handle in handles:
            handle.close()
        twin.close()


async def warm_pair(pg_dsn: str, schema: str, handle: PostgresEventLog, twin: LmdbEventLog) -> PostgresEventLog:
    """Bring `handle` (conversation c0) to sending several variants: another handle (c1) takes
    turns of one or two appends with it, so the counter moves by one or two between `handle`'s
    appends. Returns the other handle."""
    other = opened(pg_dsn, schema)
    await start([handle, other], twin)
    number = 0
    for turn in range(12):
        await both(handle, twin, say(0, number := number + 1))
        for _ in range(1 + turn % 2):
            await both(other, twin, say(1, number := number + 1))
    assert trips(handle)['speculative'] >= 3, trips(handle)
    return other


async def test_a_speculative_append_that_committed_but_lost_its_answer_returns_its_seq(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    """A relay passes the pipeline of a speculative append on and drops the answer with the
    connection: the first entry of the variant that applied is in the log as it wrote it, so the
    append returns that variant's seq (no error, no second copy)."""
    from test_postgres_faults import CommitCutter

    relay = CommitCutter(int(psycopg.conninfo.conninfo_to_dict(pg_dsn)['port'] or 5432))
    handle = opened(psycopg.conninfo.make_conninfo(pg_dsn, host='127.0.0.1', port=str(relay.address)), schema)
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    other = None
    try:
        other = await warm_pair(pg_dsn, schema, handle, twin)
        speculative = trips(handle)['speculative']
        relay.armed.set()
        await both(handle, twin, say(0, 101))
        assert relay.cut.is_set()
        assert trips(handle)['speculative'] == speculative + 1
        await both(handle, twin, say(0, 102))
        await same_log(handle, twin)
    finally:
        handle.close()
        if other is not None:
            other.close()
        twin.close()
        relay.close()


async def test_a_speculative_append_whose_backend_dies_waiting_for_the_lock_is_made_again(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    """The pipeline of a speculative append waits for the store-wide lock when its server process
    is ended: no variant's entry is in the log and the process is gone, so it never committed;
    the append is made again on the two-trip path, once, at the right seq."""
    handle = opened(pg_dsn, schema)
    twin = LmdbEventLog(tmp_path / 'twin.lmdb')
    admin = psycopg.connect(pg_dsn, autocommit=True)
    other = None
    try:
        other = await warm_pair(pg_dsn, schema, handle, twin)
        variants = trips(handle)['variants']
        admin.execute('BEGIN')
        admin.execute(f'LOCK TABLE "{schema}".entries IN EXCLUSIVE MODE')  # type: ignore[arg-type]
        pending = asyncio.create_task(handle.append(say(0, 101)))
        await asyncio.to_thread(wait_until, lambda: len(lock_waiters(pg_dsn, schema)) == 1, 'the append waits')
        [waiter] = lock_waiters(pg_dsn, schema)
        await asyncio.to_thread(kill, pg_dsn, waiter)
        admin.execute('COMMIT')
        seq = await pending
        assert trips(handle)['variants'] > variants + 1  # the lost attempt sent several variants
        assert await twin.append(say(0, 101)) == seq
        await same_log(handle, twin)
    finally:
        admin.close()
        handle.close()
        if other is not None:
            other.close()
        twin.close()
