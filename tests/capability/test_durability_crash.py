"""`EventLogDurability` with real processes killed by SIGKILL at every unit boundary, then resumed.

A first process (`_durable_worker.py start`) runs every scenario of `SCENARIOS` at once, each an
agent with `EventLogPersistence` and `EventLogDurability` on one log, driven by a `FunctionModel`.
Each scenario stops at its own point: while a model request or a tool executes, after one
returned but before its journal entry was appended, or just after that entry committed. The
test kills the process with SIGKILL, then a second process calls `EventLogDurability.resume` for
each run. Every real model call and tool execution of both processes is counted in a file.

Each unit executes exactly once across both processes, except the one in flight when the process
died (executing, or returned but not journaled), which executes twice; a unit whose journal
entry committed never executes again. Afterwards every run replays byte for byte as the resumed
result, each entry is in the log once, each tool's effects are recorded once, and `verify` passes.
Both backends that outlive a process are covered: LMDB, and PostgreSQL on the server the tests start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from _durable_worker import ANSWER, SCENARIOS, UNITS, Scenario
from backends import postgres_dsn, schema_for
from pgserver import drop_schema
from pydantic_ai.messages import ModelMessagesTypeAdapter

from eventlog import DurableStepInfo, Entry, LmdbEventLog, RunRecord, ToolEffectInfo, VerifyReport
from eventlog.log import EventLogBase

WORKER = Path(__file__).with_name('_durable_worker.py')
DEADLINE = 120.0
"""Seconds a process may take (imports alone take a few on a busy machine)."""


LEASE: Final = {'DURABLE_LEASE_SECONDS': '2'}
"""A short lease: a killed holder's lease lapses soon (nothing else tells a resumer it died)."""
WAIT: Final = {**LEASE, 'DURABLE_LEASE_WAIT': '30'}
"""A resumer that waits for the killed holder's lease to lapse."""


def worker(
    workdir: Path,
    mode: str,
    store: list[str],
    names: str = '-',
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start `_durable_worker.py` in `mode` (its environment plus `env`, its command after
    `prefix`), its output going to `<mode>.out`."""
    with (workdir / f'{mode}.out').open('ab') as output:
        return subprocess.Popen(
            [*prefix, sys.executable, str(WORKER), str(workdir), mode, names, *store],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={**os.environ, **(env or {})},
        )


def output_of(workdir: Path, mode: str) -> str:
    return (workdir / f'{mode}.out').read_text(errors='replace')[-4000:]


def wait_hung(workdir: Path, process: subprocess.Popen[bytes], names: list[str], mode: str) -> None:
    """Wait until every named scenario stopped at its point (or fail with the process's output)."""
    deadline = time.monotonic() + DEADLINE
    while not all((workdir / f'hung-{name}').exists() for name in names):
        if process.poll() is not None:
            pytest.fail(f'the {mode} process exited ({process.returncode}) early:\n{output_of(workdir, mode)}')
        if time.monotonic() > deadline:
            pytest.fail(f'the {mode} process did not stop everywhere in time:\n{output_of(workdir, mode)}')
        time.sleep(0.05)


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=DEADLINE)  # reaped: its pid no longer names a live process


def finish(workdir: Path, process: subprocess.Popen[bytes], mode: str) -> None:
    try:
        code = process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        kill(process)
        pytest.fail(f'the {mode} process did not finish:\n{output_of(workdir, mode)}')
    assert code == 0, output_of(workdir, mode)


def open_log(workdir: Path, store: list[str]) -> EventLogBase:
    if store[0] == 'lmdb':
        return LmdbEventLog(workdir / 'log.lmdb')
    from eventlog.postgres_log import PostgresEventLog

    return PostgresEventLog(store[1], schema=store[2], create=False)


async def read_log(
    workdir: Path, store: list[str]
) -> tuple[list[Entry], list[RunRecord], dict[str, bytes], VerifyReport]:
    log = open_log(workdir, store)
    try:
        entries = await log.entries()
        runs = await log.list_runs()
        replays = {r.run_id: ModelMessagesTypeAdapter.dump_json(await log.run_messages(r.run_id)) for r in runs}
        return entries, runs, replays, await log.verify()
    finally:
        log.close()


@dataclass
class Resumed:
    """What the two processes left behind."""

    before: list[Entry]
    """The whole log once the first process was killed."""
    after: list[Entry]
    runs: list[RunRecord]
    replays: dict[str, bytes]
    report: VerifyReport
    calls: list[tuple[str, str, str]]
    """(mode, scenario, unit) for every real execution."""
    interrupted: list[str]
    """What `list_runs(status='running')` gave the second process before it resumed anything."""
    workdir: Path

    def outcome(self, scenario: Scenario) -> dict[str, Any]:
        return json.loads((self.workdir / f'outcome-{scenario.name}.json').read_text())

    def messages(self, scenario: Scenario) -> bytes:
        return (self.workdir / f'messages-{scenario.name}.json').read_bytes()

    def journaled_units(self, scenario: Scenario) -> int:
        """How many model and tool units the journal held when the first process died."""
        count = 0
        for entry in self.before:
            if entry.run_id == scenario.run_id and entry.kind == 'durable_step':
                name = msgspec.json.decode(entry.payload, type=DurableStepInfo).name
                count += 'model.request' in name or 'call_tool' in name
        return count


def resume_all(workdir: Path, store: list[str]) -> Resumed:
    first = worker(workdir, 'start', store, env=LEASE)
    try:
        wait_hung(workdir, first, [s.name for s in SCENARIOS], 'start')
    finally:
        kill(first)
    before, _, _, _ = asyncio.run(read_log(workdir, store))
    second = worker(workdir, 'resume', store, env=WAIT)
    finish(workdir, second, 'resume')
    after, runs, replays, report = asyncio.run(read_log(workdir, store))
    calls = [tuple(line.split(' ')) for line in (workdir / 'calls.txt').read_text().splitlines()]
    interrupted = json.loads((workdir / 'interrupted.json').read_text())
    return Resumed(before, after, runs, replays, report, calls, interrupted, workdir)  # pyright: ignore[reportArgumentType]


@pytest.fixture(scope='module', params=['lmdb', 'postgres'])
def resumed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Resumed]:
    workdir = tmp_path_factory.mktemp(f'durable-{request.param}')
    if request.param == 'lmdb':
        yield resume_all(workdir, ['lmdb'])
        return
    store = ['postgres', postgres_dsn(), schema_for(workdir)]
    try:
        yield resume_all(workdir, store)
    finally:
        drop_schema(store[1], store[2])


@pytest.mark.parametrize('scenario', SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_each_unit_executes_once_and_the_one_in_flight_at_most_twice(resumed: Resumed, scenario: Scenario) -> None:
    counts = Counter(unit for _, name, unit in resumed.calls if name == scenario.name)
    point, unit = scenario.stop.split(':', 1)
    expected = dict.fromkeys(UNITS[scenario.kind], 1)
    if point in ('in', 'returned'):
        expected[unit] = 2  # executing, or returned but not journaled, when the process died
    assert dict(counts) == expected
    # The units journaled before the kill are exactly the ones before the stop (and the stop's own
    # unit once its journal entry committed): none of them ran in the second process.
    position = UNITS[scenario.kind].index(unit)
    journaled = resumed.journaled_units(scenario)
    assert journaled == position + (point == 'journaled')
    again = [u for mode, name, u in resumed.calls if mode == 'resume' and name == scenario.name]
    assert again == UNITS[scenario.kind][journaled:]


@pytest.mark.parametrize('scenario', SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_resumed_run_replays_exactly_once_recorded(resumed: Resumed, scenario: Scenario) -> None:
    outcome = resumed.outcome(scenario)
    assert outcome['run_id'] == scenario.run_id
    if scenario.kind == 'structured':
        assert outcome['output'] == {'text': ANSWER, 'count': 2}
    else:
        assert outcome['output'] == ANSWER
    assert resumed.replays[scenario.run_id] == resumed.messages(scenario)
    [run] = [r for r in resumed.runs if r.run_id == scenario.run_id]
    assert run.status == 'completed'
    assert run.conversation_id == f'{scenario.name}-conversation'
    entries = [e for e in resumed.after if e.run_id == scenario.run_id]
    keys = [e.idempotency_key for e in entries]
    assert len(keys) == len(set(keys))
    assert [e.kind for e in entries].count('run_started') == 1
    assert [e.kind for e in entries].count('run_finished') == 1
    effects = Counter(
        (info.tool_call_id, info.status)
        for info in (msgspec.json.decode(e.payload, type=ToolEffectInfo) for e in entries if e.kind == 'tool_effect')
    )
    calls = {call for call, _ in effects}
    assert calls and all(effects[(call, 'started')] == 1 for call in calls)
    ended = [effects[(call, 'completed')] + effects[(call, 'failed')] for call in calls]
    assert ended == [1] * len(calls)
    steps = [msgspec.json.decode(e.payload, type=DurableStepInfo).step for e in entries if e.kind == 'durable_step']
    assert steps == list(range(len(steps)))  # the journal is a prefix: no step twice, none skipped


def test_the_interrupted_runs_are_listed_and_verify_passes(resumed: Resumed) -> None:
    assert sorted(resumed.interrupted) == sorted(s.run_id for s in SCENARIOS)
    assert all(r.status == 'completed' for r in resumed.runs)
    assert resumed.report.ok, resumed.report.problems


@pytest.fixture(params=['lmdb', 'postgres'])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Where the processes of one test keep the log: an LMDB directory, or a PostgreSQL schema."""
    if request.param == 'lmdb':
        yield ['lmdb']
        return
    found = ['postgres', postgres_dsn(), schema_for(tmp_path)]
    try:
        yield found
    finally:
        drop_schema(found[1], found[2])


def test_two_processes_resuming_one_run_at_once(tmp_path: Path, store: list[str]) -> None:
    """Only one process may execute a run: the second gets `RunLeaseError` while the first is
    alive; once the first is killed, a third resumes the run (once its lease lapsed) and finishes it."""
    name = 'basic-in-model-2'
    first = worker(tmp_path, 'start', store, name, env=LEASE)
    try:
        wait_hung(tmp_path, first, [name], 'start')
    finally:
        kill(first)
    (tmp_path / f'hung-{name}').unlink()
    holder = worker(tmp_path, 'hold', store, name, env=WAIT)
    try:
        wait_hung(tmp_path, holder, [name], 'hold')
        rival = worker(tmp_path, 'resume', store, name, env=LEASE)
        finish(tmp_path, rival, 'resume')
        outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
        assert outcome['error'] == 'RunLeaseError'
        assert 'only one process may execute a run at a time' in outcome['message']
    finally:
        kill(holder)
    last = worker(tmp_path, 'resume', store, name, env=WAIT)
    finish(tmp_path, last, 'resume')
    outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
    assert outcome['output'] == ANSWER
    calls = [line.split(' ') for line in (tmp_path / 'calls.txt').read_text().splitlines()]
    # model 2 was in flight in the first and the holding process; the rival executed nothing.
    assert Counter(unit for _, _, unit in calls) == {
        'model:1': 1,
        'tool:alpha': 1,
        'model:2': 3,
        'tool:beta': 1,
        'model:3': 1,
    }
    assert [mode for mode, _, _ in calls].count('resume') == 3  # model 2 (again), tool beta, model 3
