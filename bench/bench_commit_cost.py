"""Where `EventLogPersistence`'s overhead per agent run goes: synced commits, pages, CPU.

The same chat workload as `bench_capability.py` (one run per exchange, history threaded), each
exchange run by every agent below in turn, so all see the same machine state:

- `none`: no capability (the baseline every overhead is measured against);
- `hooks only`: a capability with the same hooks as `EventLogPersistence` that does nothing;
- `commit: 1 value`: one synced LMDB commit of one small value at each point where
  `EventLogPersistence` commits in a plain exchange (the request before it is sent, the response
  once stamped, the run's end);
- `commit: entry + 1 leaf` and `commit: entry + 6 leaves`: the same three commits, each writing a
  1,200-byte entry at the end of one table and touching one or six leaves of a second,
  pre-filled table (an append to the log touches about five index leaves);
- `eventlog, sync=False` and `eventlog`: `EventLogPersistence` on an `LmdbEventLog` without and
  with synced commits (the default).

The order in which the agents run rotates from one exchange to the next.

    .venv/bin/python bench/bench_commit_cost.py               # 100 exchanges, 3 repetitions
    .venv/bin/python bench/bench_commit_cost.py --exchanges 400 --reps 1
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lmdb
from bench_capability import SyncedCommitFloor, exchanges, make_agent
from pydantic_ai.messages import ModelMessage

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog

_FILLER_KEYS = 20_000

Store = tuple[lmdb.Environment, Any, Any]
"""An environment with its `entries` table and its pre-filled `index` table."""


@dataclass
class CommitShape(SyncedCommitFloor):
    """The floor's hooks, each commit writing an entry and touching `leaves` index leaves."""

    store: Store | None = None
    entry_bytes: int = 1200
    leaves: int = 0

    def _commit(self) -> None:
        if self.store is None:
            return
        env, entries, index = self.store
        with env.begin(write=True) as txn:
            count = txn.stat(entries)['entries']
            txn.put(b'%016d' % count, b'x' * self.entry_bytes, append=True, db=entries)
            for leaf in range(self.leaves):
                # Keys of table `leaf` sit together, so each lands on a leaf of its own.
                txn.put(b'%02d%08d' % (leaf, count * 7919 % _FILLER_KEYS), b'y' * 100, db=index)


def open_store(path: Path) -> Store:
    path.mkdir(parents=True)
    env = lmdb.open(str(path), map_size=256 << 20, max_dbs=4)  # synced commits: LMDB's default
    entries = env.open_db(b'entries')
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        for i in range(_FILLER_KEYS):
            txn.put(b'%02d%08d' % (i % 8, i), b'x' * 100, db=index)
    return env, entries, index


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--exchanges', type=int, default=100)
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--seed', type=int, default=42)
    args = parser.parse_args()
    count: int = args.exchanges
    data = exchanges(count, args.seed)
    replies = [reply for _, reply in data]
    times: dict[str, list[list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix='bench-commit-cost-') as tmp:
        for rep in range(args.reps):
            root = Path(tmp) / str(rep)
            stores = [open_store(root / name) for name in ('leaf1', 'leaf6')]
            plain = lmdb.open(str(root / 'one'), map_size=64 << 20)  # synced commits: LMDB's default
            logs = [LmdbEventLog(root / 'log-nosync', sync=False), LmdbEventLog(root / 'log')]
            agents = {
                'none': make_agent(replies, []),
                'hooks only': make_agent(replies, [SyncedCommitFloor()]),
                'commit: 1 value': make_agent(replies, [SyncedCommitFloor(plain)]),
                'commit: entry + 1 leaf': make_agent(replies, [CommitShape(store=stores[0], leaves=1)]),
                'commit: entry + 6 leaves': make_agent(replies, [CommitShape(store=stores[1], leaves=6)]),
                'eventlog, sync=False': make_agent(replies, [EventLogPersistence(logs[0])]),
                'eventlog': make_agent(replies, [EventLogPersistence(logs[1])]),
            }
            history: dict[str, list[ModelMessage] | None] = dict.fromkeys(agents)
            for name in agents:
                times.setdefault(name, []).append([])
            gc.collect()
            names = list(agents)
            for index, (user, _) in enumerate(data):
                # A different order each exchange, so no agent always runs right after another's fsync.
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    agent = agents[name]
                    agent.__dict__['_bench_position']['i'] = index
                    start = time.perf_counter()
                    result = await agent.run(user, message_history=history[name], conversation_id=f'c-{rep}')
                    times[name][-1].append(time.perf_counter() - start)
                    history[name] = result.all_messages()
            for log in logs:
                log.close()
            for env in [plain, *(env for env, _, _ in stores)]:
                env.close()
            print(f'  repetition {rep + 1} done')
    per_run = {name: [statistics.median(rep[x] for rep in reps) for x in range(count)] for name, reps in times.items()}
    span = range(count - max(1, count // 4), count)
    print(f'\n{count} exchanges, {args.reps} repetitions; overhead = median over the last quarter of the runs')
    print(f'{"capability":>26} | {"run":>9} | {"overhead":>9}')
    print('-' * 51)
    for name, values in per_run.items():
        run = statistics.median(values[x] for x in span)
        overhead = statistics.median(values[x] - per_run['none'][x] for x in span)
        print(f'{name:>26} | {run * 1e3:6.3f} ms | {overhead * 1e3:6.3f} ms')


if __name__ == '__main__':
    asyncio.run(main())
