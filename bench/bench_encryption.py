"""Encryption at rest against plain, side by side in one run (docs/encryption.md, docs/performance.md).

On an LMDB store in a temporary directory, plain and encrypted (`keys=FileKeyProvider`), measured in
alternating rounds so both see the same machine:

- append: one message per `append` call (its own transaction), microseconds per entry;
- replay: `transcript` of a conversation of `--replay` messages, milliseconds;
- search at `--messages` messages (10,000 by default): each store builds its index once
  (`catch_up`: the plain store's at rest, the encrypted store's in memory, opening each payload,
  as a process does at its first search) and answers queries from it (caught up with each
  round's appends before the query is timed).

With `--postgres` the same on PostgreSQL (a server the bench starts, as the tests do, or `--dsn`).

Medians of `--rounds` rounds, the load average before and after, and each ratio (encrypted / plain).
`--sync` appends with a flush per commit (the library's default); without it the flush, which
costs the same on both, is left out so the figure shows the sealing itself.

Usage: `python bench/bench_encryption.py [--messages 10000] [--appends 2000] [--rounds 5] [--sync]
[--postgres [--dsn URL]]`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _baseline import load_average
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry
from eventlog.encryption import FileKeyProvider
from eventlog.log import EventLogBase
from search import SearchEngine, SearchOptions
from search.analyzers import resolve_analyzer
from search.persistent_index import PersistentIndex, backend_for

_WORDS = [
    *('deploy', 'retry', 'budget', 'alert', 'runbook', 'latency', 'cache', 'shard', 'replica', 'config'),
    *('staging', 'rollout', 'canary', 'database', 'migration', 'index', 'query', 'schema', 'backup'),
    *('restore', 'incident', 'owner', 'review', 'ticket', 'queue', 'worker', 'timeout', 'region'),
    *('failover', 'metric', 'dashboard', 'quota', 'token', 'vector', 'embedding', 'cluster', 'node'),
]


def _message(rng: random.Random, index: int) -> ModelMessage:
    text = ' '.join(rng.choice(_WORDS) for _ in range(rng.randint(12, 40))) + f' item{index}'
    if index % 2 == 0:
        return ModelRequest(parts=[UserPromptPart(content=text)])
    return ModelResponse(parts=[TextPart(content=text)])


async def _fill(log: EventLogBase, conversation: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    for start in range(0, count, 500):
        run_id = f'{conversation}-{start}'
        batch = [run_started_entry(conversation_id=conversation, run_id=run_id)]
        batch += [
            message_entry(_message(rng, i), conversation_id=conversation, run_id=run_id)
            for i in range(start, min(start + 500, count))
        ]
        batch.append(run_finished_entry(conversation_id=conversation, run_id=run_id, status='completed'))
        await log.append_many(batch)


async def _timed(work: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await work()
    return time.perf_counter() - began


async def _append_round(log: EventLogBase, tag: str, count: int) -> float:
    """Seconds per entry of `count` single-entry appends to a new run."""
    rng = random.Random(7)
    run_id = f'append-{tag}'
    await log.append(run_started_entry(conversation_id=f'append-{tag}', run_id=run_id))
    entries = [message_entry(_message(rng, i), conversation_id=f'append-{tag}', run_id=run_id) for i in range(count)]
    began = time.perf_counter()
    for entry in entries:
        await log.append(entry)
    return (time.perf_counter() - began) / count


async def _find(log: EventLogBase, query: str) -> int:
    backend = backend_for(log, resolve_analyzer('default'))
    result = await SearchEngine(backend, SearchOptions()).find(query, scope='all', conversation_id=None)
    return len(result.hits)


async def _measure(logs: dict[str, EventLogBase], args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Every measure of the plain and the encrypted store of one backend, in alternating rounds."""
    for log in logs.values():
        await _fill(log, 'search', args.messages, seed=1)
        await _fill(log, 'replay', args.replay, seed=2)
    times: dict[str, dict[str, list[float]]] = {name: {} for name in logs}
    # Both build the index once: the plain store at rest, the encrypted one in memory.
    for name, log in logs.items():
        began = time.perf_counter()
        await asyncio.to_thread(PersistentIndex(log).catch_up)
        times[name]['search build'] = [time.perf_counter() - began]
    queries = ['retry budget', 'database migration', 'failover region', 'canary rollout', 'vector index']
    for round_ in range(args.rounds):
        for name, log in logs.items() if round_ % 2 == 0 else reversed(list(logs.items())):
            got = times[name]
            got.setdefault('append (per entry)', []).append(await _append_round(log, f'{name}-{round_}', args.appends))
            got.setdefault('replay (transcript)', []).append(await _timed(lambda log=log: log.transcript('replay')))
            await _find(log, 'warm')  # catches the index up with the round's appends (not timed)
            query = queries[round_ % len(queries)]
            got.setdefault('search query', []).append(await _timed(lambda log=log, query=query: _find(log, query)))
    return times


def _report(title: str, times: dict[str, dict[str, list[float]]]) -> None:
    print(title)
    print(f'{"measure":24} {"plain":>12} {"encrypted":>12} {"ratio":>8}')
    for measure in times['plain']:
        plain = statistics.median(times['plain'][measure])
        sealed = statistics.median(times['encrypted'][measure])
        unit, scale = ('us', 1e6) if measure.startswith('append') else ('ms', 1e3)
        print(f'{measure:24} {plain * scale:>9.1f} {unit} {sealed * scale:>9.1f} {unit} {sealed / plain:>7.2f}x')


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or '').splitlines()[0])
    parser.add_argument('--messages', type=int, default=10_000, help='messages the search stores hold')
    parser.add_argument('--replay', type=int, default=1_000, help='messages of the replayed conversation')
    parser.add_argument('--appends', type=int, default=2_000, help='single-entry appends per round')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--sync', action='store_true', help='flush every commit (the default of the library)')
    parser.add_argument(
        '--postgres', action='store_true', help='also PostgreSQL (a server the bench starts, unless --dsn)'
    )
    parser.add_argument('--dsn', help='the PostgreSQL server for --postgres')
    args = parser.parse_args()
    print(f'load average before: {load_average()}')
    print(
        f'{args.messages} messages searched, a conversation of {args.replay} replayed, {args.appends} appends '
        f'per round, {args.rounds} rounds, LMDB sync={args.sync}'
    )
    with tempfile.TemporaryDirectory(prefix='bench-encryption-') as tmp:
        root = Path(tmp)
        keys = FileKeyProvider.create(root / 'ring')
        lmdb_logs: dict[str, EventLogBase] = {
            'plain': LmdbEventLog(root / 'plain', sync=args.sync),
            'encrypted': LmdbEventLog(root / 'encrypted', sync=args.sync, keys=keys),
        }
        try:
            _report('LMDB', await _measure(lmdb_logs, args))
        finally:
            for log in lmdb_logs.values():
                log.close()
        if args.postgres:
            await _postgres(args, keys)
    print(f'load average after: {load_average()}')


async def _postgres(args: argparse.Namespace, keys: FileKeyProvider) -> None:
    from eventlog.postgres_log import PostgresEventLog

    server = None
    dsn = args.dsn
    if dsn is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tests'))
        from pgserver import start_server  # pyright: ignore[reportMissingImports]

        server = start_server()
        dsn = str(server.dsn())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    try:
        suffix = secrets.token_hex(4)
        logs: dict[str, EventLogBase] = {
            'plain': PostgresEventLog(dsn, schema=f'bench_plain_{suffix}'),
            'encrypted': PostgresEventLog(dsn, schema=f'bench_sealed_{suffix}', keys=keys),
        }
        try:
            _report('PostgreSQL (local server, fsync on)', await _measure(logs, args))
        finally:
            for log in logs.values():
                log.close()
    finally:
        if server is not None:
            server.destroy()  # pyright: ignore[reportUnknownMemberType]


if __name__ == '__main__':
    asyncio.run(main())
