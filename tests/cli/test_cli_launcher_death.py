"""The command the `eventlog` launcher forks dies with the launcher, whatever kills it: a SIGKILL
(`timeout -s KILL`, a supervisor, the out-of-memory killer) must not leave an orphaned worker
holding the store (issue 42).

These run the real console entry point in subprocesses and kill them with real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from clitools import Store, build_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')


def _env() -> dict[str, str]:
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    return env


def _children(pid: int) -> list[int]:
    """The processes `pid` forked (Linux: /proc/PID/task/TID/children)."""
    found: list[int] = []
    for task in Path(f'/proc/{pid}/task').iterdir():
        found += [int(child) for child in (task / 'children').read_text().split()]
    return found


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        status = Path(f'/proc/{pid}/status').read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith('State:'))
    return 'Z' not in state.split()[1]


def _wait_gone(pid: int) -> bool:
    """Wait (up to a minute, polling) until `pid` no longer runs; whether it ended."""
    for _ in range(600):
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


@contextmanager
def _launched(*args: str) -> Iterator[subprocess.Popen[str]]:
    """`python -m eventlog_cli ARGS` (the console script: launcher and forked worker), whose first
    line of output has been read; every process it started is killed afterwards."""
    process = subprocess.Popen(
        [sys.executable, '-m', 'eventlog_cli', *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    workers: list[int] = []
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else ''
        workers = _children(process.pid)
        yield process
    finally:
        for pid in workers:  # an orphan the original launcher left behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return build_store(tmp_path / 'store.lmdb')


@pytest.mark.parametrize(
    'command',
    [
        pytest.param(('serve', '--port', '0'), id='serve'),
        pytest.param(('tail', '--follow'), id='tail-follow'),
    ],
)
def test_sigkill_of_the_launcher_ends_its_worker_and_frees_the_store(store: Store, command: tuple[str, ...]) -> None:
    with _launched(*command, '--store', str(store.path)) as launcher:
        workers = _children(launcher.pid)
        assert len(workers) == 1, workers  # the forked command, holding the store open
        (worker,) = workers
        assert _alive(worker)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_gone(worker), 'the worker outlived its launcher and still holds the store'
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'compact', '--store', str(store.path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_a_worker_whose_launcher_died_before_the_watch_was_set_ends_at_once() -> None:
    """The race `PR_SET_PDEATHSIG` leaves open: the parent died between the fork and the call.
    The worker then has another parent than the launcher it was forked by, and must not run."""
    script = 'import os\nfrom eventlog_cli.launch import _die_with\n_die_with(os.getppid() + 1)\nprint("ran")\n'
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 128 + signal.SIGKILL and done.stdout == '', (done.returncode, done.stdout, done.stderr)
    script = 'import os\nfrom eventlog_cli.launch import _die_with\n_die_with(os.getppid())\nprint("ran")\n'
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0 and done.stdout == 'ran\n', done.stderr
