"""Conversation-scope search through a local index of a PostgreSQL log, next to LMDB, in one run.

Run: `.venv/bin/python bench/bench_pg_local_search.py [--rounds N] [--dsn URL]`

One conversation of 10,000 messages (the corpus of `bench_postgres.py`'s search section) is
loaded into a PostgreSQL schema and into an LMDB store, and searched, query by query in turn, by:

- `LMDB`: `LmdbIndex` of the `LmdbEventLog`;
- `PG local`: `LmdbIndex` of `PostgresEventLog(projections_dir=...)`, which keeps the payloads and
  run names a search shows in its local directory and asks the database only for the last `seq`;
- `PG local, reads log`: the same, through a handle that hides `projections_apart`, so that the
  index keeps nothing but the index (format 3) and reads the messages it shows and their run
  names from PostgreSQL (how every local index worked before it kept them).

Each round opens new index objects (their caches of shown messages start empty, as in a new
process), warms each up with five queries, then times every query once per index, with
`context_lines` 0 and 5. Two query sets: `found`, the generated queries of `_search_corpus`
(each finds something), and `miss`, words that are nowhere in the corpus (a search's fixed cost).
Medians per round, their ratio to LMDB, and the load average are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tests'))

from bench_postgres import load_conversation

from eventlog import LmdbEventLog, PostgresEventLog
from search import SearchEngine, SearchOptions
from search.persistent_index import PersistentIndex as LmdbIndex
from search.render import index_text

try:
    from _search_corpus import conversation_messages, make_queries
except ModuleNotFoundError:  # imported as `bench.bench_pg_local_search` from the repository root
    from bench._search_corpus import conversation_messages, make_queries

N = 10_000
NAMES = ('LMDB', 'PG local', 'PG local, reads log')


class ReadsShownFromLog:
    """A `PostgresEventLog` with a local projections directory, minus `projections_apart`: an index
    over it keeps no payloads or run names and reads them from the database."""

    def __init__(self, log: PostgresEventLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        if name == 'projections_apart':
            raise AttributeError(name)
        return getattr(self._log, name)


def load() -> str:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


async def one_round(logs: list[Any], queries: dict[str, list[str]]) -> dict[tuple[str, str, int], float]:
    out: dict[tuple[str, str, int], float] = {}
    for context in (0, 5):
        indexes = [LmdbIndex(log) for log in logs]  # new objects: empty caches, as in a new process
        engines = [SearchEngine(index, SearchOptions(max_matches=10, context_lines=context)) for index in indexes]
        for kind, texts in queries.items():
            for engine in engines:
                for query in texts[:5]:
                    await engine.search(query, scope='conversation', conversation_id='conv')
            times: list[list[int]] = [[] for _ in engines]
            for query in texts:
                for engine, spent in zip(engines, times, strict=True):
                    t0 = time.perf_counter_ns()
                    await engine.search(query, scope='conversation', conversation_id='conv')
                    spent.append(time.perf_counter_ns() - t0)
            for name, spent in zip(NAMES, times, strict=True):
                out[(kind, name, context)] = statistics.median(spent)
    return out


async def run(dsn: str, tmp: Path, rounds: int) -> None:
    messages = conversation_messages(N, seed=N)
    found = [query for _, query in make_queries([index_text(m) for m in messages], seed=N)]
    queries = {'found': found, 'miss': [f'qzx{number}vw' for number in range(len(found))]}
    schema = f'bench_local_{os.getpid()}'
    pg = PostgresEventLog(dsn, schema=schema)
    lmdb = LmdbEventLog(tmp / 'lmdb', sync=False, map_size=2 << 30)
    keeps = PostgresEventLog(dsn, schema=schema, projections_dir=tmp / 'keeps')
    reads = PostgresEventLog(dsn, schema=schema, projections_dir=tmp / 'reads')
    logs: list[Any] = [lmdb, keeps, ReadsShownFromLog(reads)]
    try:
        await load_conversation(pg, 'conv', messages)
        await load_conversation(lmdb, 'conv', messages)
        for log, name in zip(logs, NAMES, strict=True):
            t0 = time.perf_counter()
            LmdbIndex(log).catch_up()
            print(f'  .. {name}: indexed in {time.perf_counter() - t0:.1f} s', file=sys.stderr, flush=True)
        results: list[dict[tuple[str, str, int], float]] = []
        for number in range(1, rounds + 1):
            results.append(await one_round(logs, queries))
            cells = [
                f'{kind} ctx {context}: '
                + ' / '.join(f'{results[-1][(kind, name, context)] / 1e3:.0f}' for name in NAMES)
                + ' us'
                for kind in queries
                for context in (0, 5)
            ]
            print(f'round {number} ({" / ".join(NAMES)}), load {load()}: ' + '; '.join(cells), flush=True)
        print(f'\n== median of {rounds} round medians, ratio to LMDB')
        for kind in queries:
            for context in (0, 5):
                meds = {name: statistics.median(r[(kind, name, context)] for r in results) for name in NAMES}
                lmdb_med = meds['LMDB']
                row = ', '.join(f'{name} {meds[name] / 1e6:.3f} ms ({meds[name] / lmdb_med:.2f}x)' for name in NAMES)
                print(f'{kind:5} context {context}: {row}')
    finally:
        for log in (keeps, reads, lmdb):
            log.close()
        pg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rounds', type=int, default=3, help='rounds of every query set (default 3)')
    parser.add_argument('--dsn', help='use this PostgreSQL server instead of starting one')
    args = parser.parse_args()
    print(f'bench_pg_local_search on {os.cpu_count()} CPUs, load average {load()}', flush=True)
    server = None
    with tempfile.TemporaryDirectory(prefix='bench-pg-local-') as tmp:
        dsn = args.dsn
        if dsn is None:
            from pgserver import start_server  # pyright: ignore[reportMissingImports]

            server = start_server()
            dsn = server.dsn()  # pyright: ignore[reportUnknownMemberType]
        try:
            asyncio.run(run(str(dsn), Path(tmp), args.rounds))  # pyright: ignore[reportUnknownArgumentType]
        finally:
            if server is not None:
                server.destroy()  # pyright: ignore[reportUnknownMemberType]
    print(f'load average at the end {load()}')


if __name__ == '__main__':
    main()
