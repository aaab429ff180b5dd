"""A process standing for one machine in the PostgreSQL concurrency and fault tests (run as a script).

Each process opens its own `PostgresEventLog` (its own connection pool) and talks to the
parent over its standard streams: it prints `ready` once the log is open and one line per
acknowledged append, so the parent knows exactly which appends were acknowledged.

Usage:
    pg_worker.py append DSN SCHEMA CONV NAME COUNT [--idem] [--retry] [--hold-at N] [--wait]
        Append COUNT messages to conversation CONV in runs named `NAME-run-K` (ten messages a
        run, odd runs one append at a time, even runs in one `append_many`), each run opened by
        `run_started` and closed by `run_finished`. After each append call returns it prints
        `ack <seq> <label>` for each entry (`s:<run>`, `m:<index>`, `f:<run>`).
        --idem      give every entry an idempotency key (its label, prefixed by NAME)
        --retry     repeat an append that raised `StorageError` (outcome unknown or server down)
                    until it succeeds, printing `retry <message>`; safe with --idem
        --hold-at N hold the N-th append call (0-based) inside its write transaction, after its
                    seqs were assigned (every append of this worker takes two round trips): print `held <first seq> <backend pid>` and wait for a line on
                    standard input before committing
        --wait      wait for a line on standard input after `ready` before appending
        --until-stdin  stop after the current run once a line arrives on standard input
        --trips     try every window of speculative variants (a loopback round trip is short), and
                    print `trips <one> <speculative> <window missed> <two>` before `done` (how its
                    appends went: in one round trip, of them with several variants, a counter
                    outside the variants' window, two round trips)
    pg_worker.py turns DSN SCHEMA CONV NAME
        Append to run `NAME-run` of conversation CONV in turns the parent gives: each line is a
        comma-separated list of numbers G; the first G ever starts the run (`run_started`), every
        other appends `message(NAME, G)`, one `append` each, with the timestamp `turn_time(G)`.
        Prints `ack <seq> <G>` per entry and then `trips <one> <guard failed> <two>` (how this
        handle's appends went so far: in one round trip, a guard that failed, two round trips); an
        empty line ends it.
    pg_worker.py follow DSN SCHEMA LAST
        Read `entries(after_seq=...)` by position until `seq` LAST was seen; print `seen <seq>`
        for each entry and exit 3 with `gap ...` when an entry was skipped or repeated.
    pg_worker.py idem DSN SCHEMA KEYS
        Wait for a line on standard input, then append one message per key of the comma-separated
        KEYS (`k<number>`) to run `shared` of conversation `idem` (started by the parent), with the key
        as its idempotency key, one `append` each, printing `ack <seq> <key>`.
    pg_worker.py index DSN SCHEMA
        Wait for a line on standard input, then open the search index over the log (registering it)
        and catch it up, printing `ack <entries it read> index`.
    pg_worker.py open DSN SCHEMA
        Wait for a line on standard input, then open the log (creating the schema), start a run
        of conversation `opened`, and print `ack <seq> open`.
Every process prints `done` when it finished normally.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from typing import Any

from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import (
    NewEntry,
    message_entry,
    run_finished_entry,
    run_started_entry,
)
from eventlog import _engine as engine
from eventlog.errors import StorageError
from eventlog.postgres_log import PostgresEventLog

WORDS = ['deploy', 'server', 'cache', 'budget', 'kubernetes', 'latency', 'invoice', 'rollback', 'quota', 'schema']
RETRY_FOR = 120.0
"""Seconds a --retry worker keeps repeating one append before it gives up."""


def message_text(name: str, index: int) -> str:
    """The text of message `index` of worker `name` (its `marker<index>` word is unique to it)."""
    words = ' '.join(WORDS[(index * 7 + k) % len(WORDS)] for k in range(index % 5 + 1))
    return f'{name} note {index} marker{index} {words}'


def message(name: str, index: int) -> ModelRequest:
    """Message `index` of worker `name`, with a fixed timestamp so its payload is reproducible."""
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    return ModelRequest(parts=[UserPromptPart(message_text(name, index), timestamp=stamp)], timestamp=stamp)


class _Streams:
    """Where a worker's lines go and its go-ahead lines come from: standard streams when run as a
    script, the parent's pipes when started by `serve` (forked from a process that imported all this)."""

    def __init__(self) -> None:
        self.inbox: Connection | None = None
        self.outbox: Connection | None = None


_streams = _Streams()


def say(line: str) -> None:
    """Tell the parent `line`."""
    if _streams.outbox is None:
        print(line, flush=True)
    else:
        _streams.outbox.send(line)


def hear() -> str:
    """The parent's next line (empty once it closed its end)."""
    if _streams.inbox is None:
        return sys.stdin.readline()
    try:
        return str(_streams.inbox.recv())
    except EOFError:
        return ''


def hold_call(target: int) -> None:
    """Make the `target`-th append transaction wait, after its seqs were assigned, for a line on stdin."""
    real = engine.append_entries
    calls = [0]

    def held(txn: Any, entries: Sequence[NewEntry], **kwargs: Any) -> list[int]:
        seqs = real(txn, entries, **kwargs)
        calls[0] += 1
        if calls[0] == target + 1:
            pid = txn._cur.connection.info.backend_pid  # pyright: ignore[reportPrivateUsage]
            say(f'held {seqs[0]} {pid}')
            hear()
        return seqs

    engine.append_entries = held  # pyright: ignore[reportAttributeAccessIssue]


async def appended(log: PostgresEventLog, batch: list[NewEntry], retry: bool) -> list[int]:
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            if len(batch) == 1:
                return [await log.append(batch[0])]
            return await log.append_many(batch)
        except StorageError as exc:
            if not retry or time.monotonic() > deadline:
                raise
            say(f'retry {type(exc).__name__}: {exc}')
            await asyncio.sleep(0.05)  # a pause before repeating, not a synchronisation


async def append(dsn: str, schema: str, conv: str, name: str, count: int, flags: list[str]) -> None:
    idem = '--idem' in flags
    retry = '--retry' in flags
    if '--hold-at' in flags:
        hold_call(int(flags[flags.index('--hold-at') + 1]))
    log = PostgresEventLog(dsn, schema=schema, pool_size=2)
    if '--trips' in flags:
        log._variant_ms = 1e-6  # pyright: ignore[reportPrivateUsage]  # every window tried (loopback)
    if '--hold-at' in flags:
        # The hold stops an append inside its transaction, after the engine ran: an append in one
        # round trip runs the engine before its transaction starts, so this worker takes two.
        log._one_trip = False  # pyright: ignore[reportPrivateUsage]
    say('ready')
    if '--wait' in flags:
        hear()
    stop = threading.Event()
    if '--until-stdin' in flags:
        threading.Thread(target=lambda: (hear(), stop.set()), daemon=True).start()

    def key(label: str) -> str | None:
        return f'{name}/{label}' if idem else None

    async def put(batch: list[tuple[str, NewEntry]]) -> None:
        seqs = await appended(log, [entry for _, entry in batch], retry)
        for seq, (label, _) in zip(seqs, batch, strict=True):
            say(f'ack {seq} {label}')

    index = 0
    run = 0
    while index < count and not stop.is_set():
        run_id = f'{name}-run-{run}'
        run += 1
        await put(
            [(f's:{run_id}', run_started_entry(conversation_id=conv, run_id=run_id, idempotency_key=key(run_id)))]
        )
        end = min(index + 10, count)
        messages = [
            (
                f'm:{i}',
                message_entry(message(name, i), conversation_id=conv, run_id=run_id, idempotency_key=key(f'm{i}')),
            )
            for i in range(index, end)
        ]
        if run % 2:
            for item in messages:
                await put([item])
        else:
            await put(messages)
        finished = run_finished_entry(
            conversation_id=conv, run_id=run_id, status='completed', idempotency_key=key(f'f{run_id}')
        )
        await put([(f'f:{run_id}', finished)])
        index = end
    if '--trips' in flags:
        trips = log._trips  # pyright: ignore[reportPrivateUsage]
        say(f'trips {trips["one"]} {trips["speculative"]} {trips["window missed"]} {trips["two"]}')
    log.close()
    say('done')


def turn_time(number: int) -> datetime:
    """The timestamp of entry `number` of a `turns` worker (fixed, so that a test can append the same entries)."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=number)


def turn_entry(conv: str, name: str, number: int, first: bool) -> NewEntry:
    """Entry `number` of a `turns` worker (its first one starts its run)."""
    run_id = f'{name}-run'
    if first:
        entry = run_started_entry(conversation_id=conv, run_id=run_id)
    else:
        entry = message_entry(message(name, number), conversation_id=conv, run_id=run_id)
    return replace(entry, timestamp=turn_time(number))


async def turns(dsn: str, schema: str, conv: str, name: str) -> None:
    log = PostgresEventLog(dsn, schema=schema, pool_size=2)
    say('ready')
    first = True
    while line := hear().strip():
        for number in (int(part) for part in line.split(',')):
            seq = await log.append(turn_entry(conv, name, number, first))
            first = False
            say(f'ack {seq} {number}')
        trips = log._trips  # pyright: ignore[reportPrivateUsage]
        say(f'trips {trips["one"]} {trips["guard failed"]} {trips["two"]}')
    log.close()
    say('done')


async def follow(dsn: str, schema: str, last: int) -> None:
    log = PostgresEventLog(dsn, schema=schema, pool_size=1)
    say('ready')
    position = 0
    while position < last:
        batch = await log.entries(after_seq=position)
        for entry in batch:
            if entry.seq != position + 1:
                say(f'gap after {position}: read {entry.seq}')
                sys.exit(3)
            position = entry.seq
            say(f'seen {entry.seq}')
        if not batch:
            await asyncio.sleep(0.002)  # a polling interval, as a follower has
    log.close()
    say('done')


async def idem(dsn: str, schema: str, keys: list[str]) -> None:
    log = PostgresEventLog(dsn, schema=schema, pool_size=2)
    say('ready')
    hear()
    for key in keys:
        entry = message_entry(
            message('idem', int(key.removeprefix('k'))), conversation_id='idem', run_id='shared', idempotency_key=key
        )
        say(f'ack {await log.append(entry)} {key}')
    log.close()
    say('done')


async def open_fresh(dsn: str, schema: str) -> None:
    say('ready')
    hear()
    log = PostgresEventLog(dsn, schema=schema, pool_size=1)
    seq = await log.append(run_started_entry(conversation_id='opened', run_id=f'opened-{os.getpid()}'))
    say(f'ack {seq} open')
    log.close()
    say('done')


async def index(dsn: str, schema: str) -> None:
    from search.persistent_index import PersistentIndex as LmdbIndex

    log = PostgresEventLog(dsn, schema=schema, pool_size=2)
    say('ready')
    hear()
    read = LmdbIndex(log).catch_up()
    say(f'ack {read} index')
    log.close()
    say('done')


def main(argv: list[str]) -> None:
    mode, dsn, schema = argv[:3]
    if mode == 'append':
        asyncio.run(append(dsn, schema, argv[3], argv[4], int(argv[5]), argv[6:]))
    elif mode == 'turns':
        asyncio.run(turns(dsn, schema, argv[3], argv[4]))
    elif mode == 'follow':
        asyncio.run(follow(dsn, schema, int(argv[3])))
    elif mode == 'idem':
        asyncio.run(idem(dsn, schema, argv[3].split(',')))
    elif mode == 'index':
        asyncio.run(index(dsn, schema))
    elif mode == 'open':
        asyncio.run(open_fresh(dsn, schema))
    else:
        raise SystemExit(f'unknown mode {mode!r}')


def serve(argv: list[str], inbox: Connection, outbox: Connection) -> None:
    """Run `main(argv)` in a forked process, talking to the parent over `inbox` and `outbox`."""
    _streams.inbox, _streams.outbox = inbox, outbox
    try:
        main(argv)
    except Exception:
        for line in traceback.format_exc().splitlines():
            say(f'! {line}')
        raise


if __name__ == '__main__':
    main(sys.argv[1:])
