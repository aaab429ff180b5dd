"""Where the CPU of one append of a plain exchange goes: the engine, the store-file check, the rest.

`EventLogPersistence` makes three write transactions in a plain exchange (the request with the
run's start, the response, the run's end), each one `LmdbEventLog.append_many` (sync off here).
This bench records the batches FunctionModel agent runs hand to `append_many`, and measures the
thread CPU time of each transaction split into:

- `engine`: `_engine.append_entries` inside the transaction (validation, reads, encoding, puts);
- `identity check`: `_SharedEnv.check_identity` (one `stat` of `data.mdb`);
- what wraps them: the locks and LMDB's begin, LMDB's commit (which writes the dirty pages), the
  `_LmdbTxn` and closures, and the coroutine around the transaction (`PARTS`);

twice: inside the agent runs (interleaved with pydantic-ai's own work, as the capability sees it)
and replaying the same batches into fresh stores in a tight loop (warm caches). The difference
between the two is the cost of running cold, not of any step of the write path. Also the fixed
cost of the wrapping (an empty write transaction through `run_in_txn` against a bare LMDB one)
and the replay with LMDB's `writemap`, an option the log does not use, to show what it would save.

The timers themselves (one `time.thread_time_ns` system call each) add about a microsecond to each
part; the uninstrumented replay gives the total without them. Every figure is a median.

    .venv/bin/python bench/bench_append_path.py
    .venv/bin/python bench/bench_append_path.py --exchanges 400 --reps 9
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lmdb
from _baseline import load_average
from bench_capability import exchanges, make_agent

import eventlog.lmdb_log as lmdb_log
import eventlog.log as log_module
from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog, NewEntry

Parts = dict[str, int]

PARTS = ('append_many', 'engine', 'identity check', 'begin', 'commit', 'around engine', 'outside txn')
"""The rows: `append_many` in all; `engine` (`_engine.append_entries`); `identity check`
(`_SharedEnv.check_identity`); `begin` (the lock, `enter` and LMDB's begin in `run_in_txn`);
`commit` (LMDB's commit, which writes the dirty pages, and `leave`); `around engine` (inside the
transaction but outside the engine: `_LmdbTxn`, the closures); `outside txn` (the coroutine,
`_write`, the batch list, `Appended`)."""


class Split:
    """Instruments `append_many`, the engine and the identity check (thread CPU, nanoseconds)."""

    def __init__(self) -> None:
        self.parts: Parts = {
            'append_many': 0,
            'run_in_txn': 0,
            'inside txn': 0,
            'engine': 0,
            'identity check': 0,
            'commit': 0,
        }
        self.calls = 0
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        parts = self.parts
        append_many = log_module.EventLogBase.append_many
        engine = log_module.engine.append_entries
        check = lmdb_log._SharedEnv.check_identity  # pyright: ignore[reportPrivateUsage]
        run_in_txn = lmdb_log.LmdbEventLog.run_in_txn

        def timed_run_in_txn(log: Any, fn: Callable[[Any], Any], *, write: bool) -> Any:
            ended = [0]

            def inside(txn: Any) -> Any:
                began = time.thread_time_ns()
                try:
                    return fn(txn)
                finally:
                    ended[0] = time.thread_time_ns()
                    parts['inside txn'] += ended[0] - began

            start = time.thread_time_ns()
            try:
                return run_in_txn(log, inside, write=write)
            finally:
                done = time.thread_time_ns()
                parts['run_in_txn'] += done - start
                if ended[0]:
                    parts['commit'] += done - ended[0]

        async def timed_append_many(log: Any, entries: Sequence[NewEntry]) -> list[int]:
            start = time.thread_time_ns()
            try:
                return await append_many(log, entries)
            finally:
                parts['append_many'] += time.thread_time_ns() - start
                self.calls += 1

        def timed_engine(*args: Any, **kwargs: Any) -> list[int]:
            start = time.thread_time_ns()
            try:
                return engine(*args, **kwargs)
            finally:
                parts['engine'] += time.thread_time_ns() - start

        def timed_check(shared: Any) -> None:
            start = time.thread_time_ns()
            try:
                check(shared)
            finally:
                parts['identity check'] += time.thread_time_ns() - start

        self._saved = [
            (log_module.EventLogBase, 'append_many', append_many),
            (log_module.engine, 'append_entries', engine),
            (lmdb_log._SharedEnv, 'check_identity', check),  # pyright: ignore[reportPrivateUsage]
            (lmdb_log.LmdbEventLog, 'run_in_txn', run_in_txn),
        ]
        log_module.EventLogBase.append_many = timed_append_many  # type: ignore[method-assign]
        log_module.engine.append_entries = timed_engine  # type: ignore[assignment]
        lmdb_log._SharedEnv.check_identity = timed_check  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
        lmdb_log.LmdbEventLog.run_in_txn = timed_run_in_txn  # type: ignore[method-assign]

    def uninstall(self) -> None:
        for owner, name, value in self._saved:
            setattr(owner, name, value)

    def per_call(self) -> dict[str, float]:
        """Microseconds per transaction of each part (see `PARTS`)."""
        calls = max(self.calls, 1)
        raw = {name: value / calls / 1000 for name, value in self.parts.items()}
        return {
            'append_many': raw['append_many'],
            'engine': raw['engine'],
            'identity check': raw['identity check'],
            'begin': raw['run_in_txn'] - raw['inside txn'] - raw['commit'] - raw['identity check'],
            'commit': raw['commit'],
            'around engine': raw['inside txn'] - raw['engine'],
            'outside txn': raw['append_many'] - raw['run_in_txn'],
        }


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the log's short writes run inline) without a loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError('the append suspended')


async def record(count: int, seed: int, directory: Path) -> tuple[list[list[NewEntry]], dict[str, float]]:
    """Run `count` exchanges through an agent with `EventLogPersistence`; the batches it appended
    and the split of its transactions' CPU."""
    data = exchanges(count, seed)
    replies = [reply for _, reply in data]
    batches: list[list[NewEntry]] = []
    split = Split()
    split.install()
    inner = log_module.EventLogBase.append_many

    async def keeping(log: Any, entries: Sequence[NewEntry]) -> list[int]:
        batches.append(list(entries))
        return await inner(log, entries)

    log_module.EventLogBase.append_many = keeping  # type: ignore[method-assign]
    try:
        log = LmdbEventLog(directory / 'agent', sync=False)
        agent = make_agent(replies, [EventLogPersistence(log)])
        history = None
        for index, (user, _) in enumerate(data):
            agent.__dict__['_bench_position']['i'] = index
            result = await agent.run(user, message_history=history)
            history = result.all_messages()
        log.close()
    finally:
        log_module.EventLogBase.append_many = inner  # type: ignore[method-assign]
        split.uninstall()
    return batches, split.per_call()


@contextlib.contextmanager
def writemap() -> Iterator[None]:
    """Stores opened meanwhile use LMDB's `writemap` (writes go straight into the map: a commit
    copies and writes no pages), which the log does not use: what that option would save."""
    opener = lmdb.open

    def open_writemap(*args: Any, **kwargs: Any) -> lmdb.Environment:
        if not kwargs.get('readonly'):
            kwargs['writemap'] = True
        return opener(*args, **kwargs)

    lmdb.open = open_writemap
    try:
        yield
    finally:
        lmdb.open = opener


def replay(batches: list[list[NewEntry]], directory: Path, name: str, split: Split | None) -> float:
    """Append `batches` into a fresh store in a tight loop; microseconds per transaction."""
    log = LmdbEventLog(directory / name, sync=False)
    if split is not None:
        split.install()
    try:
        append_many = log.append_many
        start = time.thread_time_ns()
        for batch in batches:
            drive(append_many(batch))
        return (time.thread_time_ns() - start) / len(batches) / 1000
    finally:
        if split is not None:
            split.uninstall()
        log.close()


def empty_transactions(directory: Path, count: int = 3000) -> dict[str, float]:
    """Microseconds of an empty write transaction, bare and through `run_in_txn`, and of the `stat`."""
    log = LmdbEventLog(directory / 'empty', sync=False)
    shared = log._shared  # pyright: ignore[reportPrivateUsage]
    env = shared.env

    def bare() -> None:
        with env.begin(write=True):
            pass

    def wrapped() -> None:
        log.run_in_txn(lambda txn: None, write=True)

    def stat() -> None:
        os.stat(shared.data_path)

    out: dict[str, float] = {}
    cases: list[tuple[str, Callable[[], None]]] = [
        ('bare LMDB write txn', bare),
        ('run_in_txn (empty)', wrapped),
        ('os.stat(data.mdb)', stat),
    ]
    for name, fn in cases:
        times: list[float] = []
        for _ in range(5):
            start = time.thread_time_ns()
            for _ in range(count):
                fn()
            times.append((time.thread_time_ns() - start) / count / 1000)
        out[name] = statistics.median(times)
    log.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--exchanges', type=int, default=200)
    parser.add_argument('--reps', type=int, default=7, help='replays of the recorded batches')
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    print(f'load average before: {load_average()}')
    with tempfile.TemporaryDirectory(prefix='bench-append-path-') as tmp:
        root = Path(tmp)
        batches, in_agent = asyncio.run(record(args.exchanges, args.seed, root))
        plain: list[float] = []
        mapped: list[float] = []
        splits: list[dict[str, float]] = []
        for rep in range(args.reps):
            plain.append(replay(batches, root, f'plain-{rep}', None))
            with writemap():
                mapped.append(replay(batches, root, f'writemap-{rep}', None))
            split = Split()
            replay(batches, root, f'split-{rep}', split)
            splits.append(split.per_call())
        empty = empty_transactions(root)
    tight = {name: statistics.median(s[name] for s in splits) for name in splits[0]}
    print(f'load average after: {load_average()}')
    print(f'\n{len(batches)} transactions of {args.exchanges} plain exchanges; thread CPU, us per transaction')
    print(f'{"":>16} | {"in the agent runs":>18} | {"tight-loop replay":>18}')
    for name in PARTS:
        print(f'{name:>16} | {in_agent[name]:18.1f} | {tight[name]:18.1f}')
    print(f'tight-loop replay without the timers: {statistics.median(plain):.1f} us per transaction')
    print(f'  the same with LMDB writemap (not used by the log): {statistics.median(mapped):.1f} us per transaction')
    for name, value in empty.items():
        print(f'{name:>22}: {value:.2f} us')


if __name__ == '__main__':
    main()
