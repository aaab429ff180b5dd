"""Issue 32's CPU budget for a plain exchange, set beside what the capability costs over a log that does nothing.

The goal of issue 32 is at most 0.25 ms of CPU per append with `sync=False`, that is 0.75 ms per
plain exchange (a request, a response, the run's end). This bench splits a run's CPU so that the
budget can be read against what no log can avoid. Agents run the same exchanges (one run per
exchange, history threaded), all of them within each exchange, in an order that rotates:

- `none`: no capability; every other figure is that agent's thread CPU time for the exchange
  minus this one's (a paired difference, so the machine's drift cancels), median over the runs;
- `hooks`: a capability with `EventLogPersistence`'s hooks that does nothing;
- `bare commits`: the same hooks, each making one LMDB commit of one small value where
  `EventLogPersistence` commits (`sync=False`): three per run;
- `encoded commits`: the same, each commit holding the message pydantic-ai just made final as
  pydantic-ai's JSON (`encode_message`; the run's end as a short constant): the least any log
  of pydantic-ai's messages does;
- `put-only log`: `EventLogPersistence` itself over a log whose `append_many` puts each payload
  at the end of a table in one transaction and does nothing else (no checks, no idempotency
  keys, no index, no records, no hash chain): what the capability costs with the cheapest log
  that still commits each step;
- `eventlog`: `EventLogPersistence` over `LmdbEventLog(sync=False)`.

Then `eventlog - put-only log` is the log's share and `put-only log - encoded commits` the
capability's own beyond encoding (planning what is new, the re-encoding checks, the entries of
the run's start and end, idempotency keys, digests, the bookkeeping).

A probe measures how cold this machine leaves code that has not run for a while: the time of one
`encode_message` of a recorded response run back to back, after sleeping 10 ms, and after 10 ms
of other Python work. Inside agent runs every piece of the write path runs in the second or
third situation (pydantic-ai's work, or the model call, comes between two appends), which is why
`bench_append_path.py`'s tight loop shows it several times cheaper.

Each repetition runs in a child process of its own; the summary gives each repetition and the
median of the repetitions, with the load average before and after.

    .venv/bin/python bench/bench_write_budget.py                   # 300 exchanges, 3 repetitions
    .venv/bin/python bench/bench_write_budget.py --exchanges 100 --reps 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lmdb
from _baseline import load_average
from bench_capability import SyncedCommitFloor, exchanges, make_agent
from pydantic_ai import ModelRequestNode, RunContext
from pydantic_ai.messages import ModelMessage

from capability.persistence import EventLogPersistence
from eventlog import Appended, LmdbEventLog, NewEntry, encode_message

BUDGET_PER_APPEND_MS = 0.25
"""Issue 32's goal: CPU per append with `sync=False`."""

APPENDS_PER_RUN = 3
"""A plain exchange's write transactions: the request (with the run's start), the response, the end."""

AGENTS = ('none', 'hooks', 'bare commits', 'encoded commits', 'put-only log', 'eventlog')


@dataclass
class EncodedCommits(SyncedCommitFloor):
    """`SyncedCommitFloor`'s hooks, each commit holding the message just made final, encoded."""

    def _put(self, payload: bytes) -> None:
        assert self.env is not None
        with self.env.begin(write=True) as txn:
            txn.put(b'%016d' % txn.stat()['entries'], payload, append=True)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        result = await handler()
        self._put(b'{"end":true}')
        return result

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        self._put(encode_message(ctx.messages[-1]))
        return request_context

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        if isinstance(node, ModelRequestNode):
            self._put(encode_message(ctx.messages[-1]))
        return result


class PutOnlyLog(LmdbEventLog):
    """An `LmdbEventLog` whose `append_many` only puts each payload at the end of a table of its
    own, in one transaction: none of the log's checks, keys, records or chain. A measuring device,
    not a log: what it stores cannot be read back as entries."""

    _next = 0

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        table = self._put_table()

        def put(txn: lmdb.Transaction) -> list[int]:
            seqs: list[int] = []
            for entry in entries:
                self._next += 1
                txn.put(b'%016d' % self._next, entry.payload, append=True, db=table)
                seqs.append(self._next)
            return seqs

        return Appended(self.run_in_txn(put, write=True), {})

    def _put_table(self) -> Any:
        table = self.__dict__.get('_table')
        if table is None:
            table = self.__dict__['_table'] = self.open_table(b'bench_put_only')
        return table


def cold_probe(message: ModelMessage, samples: int = 200) -> dict[str, float]:
    """Median microseconds of one `encode_message(message)`: back to back, after a 10 ms sleep,
    and after 10 ms of other Python work."""

    def spin() -> None:
        end = time.perf_counter() + 0.01
        total = 0
        while time.perf_counter() < end:
            total += 1

    def median_after(before: Callable[[], object]) -> float:
        times: list[float] = []
        for _ in range(samples):
            before()
            start = time.perf_counter_ns()
            encode_message(message)
            times.append((time.perf_counter_ns() - start) / 1e3)
        return statistics.median(times)

    return {
        'back to back': median_after(lambda: None),
        'after 10 ms asleep': median_after(lambda: time.sleep(0.01)),
        'after 10 ms of Python': median_after(spin),
    }


async def child(count: int) -> dict[str, Any]:
    """One repetition: each agent's CPU overhead per run over `none` (ms), and the cold probe."""
    data = exchanges(count, 1)
    replies = [reply for _, reply in data]
    with tempfile.TemporaryDirectory(prefix='bench-write-budget-') as tmp:
        workdir = Path(tmp)
        bare = lmdb.open(str(workdir / 'bare'), map_size=256 << 20, sync=False)
        encoded = lmdb.open(str(workdir / 'encoded'), map_size=256 << 20, sync=False)
        agents = {
            'none': make_agent(replies, []),
            'hooks': make_agent(replies, [SyncedCommitFloor()]),
            'bare commits': make_agent(replies, [SyncedCommitFloor(bare)]),
            'encoded commits': make_agent(replies, [EncodedCommits(encoded)]),
            'put-only log': make_agent(replies, [EventLogPersistence(PutOnlyLog(workdir / 'put-only', sync=False))]),
            'eventlog': make_agent(replies, [EventLogPersistence(LmdbEventLog(workdir / 'log', sync=False))]),
        }
        history: dict[str, list[ModelMessage] | None] = dict.fromkeys(AGENTS)
        cpu: dict[str, list[int]] = {name: [] for name in AGENTS}
        for index, (prompt, _) in enumerate(data):
            turn = index % len(AGENTS)
            for name in AGENTS[turn:] + AGENTS[:turn]:
                agent = agents[name]
                agent.__dict__['_bench_position']['i'] = index
                start = time.thread_time_ns()
                result = await agent.run(prompt, message_history=history[name])
                cpu[name].append(time.thread_time_ns() - start)
                history[name] = result.all_messages()
        skip = count // 4  # the first runs warm the process up
        overhead = {
            name: statistics.median(a - b for a, b in zip(cpu[name][skip:], cpu['none'][skip:], strict=True)) / 1e6
            for name in AGENTS[1:]
        }
        last = history['none']
        assert last is not None
        bare.close()
        encoded.close()
        return {'overhead': overhead, 'probe': cold_probe(last[-1])}


def summarize(reps: list[dict[str, Any]]) -> None:
    budget = BUDGET_PER_APPEND_MS * APPENDS_PER_RUN
    print(f'\nCPU overhead per plain exchange over no capability (sync=False), ms; budget {budget:.2f} per run')
    header = ''.join(f'  rep {i + 1:<3}' for i in range(len(reps)))
    print(f'{"":22}{header}    median  per append')
    rows: dict[str, float] = {}
    for name in AGENTS[1:]:
        values = [rep['overhead'][name] for rep in reps]
        rows[name] = statistics.median(values)
        cells = ''.join(f'{v:10.3f}' for v in values)
        print(f'{name:22}{cells}{rows[name]:10.3f}{rows[name] / APPENDS_PER_RUN:12.3f}')
    shares = {
        "the log's share (eventlog - put-only log)": rows['eventlog'] - rows['put-only log'],
        'encoding the two messages (encoded - bare commits)': rows['encoded commits'] - rows['bare commits'],
        "the capability's own beyond (put-only log - encoded)": rows['put-only log'] - rows['encoded commits'],
    }
    for label, value in shares.items():
        print(f'{label:54} {value:.3f} ms per run')
    print(' '.join(f'{name} / budget: {rows[name] / budget:.2f}x  ' for name in AGENTS[3:]))
    print('\nencode_message of one response, median us:')
    for situation in reps[0]['probe']:
        values = [rep['probe'][situation] for rep in reps]
        print(f'  {situation:24} {statistics.median(values):7.1f}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--exchanges', type=int, default=300, help='exchanges per repetition (default 300)')
    parser.add_argument('--reps', type=int, default=3, help='repetitions, each in a child process (default 3)')
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.exchanges))))
        return
    print(f'load average before: {load_average()}')
    reps: list[dict[str, Any]] = []
    for rep in range(args.reps):
        command = [sys.executable, __file__, '--child', '--exchanges', str(args.exchanges)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        reps.append(json.loads(out.strip().splitlines()[-1]))
        print(f'repetition {rep + 1} done, load average {load_average()}')
    summarize(reps)
    print(f'\nload average after: {load_average()}')


if __name__ == '__main__':
    main()
