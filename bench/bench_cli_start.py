"""How long the everyday `eventlog` commands take from a cold start, as a user types them.

Builds a small store (a few conversations with messages and runs), then runs each command in a
real subprocess through the console script (crash guard included) and prints the median wall
time. The browsing commands import pydantic-ai only when they need it, so start-up dominates.

Usage: python bench/bench_cli_start.py [RUNS] [--eventlog PATH]
(`--eventlog` times another install's console script, e.g. one built from an older commit.)
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import subprocess
import sys
import tempfile
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


def main() -> None:
    args = sys.argv[1:]
    script = Path(sys.executable).parent / 'eventlog'
    if '--eventlog' in args:
        at = args.index('--eventlog')
        script = Path(args[at + 1])
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
            ['show', conversation, '--store', str(store)],
        ]
        print(f'{script} (median of {runs} cold starts; target: under 0.3 s wall on a quiet machine)')
        print(f'  {"command":<31} {"wall":>7} {"cpu":>7}')
        for command in commands:
            wall, cpu = median_time([str(script), *command], runs)
            label = ' '.join(part for part in command if part != str(store) and part != '--store')
            print(f'  eventlog {label:<22} {wall:>6.3f}s {cpu:>6.3f}s')
    print('(`show` decodes messages, so it imports pydantic-ai: a reference, not a target)')


if __name__ == '__main__':
    main()
