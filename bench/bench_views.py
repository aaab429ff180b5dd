"""Time and peak memory of the reading views on a long run and on one huge message.

Builds, in a temporary directory, a store with one run of `--messages` messages (200,000 by
default, short requests and responses) and stores holding a single message of 16 MB and of
50 MB of text; then runs `eventlog show` (conversation and `--run --full`), `replay` and
`context` on each as a real subprocess, output to /dev/null (not a terminal, so 160 columns),
and the library's `run_messages` and `context`, reporting wall time and the peak resident
set size of each process (`wait4`'s `ru_maxrss`, which includes the interpreter and imports:
see the `baseline` line for a process that only imports the CLI).

It prints this project's figures only; it does not run or compare with the reference
implementation. Usage: `python bench/bench_views.py [--messages N] [--sizes 16,50]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry

CONV = 'bench'
RUN = 'bench-run'


async def _build_long(path: Path, count: int) -> None:
    log = LmdbEventLog(path)
    try:
        await log.append(run_started_entry(conversation_id=CONV, run_id=RUN, agent_name='bench'))
        batch = []
        for index in range(count):
            if index % 2 == 0:
                message = ModelRequest(parts=[UserPromptPart(content=f'question {index}: where is file_{index}.txt?')])
            else:
                message = ModelResponse(parts=[TextPart(content=f'answer {index}: it is in /srv/data/{index}, found')])
            batch.append(message_entry(message, conversation_id=CONV, run_id=RUN))
            if len(batch) == 10_000:
                await log.append_many(batch)
                batch = []
        if batch:
            await log.append_many(batch)
        await log.append(run_finished_entry(conversation_id=CONV, run_id=RUN, status='completed'))
    finally:
        log.close()


async def _build_huge(path: Path, megabytes: int) -> None:
    words = 'lorem ipsum dolor sit amet, consectetur adipiscing elit\n'
    text = (words * (megabytes * 1024 * 1024 // len(words) + 1))[: megabytes * 1024 * 1024] + ' THE-END'
    log = LmdbEventLog(path)
    try:
        await log.append(run_started_entry(conversation_id=CONV, run_id=RUN))
        await log.append(
            message_entry(ModelRequest(parts=[UserPromptPart(content=text)]), conversation_id=CONV, run_id=RUN)
        )
        await log.append(run_finished_entry(conversation_id=CONV, run_id=RUN, status='completed'))
    finally:
        log.close()


def _measure(argv: list[str]) -> tuple[float, float, int]:
    """Run `argv` with output discarded; return seconds, peak RSS in MB, exit status."""
    began = time.perf_counter()
    with open(os.devnull, 'wb') as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
        assert process.stderr is not None
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        errors = process.stderr.read().decode(errors='replace').strip()
    seconds = time.perf_counter() - began
    if process.returncode:
        print(f'    ! exit {process.returncode}: {errors[-300:]}')
    return seconds, usage.ru_maxrss / 1024, process.returncode


_LIBRARY = """
import asyncio, sys
from eventlog import LmdbEventLog
async def main():
    log = LmdbEventLog(sys.argv[2])
    try:
        if sys.argv[1] == 'run_messages':
            found = await log.run_messages(sys.argv[3])
        else:
            found = await log.context(sys.argv[3])
        print(len(found))
    finally:
        log.close()
asyncio.run(main())
"""


def _report(label: str, store: Path) -> None:
    cli = [sys.executable, '-m', 'capability.cli']
    commands = {
        'show CONV': [*cli, 'show', CONV, '--store', str(store)],
        'show --run --full': [*cli, 'show', '--run', RUN, '--full', '--store', str(store)],
        'replay': [*cli, 'replay', RUN, '--store', str(store)],
        'context': [*cli, 'context', CONV, '--store', str(store)],
        'show --json': [*cli, 'show', CONV, '--json', '--store', str(store)],
        'run_messages (API)': [sys.executable, '-c', _LIBRARY, 'run_messages', str(store), RUN],
        'context (API)': [sys.executable, '-c', _LIBRARY, 'context', str(store), CONV],
    }
    print(f'{label}:')
    for name, argv in commands.items():
        seconds, peak, _ = _measure(argv)
        print(f'  {name:<20} {seconds:8.2f} s   peak RSS {peak:8.1f} MB', flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=200_000, help='messages in the long run')
    parser.add_argument('--sizes', default='16,50', help='sizes in MB of the single huge messages')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='bench-views-') as tmp:
        seconds, peak, _ = _measure([sys.executable, '-c', 'import capability.cli'])
        print(f'baseline (import the CLI): {seconds:.2f} s, peak RSS {peak:.1f} MB')
        long_store = Path(tmp) / 'long.lmdb'
        began = time.perf_counter()
        asyncio.run(_build_long(long_store, args.messages))
        print(f'built a run of {args.messages} messages in {time.perf_counter() - began:.1f} s')
        _report(f'one run of {args.messages} messages', long_store)
        for size in (int(s) for s in args.sizes.split(',') if s):
            store = Path(tmp) / f'huge-{size}.lmdb'
            asyncio.run(_build_huge(store, size))
            _report(f'one message of {size} MB', store)


if __name__ == '__main__':
    main()
