"""Where `EventLogPersistence`'s overhead per agent run goes: synced commits, pages, CPU.

The same chat workload as `bench_capability.py` (one run per exchange, history threaded), each
exchange run by every agent below in turn, so all see the same machine state:

- `none`: no capability (the baseline every overhead is measured against);
- `hooks only`: a capability with the same hooks as `EventLogPersistence` that does nothing;
- `commit: 1 value`: one synced LMDB commit of one small value at each point where
  `EventLogPersistence` commits in a plain exchange (the request before it is sent, the response
  once stamped, the run's end): the floor of any store that makes each of them durable before
  the run goes on;
- `commit: entry + 1 leaf` and `commit: entry + 6 leaves`: the same three commits, each writing a
  1,200-byte entry at the end of one table and touching one or six leaves of a second,
  pre-filled table (an append to the log touches about five index leaves);
- `eventlog, sync=False` and `eventlog`: `EventLogPersistence` on an `LmdbEventLog` without and
  with synced commits (the default).

The order in which the agents run rotates from one exchange to the next. Each repetition runs in
a child process of its own. With `--baseline REF` the packages of git ref `REF` (say `main`) are
exported and each repetition runs in two children, one per tree, driven in lock step: exchange
by exchange, each child runs it with all its agents in turn, the first child alternating, so the
old and the new write path are measured side by side, at the same moments. The summary gives
both, the ratios new / old, the overhead over the three-commit floor and the CPU per append with
`sync=False` (its overhead over the three appends of a plain exchange; also from the thread CPU
time of the runs, which the waits of a loaded machine do not inflate), and the pages each
commit writes (the bytes the run hands to write system calls over 4096 and the three commits).
Every figure is a median; load averages are printed before, during and after.

    .venv/bin/python bench/bench_commit_cost.py                     # 100 exchanges, 3 repetitions
    .venv/bin/python bench/bench_commit_cost.py --baseline main     # the same, old and new side by side
    .venv/bin/python bench/bench_commit_cost.py --exchanges 400 --reps 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lmdb
from _baseline import HERE, LockStep, exported, load_average, serve
from bench_capability import SyncedCommitFloor, exchanges, make_agent
from pydantic_ai.messages import ModelMessage

import capability.persistence
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


def bytes_written() -> int:
    """Bytes this process has handed to write system calls (`wchar` of /proc/self/io; 0 where
    there is none): LMDB writes a commit's pages with `pwrite`, so per run, its commits' pages."""
    try:
        with open('/proc/self/io') as lines:
            return next(int(line.split()[1]) for line in lines if line.startswith('wchar'))
    except (OSError, StopIteration):
        return 0


APPENDS_PER_RUN = 3
"""Write transactions `EventLogPersistence` makes in a plain exchange: the request (with the run's
start), the response, the run's end."""


async def child(count: int, seed: int, rep: int) -> None:
    """One repetition, in a child process measuring its tree, driven by the parent (`LockStep`):
    each step is one exchange, run by every agent in turn; it answers each agent's seconds."""
    data = exchanges(count, seed)
    replies = [reply for _, reply in data]
    with tempfile.TemporaryDirectory(prefix='bench-commit-cost-') as tmp:
        root = Path(tmp)
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
        names = list(agents)
        gc.collect()

        async def step(line: str) -> dict[str, dict[str, float]]:
            index = int(line)
            user = data[index][0]
            times: dict[str, float] = {}
            cpu: dict[str, float] = {}
            written: dict[str, float] = {}
            # A different order each exchange, so no agent always runs right after another's fsync.
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                agent = agents[name]
                agent.__dict__['_bench_position']['i'] = index
                before = bytes_written()
                start = time.perf_counter()
                cpu_start = time.thread_time()
                result = await agent.run(user, message_history=history[name], conversation_id=f'c-{rep}')
                times[name] = time.perf_counter() - start
                cpu[name] = time.thread_time() - cpu_start
                written[name] = bytes_written() - before
                history[name] = result.all_messages()
            return {'times': times, 'cpu': cpu, 'written': written}

        def finish() -> dict[str, str]:
            for log in logs:
                log.close()
            for env in [plain, *(env for env, _, _ in stores)]:
                env.close()
            return {'module': capability.persistence.__file__}

        await serve(step, finish)


def summarize(reps: list[dict[str, list[float]]], count: int) -> dict[str, tuple[float, float]]:
    """Each agent's (time per run, overhead per run): medians over the repetitions, then over the
    last quarter of the runs."""
    per_run = {name: [statistics.median(rep[name][x] for rep in reps) for x in range(count)] for name in reps[0]}
    span = range(count - max(1, count // 4), count)
    return {
        name: (
            statistics.median(values[x] for x in span),
            statistics.median(values[x] - per_run['none'][x] for x in span),
        )
        for name, values in per_run.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--exchanges', type=int, default=100)
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--seed', type=int, default=42)
    parser.add_argument('--baseline', default='', help="git ref of the old way to measure side by side ('' for none)")
    parser.add_argument('--child', type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    count: int = args.exchanges
    if args.child is not None:  # one repetition, in a child process measuring its tree
        asyncio.run(child(count, args.seed, args.child))
        return
    script = Path(__file__).resolve()
    with exported(args.baseline) if args.baseline else contextlib.nullcontext(None) as old_tree:
        trees = {f'old ({args.baseline})': old_tree} if old_tree is not None else {}
        trees['new (this tree)'] = HERE
        results: dict[str, list[dict[str, list[float]]]] = {label: [] for label in trees}
        cpu_results: dict[str, list[dict[str, list[float]]]] = {label: [] for label in trees}
        written: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
        print(f'load average before: {load_average()}')
        span = range(count - max(1, count // 4), count)
        for rep in range(args.reps):
            children = LockStep(
                script, trees, ['--exchanges', str(count), '--seed', str(args.seed), '--child', str(rep)]
            )
            for times in [*results.values(), *cpu_results.values()]:
                times.append({})
            for index in range(count):
                # The trees take turns exchange by exchange, the first one alternating.
                for label in list(trees) if (index + rep) % 2 == 0 else list(trees)[::-1]:
                    found = children.step(label, str(index))
                    for name, seconds in found['times'].items():
                        results[label][-1].setdefault(name, []).append(seconds)
                    for name, seconds in found['cpu'].items():
                        cpu_results[label][-1].setdefault(name, []).append(seconds)
                    if index in span:
                        for name, amount in found['written'].items():
                            written[label].setdefault(name, []).append(amount)
            children.close()
            print(f'  repetition {rep + 1} done; load average {load_average()}', flush=True)
    load_after = load_average()
    summaries = {label: summarize(reps, count) for label, reps in results.items()}
    cpu_summaries = {label: summarize(reps, count) for label, reps in cpu_results.items()}
    print(f'\n{count} exchanges, {args.reps} repetitions; overhead = median over the last quarter of the runs')
    print(f'load average after: {load_after}')
    labels = list(summaries)
    header = f'{"capability":>26} | ' + ' | '.join(f'{label:>21}' for label in labels)
    if len(labels) == 2:
        header += f' | {"new / old":>9}'
    print(f'\n{"":>26}   ' + '   '.join(f'{"run":>9}   {"overhead":>9}' for _ in labels))
    print(header)
    print('-' * len(header))
    for name in summaries[labels[0]]:
        cells = [
            f'{summaries[label][name][0] * 1e3:6.3f} ms {summaries[label][name][1] * 1e3:7.3f} ms' for label in labels
        ]
        line = f'{name:>26} | ' + ' | '.join(f'{cell:>21}' for cell in cells)
        if len(labels) == 2 and name != 'none':
            old, new = (summaries[label][name][1] for label in labels)
            line += f' | {new / old:8.2f}x' if old > 5e-5 else f' | {"n/a":>9}'
        print(line)
    print()
    # The floor is the same code in every child (this tree's bench), so with two trees measured in
    # lock step their two measurements of it differ by noise alone: each is also compared with both.
    pooled = statistics.mean(summaries[label]['commit: 1 value'][1] for label in labels)
    for label in labels:
        summary = summaries[label]
        floor = summary['commit: 1 value'][1]
        synced = summary['eventlog'][1]
        unsynced = summary['eventlog, sync=False'][1]
        line = (
            f'{label}: overhead per run {synced * 1e3:.3f} ms = {synced / floor:.2f}x the three-commit floor '
            f'of its child ({floor * 1e3:.3f} ms)'
        )
        if len(labels) == 2:
            line += f', {synced / pooled:.2f}x the floor of both children ({pooled * 1e3:.3f} ms)'
        print(f'{line}; CPU per append with sync=False {unsynced / APPENDS_PER_RUN * 1e3:.3f} ms')
        cpu_unsynced = cpu_summaries[label]['eventlog, sync=False'][1]
        print(
            f'  the same from the thread CPU time of the runs (no waits; cache misses of a loaded machine '
            f'still count): {cpu_unsynced / APPENDS_PER_RUN * 1e3:.3f} ms per append'
        )
        pages = {
            name: statistics.median(written[label][name]) / 4096 / APPENDS_PER_RUN
            for name in ('commit: 1 value', 'eventlog')
        }
        print(
            f'  pages written per commit (write syscalls of the run / 4096 / {APPENDS_PER_RUN}): '
            f'the floor {pages["commit: 1 value"]:.1f}, the log {pages["eventlog"]:.1f}'
        )


if __name__ == '__main__':
    main()
