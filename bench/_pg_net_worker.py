"""A writer or follower process of `bench_postgres.py --rtt-ms N` (run with the code under test
first on PYTHONPATH: this tree's, or an older checkout's for the old scheme).

    python _pg_net_worker.py writer DSN SCHEMA NAME
    python _pg_net_worker.py follower DSN SCHEMA

Both print `ready`, then take commands on stdin, one a line, and answer each with one JSON line:

- writer `round CONV START SECONDS`: start a run of its own in conversation CONV, append one
  message (warm-up), wait until the wall clock reaches START, then append single messages until
  START + SECONDS. Answers {appends, cpu, latencies (ms, sampled), acks: [[seq, time], ...],
  trips: how its appends went (the log's `_trips` counters over the window, when it has them)}.
- follower `round START SECONDS`: from the log's last settled position just before START, read
  `entries(after_seq=position)` every 2 ms until START + SECONDS + 1, then once more after the
  writers are done (the next line, `catch-up [SEQ]`: with SEQ, the last acknowledged seq, it reads
  until it has read that far or 10 s passed, since a transaction still open anywhere in the
  cluster, an automatic ANALYZE for one, holds the settled prefix back: lag, not a skip).
  Answers {seen: [[seq, time], ...], backwards}.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time

from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import PostgresEventLog, message_entry, run_started_entry


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def message(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


async def writer(dsn: str, schema: str, name: str) -> None:
    log = PostgresEventLog(dsn, schema=schema, pool_size=1)
    if os.environ.get('EVENTLOG_BENCH_MAX_VARIANTS') and hasattr(log, '_max_variants'):
        # An experiment: the widest window of speculative variants this writer tries.
        log._max_variants = int(os.environ['EVENTLOG_BENCH_MAX_VARIANTS'])  # pyright: ignore[reportAttributeAccessIssue]
    print('ready', flush=True)
    rounds = 0
    try:
        while line := sys.stdin.readline().split():
            _, conv, start, seconds = line
            rounds += 1
            run_id = f'{name}-{rounds}'
            await log.append(run_started_entry(conversation_id=conv, run_id=run_id))
            entry = message_entry(message(f'{name} says hello'), conversation_id=conv, run_id=run_id)
            await log.append(entry)
            await asyncio.sleep(max(0.0, float(start) - time.time()))
            end = float(start) + float(seconds)
            acks: list[tuple[int, float]] = []
            latencies: list[float] = []
            spent = cpu()
            trips = dict(getattr(log, '_trips', {}))
            while (began := time.time()) < end:
                seq = await log.append(entry)
                done = time.time()
                acks.append((seq, done))
                latencies.append((done - began) * 1000)
            spent = cpu() - spent
            # How the window's appends went, where the code counts it (`_trips`: in one round trip...).
            trips = {k: v - trips.get(k, 0) for k, v in getattr(log, '_trips', {}).items()}
            answer = {'appends': len(acks), 'cpu': spent, 'latencies': latencies, 'acks': acks, 'trips': trips}
            print(json.dumps(answer), flush=True)
    finally:
        log.close()


async def follower(dsn: str, schema: str) -> None:
    log = PostgresEventLog(dsn, schema=schema, pool_size=1)
    print('ready', flush=True)
    try:
        while line := sys.stdin.readline().split():
            _, start, seconds = line
            # The position a little before the window: every append acknowledged in it began
            # after, so it comes after that position (the warm-ups are read too, and not counted).
            await asyncio.sleep(max(0.0, float(start) - 0.2 - time.time()))
            position = await log.last_seq()
            seen: list[tuple[int, float]] = []
            backwards = 0
            end = float(start) + float(seconds) + 1
            spent = cpu()
            caught_up = False
            target, deadline = 0, 0.0
            while True:
                for entry in await log.entries(after_seq=position):
                    if entry.seq <= position:
                        backwards += 1
                    seen.append((entry.seq, time.time()))
                    position = entry.seq
                if caught_up and (position >= target or time.time() >= deadline):
                    break
                if not caught_up and time.time() >= end:
                    spent = cpu() - spent
                    said = sys.stdin.readline().split()  # catch-up: the writers are done
                    target = int(said[1]) if len(said) > 1 else 0
                    deadline = time.time() + 10
                    caught_up = True
                    continue
                await asyncio.sleep(0.002)
            print(json.dumps({'seen': seen, 'backwards': backwards, 'cpu': spent}), flush=True)
    finally:
        log.close()


def main() -> None:
    role, *args = sys.argv[1:]
    if role == 'writer':
        asyncio.run(writer(*args))
    else:
        asyncio.run(follower(*args))


if __name__ == '__main__':
    main()
