"""Followers of a PostgreSQL log never skip an entry, however late its commit comes.

Writers in processes of their own append to their own conversations at once (their commits
overlap: no store-wide lock), and a deferred trigger holds each COMMIT for a random time, so
that transactions commit in an order unlike their seqs'. A follower reading the log by position
(`entries(after_seq=...)`, as `tail --follow` and the local index do) must then see every
acknowledged append exactly once, in `seq` order; a reader taking whatever rows are visible
(`k > position`, without the settled horizon) is run alongside to show that the commits really
came out of order (it misses some). The writers' appends take one round trip with speculative
variants (docs/postgres.md, "Appends in one round trip") whenever the counter is where a writer
expects it, two otherwise: both paths are in the run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import psycopg
from pgworkers import Worker, schema_fixture, workers_fixture

from eventlog.postgres_log import PostgresEventLog

__all__ = ['schema_fixture', 'workers_fixture']  # fixtures used by the tests below

LONG = bool(os.environ.get('EVENTLOG_LONG'))
WRITERS = 8 if LONG else 4
MESSAGES = 240 if LONG else 24
"""Messages per writer: runs of up to 10, each with its start and end, some as one batch
(`EVENTLOG_LONG=1`: 8 writers of 240)."""


def dawdle_at_commit(dsn: str, schema: str) -> None:
    """Hold every COMMIT that wrote entries for a random time (a deferred trigger runs in it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE FUNCTION "{schema}".dawdle() RETURNS trigger LANGUAGE plpgsql AS '  # type: ignore[arg-type]
            '$$ BEGIN PERFORM pg_sleep(random() * 0.006); RETURN NULL; END $$'
        )
        conn.execute(
            f'CREATE CONSTRAINT TRIGGER dawdle AFTER INSERT ON "{schema}".entries '  # type: ignore[arg-type]
            f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".dawdle()'
        )


async def test_a_follower_sees_every_acknowledged_append_once_in_order_while_commits_come_out_of_order(
    pg_dsn: str, schema: str, workers: Callable[..., Worker]
) -> None:
    PostgresEventLog(pg_dsn, schema=schema).close()
    dawdle_at_commit(pg_dsn, schema)
    writers = [
        workers('append', pg_dsn, schema, f'conv-{n}', f'w{n}', str(MESSAGES), '--wait', '--trips')
        for n in range(WRITERS)
    ]
    for writer in writers:
        writer.expect('ready')
    log = PostgresEventLog(pg_dsn, schema=schema, pool_size=2)
    naive = psycopg.connect(pg_dsn, autocommit=True)
    seen: list[int] = []
    naive_seen: set[int] = set()
    naive_position = 0
    out_of_order = 0
    try:
        for writer in writers:
            writer.send()
        position = 0
        deadline = time.monotonic() + 120
        while True:
            done = all(writer.proc.exitcode is not None for writer in writers)
            for entry in await log.entries(after_seq=position):
                assert entry.seq > position, f'read {entry.seq} after {position}'
                seen.append(entry.seq)
                position = entry.seq
            rows = naive.execute(
                f'SELECT k FROM "{schema}".entries ORDER BY k',  # type: ignore[arg-type]
            ).fetchall()
            for (key,) in rows:
                seq = int.from_bytes(key, 'big')
                if seq not in naive_seen:
                    naive_seen.add(seq)
                    if seq < naive_position:
                        out_of_order += 1  # committed after a larger seq was visible
                    naive_position = max(naive_position, seq)
            if done and position >= await log.last_seq():
                break
            assert time.monotonic() < deadline, 'the writers did not finish'
            await asyncio.sleep(0.001)
        for writer in writers:
            writer.finish()
        acked = sorted(seq for writer in writers for seq, _ in writer.acks())
        per_writer = MESSAGES + 2 * -(-MESSAGES // 10)
        assert len(acked) == WRITERS * per_writer
        assert seen == acked  # every acknowledged append, once each, in seq order
        assert out_of_order > 0, 'no commit came out of order: the test proved nothing'
        trips = [[int(n) for n in writer.expect('trips').split()[1:]] for writer in writers]
        # The writers' one-trip appends sent speculative variants (the counter moves between a
        # writer's appends), so the follower's guarantee was tested on that path too.
        assert sum(speculative for _, speculative, _, _ in trips) > 0, trips
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        naive.close()
        log.close()
