"""Processes standing for other machines in the PostgreSQL tests, and what the tests check with them.

`Worker` runs `pg_worker` in a process forked from a server process that imported the worker's
modules once (importing pydantic-ai takes seconds of CPU); each then opens its own log and
connection pool, as another machine would, and talks to the test over pipes, line by line.
A test module imports the fixtures `workers_fixture` and `schema_fixture` to use them.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator

import pg_worker
import psycopg
import pytest
from pg_worker import message
from pgserver import fresh_schema

from eventlog.entries import Entry, encode_message

WAIT = 120.0
"""Seconds any one step may take before a test fails (generous: the machine is shared)."""

_CONTEXT = multiprocessing.get_context('forkserver')
# Installed modules only: the fork server of Python 3.11 does not take the tests' sys.path.
_CONTEXT.set_forkserver_preload(['eventlog', 'eventlog.postgres_log', 'pydantic_ai.messages'])


class Worker:
    """One `pg_worker` process: its output lines as they come, its input for go-ahead lines."""

    def __init__(self, *args: str) -> None:
        self.args = args
        inbox_read, self._inbox = _CONTEXT.Pipe(duplex=False)
        self._outbox, outbox_write = _CONTEXT.Pipe(duplex=False)
        self.proc = _CONTEXT.Process(target=pg_worker.serve, args=(list(args), inbox_read, outbox_write), daemon=True)
        self.proc.start()
        inbox_read.close()
        outbox_write.close()
        self.output: list[str] = []
        self.changed = threading.Condition()
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        while True:
            try:
                line = str(self._outbox.recv())
            except (EOFError, OSError):
                break
            with self.changed:
                self.output.append(line)
                self.changed.notify_all()
            self._lines.put(line)
        self._lines.put(None)
        with self.changed:
            self.changed.notify_all()

    def describe(self) -> str:
        shown = '\n'.join(self.output[-40:])
        return f'worker {self.args[0]} {self.args[3:]} (exit code {self.proc.exitcode}), last lines:\n{shown}'

    def expect(self, prefix: str) -> str:
        """The next line starting with `prefix` (earlier lines are kept in `output` only)."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f'no {prefix!r} line within {WAIT} s from {self.describe()}') from None
            if line is None:
                raise AssertionError(f'no {prefix!r} line before the end of {self.describe()}')
            if line.startswith(prefix):
                return line

    def wait_for(self, predicate: Callable[[list[str]], bool]) -> None:
        """Wait until `predicate(output)` holds."""
        with self.changed:
            ended = lambda: not self._pump_thread.is_alive()  # noqa: E731
            if not self.changed.wait_for(lambda: predicate(self.output) or ended(), WAIT):
                raise AssertionError(f'timed out waiting on {self.describe()}')
            assert predicate(self.output), self.describe()

    def send(self, line: str = 'go') -> None:
        self._inbox.send(line)

    def finish(self) -> list[str]:
        """Wait for the process to end well; its output lines."""
        self.proc.join(WAIT)
        if self.proc.exitcode is None:
            self.proc.kill()
            raise AssertionError(f'still running after {WAIT} s: {self.describe()}')
        self._pump_thread.join(WAIT)
        assert self.proc.exitcode == 0, self.describe()
        assert self.output[-1] == 'done', self.describe()
        return self.output

    def acks(self) -> list[tuple[int, str]]:
        """(seq, label) of every acknowledged append, in the order acknowledged."""
        return [
            (int(seq), label) for _, seq, label in (line.split() for line in self.output if line.startswith('ack '))
        ]

    def stop(self) -> None:
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join(WAIT)
        self._inbox.close()


def lock_waiters(dsn: str, schema: str) -> list[int]:
    """Backends waiting for a writers' lock of the schema: the entries table (the store-wide
    lock), or a conversation's or run's advisory lock (an append's)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            'SELECT pid FROM pg_locks WHERE NOT granted AND (relation = to_regclass(%s) OR '
            "(locktype = 'advisory' AND objsubid = 2 AND classid::bigint = %s))",
            (f'"{schema}".entries', zlib.crc32(schema.encode())),
        ).fetchall()
    return [int(row[0]) for row in rows]


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll the server's state until `check()` holds (a state to observe, not a time to wait)."""
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out waiting until {what}')
        time.sleep(0.01)


def check_entry(entry: Entry, worker: str, label: str, conversation: str) -> None:
    """`entry` is what worker `worker` acknowledged as `label` (see `pg_worker.append`)."""
    kind, _, ident = label.partition(':')
    if kind == 'm':
        assert entry.kind == 'message'
        assert entry.payload == encode_message(message(worker, int(ident)))
        assert entry.run_id is not None and entry.run_id.startswith(f'{worker}-run-')
    else:
        assert entry.kind == ('run_started' if kind == 's' else 'run_finished')
        assert entry.run_id == ident
    assert entry.conversation_id == conversation


@pytest.fixture(name='workers')
def workers_fixture() -> Iterator[Callable[..., Worker]]:
    """Start `pg_worker.py` processes; any still running when the test ends are killed."""
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        worker = Worker(*args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture(name='schema')
def schema_fixture(pg_schemas: list[str]) -> str:
    """A fresh schema name, dropped when the test ends."""
    name = fresh_schema()
    pg_schemas.append(name)
    return name
