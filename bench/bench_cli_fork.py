"""What the console script's crash guard costs: `eventlog` runs each command in a forked child
(eventlog_cli.launch.main), after every import is done.

Prints the median time of fork + child exit + wait in a process that has imported the CLI, and
the median wall time of `eventlog conversations --json` on a small store with and without the
guard (fresh interpreters both ways, so import time dominates both).

Usage: python bench/bench_cli_fork.py [RUNS]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import eventlog_cli.main  # noqa: F401  (the guard forks after these imports)
from eventlog import LmdbEventLog, run_finished_entry, run_started_entry


def fork_cost(runs: int) -> float:
    times: list[float] = []
    for _ in range(runs):
        began = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def command_time(script: str, store: Path, runs: int) -> float:
    times: list[float] = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, '-c', script, 'conversations', '--json', '--store', str(store)],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def build(store: Path) -> None:
    log = LmdbEventLog(store)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed'))
    finally:
        log.close()


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f'fork + exit + wait after imports: {fork_cost(50) * 1000:.2f} ms (median of 50)')
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / 'store.lmdb'
        asyncio.run(build(store))
        guarded = 'import sys\nfrom eventlog_cli.launch import main\nsys.argv[0] = "eventlog"\nmain()\n'
        plain = 'import sys\nfrom eventlog_cli.main import run\nsys.exit(run(sys.argv[1:]))\n'
        with_guard = command_time(guarded, store, runs)
        without = command_time(plain, store, runs)
    print(
        f'eventlog conversations --json: {with_guard:.3f} s with the guard, {without:.3f} s without (median of {runs})'
    )


if __name__ == '__main__':
    main()
