"""Benchmark of `LmdbEventLog` against bare LMDB, pydantic-ai itself and the reference.

Run: `.venv/bin/python bench/bench_log.py [--quick]`

Measures, in one run:
1. durable single-append latency next to one bare synced LMDB commit;
2. batched append throughput (pre-serialized entries, and entries the log validates);
3. replay throughput next to pydantic-ai decoding the same messages;
4. bytes on disk per message next to the messages' JSON;
5. the same chat workload persisted by the reference (`StepPersistence` + `SqliteStepStore`)
   and by the log: through a real `Agent`, and directly through each store's API.

All stores live in temporary directories on the same filesystem as this repository.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lmdb
from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from eventlog import LmdbEventLog, NewEntry, encode_message, message_entry, run_started_entry

try:
    from _corpus import Exchange, make_conversation, make_exchanges
except ModuleNotFoundError:  # imported as `bench.bench_log` from the repository root
    from bench._corpus import Exchange, make_conversation, make_exchanges

T = TypeVar('T')
REPO = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    quick: bool
    single_appends: int
    """Durable single appends (and as many bare commits), alternating one by one."""
    batch_size: int
    batches: int
    validated_batches: int
    run_length: int
    """Messages per run in the batched store; the first run is the one replayed."""
    replay_repeats: int
    agent_exchanges: int
    snapshot_exchanges: int


FULL = Config(
    quick=False,
    single_appends=2000,
    batch_size=1000,
    batches=50,
    validated_batches=10,
    run_length=10_000,
    replay_repeats=7,
    agent_exchanges=150,
    snapshot_exchanges=200,
)
QUICK = Config(
    quick=True,
    single_appends=300,
    batch_size=1000,
    batches=10,
    validated_batches=3,
    run_length=10_000,
    replay_repeats=3,
    agent_exchanges=24,
    snapshot_exchanges=40,
)


# --- small helpers --------------------------------------------------------------------------------


def now_ns() -> int:
    return time.perf_counter_ns()


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def us(ns: float) -> str:
    return f'{ns / 1000:,.1f} us'


def ms(ns: float) -> str:
    return f'{ns / 1e6:,.2f} ms'


def rate(n: int, ns: float) -> str:
    return f'{n / (ns / 1e9):,.0f}/s'


def size(n: float) -> str:
    if n >= MiB:
        return f'{n / MiB:,.2f} MiB'
    if n >= 1024:
        return f'{n / 1024:,.1f} KiB'
    return f'{n:,.0f} B'


def ratio(a: float, b: float) -> str:
    return f'{a / b:.2f}x' if b else 'n/a'


def allocated(path: Path) -> int:
    """Bytes the files under `path` occupy on disk (allocated blocks)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob('*') if p.is_file())


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()) -> None:
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]
    line = '  '.join('-' * w for w in widths)
    print(f'\n== {title}')
    print('  '.join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))))
    print(line)
    for row in rows:
        print('  '.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    for note in notes:
        print(f'   {note}')


@dataclass
class Verdicts:
    lines: list[str] = field(default_factory=list[str])

    def target(self, name: str, met: bool, detail: str) -> None:
        self.lines.append(f'[{"met" if met else "NOT MET"}] {name}: {detail}')

    def info(self, name: str, detail: str) -> None:
        self.lines.append(f'[info] {name}: {detail}')


def corpus(n_messages: int, seed: int) -> list[ModelMessage]:
    """At least `n_messages` realistic messages (whole exchanges), cut to exactly `n_messages`."""
    exchanges = max(1, n_messages * 10 // 27 + 10)
    messages = make_conversation(exchanges, seed=seed)
    while len(messages) < n_messages:
        exchanges *= 2
        messages = make_conversation(exchanges, seed=seed)
    return messages[:n_messages]


# --- 1. durable single appends --------------------------------------------------------------------


@dataclass
class SingleResult:
    log_total: list[int] = field(default_factory=list[int])
    log_append: list[int] = field(default_factory=list[int])
    bare: list[int] = field(default_factory=list[int])
    bare_payload: list[int] = field(default_factory=list[int])
    messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    store: Path = Path()


async def single_pass(tmp: Path, messages: list[ModelMessage], n: int, *, sync: bool, warmup: int) -> SingleResult:
    """`n` single appends to a fresh log, alternating one by one with one-put commits to a bare env."""
    tag = 'sync' if sync else 'nosync'
    res = SingleResult(store=tmp / f'single-{tag}.lmdb')
    log = LmdbEventLog(res.store, sync=sync)
    raw_dir = tmp / f'bare-{tag}.lmdb'
    raw_dir.mkdir()
    env = lmdb.open(str(raw_dir), sync=sync, metasync=sync, map_size=256 * MiB)
    small = b'x' * 64
    try:
        await log.append(run_started_entry(conversation_id='conv-single', run_id='run-single'))

        async def one_append(message: ModelMessage, keep: bool) -> None:
            t0 = now_ns()
            entry = message_entry(message, conversation_id='conv-single', run_id='run-single')
            t1 = now_ns()
            await log.append(entry)
            t2 = now_ns()
            if keep:
                res.log_total.append(t2 - t0)
                res.log_append.append(t2 - t1)

        def one_commit(key: int, value: bytes, out: list[int] | None) -> None:
            t0 = now_ns()
            with env.begin(write=True) as txn:
                txn.put(key.to_bytes(8, 'big'), value)
            if out is not None:
                out.append(now_ns() - t0)

        for i in range(warmup):
            await one_append(messages[i], keep=False)
            one_commit(i, small, None)
        key = warmup
        gc.collect()
        for i in range(n):
            key += 1
            one_commit(key, small, res.bare)
            await one_append(messages[warmup + i], keep=True)
            if i % 4 == 0:
                key += 1
                one_commit(key, encode_message(messages[warmup + i]), res.bare_payload)
    finally:
        log.close()
        env.close()
    res.messages = messages[: warmup + n]
    return res


async def bench_single(cfg: Config, tmp: Path) -> tuple[SingleResult, SingleResult]:
    warmup = 50
    messages = corpus(cfg.single_appends + warmup, seed=11)
    synced = await single_pass(tmp, messages, cfg.single_appends, sync=True, warmup=warmup)
    unsynced = await single_pass(tmp, messages, cfg.single_appends // 2, sync=False, warmup=warmup)
    return synced, unsynced


def report_single(res: SingleResult, unsynced: SingleResult, verdicts: Verdicts) -> None:
    bare_med, bare_p99 = statistics.median(res.bare), pct(res.bare, 99)
    rows: list[list[str]] = []
    for label, values in (
        ('bare LMDB commit, one 64 B put (sync, metasync)', res.bare),
        ('bare LMDB commit, one put of a message payload', res.bare_payload),
        ('log.append(message_entry(msg)) incl. encoding', res.log_total),
        ('log.append(entry) only (entry pre-built)', res.log_append),
    ):
        med, p99 = statistics.median(values), pct(values, 99)
        rows.append([label, f'{len(values):,}', us(med), us(p99), ratio(med, bare_med), ratio(p99, bare_p99)])
    nosync_bare = statistics.median(unsynced.bare)
    for label, values in (
        ('  without fsync: bare commit, 64 B put (sync=False)', unsynced.bare),
        ('  without fsync: log.append incl. encoding (sync=False)', unsynced.log_total),
        ('  without fsync: log.append only (sync=False)', unsynced.log_append),
    ):
        med, p99 = statistics.median(values), pct(values, 99)
        rows.append([label, f'{len(values):,}', us(med), us(p99), ratio(med, nosync_bare), ''])
    print_table(
        '1. durable single append (LmdbEventLog sync=True) vs one bare synced LMDB commit',
        ['operation', 'n', 'median', 'p99', 'median/bare', 'p99/bare'],
        rows,
        [
            'bare commits and appends alternate one by one; ratios are against the 64 B bare commit',
            'the sync=False rows (ratios against the unsynced bare commit) show the CPU part of an append',
        ],
    )
    med, p99 = statistics.median(res.log_total), pct(res.log_total, 99)
    r_med, r_p99 = med / bare_med, p99 / bare_p99
    verdicts.target(
        'durable append <= 2x bare commit',
        r_med <= 2 and r_p99 <= 2,
        f'median {us(med)} vs {us(bare_med)} ({r_med:.2f}x), p99 {us(p99)} vs {us(bare_p99)} ({r_p99:.2f}x)',
    )


# --- 2. batched appends and 3. replay -------------------------------------------------------------


@dataclass
class BatchResult:
    prevalidated_ns: int
    prevalidated_cpu_ns: int
    prevalidated_n: int
    encode_ns: int
    encode_cpu_ns: int
    validated_ns: int
    validated_cpu_ns: int
    validated_n: int
    batch_times: list[int]
    replay_run: str
    replay_messages: list[ModelMessage]
    store: Path
    stored_messages: list[ModelMessage]


async def bench_batches(cfg: Config, tmp: Path) -> tuple[BatchResult, LmdbEventLog]:
    n = cfg.batch_size * cfg.batches
    messages = corpus(max(n, cfg.run_length), seed=22)
    store = tmp / 'batched.lmdb'
    log = LmdbEventLog(store, map_size=2048 * MiB)
    conv = 'conv-batch'
    batch_times: list[int] = []
    cpu_ns = 0
    encode_ns = 0
    encode_cpu_ns = 0
    written = 0
    run_index = -1
    run_id = ''
    gc.collect()
    while written < n:
        if written % cfg.run_length == 0:
            run_index += 1
            run_id = f'run-batch-{run_index}'
            await log.append(run_started_entry(conversation_id=conv, run_id=run_id))
        size_ = min(cfg.batch_size, n - written, cfg.run_length - written % cfg.run_length)
        chunk = messages[written : written + size_]
        t0, c0 = now_ns(), time.process_time_ns()
        entries = [message_entry(m, conversation_id=conv, run_id=run_id) for m in chunk]
        t1, c1 = now_ns(), time.process_time_ns()
        encode_cpu_ns += c1 - c0
        await log.append_many(entries)
        cpu_ns += time.process_time_ns() - c1
        t2 = now_ns()
        encode_ns += t1 - t0
        batch_times.append(t2 - t1)
        written += size_
    stored = messages[:n]

    # The same, with plain NewEntry objects the log must validate itself.
    vrun = 'run-validated'
    await log.append(run_started_entry(conversation_id=conv, run_id=vrun))
    payloads = [encode_message(m) for m in messages[: cfg.batch_size * cfg.validated_batches]]
    validated_ns = 0
    validated_cpu_ns = 0
    for b in range(cfg.validated_batches):
        entries = [
            NewEntry(conversation_id=conv, kind='message', run_id=vrun, payload=p)
            for p in payloads[b * cfg.batch_size : (b + 1) * cfg.batch_size]
        ]
        t0, c0 = now_ns(), time.process_time_ns()
        await log.append_many(entries)
        validated_ns += now_ns() - t0
        validated_cpu_ns += time.process_time_ns() - c0
    stored += messages[: cfg.batch_size * cfg.validated_batches]
    res = BatchResult(
        prevalidated_ns=sum(batch_times),
        prevalidated_cpu_ns=cpu_ns,
        prevalidated_n=n,
        encode_ns=encode_ns,
        encode_cpu_ns=encode_cpu_ns,
        validated_ns=validated_ns,
        validated_cpu_ns=validated_cpu_ns,
        validated_n=len(payloads),
        batch_times=batch_times,
        replay_run='run-batch-0',
        replay_messages=messages[: min(cfg.run_length, n)],
        store=store,
        stored_messages=stored,
    )
    return res, log


def report_batches(cfg: Config, res: BatchResult, verdicts: Verdicts) -> None:
    pre = res.prevalidated_n / (res.prevalidated_ns / 1e9)
    rows = [
        [
            f'append_many, {cfg.batch_size:,} message_entry() entries (prevalidated)',
            f'{res.prevalidated_n:,}',
            ms(statistics.median(res.batch_times)),
            rate(res.prevalidated_n, res.prevalidated_ns),
            f'{res.prevalidated_cpu_ns / res.prevalidated_n / 1000:.2f} us',
        ],
        [
            '  the same, counting message_entry() encoding too',
            f'{res.prevalidated_n:,}',
            ms((res.prevalidated_ns + res.encode_ns) / len(res.batch_times)),
            rate(res.prevalidated_n, res.prevalidated_ns + res.encode_ns),
            f'{(res.prevalidated_cpu_ns + res.encode_cpu_ns) / res.prevalidated_n / 1000:.2f} us',
        ],
        [
            f'append_many, {cfg.batch_size:,} NewEntry(payload=bytes) (log validates)',
            f'{res.validated_n:,}',
            ms(res.validated_ns / cfg.validated_batches),
            rate(res.validated_n, res.validated_ns),
            f'{res.validated_cpu_ns / res.validated_n / 1000:.2f} us',
        ],
    ]
    print_table(
        '2. batched append throughput (sync=True, one commit per batch)',
        ['workload', 'messages', 'per batch', 'messages/s', 'CPU/msg'],
        rows,
        [
            'CPU/msg = process CPU time per message (the rest of the wall time is waiting, mostly on fsync)',
            'map_size preset to 2 GiB so no map growth happens inside the timed batches',
            'encoding (pydantic-ai dump_json per message) is outside the first figure, as the target asks',
        ],
    )
    verdicts.target(
        'batched append >= 100,000 messages/s',
        pre >= 100_000,
        f'{pre:,.0f}/s prevalidated (CPU {res.prevalidated_cpu_ns / res.prevalidated_n / 1000:.1f} us/msg); '
        f'{res.validated_n / (res.validated_ns / 1e9):,.0f}/s when the log validates; '
        f'{res.prevalidated_n / ((res.prevalidated_ns + res.encode_ns) / 1e9):,.0f}/s counting encoding',
    )


@dataclass
class Timing:
    walls: list[int] = field(default_factory=list[int])
    cpus: list[int] = field(default_factory=list[int])
    out: Any = None

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    @property
    def best(self) -> float:
        return min(self.walls)

    @property
    def cpu(self) -> float:
        """Median process CPU time."""
        return statistics.median(self.cpus)


async def timed_round_robin(fns: Sequence[Callable[[], Awaitable[Any]]], repeats: int) -> list[Timing]:
    """Time each function `repeats` times, taking turns, so load changes hit them all alike."""
    timings = [Timing() for _ in fns]
    for _ in range(repeats):
        for fn, timing in zip(fns, timings, strict=True):
            gc.collect()
            t0, c0 = now_ns(), time.process_time_ns()
            timing.out = await fn()
            timing.walls.append(now_ns() - t0)
            timing.cpus.append(time.process_time_ns() - c0)
    return timings


async def bench_replay(cfg: Config, res: BatchResult, log: LmdbEventLog, verdicts: Verdicts) -> None:
    n = len(res.replay_messages)
    payloads = [encode_message(m) for m in res.replay_messages]
    whole = ModelMessagesTypeAdapter.dump_json(res.replay_messages)
    one = TypeAdapter(ModelMessage)

    async def replay() -> list[ModelMessage]:
        return await log.run_messages(res.replay_run)

    async def replay_raw() -> list[bytes]:
        return await log.run_message_payloads(res.replay_run)

    async def decode_whole() -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_json(whole)

    async def decode_each() -> list[ModelMessage]:
        return [one.validate_json(p) for p in payloads]

    await replay()  # warm the page cache and the code paths
    r, raw, w, e = await timed_round_robin([replay, replay_raw, decode_whole, decode_each], cfg.replay_repeats)
    exact = ModelMessagesTypeAdapter.dump_json(r.out) == whole
    base, base_name = (w, 'validate_json of the whole list') if w.median <= e.median else (e, 'one by one')
    r_med, base_med = r.median, base.median
    rows = [
        ['log.run_messages(run_id)', ms(r.median), rate(n, r.median), ms(r.cpu), f'{base_med / r_med:.0%}'],
        ['  of which reading payloads (run_message_payloads)', ms(raw.median), rate(n, raw.median), ms(raw.cpu), ''],
        [
            'pydantic-ai ModelMessagesTypeAdapter.validate_json(whole list)',
            ms(w.median),
            rate(n, w.median),
            ms(w.cpu),
            '',
        ],
        [
            'pydantic-ai TypeAdapter(ModelMessage).validate_json, one by one',
            ms(e.median),
            rate(n, e.median),
            ms(e.cpu),
            '',
        ],
    ]
    print_table(
        f'3. replay of one run of {n:,} messages (median of {cfg.replay_repeats}, taking turns)',
        ['operation', 'time', 'messages/s', 'CPU', 'vs baseline'],
        rows,
        [
            f'baseline = the faster pydantic-ai figure: {base_name}',
            f'replay equals the original messages byte for byte: {"yes" if exact else "NO"}',
            f'best replay {ms(r.best)} ({rate(n, r.best)}); best baseline {ms(base.best)} ({rate(n, base.best)})',
        ],
    )
    verdicts.target(
        'replay >= 70% of pydantic-ai decode rate',
        base_med / r_med >= 0.7,
        f'{n / (r_med / 1e9):,.0f}/s vs {n / (base_med / 1e9):,.0f}/s ({base_name}) = {base_med / r_med:.0%} '
        f'(by CPU time: {base.cpu / r.cpu:.0%})' + ('' if exact else '; replay NOT byte-exact'),
    )


# --- 4. bytes on disk -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiskUse:
    file_bytes: int
    used_bytes: int
    high_water_bytes: int


def lmdb_usage(log: LmdbEventLog) -> DiskUse:
    env = log.env
    info = env.info()
    psize: int = env.stat()['psize']
    used = 0
    with env.begin() as txn:
        main = txn.stat()
        used += (main['branch_pages'] + main['leaf_pages'] + main['overflow_pages']) * psize
        names = [bytes(k) for k, _ in txn.cursor()]
        for name in names:
            st = txn.stat(env.open_db(name, txn=txn, create=False))
            used += (st['branch_pages'] + st['leaf_pages'] + st['overflow_pages']) * psize
    return DiskUse(log.disk_size(), used, (info['last_pgno'] + 1) * psize)


def report_disk(stores: Sequence[tuple[str, Path, list[ModelMessage]]], verdicts: Verdicts) -> None:
    rows: list[list[str]] = []
    headline: tuple[float, float, float] | None = None
    for label, path, messages in stores:
        log = LmdbEventLog(path)
        try:
            usage = lmdb_usage(log)
        finally:
            log.close()
        n = len(messages)
        json_per = sum(len(encode_message(m)) for m in messages) / n
        file_per, used_per = usage.file_bytes / n, usage.used_bytes / n
        rows.append(
            [
                label,
                f'{n:,}',
                size(json_per),
                size(file_per),
                ratio(file_per, json_per),
                size(used_per),
                ratio(used_per, json_per),
                size(usage.high_water_bytes / n),
            ]
        )
        if headline is None:
            headline = (file_per, used_per, json_per)
    print_table(
        '4. bytes on disk per message vs the message JSON',
        ['store', 'messages', 'JSON/msg', 'file/msg', 'file/JSON', 'used/msg', 'used/JSON', 'high-water/msg'],
        rows,
        [
            'file = log.disk_size() (allocated blocks of data.mdb); used = B-tree pages of all tables x page size;',
            'high-water = (last_pgno + 1) x page size (includes free pages kept for reuse)',
        ],
    )
    assert headline is not None
    file_per, used_per, json_per = headline
    verdicts.target(
        'disk <= 3x message JSON',
        file_per / json_per <= 3,
        f'{stores[0][0]}: file {file_per:,.0f} B/msg, used pages {used_per:,.0f} B/msg, JSON {json_per:,.0f} B/msg '
        f'({file_per / json_per:.2f}x file, {used_per / json_per:.2f}x used)',
    )


# --- 5. the reference -----------------------------------------------------------------------------


def find_capability(log: LmdbEventLog) -> tuple[AbstractCapability[None] | None, str]:
    """The lead's `EventLogPersistence` over `log` if it exists and builds, and where it came from."""
    import importlib

    problems: list[str] = []
    for module_name in ('capability', 'capability.persistence'):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            problems.append(f'{module_name}: {exc!r}')
            continue
        cls = getattr(module, 'EventLogPersistence', None)
        if cls is None:
            problems.append(f'{module_name} has no EventLogPersistence')
            continue
        try:
            return cls(log), f'{module_name}.EventLogPersistence'
        except Exception as exc:
            problems.append(f'{module_name}.EventLogPersistence(log): {exc!r}')
    return None, '; '.join(problems)


class ScriptedModel:
    """A `FunctionModel` function replaying a corpus script: tool calls first, then the reply."""

    def __init__(self, exchanges: list[Exchange]) -> None:
        self.exchanges = exchanges
        self.current = 0
        self.results = {u.tool_call_id: u.result for ex in exchanges for u in ex.tool_uses}

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        ex = self.exchanges[self.current]
        last = messages[-1]
        answered = isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
        if ex.tool_uses and not answered:
            parts: list[TextPart | ToolCallPart] = [TextPart(ex.preface)] if ex.preface else []
            parts += [ToolCallPart(u.tool_name, dict(u.args), tool_call_id=u.tool_call_id) for u in ex.tool_uses]
            return ModelResponse(parts=list(parts))
        return ModelResponse(parts=[TextPart(ex.reply)])

    def tool_result(self, ctx: RunContext[None]) -> str:
        return self.results.get(ctx.tool_call_id or '', '')


def make_agent(script: ScriptedModel, capabilities: list[AbstractCapability[None]]) -> Agent[None, str]:
    agent = Agent(FunctionModel(script), deps_type=type(None), output_type=str, capabilities=capabilities)

    @agent.tool
    async def read_file(ctx: RunContext[None], path: str) -> str:
        return script.tool_result(ctx)

    @agent.tool
    async def search_code(ctx: RunContext[None], pattern: str, directory: str) -> str:
        return script.tool_result(ctx)

    @agent.tool
    async def run_command(ctx: RunContext[None], command: str) -> str:
        return script.tool_result(ctx)

    @agent.tool
    async def lookup_calendar(ctx: RunContext[None], date: str) -> str:
        return script.tool_result(ctx)

    return agent


def checkpoint_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')
    finally:
        conn.close()


class CountingLog(LmdbEventLog):
    """An `LmdbEventLog` that counts its write transactions (each one is a synced commit)."""

    commits = 0

    def run_in_txn(self, fn: Callable[[lmdb.Transaction], T], *, write: bool) -> T:
        if write:
            self.commits += 1
        return super().run_in_txn(fn, write=write)


@dataclass
class AgentConfig:
    label: str
    agent: Agent[None, str]
    manual_log: LmdbEventLog | None = None
    """Set for the mode that appends each run's new messages itself after the run."""
    history: list[ModelMessage] = field(default_factory=list[ModelMessage])
    total_ns: int = 0
    last_run: str = ''
    tip: int | None = None
    error: str | None = None

    async def exchange(self, prompt: str, conversation_id: str) -> None:
        result = await self.agent.run(prompt, message_history=self.history or None, conversation_id=conversation_id)
        log = self.manual_log
        if log is not None:
            run_id = result.run_id
            self.tip = await log.append(
                run_started_entry(conversation_id=conversation_id, run_id=run_id, parent=self.tip)
            )
            for message in result.new_messages():
                self.tip = await log.append(message_entry(message, conversation_id=conversation_id, run_id=run_id))
        self.last_run = result.run_id
        self.history = result.all_messages()


async def exact_replay(log: LmdbEventLog, config: AgentConfig) -> str:
    try:
        replayed = await log.run_messages(config.last_run)
    except Exception as exc:
        return f'could not check ({exc!r})'
    same = ModelMessagesTypeAdapter.dump_json(replayed) == ModelMessagesTypeAdapter.dump_json(config.history)
    return 'yes' if same else 'NO'


async def bench_agent(cfg: Config, tmp: Path, verdicts: Verdicts) -> None:
    from pydantic_ai_harness.step_persistence import SqliteStepStore, StepPersistence

    exchanges = make_exchanges(cfg.agent_exchanges, seed=33)
    script = ScriptedModel(exchanges)
    ref_dir = tmp / 'agent-ref'
    ref_dir.mkdir()
    ref_db = ref_dir / 'steps.db'
    manual_path = tmp / 'agent-manual.lmdb'
    cap_path = tmp / 'agent-capability.lmdb'
    manual_log = CountingLog(manual_path)
    cap_log = CountingLog(cap_path)
    cap, how = find_capability(cap_log)
    plain = AgentConfig('Agent + FunctionModel, no persistence', make_agent(script, []))
    ref = AgentConfig(
        'reference: StepPersistence(SqliteStepStore)',
        make_agent(script, [StepPersistence(store=SqliteStepStore(database=ref_db))]),
    )
    manual = AgentConfig('ours: log.append per message after each run', make_agent(script, []), manual_log=manual_log)
    configs = [plain, ref, manual]
    ours_cap: AgentConfig | None = None
    if cap is not None:
        ours_cap = AgentConfig(f'ours: {how}', make_agent(script, [cap]))
        configs.append(ours_cap)
    conv = 'conv-agent'
    steps = 0
    notes: list[str] = []
    try:
        for k, ex in enumerate(exchanges):
            script.current = k
            steps += 2 if ex.tool_uses else 1
            active = [c for c in configs if c.error is None]
            for config in active[k % len(active) :] + active[: k % len(active)]:
                t0 = now_ns()
                try:
                    await config.exchange(ex.prompt, conv)
                except Exception as exc:
                    if config is not ours_cap:
                        raise
                    config.error = f'failed at exchange {k}: {exc!r}'
                config.total_ns += now_ns() - t0
        notes.append(
            f'replay of the last run equals its all_messages(): manual {await exact_replay(manual_log, manual)}'
        )
        if ours_cap is not None and ours_cap.error is None:
            notes[-1] += f', capability {await exact_replay(cap_log, ours_cap)}'
        manual_bytes, cap_bytes = allocated(manual_path), allocated(cap_path)
        counts = f'entries / commits per model step: manual {await manual_log.last_seq() / steps:.2f} / ' + (
            f'{manual_log.commits / steps:.2f}'
        )
        if ours_cap is not None:
            counts += f', capability {await cap_log.last_seq() / steps:.2f} / {cap_log.commits / steps:.2f}'
        notes.append(counts)
    finally:
        manual_log.close()
        cap_log.close()
    checkpoint_sqlite(ref_db)
    ref_bytes = allocated(ref_dir)
    n = len(exchanges)
    msgs = len(plain.history)

    def added(config: AgentConfig) -> float:
        return (config.total_ns - plain.total_ns) / steps

    rows = [[plain.label, ms(plain.total_ns / n), '', '', '']]
    for config, disk in ((ref, ref_bytes), (manual, manual_bytes), (ours_cap, cap_bytes)):
        if config is None:
            continue
        if config.error is not None:
            rows.append([config.label, 'FAILED', '', '', ''])
            notes.append(f'{config.label} {config.error}')
            continue
        rows.append([config.label, ms(config.total_ns / n), ms(added(config)), size(disk), size(disk / msgs)])
    best_ours = manual if ours_cap is None or ours_cap.error is not None else ours_cap
    best_bytes = manual_bytes if best_ours is manual else cap_bytes
    rows.append(
        [
            f'reference / {"capability" if best_ours is ours_cap else "manual append"}',
            ratio(ref.total_ns, best_ours.total_ns),
            ratio(added(ref), added(best_ours)) if added(best_ours) > 0 else 'n/a',
            ratio(ref_bytes, best_bytes),
            '',
        ]
    )
    if cap is None:
        notes.append(f'no capability run: {how}')
    print_table(
        f'5a. a real Agent through {n} exchanges ({steps} model steps, {msgs:,} messages), history threaded',
        ['persistence', 'per exchange', 'added per step', 'on disk', 'disk/msg'],
        rows,
        [
            'added per step = (total - no-persistence total) / model steps; configurations interleaved per exchange',
            'on disk = allocated blocks of every file in the store (SQLite after a TRUNCATE checkpoint)',
            *notes,
        ],
    )
    verdicts.info(
        'agent workload vs reference',
        f'added per step {ms(added(ref))} (reference) vs {ms(added(best_ours))} ({best_ours.label}); '
        f'disk {size(ref_bytes)} vs {size(best_bytes)}',
    )


async def bench_snapshots(cfg: Config, tmp: Path, verdicts: Verdicts) -> None:
    from pydantic_ai_harness.step_persistence import ContinuableSnapshot, RunRecord, SqliteStepStore

    messages = make_conversation(cfg.snapshot_exchanges, seed=44)
    ends = [i + 1 for i, m in enumerate(messages) if isinstance(m, ModelResponse)]
    ref_dir = tmp / 'snap-ref'
    ref_dir.mkdir()
    store = SqliteStepStore(database=ref_dir / 'steps.db')
    one_path = tmp / 'snap-ours-each.lmdb'
    many_path = tmp / 'snap-ours-step.lmdb'
    each = LmdbEventLog(one_path)
    many = LmdbEventLog(many_path)
    conv, run_id = 'conv-snap', 'run-snap'
    ref_t: list[int] = []
    each_t: list[int] = []
    many_t: list[int] = []
    try:
        await store.register_run(RunRecord(run_id=run_id, conversation_id=conv))
        await each.append(run_started_entry(conversation_id=conv, run_id=run_id))
        await many.append(run_started_entry(conversation_id=conv, run_id=run_id))
        start = 0
        for step, end in enumerate(ends):
            new = messages[start:end]
            t0 = now_ns()
            await store.save_snapshot(
                ContinuableSnapshot(run_id=run_id, step_index=step, messages=messages[:end], conversation_id=conv)
            )
            t1 = now_ns()
            for m in new:
                await each.append(message_entry(m, conversation_id=conv, run_id=run_id))
            t2 = now_ns()
            await many.append_many([message_entry(m, conversation_id=conv, run_id=run_id) for m in new])
            t3 = now_ns()
            ref_t.append(t1 - t0)
            each_t.append(t2 - t1)
            many_t.append(t3 - t2)
            start = end
        each_bytes, many_bytes = allocated(one_path), allocated(many_path)
    finally:
        each.close()
        many.close()
    checkpoint_sqlite(ref_dir / 'steps.db')
    ref_bytes = allocated(ref_dir)
    n_steps = len(ends)
    tail = max(1, n_steps // 10)
    n_msgs = len(messages)
    json_bytes = sum(len(encode_message(m)) for m in messages)

    def row(label: str, t: list[int], b: int) -> list[str]:
        return [
            label,
            ms(statistics.mean(t)),
            ms(statistics.mean(t[-tail:])),
            ms(pct(t, 99)),
            size(b),
            ratio(b, json_bytes),
        ]

    rows = [
        row('reference: SqliteStepStore.save_snapshot(whole history)', ref_t, ref_bytes),
        row('ours: log.append(message_entry(m)) per new message', each_t, each_bytes),
        row('ours: log.append_many(step messages), one commit per step', many_t, many_bytes),
    ]
    rows.append(
        [
            'reference / ours per message',
            ratio(statistics.mean(ref_t), statistics.mean(each_t)),
            ratio(statistics.mean(ref_t[-tail:]), statistics.mean(each_t[-tail:])),
            ratio(pct(ref_t, 99), pct(each_t, 99)),
            ratio(ref_bytes, each_bytes),
            '',
        ]
    )
    print_table(
        f'5b. store APIs directly: {n_steps} steps, {n_msgs:,} messages ({size(json_bytes)} of JSON), one run',
        ['store', 'per step', f'last {tail} steps', 'p99 step', 'on disk', 'disk/JSON'],
        rows,
        ['a step ends at each ModelResponse; the reference saves the whole history so far, ours the new messages'],
    )
    verdicts.info(
        'direct store API vs reference',
        f'{ms(statistics.mean(ref_t))}/step (reference snapshot) vs {ms(statistics.mean(each_t))}/step (ours, '
        f'per message) = {ratio(statistics.mean(ref_t), statistics.mean(each_t))}; last {tail} steps '
        f'{ratio(statistics.mean(ref_t[-tail:]), statistics.mean(each_t[-tail:]))}; disk {size(ref_bytes)} vs '
        f'{size(each_bytes)}',
    )


# --- main -----------------------------------------------------------------------------------------


def pick_tempdir() -> str | None:
    """The default temp dir if it shares the repository's filesystem, else one next to the repository."""
    default = Path(tempfile.gettempdir())
    if default.stat().st_dev == REPO.stat().st_dev and not str(default).startswith('/dev/shm'):
        return None
    return str(REPO.parent)


async def run_all(cfg: Config) -> None:
    verdicts = Verdicts()
    load = os.getloadavg()
    started = now_ns()
    print(f'bench_log ({"quick" if cfg.quick else "full"}) on {os.cpu_count()} CPUs, python {sys.version.split()[0]}')
    print(f'load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}')
    with tempfile.TemporaryDirectory(prefix='bench_log_', dir=pick_tempdir()) as name:
        tmp = Path(name)
        print(f'stores under {tmp} (same filesystem as {REPO}: {tmp.stat().st_dev == REPO.stat().st_dev})')

        mark = now_ns()

        def took() -> None:
            nonlocal mark
            print(f'   (section took {(now_ns() - mark) / 1e9:.1f} s)')
            mark = now_ns()

        single, unsynced = await bench_single(cfg, tmp)
        report_single(single, unsynced, verdicts)
        took()

        batches, log = await bench_batches(cfg, tmp)
        try:
            report_batches(cfg, batches, verdicts)
            took()
            await bench_replay(cfg, batches, log, verdicts)
            took()
        finally:
            log.close()

        report_disk(
            [
                ('one durable append per message (section 1)', single.store, single.messages),
                ('append_many batches (section 2)', batches.store, batches.stored_messages),
            ],
            verdicts,
        )
        took()
        await bench_agent(cfg, tmp, verdicts)
        took()
        await bench_snapshots(cfg, tmp, verdicts)
        took()

    load = os.getloadavg()
    print(f'\nload average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; total {(now_ns() - started) / 1e9:.1f} s')
    print('\n== verdicts')
    for line in verdicts.lines:
        print(line)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('--quick', action='store_true', help='fewer iterations (about 30 s)')
    args = parser.parse_args(argv)
    asyncio.run(run_all(QUICK if args.quick else FULL))


if __name__ == '__main__':
    main()
