"""PostgreSQL appends where the network is real: the `--rtt-ms N` section of `bench_postgres.py`.

Every connection goes through `delay_proxy.py` (N/2 ms each way). Writer processes
(`_pg_net_worker.py`) append single messages for a fixed window, 1, 4, 8 and 16 of them, each to
its own conversation and all to one, with the old scheme (the code of `--old-rev`, by default
`LAYOUT_1_COMMIT`, the last commit before layout 2, extracted with `git archive` and run from
there: one store-wide lock per write) and the new one (this tree: concurrent commits, a
per-conversation lock), interleaved configuration by configuration. A follower process reads `entries(after_seq=...)` through the same proxy during
each window; every acknowledged append must be seen (skipped: 0) and its lag is the time from
the writer's acknowledgement to the follower's read.

`--base-rev REV` adds a third column, the code of REV run the same way (e.g. main before a
change: `--old-rev none --base-rev main` compares it with this tree alone). Each configuration
also reports how its appends went where the code counts it (the log's `_trips`): the share
made in one round trip, and the speculative variants sent per one-trip try.

CPU per append is the writers' (their own rusage), the server's (its postmaster and children,
sampled over the window: the follower's reads included) and the proxy's; the ceiling it puts on
any scheme here is the machine's cores divided by that total.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from _baseline import export  # pyright: ignore[reportMissingImports]
from psycopg.conninfo import conninfo_to_dict, make_conninfo

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / '_pg_net_worker.py'
TICK = os.sysconf('SC_CLK_TCK')
MODES = ('own conversations', 'one conversation')
LAYOUT_1_COMMIT = '1d3c2619999330f99996c3ed087b070c1fb99909'
"""The last commit of the old scheme (one store-wide lock per write): main before layout 2."""


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def postmaster_pid(dsn: str) -> int | None:
    """The pid of the server's postmaster (read from its data directory), or `None` when that
    cannot be read (a server elsewhere)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute('SHOW data_directory').fetchone()
        assert row is not None
        return int(Path(str(row[0]), 'postmaster.pid').read_text().split()[0])
    except (OSError, psycopg.Error, ValueError, IndexError):
        return None


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds used so far by the server's processes: the postmaster and its children (every
    PostgreSQL process of the machine when the postmaster is not known; other servers then count)."""
    total = 0.0
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            if postmaster is None:
                if Path(f'/proc/{pid}/comm').read_text().startswith(('postgres', 'postmaster')):
                    total += proc_cpu(int(pid))
                continue
            fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
            if int(pid) == postmaster or int(fields[1]) == postmaster:
                total += (int(fields[11]) + int(fields[12])) / TICK
        except (OSError, IndexError, ValueError):
            continue
    return total


class Child:
    """A worker process speaking one line at a time."""

    def __init__(self, code: Path, *args: str) -> None:
        env = {**os.environ, 'PYTHONPATH': f'{code}{os.pathsep}{HERE}'}
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.stdin: IO[str] = self.proc.stdin  # pyright: ignore[reportAttributeAccessIssue]
        self.stdout: IO[str] = self.proc.stdout  # pyright: ignore[reportAttributeAccessIssue]

    def send(self, line: str) -> None:
        self.stdin.write(line + '\n')
        self.stdin.flush()

    def line(self) -> str:
        got = self.stdout.readline()
        if not got:
            raise RuntimeError(f'worker {self.proc.args} ended (exit code {self.proc.wait()})')
        return got.strip()

    def close(self) -> None:
        try:
            self.stdin.close()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@dataclass
class Row:
    scheme: str
    mode: str
    writers: int
    rate: float
    p50: float
    p99: float
    cpu_writers: float
    cpu_server: float
    cpu_proxy: float
    skipped: int
    backwards: int
    lag_p50: float
    lag_p99: float
    one_trip: float
    variants: float
    trips: dict[str, int]
    unread: int = 0
    """Acknowledged appends after the last entry the follower read when it gave up catching up
    (held back by a transaction still open in the cluster: lag); `skipped` counts only those it
    passed over."""

    @property
    def cpu_total(self) -> float:
        return self.cpu_writers + self.cpu_server + self.cpu_proxy


def create_schema(code: Path, dsn: str, schema: str) -> None:
    env = {**os.environ, 'PYTHONPATH': str(code)}
    script = (
        'import sys; from eventlog import PostgresEventLog; PostgresEventLog(sys.argv[1], schema=sys.argv[2]).close()'
    )
    subprocess.run([sys.executable, '-c', script, dsn, schema], check=True, env=env, cwd=code)


def through(dsn: str, port: int) -> str:
    return make_conninfo(dsn, host='127.0.0.1', port=str(port))


def measured_rtt(dsn: str) -> float:
    """Median ms of `SELECT 1` on one connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        times: list[float] = []
        for _ in range(40):
            began = time.perf_counter()
            conn.execute('SELECT 1').fetchone()
            times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float('nan')
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_round(
    scheme: str,
    mode: str,
    writers: list[Child],
    follower: Child,
    proxy_pid: int,
    seconds: float,
    tag: str,
    postmaster: int | None,
) -> Row:
    start = time.time() + 1.5 + 0.05 * len(writers)
    for number, writer in enumerate(writers):
        conv = f'{tag}-shared' if mode == 'one conversation' else f'{tag}-own-{number}'
        writer.send(f'round {conv} {start} {seconds}')
    follower.send(f'round {start} {seconds}')
    time.sleep(max(0.0, start - time.time()))
    server_before, proxy_before = server_cpu(postmaster), proc_cpu(proxy_pid)
    time.sleep(max(0.0, start + seconds - time.time()))
    server_after, proxy_after = server_cpu(postmaster), proc_cpu(proxy_pid)
    results: list[dict[str, Any]] = [json.loads(writer.line()) for writer in writers]
    follower.send(f'catch-up {max((int(seq) for r in results for seq, _ in r["acks"]), default=0)}')
    seen_raw: dict[str, Any] = json.loads(follower.line())
    appends = max(1, sum(r['appends'] for r in results))
    latencies = [x for r in results for x in r['latencies']]
    seen = {int(seq): float(at) for seq, at in seen_raw['seen']}
    acks = [(int(seq), float(at)) for r in results for seq, at in r['acks']]
    lags = [(seen[seq] - at) * 1000 for seq, at in acks if seq in seen]
    trips: dict[str, int] = {}
    for r in results:
        for key, value in r.get('trips', {}).items():
            trips[key] = trips.get(key, 0) + int(value)
    return Row(
        scheme,
        mode,
        len(writers),
        sum(r['appends'] for r in results) / seconds,
        pct(latencies, 0.5),
        pct(latencies, 0.99),
        sum(r['cpu'] for r in results) / appends,
        (server_after - server_before) / appends,
        (proxy_after - proxy_before) / appends,
        sum(1 for seq, _ in acks if seq not in seen and seq < max(seen, default=0)),
        int(seen_raw['backwards']),
        pct(lags, 0.5),
        pct(lags, 0.99),
        trips.get('one', 0) / appends if trips else float('nan'),
        trips.get('variants', 0)
        / max(1, trips.get('one', 0) + trips.get('window missed', 0) + trips.get('guard failed', 0))
        if trips
        else float('nan'),
        trips,
        unread=sum(1 for seq, _ in acks if seq not in seen and seq > max(seen, default=0)),
    )


def bench_network(
    dsn: str,
    rtt_ms: float,
    *,
    seconds: float,
    counts: Sequence[int],
    old_rev: str | None,
    tmp: Path,
    base_rev: str | None = None,
    modes: Sequence[str] = MODES,
) -> list[Row]:
    """The section: returns its rows (and prints them)."""
    params = conninfo_to_dict(dsn)
    target = f'{params.get("host") or "127.0.0.1"}:{params.get("port") or 5432}'
    proxy = subprocess.Popen(
        [sys.executable, str(HERE / 'delay_proxy.py'), '--target', target, '--delay-ms', str(rtt_ms / 2)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    port = int(proxy.stdout.readline().split()[1])
    far = through(dsn, port)
    postmaster = postmaster_pid(dsn)
    codes: dict[str, Path] = {}
    if old_rev is not None:
        codes['old'] = export(old_rev, tmp / 'old-code', ('eventlog',))
    if base_rev is not None:
        codes['base'] = export(base_rev, tmp / 'base-code', ('eventlog',))
    codes['new'] = REPO
    children: list[Child] = []
    rows: list[Row] = []
    try:
        rtt = measured_rtt(far)
        print(f'\n== appends through a proxy adding {rtt_ms:g} ms per round trip (measured SELECT 1: {rtt:.2f} ms)')
        pools: dict[str, tuple[list[Child], Child]] = {}
        for scheme, code in codes.items():
            schema = f'net_{scheme}_{os.getpid()}_{int(rtt_ms * 1000)}'
            create_schema(code, dsn, schema)
            writers = [Child(code, 'writer', far, schema, f'{scheme}{n}') for n in range(max(counts))]
            follower = Child(code, 'follower', far, schema)
            children += [*writers, follower]
            pools[scheme] = (writers, follower)
        for child in children:
            if child.line() != 'ready':
                raise RuntimeError('a worker failed to start')
        for count in counts:
            for mode in modes:
                if count == 1 and mode == 'one conversation':
                    continue
                for scheme in codes:
                    writers, follower = pools[scheme]
                    tag = f'{scheme}-{count}-{mode[:3]}'
                    row = one_round(scheme, mode, writers[:count], follower, proxy.pid, seconds, tag, postmaster)
                    rows.append(row)
                    print(
                        f'  {scheme:4} {mode:17} {count:2} writers: {row.rate:7.0f} appends/s, p50 {row.p50:6.1f} ms, '
                        f'CPU {row.cpu_total * 1000:.2f} ms/append, one trip {row.one_trip:.0%}, skipped {row.skipped}, unread {row.unread}'
                        f'; {row.trips}',
                        flush=True,
                    )
    finally:
        for child in children:
            child.close()
        proxy.terminate()
        proxy.wait()
    report(rows, rtt_ms, rtt)
    return rows


def report(rows: list[Row], rtt_ms: float, rtt: float) -> None:
    cores = os.cpu_count() or 1
    base = {r.scheme: r.rate for r in rows if r.writers == 1}
    print(f'\n-- rtt {rtt_ms:g} ms (SELECT 1 {rtt:.2f} ms), {cores} cores, load average {os.getloadavg()[0]:.2f}')
    header = (
        'scheme', 'mode', 'N', 'appends/s', 'x 1 writer', 'p50 ms', 'p99 ms', 'CPU ms/append writers+server+proxy',
        'ceiling/s', 'of ceiling', 'skipped', 'lag p50/p99 ms', 'one trip', 'variants',
    )  # fmt: skip
    print(' | '.join(header))
    for r in rows:
        ceiling = cores / r.cpu_total if r.cpu_total > 0 else float('nan')
        print(
            ' | '.join(
                (
                    r.scheme,
                    r.mode,
                    str(r.writers),
                    f'{r.rate:.0f}',
                    f'{r.rate / base[r.scheme]:.2f}x',
                    f'{r.p50:.1f}',
                    f'{r.p99:.1f}',
                    f'{r.cpu_total * 1000:.2f} = {r.cpu_writers * 1000:.2f}+{r.cpu_server * 1000:.2f}+{r.cpu_proxy * 1000:.2f}',
                    f'{ceiling:.0f}',
                    f'{r.rate / ceiling:.0%}',
                    str(r.skipped + r.backwards),
                    f'{r.lag_p50:.1f}/{r.lag_p99:.1f}',
                    f'{r.one_trip:.0%}',
                    f'{r.variants:.1f}',
                )
            )
        )
    new = {(r.mode, r.writers): r for r in rows if r.scheme == 'new'}
    for other in ('old', 'base'):
        them = {(r.mode, r.writers): r for r in rows if r.scheme == other}
        for count in sorted({r.writers for r in rows}):
            if ('own conversations', count) in new and ('own conversations', count) in them:
                ratio = new['own conversations', count].rate / them['own conversations', count].rate
                print(f'new / {other}, {count} writers on their own conversations: {ratio:.2f}x')
    if 'base' in base and ('own conversations', 8) in new:
        scaling = next(r.rate for r in rows if r.scheme == 'base' and r.mode == 'own conversations' and r.writers == 8)
        print(f'base, 8 writers on their own conversations: {scaling / base["base"]:.2f}x one writer')
    # Each goal of issue 29 is stated for one round trip: its verdict is printed for that one only.
    if rtt_ms == 4 and ('own conversations', 8) in new:
        scaling = new['own conversations', 8].rate / base['new']
        print(
            f'goal (at 4 ms): new, 8 writers >= 4x one writer: {scaling:.2f}x -> {"met" if scaling >= 4 else "NOT met"}'
        )
    best = max((r for r in rows if r.scheme == 'new'), key=lambda r: r.rate, default=None)
    if rtt_ms == 1 and best is not None:
        ceiling = cores / best.cpu_total
        print(
            f'goal (at 1 ms): new, best {best.rate:.0f}/s ({best.writers} writers, {best.mode}) >= 80% of the CPU '
            f'ceiling {ceiling:.0f}/s: {best.rate / ceiling:.0%} -> {"met" if best.rate >= 0.8 * ceiling else "NOT met"}'
        )
    skipped = sum(r.skipped + r.backwards for r in rows if r.scheme == 'new')
    unread = sum(r.unread for r in rows if r.scheme == 'new')
    print(
        f'follower, new scheme: entries skipped {skipped} (must be 0) -> {"met" if skipped == 0 else "NOT met"}; '
        f'acknowledged but not read 10 s after the writers stopped: {unread}'
    )


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rtt-ms', type=float, nargs='+', default=[1.0])
    parser.add_argument('--seconds', type=float, default=3.0)
    parser.add_argument('--writers', type=int, nargs='+', default=[1, 4, 8, 16])
    parser.add_argument('--old-rev', default=LAYOUT_1_COMMIT, help="the old scheme's revision ('none': leave it out)")
    parser.add_argument('--base-rev', help='a third column: the code of this revision (e.g. main before a change)')
    parser.add_argument('--own-only', action='store_true', help='leave out the writers on one conversation')
    parser.add_argument('--dsn')
    args = parser.parse_args(argv)
    run(
        args.dsn,
        args.rtt_ms,
        seconds=args.seconds,
        counts=args.writers,
        old_rev=None if args.old_rev == 'none' else args.old_rev,
        base_rev=args.base_rev,
        modes=MODES[:1] if args.own_only else MODES,
    )


def run(
    dsn: str | None,
    rtts: Sequence[float],
    *,
    seconds: float,
    counts: Sequence[int],
    old_rev: str | None,
    base_rev: str | None = None,
    modes: Sequence[str] = MODES,
) -> None:
    """Start a server unless `dsn` names one, and run the section at each round trip of `rtts`."""
    sys.path.insert(0, str(REPO / 'tests'))
    print(f'pg_network on {os.cpu_count()} CPUs, load average {" ".join(f"{x:.2f}" for x in os.getloadavg())}')
    server = None
    if dsn is None:
        from pgserver import start_server  # pyright: ignore[reportMissingImports]

        server = start_server()
        dsn = str(server.dsn())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    try:
        with tempfile.TemporaryDirectory(prefix='bench-pgnet-') as tmp:
            for rtt in rtts:
                bench_network(
                    dsn,
                    rtt,
                    seconds=seconds,
                    counts=counts,
                    old_rev=old_rev,
                    base_rev=base_rev,
                    tmp=Path(tmp) / f'{rtt:g}',
                    modes=modes,
                )
    finally:
        if server is not None:
            server.destroy()  # pyright: ignore[reportUnknownMemberType]
    print(f'load average at the end {" ".join(f"{x:.2f}" for x in os.getloadavg())}')


if __name__ == '__main__':
    main()
