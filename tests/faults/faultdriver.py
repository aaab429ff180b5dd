"""The fault suite's driver: starts a seeded mix of worker processes on one store, injects faults
(SIGKILL, SIGSTOP/SIGCONT, a PostgreSQL server killed and restarted), stops everything, then runs
the checker (`faultcheck.py`) in a fresh process.

`run_mix` returns a `MixResult`; `MixResult.failure()` is the message a test fails with: the
seed, how to run it again, the faults injected and each violation with its worker and record.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / '_fault_worker.py'
CHECKER = HERE / 'faultcheck.py'
STOP_GRACE = 25.0
"""Seconds a worker has, after its deadline, to exit by itself before it counts as hung."""


def child_env() -> dict[str, str]:
    """The environment of every process the suite starts: this one's, with the source tree first
    on the path (the tests run from a worktree whose virtualenv may point at another checkout)."""
    env = dict(os.environ)
    root = str(HERE.parent.parent)
    env['PYTHONPATH'] = os.pathsep.join([root, *[p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]])
    return env


@dataclass
class Spec:
    name: str
    role: str
    options: list[str] = field(default_factory=list[str])


@dataclass
class Proc:
    spec: Spec
    incarnation: int
    popen: subprocess.Popen[bytes]
    output: Path
    killed: bool = False


@dataclass
class MixResult:
    test: str
    seed: int
    backend: str
    specs: list[Spec]
    faults: collections.Counter[str]
    fault_log: list[str]
    counts: dict[str, int]
    violations: list[dict[str, Any]]

    def summary(self) -> str:
        roles = ', '.join(f'{s.name}={s.role}{"+" + "+".join(s.options) if s.options else ""}' for s in self.specs)
        return (
            f'{self.test} on {self.backend}, seed {self.seed} (rerun: EVENTLOG_FAULTS_SEED={self.seed})\n'
            f'workers: {roles}\nfaults: {dict(self.faults)}\ncounts: {self.counts}'
        )

    def failure(self, limit: int = 25) -> str:
        kinds = collections.Counter(v['invariant'] for v in self.violations)
        lines = [self.summary(), f'{len(self.violations)} violations: {dict(kinds)}']
        for v in self.violations[:limit]:
            lines.append(
                f'  [{v["invariant"]}] seed {self.seed} worker {v["worker"]}: {v["detail"]}\n'
                f'      record {json.dumps(v["record"], sort_keys=True)}'
            )
        if len(self.violations) > limit:
            lines.append(f'  ... and {len(self.violations) - limit} more')
        lines.append('last faults: ' + '; '.join(self.fault_log[-12:]))
        return '\n'.join(lines)


def seed_from_env() -> int:
    given = os.environ.get('EVENTLOG_FAULTS_SEED')
    return int(given) if given else random.SystemRandom().randrange(1, 10**9)


def kill_server(server: Any) -> None:
    """SIGKILL the postmaster and every process it started, as a machine crash would end them."""
    pm = int((server.data / 'postmaster.pid').read_text().split()[0])
    victims = [pm, *children(pm)]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while any(Path(f'/proc/{pid}').exists() and not zombie(pid) for pid in victims):
        if time.monotonic() > deadline:
            raise RuntimeError(f'server processes {victims} outlived SIGKILL')
        time.sleep(0.05)
    # Its lock files name a pid that is a zombie when nothing reaps it (a container without an
    # init): the server would take it for a live postmaster. After a real crash the pid is gone.
    for stale in [server.data / 'postmaster.pid', *server.root.glob('.s.PGSQL.*.lock')]:
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path('/proc').iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / 'stat').read_text()
                if int(stat.rsplit(')', 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def zombie(pid: int) -> bool:
    try:
        return (Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]) == 'Z'
    except OSError:
        return True


class Driver:
    def __init__(self, test: str, backend: str, seed: int, workdir: Path, store: list[str], server: Any = None) -> None:
        self.test = test
        self.backend = backend
        self.seed = seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.store = store
        self.server = server
        self.procs: dict[str, Proc] = {}
        self.stopped: dict[str, float] = {}
        """Workers held with SIGSTOP, and when they get SIGCONT."""
        self.restarts: list[tuple[float, Spec]] = []
        self.faults: collections.Counter[str] = collections.Counter()
        self.fault_log: list[str] = []
        self.violations: list[dict[str, Any]] = []
        self.deadline = 0.0
        self.start_time = time.monotonic()
        for sub in ('acks', 'effects', 'output'):
            (workdir / sub).mkdir(parents=True, exist_ok=True)

    def note(self, text: str) -> None:
        self.fault_log.append(f'{time.monotonic() - self.start_time:.1f}s {text}')

    def spawn(self, spec: Spec, incarnation: int) -> None:
        output = self.workdir / 'output' / f'{spec.name}.{incarnation}.txt'
        args = [
            sys.executable,
            str(WORKER),
            str(self.workdir),
            spec.name,
            spec.role,
            str(incarnation),
            str(self.seed),
            ','.join(spec.options) or '-',
            *self.store,
        ]
        with output.open('wb') as out:
            popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=self.workdir)
        self.procs[spec.name] = Proc(spec, incarnation, popen, output)

    def run(self, specs: list[Spec], duration: float, *, faults: bool) -> MixResult:
        for spec in specs:
            self.spawn(spec, 0)
        try:
            self.wait_ready(specs)
            self.deadline = time.time() + duration
            (self.workdir / 'go.tmp').write_text(repr(self.deadline))
            (self.workdir / 'go.tmp').rename(self.workdir / 'go')
            self.start_time = time.monotonic()
            end = time.monotonic() + duration
            while time.monotonic() < end:
                self.tick(end, faults=faults)
            self.finish()
        finally:
            self.kill_all()
        counts: dict[str, int] = {}
        if not any(v['invariant'] == 'checker runs' for v in self.violations):
            checked = self.check()
            counts = checked['counts']
            self.violations.extend(checked['violations'])
        return MixResult(
            self.test, self.seed, self.backend, specs, self.faults, self.fault_log, counts, self.violations
        )

    def wait_ready(self, specs: list[Spec]) -> None:
        """Wait until every worker has imported what it needs (a second or more each, on a busy machine)."""
        limit = time.monotonic() + 120
        while not all((self.workdir / f'ready-{s.name}-0').exists() for s in specs):
            self.reap()
            if self.violations or time.monotonic() > limit:
                raise RuntimeError('workers did not start: ' + json.dumps(self.violations)[:3000])
            time.sleep(0.1)

    def tick(self, end: float, *, faults: bool) -> None:
        now = time.monotonic()
        for name, when in list(self.stopped.items()):
            if now >= when:
                self.cont(name)
        for item in list(self.restarts):
            when, spec = item
            if now >= when:
                self.restarts.remove(item)
                self.spawn(spec, self.procs[spec.name].incarnation + 1)
        self.reap()
        if not faults:
            time.sleep(0.2)
            return
        time.sleep(self.rng.uniform(0.2, 1.0))
        if time.monotonic() > end - 1:
            return
        live = [p for p in self.procs.values() if p.popen.poll() is None and p.spec.name not in self.stopped]
        choice = self.rng.random()
        if self.server is not None and choice < 0.08 and self.faults['server SIGKILL'] < 3:
            self.crash_server()
        elif live and choice < 0.55:
            proc = self.rng.choice(live)
            proc.killed = True
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait()
            self.faults['SIGKILL'] += 1
            self.note(f'SIGKILL {proc.spec.name}.{proc.incarnation}')
            if time.time() < self.deadline - 4:
                self.restarts.append((time.monotonic() + self.rng.uniform(0.1, 1.0), proc.spec))
        elif live:
            proc = self.rng.choice(live)
            hold = self.rng.choice([self.rng.uniform(0.05, 0.5), self.rng.uniform(0.5, 3.5)])
            proc.popen.send_signal(signal.SIGSTOP)
            self.stopped[proc.spec.name] = time.monotonic() + hold
            self.faults['SIGSTOP'] += 1
            self.note(f'SIGSTOP {proc.spec.name}.{proc.incarnation} for {hold:.2f}s')

    def cont(self, name: str) -> None:
        del self.stopped[name]
        with contextlib.suppress(ProcessLookupError):
            self.procs[name].popen.send_signal(signal.SIGCONT)

    def crash_server(self) -> None:
        kill_server(self.server)
        self.faults['server SIGKILL'] += 1
        self.note('server SIGKILL')
        time.sleep(self.rng.uniform(0.2, 1.5))
        self.server.start()
        self.note('server restarted')

    def reap(self) -> None:
        """A worker that exited on its own before its deadline with an error is a finding."""
        for proc in self.procs.values():
            code = proc.popen.poll()
            if code is not None and code != 0 and not proc.killed and not getattr(proc, 'reported', False):
                proc.reported = True  # type: ignore[attr-defined]
                tail = proc.output.read_text(errors='replace')[-1500:]
                self.violations.append(
                    {
                        'invariant': 'worker exits cleanly',
                        'worker': f'{proc.spec.name}.{proc.incarnation}',
                        'record': {'exit': code, 'role': proc.spec.role},
                        'detail': tail,
                    }
                )

    def finish(self) -> None:
        for name in list(self.stopped):
            self.cont(name)
        self.restarts.clear()
        limit = time.monotonic() + max(0.0, self.deadline - time.time()) + STOP_GRACE
        for proc in self.procs.values():
            try:
                proc.popen.wait(timeout=max(0.1, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.violations.append(
                    {
                        'invariant': 'worker stops by itself',
                        'worker': f'{proc.spec.name}.{proc.incarnation}',
                        'record': {'role': proc.spec.role, 'stack': py_stack(proc.popen.pid)},
                        'detail': f'still running {STOP_GRACE:.0f}s after its deadline; '
                        + proc.output.read_text(errors='replace')[-500:],
                    }
                )
                proc.killed = True
                proc.popen.kill()
                proc.popen.wait()
        self.reap()

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.kill()
                proc.popen.wait()

    def check(self) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(CHECKER), str(self.workdir), *self.store],
            capture_output=True,
            env=child_env(),
            cwd=self.workdir,
            timeout=240,
            check=False,
        )
        try:
            return json.loads(done.stdout.decode().strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return {
                'counts': {},
                'violations': [
                    {
                        'invariant': 'checker runs',
                        'worker': None,
                        'record': {'exit': done.returncode},
                        'detail': (done.stdout + done.stderr).decode(errors='replace')[-3000:],
                    }
                ],
            }


def py_stack(pid: int) -> str:
    """Where a hung worker is: its wait channel (no debugger needed)."""
    try:
        return Path(f'/proc/{pid}/wchan').read_text()
    except OSError:
        return '?'


def has_conversation_store() -> bool:
    """Whether this interpreter's pydantic-ai has `ConversationStore` (2.66+), which the saver role needs."""
    try:
        return importlib.util.find_spec('pydantic_ai.conversation_store') is not None
    except ImportError:
        return False


def random_specs(rng: random.Random, backend: str) -> list[Spec]:
    """A seeded mix of roles: every role at least once (the saver only on pydantic-ai 2.66+), some
    twice, appenders with and without keys."""
    specs = [
        Spec('a0', 'appender', ['idem']),
        Spec('a1', 'appender', []),
        Spec('c0', 'compactor'),
        Spec('e0', 'eraser', rng.sample(['idem'], rng.randint(0, 1))),
        Spec('d0', 'deleter'),
        Spec('r0', 'retainer'),
        Spec('u0', 'durable'),
        Spec('s0', 'resumer'),
        Spec('h0', 'attacker'),
    ]
    if has_conversation_store():
        specs.append(Spec('v0', 'saver'))
    if backend == 'lmdb':
        for spec in specs:
            if spec.role == 'appender' and rng.random() < 0.5:
                spec.options.append('compact')
            if spec.role == 'compactor' and rng.random() < 0.5:
                spec.options.append('tight')
            if spec.role in ('eraser', 'deleter', 'retainer', 'appender', 'saver') and rng.random() < 0.4:
                spec.options.append('reopen')
    extra = rng.choice(
        ['appender', 'durable', 'compactor', 'eraser', None, *(['saver'] if has_conversation_store() else [])]
    )
    if extra is not None:
        specs.append(Spec('x0', extra, ['idem'] if extra == 'appender' and rng.random() < 0.5 else []))
    return specs


def run_mix(
    test: str, backend: str, specs: list[Spec] | None, duration: float, *, seed: int, faults: bool = True
) -> MixResult:
    """Run one seeded mix on a fresh store of `backend` and check it; the temporary files are removed."""
    rng = random.Random(seed)
    specs = specs if specs is not None else random_specs(rng, backend)
    workdir = Path(tempfile.mkdtemp(prefix='eventlog-faults-'))
    server = None
    try:
        if backend == 'lmdb':
            store = ['lmdb']
        else:
            sys.path.insert(0, str(HERE.parent))
            from pgserver import start_server

            from eventlog.postgres_log import PostgresEventLog

            server = start_server()
            PostgresEventLog(server.dsn(), schema='faults').close()
            store = ['postgres', server.dsn(), 'faults']
        print(f'{test}: seed {seed} ({backend}); EVENTLOG_FAULTS_SEED={seed} reruns it', flush=True)
        return Driver(test, backend, seed, workdir, store, server).run(specs, duration, faults=faults)
    finally:
        if server is not None:
            server.destroy()
        if os.environ.get('EVENTLOG_FAULTS_KEEP'):
            print(f'kept {workdir}', flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
