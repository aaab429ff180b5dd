"""Benchmark of conversation search: the persistent `LmdbIndex` against the reference, our
in-memory path and SQLite FTS5, on the same stored messages.

Run: `.venv/bin/python bench/bench_search.py [--quick] [--no-1m] [--index-budget SECONDS]`
Profile one configuration: `... --profile search --profile-size 10000 --profile-context 5`
or `... --profile index --profile-size 10000` (cProfile, top 25 by own time).

Measures, in one run:
1. conversation-scoped search latency (median and p95 over about 50 varied queries, top 10,
   `context_lines` 0 and 5) in one conversation of 1,000, 10,000 and 100,000 messages, stored
   as threaded runs of about 10 messages (each run continues the previous one), with `LmdbIndex`;
2. the same 10,000-message conversation inside a store of 1,000,000 messages over 1,000
   conversations, and `scope='all'` over that store;
3. the reference's `ConversationSearchToolset` and our in-memory path (`HistorySourceBackend`)
   over `ReplayHistorySource` of the same log, where a query takes under a minute;
4. SQLite FTS5 `bm25()` over the same indexed text with the same conversation filter;
5. indexing cost per appended message (`catch_up` after a bulk load, and after 1,000 more
   messages), and the cost of a search that first has to index one new entry;
6. recall@5 on a conversation with 50 planted facts asked for in other word forms, under the
   `default` and `english` analyzers (FTS5 `unicode61` and `porter` alongside).

Indexing a store is bounded by a time budget (`--index-budget`, per store): a store whose
index is not complete within it is reported as such and not searched through `LmdbIndex`.
Slow configurations (the reference, the in-memory path) time as many queries as fit in a
per-configuration budget, and sizes projected (quadratically, from the size below) to take
over a minute per query are skipped. Timings are wall-clock (`perf_counter_ns`) on whatever
else the machine is running; the load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import math
import os
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from eventlog import LmdbEventLog, NewEntry, ReplayHistorySource, message_entry, run_started_entry
from search import SearchEngine, SearchOptions, get_analyzer
from search.analyzers import Analyzer, DefaultAnalyzer
from search.bm25 import unique_terms
from search.memory_index import HistorySourceBackend
from search.persistent_index import PersistentIndex as LmdbIndex
from search.render import index_text

try:
    from _search_corpus import FACTS, conversation_messages, make_queries, make_recall_conversation, split_runs
except ModuleNotFoundError:  # imported as `bench.bench_search` from the repository root
    from bench._search_corpus import FACTS, conversation_messages, make_queries, make_recall_conversation, split_runs

if TYPE_CHECKING:
    from pydantic_ai import RunContext

GiB = 1024**3
BATCH = 5000
"""Entries per `append_many` while bulk loading."""
RUN_SIZE = 10
REFERENCE_LIMIT_S = 60.0
"""Sizes projected to take longer than this per query are not run through the slow paths."""


@dataclass(frozen=True, slots=True)
class Config:
    quick: bool
    sizes: tuple[int, ...]
    """Messages in each single-conversation store."""
    focus: int
    """The single-conversation size that is also placed inside the big store."""
    big_total: int
    """Messages in the many-conversation store (0: skipped)."""
    big_conversations: int
    repeats: int
    """Timed repetitions of each query on fast paths (the per-query median is kept)."""
    warmup: int
    slow_budget_s: float
    """Wall time one slow configuration (reference, in-memory) may spend on timed queries."""
    index_budget_s: float
    """Wall time indexing one single-conversation store may take before it is abandoned."""
    big_index_budget_s: float
    recall_filler: int
    catch_up_rounds: int
    threaded: bool = True
    """Each run continues the previous one (`--flat-runs` makes every run its own branch)."""


FULL = Config(
    quick=False,
    sizes=(1_000, 10_000, 100_000),
    focus=10_000,
    big_total=1_000_000,
    big_conversations=1_000,
    repeats=3,
    warmup=5,
    slow_budget_s=15.0,
    index_budget_s=120.0,
    big_index_budget_s=420.0,
    recall_filler=2_400,
    catch_up_rounds=20,
)
QUICK = Config(
    quick=True,
    sizes=(100, 1_000, 10_000),
    focus=1_000,
    big_total=0,
    big_conversations=0,
    repeats=2,
    warmup=3,
    slow_budget_s=3.0,
    index_budget_s=10.0,
    big_index_budget_s=0.0,
    recall_filler=2_400,
    catch_up_rounds=10,
)


# --- small helpers --------------------------------------------------------------------------------


def now_ns() -> int:
    return time.perf_counter_ns()


_T0 = time.perf_counter()


def log_progress(text: str) -> None:
    print(f'.. [{time.perf_counter() - _T0:6.1f} s] {text}', file=sys.stderr, flush=True)


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fmt_ms(ns: float) -> str:
    if ns >= 10e9:
        return f'{ns / 1e9:,.1f} s'
    return f'{ns / 1e6:,.2f} ms'


def fmt_us(ns: float) -> str:
    return f'{ns / 1e3:,.1f} us'


def ratio(a: float, b: float) -> str:
    return f'{a / b:.2f}x' if b else 'n/a'


def count(n: int) -> str:
    return f'{n:,}'


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()) -> None:
    widths = [
        max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i]) for i in range(len(headers))
    ]
    print(f'\n== {title}')
    print('  '.join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))))
    print('  '.join('-' * w for w in widths))
    for row in rows:
        print('  '.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    for note in notes:
        print(f'   {note}')
    sys.stdout.flush()


@dataclass
class Verdicts:
    lines: list[str] = field(default_factory=list[str])

    def target(self, name: str, met: bool | None, detail: str) -> None:
        state = 'not measured' if met is None else ('met' if met else 'NOT MET')
        self.lines.append(f'[{state}] {name}: {detail}')

    def info(self, name: str, detail: str) -> None:
        self.lines.append(f'[info] {name}: {detail}')


# --- timing ---------------------------------------------------------------------------------------


@dataclass
class Latency:
    """Per-query medians of one configuration."""

    per_query: list[int] = field(default_factory=list[int])
    total_queries: int = 0
    note: str = ''

    @property
    def median(self) -> float:
        return statistics.median(self.per_query) if self.per_query else math.nan

    @property
    def p95(self) -> float:
        return pct(self.per_query, 95) if self.per_query else math.nan

    @property
    def measured(self) -> bool:
        return bool(self.per_query)


def interleave_kinds(queries: list[tuple[str, str]]) -> list[str]:
    """Queries reordered round-robin across kinds, so any prefix mixes every kind."""
    by_kind: dict[str, list[str]] = {}
    for kind, query in queries:
        by_kind.setdefault(kind, []).append(query)
    out: list[str] = []
    lists = list(by_kind.values())
    for index in range(max(len(items) for items in lists)):
        out.extend(items[index] for items in lists if index < len(items))
    return out


async def measure(
    fn: Callable[[str], Awaitable[object]],
    queries: Sequence[str],
    *,
    repeats: int,
    warmup: int,
    budget_s: float | None = None,
) -> Latency:
    """Time `fn` on each query (`repeats` times, keeping the median), after `warmup` untimed calls.

    Warm-up stops early after a call slower than a second (a slow path), unless `warmup` covers
    every query: then each query is warmed once whatever it costs. With `budget_s`, stop once
    that much time went into timed calls (at least one query is timed); a query slower than
    100 ms is timed once.
    """
    gc.collect()
    warm_all = warmup >= len(queries)
    for query in list(reversed(queries))[:warmup]:
        start = now_ns()
        await fn(query)
        if not warm_all and now_ns() - start > 1e9:
            break
    result = Latency(total_queries=len(queries))
    spent = 0
    for query in queries:
        samples: list[int] = []
        for _ in range(repeats):
            start = now_ns()
            await fn(query)
            took = now_ns() - start
            samples.append(took)
            spent += took
            if took > 1e8:
                break
        result.per_query.append(int(statistics.median(samples)))
        if budget_s is not None and spent > budget_s * 1e9:
            break
    if len(result.per_query) < len(queries):
        result.note = f'{len(result.per_query)} of {len(queries)} queries (time budget)'
    return result


# --- loading stores -------------------------------------------------------------------------------


class FtsStore:
    """SQLite FTS5 holding the same rendered text the index holds, one row per message."""

    def __init__(self, path: Path, tokenizer: str = "unicode61 tokenchars '_'") -> None:
        self.conn = sqlite3.connect(path)
        self.conn.execute('PRAGMA journal_mode=OFF')
        self.conn.execute('PRAGMA synchronous=OFF')
        self.conn.execute('PRAGMA cache_size=-262144')
        self.conn.execute(f'PRAGMA mmap_size={4 * GiB}')
        self.conn.execute(
            'CREATE VIRTUAL TABLE t USING fts5(conversation_id UNINDEXED, run_id UNINDEXED, position UNINDEXED, '
            f'text, tokenize="{tokenizer}")'
        )
        self.insert_ns = 0
        self.rows = 0
        self._analyzer = DefaultAnalyzer()

    def insert(self, rows: Sequence[tuple[str, str, int, str]]) -> None:
        start = now_ns()
        self.conn.executemany('INSERT INTO t (conversation_id, run_id, position, text) VALUES (?, ?, ?, ?)', rows)
        self.insert_ns += now_ns() - start
        self.rows += len(rows)

    def commit(self) -> None:
        start = now_ns()
        self.conn.commit()
        self.insert_ns += now_ns() - start

    def match_expr(self, query: str) -> str | None:
        terms = unique_terms(self._analyzer.tokens(query))
        if not terms:
            return None
        return ' OR '.join('"' + term.replace('"', '""') + '"' for term in terms)

    def search(self, query: str, conversation_id: str | None, limit: int = 10) -> list[tuple[Any, ...]]:
        """The top `limit` rows by `bm25()`, with their text (what a result would show)."""
        expr = self.match_expr(query)
        if expr is None:
            return []
        if conversation_id is None:
            sql = 'SELECT run_id, position, text FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?'
            return self.conn.execute(sql, (expr, limit)).fetchall()
        sql = 'SELECT run_id, position, text FROM t WHERE t MATCH ? AND conversation_id = ? ORDER BY bm25(t) LIMIT ?'
        return self.conn.execute(sql, (expr, conversation_id, limit)).fetchall()

    def close(self) -> None:
        self.conn.close()


@dataclass
class Loaded:
    """What a bulk load wrote."""

    messages: int = 0
    entries: int = 0
    runs: int = 0
    append_ns: int = 0
    prepare_ns: int = 0
    """Generating and encoding messages, rendering FTS text (not part of any measured cost)."""


class StoreWriter:
    """Appends runs in batches of about `BATCH` entries, mirroring messages into FTS5.

    Threaded (the default), each run starts with `run_started(parent=<last seq of the
    conversation's previous run>)`, so its record is the whole conversation so far plus its own
    messages, and the position of a message in its run's record is its index in the
    conversation. Otherwise each run is a branch of its own and positions restart at 0.
    """

    def __init__(self, log: LmdbEventLog, fts: FtsStore | None, first_seq: int, *, threaded: bool = True) -> None:
        self.log = log
        self.fts = fts
        self.threaded = threaded
        self.next_seq = first_seq
        self.pending: list[NewEntry] = []
        self.rows: list[tuple[str, str, int, str]] = []
        self.tip: dict[str, int] = {}
        self.positions: dict[str, int] = {}
        self.run_counts: dict[str, int] = {}
        self.loaded = Loaded()

    async def add_run(self, conversation_id: str, messages: Sequence[ModelMessage]) -> tuple[str, int]:
        """Queue one run; return its id and the position of its first message."""
        start = now_ns()
        number = self.run_counts.get(conversation_id, 0)
        self.run_counts[conversation_id] = number + 1
        run_id = f'{conversation_id}-run{number:05d}'
        parent = self.tip.get(conversation_id) if self.threaded else None
        self.pending.append(run_started_entry(conversation_id=conversation_id, run_id=run_id, parent=parent))
        first = position = self.positions.get(conversation_id, 0) if self.threaded else 0
        for message in messages:
            self.pending.append(message_entry(message, conversation_id=conversation_id, run_id=run_id))
            if self.fts is not None:
                self.rows.append((conversation_id, run_id, position, index_text(message)))
            position += 1
        self.next_seq += 1 + len(messages)
        self.positions[conversation_id] = position
        self.tip[conversation_id] = self.next_seq - 1
        self.loaded.messages += len(messages)
        self.loaded.entries += 1 + len(messages)
        self.loaded.runs += 1
        self.loaded.prepare_ns += now_ns() - start
        if len(self.pending) >= BATCH:
            await self.flush()
        return run_id, first

    async def flush(self) -> None:
        if self.pending:
            expected = self.next_seq - len(self.pending)
            start = now_ns()
            seqs = await self.log.append_many(self.pending)
            self.loaded.append_ns += now_ns() - start
            if seqs[0] != expected or seqs[-1] != self.next_seq - 1:
                raise RuntimeError(f'the log assigned seqs {seqs[0]}..{seqs[-1]}, expected {expected}..')
            self.pending = []
        if self.fts is not None and self.rows:
            self.fts.insert(self.rows)
            self.rows = []


@dataclass
class Indexed:
    """How indexing a store went."""

    applied: int
    total: int
    ns: int
    complete: bool

    def per_message(self, messages: int) -> float:
        return self.ns / messages if messages else math.nan


class _OverBudget(Exception):
    pass


def index_with_budget(index: LmdbIndex, budget_s: float) -> Indexed:
    """`index.catch_up()`, abandoned (after a committed batch) once it has run `budget_s` seconds."""
    state = index.state()
    total = state.log_position - state.position
    start = now_ns()
    done = 0

    def progress(applied: int, of: int) -> None:
        nonlocal done
        done = applied
        elapsed = (now_ns() - start) / 1e9
        log_progress(f'indexed {applied:,} of {of:,} entries in {elapsed:.1f} s')
        if applied < of and elapsed > budget_s:
            raise _OverBudget

    try:
        done = index.catch_up(progress)
    except _OverBudget:
        return Indexed(done, total, now_ns() - start, complete=False)
    return Indexed(done, total, now_ns() - start, complete=True)


@dataclass
class Store:
    name: str
    log: LmdbEventLog
    fts: FtsStore
    index: LmdbIndex
    loaded: Loaded
    indexed: Indexed
    conversation_id: str
    """The conversation the latency queries run in."""
    queries: list[tuple[str, str]]
    tip_position: int = 0
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.fts.close()
            self.log.close()


def open_log(path: Path) -> LmdbEventLog:
    return LmdbEventLog(path, sync=False, map_size=2 * GiB)


async def build_single(
    tmp: Path, size: int, messages: list[ModelMessage], budget_s: float, *, threaded: bool = True
) -> Store:
    """One conversation of `size` messages in runs of about `RUN_SIZE`, with its FTS5 mirror and index."""
    name = f'single-{size}'
    conversation_id = f'conv-{size}'
    log = open_log(tmp / f'{name}.lmdb')
    fts = FtsStore(tmp / f'{name}.sqlite')
    writer = StoreWriter(log, fts, first_seq=await log.last_seq() + 1, threaded=threaded)
    for run in split_runs(messages, RUN_SIZE):
        await writer.add_run(conversation_id, run)
    await writer.flush()
    fts.commit()
    index = LmdbIndex(log)
    log_progress(f'{name}: {writer.loaded.entries:,} entries appended, indexing')
    indexed = index_with_budget(index, budget_s)
    queries = make_queries([index_text(m) for m in messages], seed=size)
    return Store(
        name, log, fts, index, writer.loaded, indexed, conversation_id, queries, writer.positions[conversation_id]
    )


def other_sizes(total: int, conversations: int, seed: int) -> list[int]:
    """`conversations` sizes between 0.3 and 1.7 times the mean, summing to `total`."""
    rng = random.Random(seed)
    mean = total / conversations
    raw = [rng.uniform(0.3, 1.7) for _ in range(conversations)]
    scale = total / (mean * sum(raw))
    sizes = [max(2, int(mean * r * scale)) for r in raw]
    sizes[-1] += total - sum(sizes)
    return sizes


async def build_big(tmp: Path, cfg: Config, focus_messages: list[ModelMessage], budget_s: float) -> Store:
    """`cfg.big_total` messages over `cfg.big_conversations` conversations, the focus conversation
    among them; conversations are loaded in groups of 50 whose runs interleave in the log."""
    log = open_log(tmp / 'big.lmdb')
    fts = FtsStore(tmp / 'big.sqlite')
    writer = StoreWriter(log, fts, first_seq=await log.last_seq() + 1, threaded=cfg.threaded)
    focus_id = f'conv-{cfg.focus}'
    others = other_sizes(cfg.big_total - len(focus_messages), cfg.big_conversations - 1, seed=7)
    plan: list[tuple[str, int | None]] = [(f'conv-o{i:04d}', size) for i, size in enumerate(others)]
    plan.insert(len(plan) // 2, (focus_id, None))
    group_size = 50
    started = now_ns()
    runs_of: list[tuple[str, list[list[ModelMessage]]]] = []
    for group_start in range(0, len(plan), group_size):
        group = plan[group_start : group_start + group_size]
        prep = now_ns()
        runs_of = []
        for offset, (conversation_id, size) in enumerate(group):
            messages = (
                focus_messages if size is None else conversation_messages(size, seed=10_000 + group_start + offset)
            )
            runs_of.append((conversation_id, split_runs(messages, RUN_SIZE)))
        writer.loaded.prepare_ns += now_ns() - prep
        for round_index in range(max(len(runs) for _, runs in runs_of)):
            for conversation_id, runs in runs_of:
                if round_index < len(runs):
                    await writer.add_run(conversation_id, runs[round_index])
        log_progress(
            f'big store: {writer.loaded.messages:,} of {cfg.big_total:,} messages loaded '
            f'({(now_ns() - started) / 1e9:.0f} s)'
        )
    await writer.flush()
    fts.commit()
    del runs_of
    gc.collect()
    index = LmdbIndex(log)
    log_progress(f'big store: {writer.loaded.entries:,} entries appended, indexing')
    indexed = index_with_budget(index, budget_s)
    queries = make_queries([index_text(m) for m in focus_messages], seed=cfg.focus)
    return Store('big', log, fts, index, writer.loaded, indexed, focus_id, queries, writer.positions[focus_id])


# --- search paths ---------------------------------------------------------------------------------


def runs_kind(cfg: Config) -> str:
    if cfg.threaded:
        return 'threaded runs of ~10 messages, each continuing the previous one'
    return 'FLAT runs of ~10 messages, each its own branch (--flat-runs)'


def lmdb_engine(store: Store, context_lines: int) -> SearchEngine:
    return SearchEngine(store.index, SearchOptions(max_matches=10, context_lines=context_lines))


def memory_engine(store: Store, context_lines: int) -> SearchEngine:
    backend = HistorySourceBackend(ReplayHistorySource(store.log))
    return SearchEngine(backend, SearchOptions(max_matches=10, context_lines=context_lines))


def reference_fn(store: Store, context_lines: int) -> Callable[[str], Awaitable[str]]:
    from pydantic_ai_harness.conversation_search import ConversationSearchToolset

    # Typed as the reference's own `list[RunRecord]`, which our `list[RunRecord]` cannot match
    # (lists are invariant); at run time it reads only `run_id` and `conversation_id`.
    source: Any = ReplayHistorySource(store.log)
    toolset: Any = ConversationSearchToolset(
        source,
        tool_id='bench-reference',
        max_matches=10,
        context_lines=context_lines,
        bm25_k1=1.5,
        bm25_b=0.75,
        scope='conversation',
    )
    # The tool reads nothing from its context but `conversation_id`.
    ctx = cast('RunContext[None]', SimpleNamespace(conversation_id=store.conversation_id))

    async def search(query: str) -> str:
        return await toolset.search_conversation_history(ctx, query)

    return search


def conversation_fn(engine: SearchEngine, conversation_id: str) -> Callable[[str], Awaitable[str]]:
    async def search(query: str) -> str:
        return await engine.search(query, scope='conversation', conversation_id=conversation_id)

    return search


def all_fn(engine: SearchEngine) -> Callable[[str], Awaitable[str]]:
    async def search(query: str) -> str:
        return await engine.search(query, scope='all', conversation_id=None)

    return search


def rank_only_fn(store: Store, conversation_id: str | None) -> Callable[[str], Awaitable[object]]:
    """Open the corpus, rank, and read the top 10 hits: the search without fetching or rendering messages."""
    analyzer = DefaultAnalyzer()

    async def search(query: str) -> object:
        corpus = await store.index.open_corpus(conversation_id=conversation_id, run_id=None, analyzer=analyzer)
        hits = await corpus.rank(unique_terms(analyzer.tokens(query)), k1=1.5, b=0.75)
        return hits[:10]

    return search


def top_text_fn(store: Store, conversation_id: str | None) -> Callable[[str], Awaitable[object]]:
    """What the FTS5 query returns, from the index: the top 10 hits with each message's text."""
    analyzer = DefaultAnalyzer()

    async def search(query: str) -> object:
        corpus = cast(
            Any, await store.index.open_corpus(conversation_id=conversation_id, run_id=None, analyzer=analyzer)
        )
        top = (await corpus.rank(unique_terms(analyzer.tokens(query)), k1=1.5, b=0.75))[:10]
        windows = await corpus.messages_many([(hit.run_id, hit.position, hit.position + 1) for hit in top])
        return [
            (hit.run_id, hit.position, index_text(message))
            for hit, window in zip(top, windows, strict=True)
            for _, message in window
        ]

    return search


def fts_fn(store: Store, conversation_id: str | None) -> Callable[[str], Awaitable[object]]:
    async def search(query: str) -> object:
        return store.fts.search(query, conversation_id)

    return search


# --- sections 1-4: latency ------------------------------------------------------------------------


@dataclass
class Row:
    size: str
    engine: str
    context: str
    latency: Latency
    baseline: Latency | None = None


@dataclass
class Measured:
    lmdb: dict[tuple[str, int], Latency] = field(default_factory=dict[tuple[str, int], Latency])
    fts: dict[str, Latency] = field(default_factory=dict[str, Latency])
    top_text: dict[str, Latency] = field(default_factory=dict[str, Latency])
    slow: dict[tuple[str, str, int], Latency] = field(default_factory=dict[tuple[str, str, int], Latency])
    all_scope: dict[int, Latency] = field(default_factory=dict[int, Latency])
    fts_all: Latency | None = None


@dataclass
class SlowState:
    """The last measured per-query cost of each slow path, to project the next size."""

    last: dict[str, tuple[int, float]] = field(default_factory=dict[str, tuple[int, float]])

    def projected_s(self, engine: str, size: int) -> float | None:
        previous = self.last.get(engine)
        if previous is None:
            return None
        prev_size, prev_ns = previous
        return prev_ns * (size / prev_size) ** 2 / 1e9


async def check_parity(store: Store, queries: Sequence[str]) -> str:
    """Whether `LmdbIndex` and the in-memory path give the same answers (first few queries)."""
    same = 0
    for query in queries:
        ours = await conversation_fn(lmdb_engine(store, 5), store.conversation_id)(query)
        memory = await conversation_fn(memory_engine(store, 5), store.conversation_id)(query)
        same += ours == memory
    return f'{same} of {len(queries)} identical'


async def measure_store(cfg: Config, store: Store, slow: SlowState, measured: Measured, key: str) -> list[Row]:
    queries = interleave_kinds(store.queries)
    rows: list[Row] = []
    size_label = count(store.loaded.messages) if key != 'big' else f'{cfg.focus:,} in {store.loaded.messages:,}'
    index_ok = store.indexed.complete
    for context in (0, 5):
        if index_ok:
            log_progress(f'{store.name}: LmdbIndex context {context}')
            lat = await measure(
                conversation_fn(lmdb_engine(store, context), store.conversation_id),
                queries,
                repeats=cfg.repeats,
                warmup=cfg.warmup,
            )
        else:
            lat = Latency(total_queries=len(queries), note='index incomplete within its budget')
        measured.lmdb[(key, context)] = lat
        rows.append(Row(size_label, 'LmdbIndex', str(context), lat))
    if index_ok:
        lat = await measure(rank_only_fn(store, store.conversation_id), queries, repeats=cfg.repeats, warmup=cfg.warmup)
        rows.append(Row(size_label, 'LmdbIndex rank only', '-', lat, measured.lmdb[(key, 0)]))
        lat = await measure(top_text_fn(store, store.conversation_id), queries, repeats=cfg.repeats, warmup=cfg.warmup)
        measured.top_text[key] = lat
        rows.append(Row(size_label, 'LmdbIndex top 10 + text', '-', lat, measured.lmdb[(key, 0)]))
    log_progress(f'{store.name}: FTS5')
    fts = await measure(fts_fn(store, store.conversation_id), queries, repeats=cfg.repeats, warmup=cfg.warmup)
    measured.fts[key] = fts
    rows.append(Row(size_label, 'SQLite FTS5 bm25()', '-', fts, measured.lmdb[(key, 0)]))
    if key == 'big':
        return rows
    size = store.loaded.messages
    for engine in ('in-memory (ours)', 'reference'):
        projected = slow.projected_s(engine, size)
        for context in (0, 5):
            if projected is not None and projected > REFERENCE_LIMIT_S:
                lat = Latency(total_queries=len(queries), note=f'skipped: projected {projected:,.0f} s per query')
            else:
                log_progress(f'{store.name}: {engine} context {context}')
                fn = (
                    conversation_fn(memory_engine(store, context), store.conversation_id)
                    if engine.startswith('in-memory')
                    else reference_fn(store, context)
                )
                warmup = 1 if projected is None or projected < 1.0 else 0
                lat = await measure(fn, queries, repeats=cfg.repeats, warmup=warmup, budget_s=cfg.slow_budget_s)
                if context == 0:
                    slow.last[engine] = (size, lat.median)
            measured.slow[(key, engine, context)] = lat
            rows.append(Row(size_label, engine, str(context), lat, measured.lmdb[(key, context)]))
    return rows


def latency_rows(rows: Sequence[Row]) -> list[list[str]]:
    out: list[list[str]] = []
    for row in rows:
        lat = row.latency
        if not lat.measured:
            out.append([row.size, row.engine, row.context, '-', '-', '-', '-', lat.note])
            continue
        vs = '-'
        if row.baseline is not None and row.baseline.measured:
            vs = ratio(lat.median, row.baseline.median)
        out.append(
            [
                row.size,
                row.engine,
                row.context,
                str(len(lat.per_query)),
                fmt_ms(lat.median),
                fmt_ms(lat.p95),
                vs,
                lat.note,
            ]
        )
    return out


LATENCY_HEADERS = ('messages', 'engine', 'ctx', 'queries', 'median', 'p95', 'median vs LmdbIndex', 'note')


# --- section 5: indexing --------------------------------------------------------------------------


@dataclass
class CatchUp:
    incremental_messages: int = 0
    incremental_ns: int = 0
    baseline: Latency | None = None
    after_message: Latency | None = None
    after_run_start: Latency | None = None


async def measure_catch_up(cfg: Config, store: Store, messages: list[ModelMessage]) -> CatchUp:
    """On an indexed store: 1,000 more messages indexed by `catch_up`, then searches that first
    index one new message (or one new run's start)."""
    out = CatchUp()
    writer = StoreWriter(store.log, None, first_seq=await store.log.last_seq() + 1, threaded=cfg.threaded)
    writer.tip[store.conversation_id] = await store.log.last_seq()
    writer.positions[store.conversation_id] = store.tip_position
    writer.run_counts[store.conversation_id] = 1_000_000
    extra = messages[: min(1_000, len(messages))]
    for run in split_runs(extra, RUN_SIZE):
        await writer.add_run(store.conversation_id, run)
    await writer.flush()
    start = now_ns()
    store.index.catch_up()
    out.incremental_ns = now_ns() - start
    out.incremental_messages = len(extra)

    engine = lmdb_engine(store, 0)
    search = conversation_fn(engine, store.conversation_id)
    query = 'retention window audit_log archive'
    rounds = cfg.catch_up_rounds
    for _ in range(3):
        await search(query)
    out.baseline = await measure(search, [query] * rounds, repeats=1, warmup=0)

    timings_message: list[int] = []
    timings_run: list[int] = []
    message = ModelRequest(parts=[UserPromptPart('One more question about the retention window for audit_log.')])
    for round_index in range(rounds):
        run_id = f'{store.conversation_id}-extra{round_index:03d}'
        parent = await store.log.last_seq() if cfg.threaded else None
        await store.log.append(run_started_entry(conversation_id=store.conversation_id, run_id=run_id, parent=parent))
        start = now_ns()
        await search(query)
        timings_run.append(now_ns() - start)
        await store.log.append(message_entry(message, conversation_id=store.conversation_id, run_id=run_id))
        start = now_ns()
        await search(query)
        timings_message.append(now_ns() - start)
    out.after_message = Latency(per_query=timings_message, total_queries=rounds)
    out.after_run_start = Latency(per_query=timings_run, total_queries=rounds)
    return out


# --- section 6: recall ----------------------------------------------------------------------------


@dataclass
class RecallResult:
    name: str
    at1: int = 0
    at5: int = 0
    reciprocal: float = 0.0
    missed: list[str] = field(default_factory=list[str])
    note: str = ''


async def recall_index(
    index: LmdbIndex, analyzer: Analyzer, conversation_id: str, expected: list[tuple[str, int]]
) -> RecallResult:
    result = RecallResult(analyzer.name)
    corpus = await index.open_corpus(conversation_id=conversation_id, run_id=None, analyzer=analyzer)
    for fact, target in zip(FACTS, expected, strict=True):
        hits = await corpus.rank(unique_terms(analyzer.tokens(fact.query)), k1=1.5, b=0.75)
        top = [(hit.run_id, hit.position) for hit in hits[:10]]
        score(result, fact.query, target, top)
    return result


def score(result: RecallResult, query: str, target: tuple[str, int], top: list[tuple[str, int]]) -> None:
    if target in top:
        rank = top.index(target) + 1
        result.reciprocal += 1 / rank
        result.at1 += rank == 1
        result.at5 += rank <= 5
        if rank > 5:
            result.missed.append(f'{query!r} (rank {rank})')
    else:
        result.missed.append(f'{query!r} (not in top 10)')


async def bench_recall(cfg: Config, tmp: Path) -> tuple[list[RecallResult], int]:
    recall = make_recall_conversation(seed=2024, filler_messages=cfg.recall_filler)
    conversation_id = 'conv-recall'
    log = open_log(tmp / 'recall.lmdb')
    fts_plain = FtsStore(tmp / 'recall.sqlite')
    fts_porter = FtsStore(tmp / 'recall-porter.sqlite', tokenizer="porter unicode61 tokenchars '_'")
    writer = StoreWriter(log, fts_plain, first_seq=await log.last_seq() + 1)
    location: dict[int, tuple[str, int]] = {}
    index_of = 0
    for run in split_runs(recall.messages, RUN_SIZE):
        run_id, first = await writer.add_run(conversation_id, run)
        for offset in range(len(run)):
            location[index_of + offset] = (run_id, first + offset)
        index_of += len(run)
    await writer.flush()
    fts_plain.commit()
    rows = fts_plain.conn.execute('SELECT conversation_id, run_id, position, text FROM t').fetchall()
    fts_porter.insert(rows)
    fts_porter.commit()
    expected = [location[position] for position in recall.positions]
    results: list[RecallResult] = []
    try:
        index = LmdbIndex(log, analyzer='default')
        budget = max(cfg.index_budget_s, 120.0)
        indexed = index_with_budget(index, budget)
        if indexed.complete:
            results.append(await recall_index(index, get_analyzer('default'), conversation_id, expected))
            start = now_ns()
            index.rebuild('english')
            log_progress(f'recall: rebuilt with english in {(now_ns() - start) / 1e9:.1f} s')
            results.append(await recall_index(index, get_analyzer('english'), conversation_id, expected))
        else:
            results.append(RecallResult('default', note='index incomplete within its budget'))
        for label, fts in (('FTS5 unicode61', fts_plain), ('FTS5 porter', fts_porter)):
            result = RecallResult(label)
            for fact, target in zip(FACTS, expected, strict=True):
                top = [(run_id, position) for run_id, position, _ in fts.search(fact.query, conversation_id)]
                score(result, fact.query, target, top)
            results.append(result)
    finally:
        fts_plain.close()
        fts_porter.close()
        log.close()
    return results, len(recall.messages)


# --- report ---------------------------------------------------------------------------------------


def report_indexing(stores: Sequence[Store], catch_up: CatchUp | None, catch_store: str, verdicts: Verdicts) -> None:
    rows: list[list[str]] = []
    for store in stores:
        loaded, indexed = store.loaded, store.indexed
        done = f'{indexed.applied:,} of {indexed.total:,}'
        per_msg = indexed.ns / max(1, indexed.applied) * (loaded.entries / max(1, loaded.messages))
        state = 'complete' if indexed.complete else 'ABANDONED (budget)'
        projected = '-'
        if not indexed.complete and indexed.applied:
            projected = f'>= {indexed.ns / indexed.applied * indexed.total / 1e9:,.0f} s'
        rows.append(
            [
                store.name,
                count(loaded.messages),
                count(loaded.runs),
                fmt_us(loaded.append_ns / max(1, loaded.entries)),
                done,
                f'{indexed.ns / 1e9:,.1f} s',
                fmt_us(per_msg),
                state,
                projected,
                fmt_us(store.fts.insert_ns / max(1, store.fts.rows)),
            ]
        )
    print_table(
        '5. indexing cost: bulk load, then index.catch_up() over everything appended',
        (
            'store',
            'messages',
            'runs',
            'append/entry',
            'entries indexed',
            'catch_up',
            'per message',
            'state',
            'projected total',
            'FTS5 insert/msg',
        ),
        rows,
        [
            "'per message' = catch_up time / entries applied x (entries per message); entries include one run_started per run.",
            "'projected total' for an abandoned index assumes the rate so far, a lower bound when cost grows with the branch.",
        ],
    )
    worst: float | None = None
    for store in stores:
        if store.indexed.applied:
            value = store.indexed.ns / store.indexed.applied * (store.loaded.entries / max(1, store.loaded.messages))
            worst = value if worst is None else max(worst, value)
    if catch_up is not None and catch_up.incremental_messages:
        incremental = catch_up.incremental_ns / catch_up.incremental_messages
        worst = incremental if worst is None else max(worst, incremental)
        rows2 = [
            [
                f'{catch_up.incremental_messages:,} more messages in new runs ({catch_store})',
                f'{catch_up.incremental_ns / 1e6:,.1f} ms',
                fmt_us(incremental),
            ]
        ]
        print_table('5b. incremental indexing', ('what', 'catch_up', 'per message'), rows2)
        if catch_up.baseline and catch_up.after_message and catch_up.after_run_start:
            base = catch_up.baseline.median
            rows3 = [
                ['search, nothing new to index', fmt_ms(base), fmt_ms(catch_up.baseline.p95), '-'],
                [
                    'append 1 message, then search',
                    fmt_ms(catch_up.after_message.median),
                    fmt_ms(catch_up.after_message.p95),
                    fmt_ms(catch_up.after_message.median - base),
                ],
                [
                    'append 1 run_started, then search',
                    fmt_ms(catch_up.after_run_start.median),
                    fmt_ms(catch_up.after_run_start.p95),
                    fmt_ms(catch_up.after_run_start.median - base),
                ],
            ]
            print_table(
                f'5c. a search that first indexes what was just appended ({catch_store}, context_lines=0, '
                f'{catch_up.baseline.total_queries} rounds)',
                ('what', 'median', 'p95', 'added'),
                rows3,
            )
    if worst is None:
        verdicts.target('indexing <= 0.5 ms per message', None, 'nothing was indexed')
    else:
        verdicts.target('indexing <= 0.5 ms per message', worst <= 0.5e6, f'worst measured {fmt_us(worst)} per message')


def report_targets(cfg: Config, measured: Measured, verdicts: Verdicts) -> None:
    focus_key = f'single-{cfg.focus}'
    biggest = f'single-{max(s for s in cfg.sizes if s <= 10_000)}'
    for context, limit in ((0, 2.0), (5, 5.0)):
        lat = measured.lmdb.get((biggest, context))
        name = f'median at {int(biggest.split("-")[1]):,} messages, context_lines={context} <= {limit:g} ms'
        if lat is None or not lat.measured:
            verdicts.target(name, None, lat.note if lat else 'not run')
        else:
            verdicts.target(name, lat.median <= limit * 1e6, f'{fmt_ms(lat.median)} (p95 {fmt_ms(lat.p95)})')
    comparisons: list[str] = []
    answers: list[str] = []
    fast_enough = True
    any_compared = False
    for key, fts in measured.fts.items():
        ours = measured.top_text.get(key)
        answer = measured.lmdb.get((key, 0))
        if answer is not None and answer.measured and fts.measured:
            answers.append(f'{key}: {fmt_ms(answer.median)} vs {fmt_ms(fts.median)}')
        if ours is None or not ours.measured or not fts.measured:
            comparisons.append(f'{key}: not compared')
            continue
        any_compared = True
        fast_enough &= ours.median <= fts.median
        comparisons.append(f'{key}: {fmt_ms(ours.median)} vs {fmt_ms(fts.median)}')
    verdicts.target(
        'at least as fast as FTS5 (median; like for like: the top 10 with their text, as the FTS5 query returns)',
        fast_enough if any_compared else None,
        '; '.join(comparisons),
    )
    verdicts.info(
        "the whole answer (context_lines=0: ranking, numbering, clipping, rendering) vs FTS5's ten rows",
        '; '.join(answers) or 'not measured',
    )
    alone = measured.lmdb.get((focus_key, 0))
    inside = measured.lmdb.get(('big', 0))
    name = f'{cfg.focus:,}-message conversation within 2x when the store holds {cfg.big_total or FULL.big_total:,} messages'
    if cfg.big_total == 0:
        verdicts.target(name, None, 'skipped (--quick or --no-1m)')
    elif alone is None or inside is None or not alone.measured or not inside.measured:
        verdicts.target(name, None, (inside.note if inside else '') or (alone.note if alone else 'not run'))
    else:
        verdicts.target(
            name,
            inside.median <= 2 * alone.median,
            f'{fmt_ms(inside.median)} inside vs {fmt_ms(alone.median)} alone ({ratio(inside.median, alone.median)})',
        )
    all_lat = measured.all_scope.get(0)
    name = f"scope='all' over {cfg.big_total or FULL.big_total:,} messages within 100 ms (median, context_lines=0)"
    if cfg.big_total == 0:
        verdicts.target(name, None, 'skipped (--quick or --no-1m)')
    elif all_lat is None or not all_lat.measured:
        verdicts.target(name, None, all_lat.note if all_lat else 'not run')
    else:
        verdicts.target(name, all_lat.median <= 100e6, f'{fmt_ms(all_lat.median)} (p95 {fmt_ms(all_lat.p95)})')


# --- main -----------------------------------------------------------------------------------------


async def run_all(cfg: Config, *, index_budget: float | None, skip_big: bool) -> None:
    verdicts = Verdicts()
    started = now_ns()
    load = os.getloadavg()
    mode = 'quick' if cfg.quick else 'full'
    print(
        f'bench_search ({mode}) on {os.cpu_count()} CPUs, python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}'
    )
    print(f'stores: {runs_kind(cfg)}')
    print(f'load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (the machine is shared with other work)')
    probe = sqlite3.connect(':memory:')
    try:
        probe.execute('CREATE VIRTUAL TABLE probe USING fts5(x)')
    except sqlite3.OperationalError as exc:
        raise SystemExit(f"this Python's sqlite3 has no FTS5 ({exc}); the comparison needs it") from None
    finally:
        probe.close()
    print('FTS5: available in this sqlite3')
    single_budget = index_budget if index_budget is not None else cfg.index_budget_s
    big_budget = index_budget if index_budget is not None else cfg.big_index_budget_s
    big_total = 0 if skip_big else cfg.big_total
    measured = Measured()
    slow = SlowState()
    rows: list[Row] = []
    stores: list[Store] = []
    catch_up: CatchUp | None = None
    catch_store = ''
    focus_messages: list[ModelMessage] = []
    with tempfile.TemporaryDirectory(prefix='bench_search_', dir='/tmp') as name:
        tmp = Path(name)
        try:
            for size in cfg.sizes:
                start = now_ns()
                messages = conversation_messages(size, seed=size)
                store = await build_single(tmp, size, messages, single_budget, threaded=cfg.threaded)
                store.loaded.prepare_ns += now_ns() - start - store.loaded.append_ns - store.indexed.ns
                stores.append(store)
                if size == cfg.focus:
                    focus_messages = messages
                log_progress(f'{store.name}: built in {(now_ns() - start) / 1e9:.1f} s')
                rows += await measure_store(cfg, store, slow, measured, store.name)
                if size == cfg.sizes[0] and store.indexed.complete:
                    parity = await check_parity(store, interleave_kinds(store.queries)[:3])
                    verdicts.info(f'answers of LmdbIndex vs in-memory path at {size:,} messages', parity)
            print_table(
                f'1/3/4. conversation-scoped search, one conversation per store ({runs_kind(cfg)})',
                LATENCY_HEADERS,
                latency_rows(rows),
                [
                    'LmdbIndex / in-memory / reference: the whole answer text; FTS5: top 10 rows with their text '
                    '(no context windows, no rendering).',
                    "'rank only': open the corpus, rank, read the top 10 hits (no messages fetched or rendered).",
                    "'top 10 + text': rank only, plus each hit's message read, decoded and turned into text: what "
                    'the FTS5 query returns.',
                    'FTS5 ranks with whole-table statistics; ours and the reference with in-conversation statistics.',
                    f'median and p95 are over the per-query medians of {cfg.repeats} runs (slow paths: 1 run, as many '
                    'queries as fit their time budget); every configuration is warmed up first.',
                ],
            )

            recall_results, recall_messages = await bench_recall(cfg, tmp)
            print_table(
                f'6. recall of {len(FACTS)} planted facts in a {recall_messages:,}-message conversation '
                '(queries use other word forms)',
                ('analyzer', 'top 1', 'top 5', 'MRR@10', 'note'),
                [
                    [
                        r.name,
                        f'{r.at1}/{len(FACTS)}',
                        f'{r.at5}/{len(FACTS)} ({r.at5 / len(FACTS):.0%})',
                        f'{r.reciprocal / len(FACTS):.2f}',
                        r.note,
                    ]
                    for r in recall_results
                ],
            )
            for r in recall_results:
                if r.name == 'english' and r.missed:
                    print(f'   missed by english (top 5): {"; ".join(r.missed)}')
            for r in recall_results:
                if r.name in ('default', 'english') and not r.note:
                    verdicts.info(f'recall@5 with {r.name}', f'{r.at5}/{len(FACTS)}')

            log_progress('indexing: incremental and catch-up searches')
            indexed_singles = [s for s in stores if s.indexed.complete]
            if indexed_singles:
                target = next((s for s in indexed_singles if s.name == f'single-{cfg.focus}'), indexed_singles[-1])
                catch_store = f'{target.name}, {target.loaded.messages:,} messages'
                source = conversation_messages(1_000, seed=99)
                catch_up = await measure_catch_up(cfg, target, source)

            if big_total:
                if not focus_messages:
                    focus_messages = conversation_messages(cfg.focus, seed=cfg.focus)
                for store in stores:
                    store.close()
                start = now_ns()
                big_cfg = replace(cfg, big_total=big_total)
                big = await build_big(tmp, big_cfg, focus_messages, big_budget)
                stores.append(big)
                log_progress(f'big store: built in {(now_ns() - start) / 1e9:.1f} s')
                big_rows = await measure_store(cfg, big, slow, measured, 'big')
                queries = interleave_kinds(big.queries)
                if big.indexed.complete:
                    # The first search touching a query's postings pages in this process pays for
                    # mapping them; that pass is reported on its own, then every query is warmed.
                    log_progress("big store: scope='all' first pass")
                    first = await measure(all_fn(lmdb_engine(big, 0)), queries, repeats=1, warmup=0)
                    big_rows.append(
                        Row(f'all {big.loaded.messages:,}', "LmdbIndex scope='all', first pass", '0', first)
                    )
                    for context in (0, 5):
                        log_progress(f"big store: scope='all' context {context}")
                        lat = await measure(
                            all_fn(lmdb_engine(big, context)), queries, repeats=cfg.repeats, warmup=len(queries)
                        )
                        measured.all_scope[context] = lat
                        big_rows.append(Row(f'all {big.loaded.messages:,}', "LmdbIndex scope='all'", str(context), lat))
                    lat = await measure(rank_only_fn(big, None), queries, repeats=cfg.repeats, warmup=cfg.warmup)
                    big_rows.append(
                        Row(
                            f'all {big.loaded.messages:,}',
                            "LmdbIndex scope='all' rank only",
                            '-',
                            lat,
                            measured.all_scope[0],
                        )
                    )
                else:
                    measured.all_scope[0] = Latency(note='index incomplete within its budget')
                fts_all = await measure(fts_fn(big, None), queries, repeats=cfg.repeats, warmup=cfg.warmup)
                measured.fts_all = fts_all
                big_rows.append(
                    Row(
                        f'all {big.loaded.messages:,}',
                        'SQLite FTS5 bm25(), no filter',
                        '-',
                        fts_all,
                        measured.all_scope.get(0),
                    )
                )
                for row in big_rows:
                    if row.engine == 'LmdbIndex':
                        row.baseline = measured.lmdb.get((f'single-{cfg.focus}', int(row.context)))
                print_table(
                    f'2. the {cfg.focus:,}-message conversation inside a store of {big.loaded.messages:,} messages '
                    f'over {cfg.big_conversations:,} conversations ({runs_kind(cfg)})',
                    LATENCY_HEADERS,
                    latency_rows(big_rows),
                    [
                        "For the LmdbIndex rows, 'median vs LmdbIndex' compares with the same conversation alone in "
                        'its own store.',
                        'The reference and the in-memory path are not run here: each search would rebuild its corpus '
                        'from every run of the conversation (see the projections above).',
                    ],
                )
            else:
                print('\n== 2. the many-conversation store: skipped (--quick or --no-1m)')

            log_progress('reporting')
            report_indexing(stores, catch_up, catch_store, verdicts)
            report_targets(replace(cfg, big_total=big_total), measured, verdicts)
        finally:
            for store in stores:
                store.close()
    log_progress('stores removed')
    load = os.getloadavg()
    print(f'\nload average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; total {(now_ns() - started) / 1e9:.1f} s')
    print('\n== targets')
    for line in verdicts.lines:
        print(line)


async def run_profile(kind: str, size: int, context: int, budget: float) -> None:
    """Build one single-conversation store and profile its indexing or its searches."""
    with tempfile.TemporaryDirectory(prefix='bench_search_profile_', dir='/tmp') as name:
        tmp = Path(name)
        messages = conversation_messages(size, seed=size)
        profiler = cProfile.Profile()
        if kind == 'index':
            log = open_log(tmp / 'profile.lmdb')
            writer = StoreWriter(log, None, first_seq=await log.last_seq() + 1)
            for run in split_runs(messages, RUN_SIZE):
                await writer.add_run(f'conv-{size}', run)
            await writer.flush()
            index = LmdbIndex(log)
            profiler.enable()
            indexed = index_with_budget(index, budget)
            profiler.disable()
            print(
                f'indexed {indexed.applied:,} of {indexed.total:,} entries of {size:,} messages in {indexed.ns / 1e9:.1f} s'
            )
            log.close()
        else:
            store = await build_single(tmp, size, messages, budget)
            if not store.indexed.complete:
                print('the index did not complete within the budget')
                store.close()
                return
            queries = interleave_kinds(store.queries)
            search = conversation_fn(lmdb_engine(store, context), store.conversation_id)
            for query in queries[:5]:
                await search(query)
            rounds = 5
            start = now_ns()
            profiler.enable()
            for _ in range(rounds):
                for query in queries:
                    await search(query)
            profiler.disable()
            took = now_ns() - start
            print(
                f'{rounds * len(queries)} searches (context_lines={context}) in a {size:,}-message conversation: '
                f'{fmt_ms(took / (rounds * len(queries)))} each under the profiler'
            )
            store.close()
        pstats.Stats(profiler).sort_stats('tottime').print_stats(25)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('--quick', action='store_true', help='sizes down 10x, no 1M store (about 2 minutes)')
    parser.add_argument('--no-1m', action='store_true', help='skip the many-conversation store')
    parser.add_argument(
        '--flat-runs',
        action='store_true',
        help='store every run as its own branch instead of continuing the previous one (isolates search '
        'latency from the cost of indexing long threaded branches); the recall set stays threaded',
    )
    parser.add_argument('--index-budget', type=float, default=None, help='seconds indexing one store may take')
    parser.add_argument('--profile', choices=('search', 'index'), default=None, help='profile one configuration')
    parser.add_argument('--profile-size', type=int, default=10_000)
    parser.add_argument('--profile-context', type=int, default=5)
    args = parser.parse_args(argv)
    if args.profile is not None:
        budget = args.index_budget if args.index_budget is not None else 600.0
        asyncio.run(run_profile(args.profile, args.profile_size, args.profile_context, budget))
        return
    cfg = QUICK if args.quick else FULL
    if args.flat_runs:
        cfg = replace(cfg, threaded=False)
    asyncio.run(run_all(cfg, index_budget=args.index_budget, skip_big=args.no_1m or cfg.big_total == 0))
    log_progress('done')


if __name__ == '__main__':
    main()
