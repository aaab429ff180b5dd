"""Time and peak memory of the reading views on a long run and on one huge message.

Builds, in a temporary directory, a store with one run of `--messages` messages (200,000 by
default, short requests and responses) and stores holding a single message of 16 MB and of
50 MB of text; then runs `eventlog show` (conversation and `--run --full`), `replay` and
`context` on each as a real subprocess, output to /dev/null (not a terminal, so 160 columns),
and the library's `run_messages` and `context`, reporting wall time and the peak resident
set size of each process: its heap (anonymous RSS, sampled every 2 ms) and its whole peak
(`VmHWM`, which also counts the store's pages LMDB maps while reading). Both include the
interpreter and imports: see the `baseline` line for a process that only imports the CLI.
(`getrusage`'s `ru_maxrss` is not used: Linux carries it over `exec` from the parent.)

It prints this project's figures only; it does not run or compare with the reference
implementation. Usage: `python bench/bench_views.py [--messages N] [--sizes 16,50]`.
"""

from __future__ import annotations

import argparse
import asyncio
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


_PEAK = """
import atexit, sys, threading

def status(field):
    with open('/proc/self/status') as lines:
        return int(next(line.split()[1] for line in lines if line.startswith(field + ':')))

peak = status('RssAnon')

def sample():
    global peak
    while True:
        peak = max(peak, status('RssAnon'))
        threading.Event().wait(0.002)

def report():
    sys.stderr.write(f'\\npeak-kb {max(peak, status("RssAnon"))} {status("VmHWM")}\\n')

threading.Thread(target=sample, daemon=True).start()
atexit.register(report)
mode, args = sys.argv[1], sys.argv[2:]
if mode == 'cli':
    sys.argv = ['eventlog', *args]
    from eventlog_cli.main import main  # the parser itself: `launch.main()` would fork and work in a child
    main()
else:
    sys.argv = ['program', *args[1:]]
    exec(compile(args[0], '<program>', 'exec'), {'__name__': '__main__'})
"""


def _measure(*args: str) -> tuple[float, float, float]:
    """Run `_PEAK` with `args`, output discarded; return seconds, peak heap (sampled anonymous
    RSS) and peak RSS (`VmHWM`, which also counts the store's pages LMDB maps), in MB."""
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, '-c', _PEAK, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    seconds = time.perf_counter() - began
    errors = result.stderr.decode(errors='replace')
    if result.returncode or 'peak-kb ' not in errors:
        print(f'    ! exit {result.returncode}: {errors.strip()[-300:]}')
        return seconds, float('nan'), float('nan')
    anon, total = errors.rsplit('peak-kb ', 1)[1].split()
    return seconds, int(anon) / 1024, int(total) / 1024


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
    where = ['--store', str(store)]
    commands = {
        'show CONV': ['cli', 'show', CONV, *where],
        'show --run --full': ['cli', 'show', '--run', RUN, '--full', *where],
        'replay': ['cli', 'replay', RUN, *where],
        'context': ['cli', 'context', CONV, *where],
        'show --json': ['cli', 'show', CONV, '--json', *where],
        'run_messages (API)': ['code', _LIBRARY, 'run_messages', str(store), RUN],
        'context (API)': ['code', _LIBRARY, 'context', str(store), CONV],
    }
    print(f'{label}:')
    for name, args in commands.items():
        seconds, heap, total = _measure(*args)
        print(f'  {name:<20} {seconds:8.2f} s   peak heap {heap:7.1f} MB   peak RSS {total:7.1f} MB', flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=200_000, help='messages in the long run')
    parser.add_argument('--sizes', default='16,50', help='sizes in MB of the single huge messages')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='bench-views-') as tmp:
        seconds, heap, total = _measure('code', 'import eventlog_cli.main')
        print(f'baseline (import the CLI): {seconds:.2f} s, peak heap {heap:.1f} MB, peak RSS {total:.1f} MB')
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
