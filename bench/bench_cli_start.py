"""How long the everyday `eventlog` commands take from a cold start, as a user types them.

Builds a small store (a few conversations with messages and runs), then runs each command in a
real subprocess through the console script (crash guard included) and prints the median wall
and CPU time with stdout a pipe (as scripts and tests see it), and the median wall time with
stdout a terminal (a pseudo-terminal of 120 columns, as a user sees it). The browsing commands
import pydantic-ai only when they need it, so start-up dominates. On a terminal the views are
styled by Rich, so there the fast commands (`eventlog_cli._fast`) leave them to the full
command line; only `--help` and `--json` output are fast on both.

Usage: python bench/bench_cli_start.py [RUNS] [--eventlog PATH]
(`--eventlog` also times another install's console script, e.g. one built from an older
commit, command by command beside this one's.)
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry


async def build(store: Path) -> str:
    """A store with three conversations of two runs each; returns one conversation id."""
    log = LmdbEventLog(store)
    try:
        for c in range(3):
            conversation = f'conv-{c}'
            for r in range(2):
                run = f'{conversation}-run-{r}'
                await log.append(run_started_entry(conversation_id=conversation, run_id=run))
                for m in range(4):
                    await log.append(
                        message_entry(
                            ModelRequest(parts=[UserPromptPart(content=f'question {m} about lmdb pages')]),
                            conversation_id=conversation,
                            run_id=run,
                        )
                    )
                    await log.append(
                        message_entry(
                            ModelResponse(parts=[TextPart(content=f'answer {m}: pages are 4 KiB')]),
                            conversation_id=conversation,
                            run_id=run,
                        )
                    )
                await log.append(run_finished_entry(conversation_id=conversation, run_id=run, status='completed'))
        return 'conv-0'
    finally:
        log.close()


def median_time(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of running `argv` to completion.

    The exit status must be 0. CPU time is what the command costs whatever else the machine is
    doing; wall time is what a user waits on a quiet machine.
    """
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        walls.append(time.perf_counter() - began)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def median_tty_time(argv: list[str], runs: int, columns: int = 120) -> float:
    """Median wall time of running `argv` with stdout and stderr a pseudo-terminal `columns` wide."""
    walls: list[float] = []
    for _ in range(runs):
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack('HHHH', 40, columns, 0, 0))
        began = time.perf_counter()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
        os.close(follower)
        while True:  # drain the terminal, or the command blocks once its buffer is full
            try:
                if not os.read(leader, 65536):
                    break
            except OSError:  # EIO: every writer has closed the terminal
                break
        status = child.wait()
        walls.append(time.perf_counter() - began)
        os.close(leader)
        if status != 0:
            raise subprocess.CalledProcessError(status, argv)
    return statistics.median(walls)


def main() -> None:
    args = sys.argv[1:]
    scripts = [Path(sys.executable).parent / 'eventlog']
    if '--eventlog' in args:
        at = args.index('--eventlog')
        scripts.append(Path(args[at + 1]))
        del args[at : at + 2]
    runs = int(args[0]) if args else 5
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / 'store.lmdb'
        conversation = asyncio.run(build(store))
        commands = [
            ['--help'],
            ['conversations', '--store', str(store)],
            ['info', conversation, '--store', str(store)],
            ['stats', '--store', str(store)],
            ['verify', '--store', str(store)],
            ['tail', '--store', str(store)],
            ['tail', '--json', '--store', str(store)],
            ['show', conversation, '--store', str(store)],
        ]
        print(f'median of {runs} cold starts; target: under 0.3 s wall on a quiet machine')
        for number, script in enumerate(scripts):
            print(f'  [{number}] {script}')
        print(f'  {"command":<31}' + ''.join(f' {"wall":>7} {"cpu":>7} {"tty wall":>9}' for _ in scripts))
        for command in commands:
            label = ' '.join(part for part in command if part != str(store) and part != '--store')
            row = f'  eventlog {label:<22}'
            for script in scripts:  # side by side, so that both see the same load
                wall, cpu = median_time([str(script), *command], runs)
                tty = median_tty_time([str(script), *command], runs)
                row += f' {wall:>6.3f}s {cpu:>6.3f}s {tty:>8.3f}s'
            print(row, flush=True)
    print('(`show` decodes messages, so it imports pydantic-ai: a reference, not a target;')
    print(' wall and cpu: stdout a pipe; tty wall: stdout a 120-column pseudo-terminal)')


if __name__ == '__main__':
    main()
