"""The web viewer on a big conversation: time to the first page of its transcript, and search latency.

Builds, in a temporary directory, a store with one conversation of `--messages` messages
(200,000 by default, short requests and responses, one run), starts `eventlog serve` on it as a
real subprocess and times HTTP requests to it from this process (httpx, one connection kept
open): the transcript's first page (the issue's target: under 200 ms), a page deep in it, the
context view framed beside it (which plans the fold over the whole branch, so the transcript
does not wait for it), an entry's stable URL, the run's timeline, and searches through the
persistent index. The first
search also brings the index up to date with the whole store; it is reported on its own.

Each figure is the median of `--reps` requests (3 for the context view) after one untimed
warm-up request (the first, cold request is printed too). It prints this project's figures only (the reference has no web
viewer). Usage: `python bench/bench_web.py [--messages N] [--reps N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry

CONV = 'bench'
RUN = 'bench-run'
TARGET_MS = 200.0


async def _build(path: Path, count: int) -> None:
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


def _start(store: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, '-m', 'eventlog_cli', 'serve', '--store', str(store), '--port', '0'],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split(' at ', 1)[1].split(' ', 1)[0].rstrip('/')


def _time(client: httpx.Client, url: str, reps: int, *, expect: str) -> tuple[float, float]:
    """The first request's time and the median of `reps` more after a warm-up, in ms."""

    def once() -> float:
        began = time.perf_counter()
        response = client.get(url)
        took = (time.perf_counter() - began) * 1000
        assert response.status_code == 200, (url, response.status_code)
        assert expect in response.text, url
        return took

    first = once()
    once()
    return first, statistics.median(once() for _ in range(reps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=200_000)
    parser.add_argument('--reps', type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / 'big.lmdb'
        began = time.perf_counter()
        asyncio.run(_build(store, args.messages))
        print(f'built a conversation of {args.messages:,} messages in {time.perf_counter() - began:.1f} s')
        process, base = _start(store)
        try:
            with httpx.Client(timeout=600) as client:
                middle = args.messages // 2
                began = time.perf_counter()
                client.get(f'{base}/search', params={'q': 'file_1.txt'})
                print(f'first search (brings the index up to date with the store): {time.perf_counter() - began:.1f} s')
                rows = [
                    ('transcript, first page', f'{base}/c/{CONV}', '#2<'),
                    ('transcript, page at the middle', f'{base}/c/{CONV}?at={middle}', f'#{middle}<'),
                    ('entry by its stable URL', f'{base}/e/{middle}', f'Entry #{middle}'),
                    ('context view (its own frame), first page', f'{base}/context/{CONV}', '#2<'),
                    ('run timeline, first page', f'{base}/r/{RUN}', 'run_started'),
                    ('conversations list', f'{base}/', CONV),
                    ('search, a rare term (1 hit)', f'{base}/search?q=file_{middle}', '<mark>'),
                    ('search, a rare and a common term', f'{base}/search?q=file_{middle}.txt', '<mark>'),
                    ('search, two common terms (first 20 hits)', f'{base}/search?q=question+where', '<mark>'),
                    ('search in the conversation', f'{base}/search?q=srv+data+{middle}&c={CONV}', '<mark>'),
                ]
                print(f'{"request":42} {"first ms":>9} {"median ms":>10}')
                for name, url, expect in rows:
                    # The context view walks the whole branch: a few repetitions say enough.
                    reps = min(args.reps, 3) if '/context' in url else args.reps
                    first, median = _time(client, url, reps, expect=expect)
                    note = ''
                    if name == 'transcript, first page':
                        note = f'  (target < {TARGET_MS:.0f} ms: {"met" if median < TARGET_MS else "MISSED"})'
                    print(f'{name:42} {first:9.1f} {median:10.1f}{note}')
        finally:
            process.terminate()
            process.wait(timeout=60)


if __name__ == '__main__':
    main()
