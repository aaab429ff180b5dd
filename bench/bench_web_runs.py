"""The web viewer's runs page and id prefixes on a store of many runs.

Builds, in a temporary directory, a store of `--messages` messages (200,000 by default) in runs
of `--per-run` messages (4: 50,000 runs) over `--conversations` conversations, every 50th run
failed and every 500th never finished, run ids UUID-shaped (so that their starts are shared, as
pydantic-ai's are); starts `eventlog serve` on it as a real subprocess and times HTTP requests to
it: the runs page (first page, a deep page, each filter, each order), a conversation's runs, and
the redirect of an abbreviated run id. The runs page reads run records only (one per run), never
entries. Medians of `--reps` requests after one warm-up; the first (cold) request beside them.
Usage: `python bench/bench_web_runs.py [--messages N] [--per-run N] [--conversations N] [--reps N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

sys.path.insert(0, str(Path(__file__).parent))
from bench_web import _start  # pyright: ignore[reportPrivateUsage]

from eventlog import LmdbEventLog, NewEntry, message_entry, run_finished_entry, run_started_entry

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run_id(index: int) -> str:
    """A UUID-shaped run id; consecutive ones share their first group, as time-ordered UUIDs do."""
    return str(uuid.UUID(int=(0x01A2 << 112) | (index * 0x9E3779B97F4A7C15 % (1 << 80))))


async def _build(path: Path, messages: int, per_run: int, conversations: int) -> int:
    log = LmdbEventLog(path)
    runs = messages // per_run
    try:
        batch: list[NewEntry] = []
        for index in range(runs):
            cid = f'conversation-{index % conversations:05d}'
            rid = run_id(index)
            start = T0 + timedelta(seconds=index)
            agent = f'agent-{index % 7}'
            batch.append(_at(run_started_entry(conversation_id=cid, run_id=rid, agent_name=agent), start))
            for m in range(per_run):
                message = (
                    ModelRequest(parts=[UserPromptPart(content=f'question {index}.{m}')])
                    if m % 2 == 0
                    else ModelResponse(parts=[TextPart(content=f'answer {index}.{m}')])
                )
                batch.append(_at(message_entry(message, conversation_id=cid, run_id=rid), start))
            if index % 500 != 499:
                status = 'failed' if index % 50 == 49 else 'completed'
                end = start + timedelta(milliseconds=(index * 37) % 5000)
                batch.append(_at(run_finished_entry(conversation_id=cid, run_id=rid, status=status), end))
            if len(batch) >= 10_000:
                await log.append_many(batch)
                batch = []
        if batch:
            await log.append_many(batch)
    finally:
        log.close()
    return runs


async def _append_runs(path: Path, first: int, count: int, per_run: int) -> None:
    """`count` more completed runs, numbered from `first`, appended by another handle on the store."""
    log = LmdbEventLog(path)
    try:
        for index in range(first, first + count):
            rid, cid = run_id(index), f'conversation-{index % 1000:05d}'
            entries = [run_started_entry(conversation_id=cid, run_id=rid, agent_name='late')]
            entries += [
                message_entry(
                    ModelRequest(parts=[UserPromptPart(content=f'late {index}.{m}')]), conversation_id=cid, run_id=rid
                )
                for m in range(per_run)
            ]
            entries.append(run_finished_entry(conversation_id=cid, run_id=rid, status='completed'))
            await log.append_many(entries)
    finally:
        log.close()


def _at(entry: NewEntry, moment: datetime) -> NewEntry:
    from dataclasses import replace

    return replace(entry, timestamp=moment)


def _time(client: httpx.Client, url: str, reps: int, status: int = 200) -> tuple[float, float]:
    def once() -> float:
        began = time.perf_counter()
        response = client.get(url)
        took = (time.perf_counter() - began) * 1000
        assert response.status_code == status, (url, response.status_code, response.text[-300:])
        return took

    first = once()
    once()
    return first, statistics.median(once() for _ in range(reps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=200_000)
    parser.add_argument('--per-run', type=int, default=4)
    parser.add_argument('--conversations', type=int, default=1_000)
    parser.add_argument('--reps', type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / 'runs.lmdb'
        began = time.perf_counter()
        runs = asyncio.run(_build(store, args.messages, args.per_run, args.conversations))
        print(
            f'built {args.messages:,} messages in {runs:,} runs over {args.conversations:,} conversations '
            f'in {time.perf_counter() - began:.1f} s'
        )
        process, base = _start(store)
        try:
            with httpx.Client(timeout=600, base_url=base) as client:
                middle = run_id(runs // 2)
                rows = [
                    ('runs, first page (latest first)', '/runs', 200),
                    ('runs, page 500', '/runs?page=500', 200),
                    ('runs, oldest first', '/runs?sort=start', 200),
                    ('runs, longest first', '/runs?sort=-duration', 200),
                    ('runs, failed', '/runs?status=failed', 200),
                    ('runs, interrupted', '/runs?status=interrupted', 200),
                    ('runs, one agent', '/runs?agent=agent-3', 200),
                    ('runs, a day', '/runs?from=2026-01-01T06:00&to=2026-01-01T07:00', 200),
                    ('runs, one conversation', '/runs?c=conversation-00500', 200),
                    ('runs, one conversation, failed', '/runs?c=conversation-00049&status=failed', 200),
                    ('run page by its full id', f'/r/{middle}', 200),
                    ('abbreviated run id (redirect)', f'/r/{middle[:24]}', 303),
                    ('ambiguous conversation prefix (10 ids)', '/c/conversation-0050', 300),
                    ('conversations list', '/', 200),
                ]
                print(f'{"request":40} {"first ms":>9} {"median ms":>10}')
                for name, url, status in rows:
                    first, median = _time(client, url, args.reps, status)
                    print(f'{name:40} {first:9.1f} {median:10.1f}')
                # The viewer keeps the runs between requests and catches up from what was appended.
                catch_up: list[float] = []
                for rep in range(args.reps):
                    asyncio.run(_append_runs(store, runs + rep * 10, 10, args.per_run))
                    began = time.perf_counter()
                    assert client.get('/runs').status_code == 200
                    catch_up.append((time.perf_counter() - began) * 1000)
                print(
                    f'{"runs, first page after 10 runs appended":40} {catch_up[0]:9.1f} {statistics.median(catch_up):10.1f}'
                )
        finally:
            process.terminate()
            process.wait(timeout=60)


if __name__ == '__main__':
    main()
