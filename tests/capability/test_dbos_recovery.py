"""`EventLogPersistence` under a real DBOS: a process killed mid-run, then recovered by another.

A first process (`_dbos_worker.py start`) starts one DBOS workflow per scenario, each running an
agent driven by a `FunctionModel` that calls a tool twice and then answers. Each scenario stops
at its own point (in a model call, in a tool, or right after the log committed an append but
before DBOS recorded that append's step) and the test kills the process with SIGKILL. A second
process (`_dbos_worker.py recover`) launches DBOS, which recovers the pending workflows from its
system database and runs them to the end. Everything is real: two processes, and either one LMDB
directory and one SQLite file, or one PostgreSQL database holding both the `PostgresEventLog`
(a schema of its own) and the DBOS system tables (another schema), on the server the tests start.

Two ways of making the agent durable are covered: the `DBOSDurability` capability (the log's
appends are DBOS steps, so recovery replays the ones DBOS recorded) and the deprecated
`DBOSAgent` wrapper (only model requests are steps: recovery re-executes every append, and the
idempotency keys alone keep them from being written twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter

pytest.importorskip('dbos')
pytest.importorskip('pydantic_ai.durable_exec.dbos')

from _dbos_worker import ANSWER, SCENARIOS, Scenario, Store, dbos_schema
from backends import postgres_dsn, schema_for
from pgserver import drop_schema

from eventlog import Entry, LmdbEventLog, RunRecord, ToolEffectInfo, VerifyReport
from eventlog.log import EventLogBase

WORKER = Path(__file__).with_name('_dbos_worker.py')
DEADLINE = 120.0
"""Seconds either process may take (imports alone take a few on a busy machine)."""

FULL_RUN = [
    'run_started',
    'message',  # the prompt, before the first model call
    'message',  # the first tool call
    'tool_effect',
    'tool_effect',
    'message',  # its return, before the second model call
    'message',  # the second tool call
    'tool_effect',
    'tool_effect',
    'message',  # its return, before the third model call
    'message',  # the answer
    'run_finished',
]
FULL_KEYS = [
    'start',
    'msg:0',
    'msg:1',
    'tool:call-1:0:started',
    'tool:call-1:0:completed',
    'msg:2',
    'msg:3',
    'tool:call-2:0:started',
    'tool:call-2:0:completed',
    'msg:4',
    'msg:5',
    'finish',
]
COMMITTED_AT_STOP = {'model:1': 2, 'tool:1': 4, 'append:5': 6, 'tool:2': 8, 'model:3': 10}
"""How many entries of `FULL_RUN` a run has committed when it stops at each point: everything
before the step in flight (a request is committed before the model sees it, a tool's `started`
before the tool runs)."""

WITH_IDS = [s for s in SCENARIOS if s.variant != 'wrapper-no-ids']


@dataclass
class Recovery:
    """What the two processes left behind."""

    before: list[Entry]
    """The whole log when the first process had been killed."""
    after: list[Entry]
    """The whole log when the second process had finished."""
    runs: list[RunRecord]
    replays: dict[str, bytes]
    """Each run's `run_messages`, serialized by pydantic-ai."""
    report: VerifyReport
    calls: list[str]
    outcomes: dict[str, dict[str, Any]]
    messages: dict[str, bytes]
    """Each scenario's recovered `result.all_messages()`, serialized by pydantic-ai."""
    workflows: dict[str, tuple[str, int]]
    """Each workflow's status and recovery attempts, as the DBOS system database holds them."""

    def runs_of(self, scenario: Scenario, entries: list[Entry] | None = None) -> list[str]:
        """The run ids whose prompt names `scenario`, in log order."""
        prefix = f'"{scenario.name}: '.encode()
        found: list[str] = []
        for entry in self.after if entries is None else entries:
            if entry.idempotency_key == 'msg:0' and prefix in entry.payload and entry.run_id not in found:
                assert entry.run_id is not None
                found.append(entry.run_id)
        return found

    def entries_of(self, run_id: str, entries: list[Entry] | None = None) -> list[Entry]:
        return [e for e in (self.after if entries is None else entries) if e.run_id == run_id]

    def run(self, run_id: str) -> RunRecord:
        [record] = [r for r in self.runs if r.run_id == run_id]
        return record


def _worker(workdir: Path, mode: str, store: Store) -> subprocess.Popen[bytes]:
    """Start `_dbos_worker.py` in `mode`, its output going to `<mode>.out`."""
    with (workdir / f'{mode}.out').open('wb') as output:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(workdir), mode, *store.args()],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )


def _output(workdir: Path, mode: str) -> str:
    return (workdir / f'{mode}.out').read_text(errors='replace')[-4000:]


def _open_log(workdir: Path, store: Store) -> EventLogBase:
    """The log the workers share, opened afresh in this process (and never created here)."""
    if store.backend == 'lmdb':
        return LmdbEventLog(workdir / 'log.lmdb')
    from eventlog.postgres_log import PostgresEventLog

    return PostgresEventLog(store.dsn, schema=store.schema, create=False)


async def _read_log(workdir: Path, store: Store) -> tuple[list[Entry], list[RunRecord], dict[str, bytes], VerifyReport]:
    log = _open_log(workdir, store)
    try:
        entries = await log.entries()
        runs = await log.list_runs()
        replays = {r.run_id: ModelMessagesTypeAdapter.dump_json(await log.run_messages(r.run_id)) for r in runs}
        return entries, runs, replays, await log.verify()
    finally:
        log.close()


def _workflows(workdir: Path, store: Store) -> dict[str, tuple[str, int]]:
    """Each workflow's status and attempts, read straight from the DBOS system tables (for
    PostgreSQL, over one connection that also sees the log's tables: the same database)."""
    query = 'SELECT workflow_uuid, status, recovery_attempts FROM {}workflow_status'
    if store.backend == 'lmdb':
        with contextlib.closing(sqlite3.connect(workdir / 'dbos.sqlite')) as db:
            rows = db.execute(query.format('')).fetchall()
    else:
        import psycopg

        with psycopg.connect(store.dsn) as conn:
            [(log_table,)] = conn.execute('SELECT to_regclass(%s)::text', [f'"{store.schema}".entries']).fetchall()
            assert log_table is not None, 'the log is not in the database of the DBOS system tables'
            rows = conn.execute(query.format(f'"{dbos_schema(store.schema)}".')).fetchall()
    return {name: (status, attempts) for name, status, attempts in rows}


@pytest.fixture(scope='module', params=['lmdb', 'postgres'])
def recovery(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recovery]:
    workdir = tmp_path_factory.mktemp(f'dbos-recovery-{request.param}')
    if request.param == 'lmdb':
        yield _recover(workdir, Store('lmdb'))
        return
    # The log and the DBOS system tables in the same database, each in a schema of its own.
    store = Store('postgres', postgres_dsn(), schema_for(workdir))
    try:
        yield _recover(workdir, store)
    finally:
        drop_schema(store.dsn, store.schema)
        drop_schema(store.dsn, dbos_schema(store.schema))


def _recover(workdir: Path, store: Store) -> Recovery:
    """Run the first worker until every scenario stopped, kill it, recover in a second one."""
    first = _worker(workdir, 'start', store)
    try:
        deadline = time.monotonic() + DEADLINE
        while not all((workdir / f'hung-{s.name}').exists() for s in SCENARIOS):
            if first.poll() is not None:
                pytest.fail(
                    f'the first process exited ({first.returncode}) before every scenario stopped:\n{_output(workdir, "start")}'
                )
            if time.monotonic() > deadline:
                pytest.fail(f'not every scenario stopped within {DEADLINE} s:\n{_output(workdir, "start")}')
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGKILL
    before, _, _, _ = asyncio.run(_read_log(workdir, store))

    second = _worker(workdir, 'recover', store)
    try:
        second.wait(timeout=DEADLINE)
    finally:
        second.kill()
        second.wait()
    assert second.returncode == 0, _output(workdir, 'recover')

    after, runs, replays, report = asyncio.run(_read_log(workdir, store))
    return Recovery(
        before=before,
        after=after,
        runs=runs,
        replays=replays,
        report=report,
        calls=(workdir / 'calls.txt').read_text().splitlines(),
        outcomes={s.name: json.loads((workdir / f'outcome-{s.name}.json').read_text()) for s in SCENARIOS},
        messages={s.name: (workdir / f'messages-{s.name}.json').read_bytes() for s in SCENARIOS},
        workflows=_workflows(workdir, store),
    )


def _without_timestamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timestamps(v) for k, v in value.items() if k != 'timestamp'}
    if isinstance(value, list):
        return [_without_timestamps(v) for v in value]
    return value


def _differences(left: Any, right: Any, path: str = '') -> list[str]:
    """Where two JSON values differ (for the assertion messages)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return [
            p for k in sorted(set(left) | set(right)) for p in _differences(left.get(k), right.get(k), f'{path}.{k}')
        ]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [p for i, (a, b) in enumerate(zip(left, right, strict=True)) for p in _differences(a, b, f'{path}[{i}]')]
    return [] if left == right else [path]


def test_dbos_recovered_every_workflow_from_its_system_database(recovery: Recovery) -> None:
    """DBOS itself recovered each workflow: its system database (the SQLite file, or the DBOS schema
    in the log's PostgreSQL database) holds every scenario as succeeded at its second attempt."""
    assert recovery.workflows == {s.name: ('SUCCESS', 2) for s in SCENARIOS}


# --- the kill ----------------------------------------------------------------------------------


@pytest.mark.parametrize('scenario', SCENARIOS, ids=lambda s: s.name)
def test_the_killed_process_committed_everything_before_the_step_in_flight(
    recovery: Recovery, scenario: Scenario
) -> None:
    """Durable at each step: the log the killed process left holds exactly the entries before the
    point it stopped at, and nothing of the step in flight."""
    [run_id] = recovery.runs_of(scenario, recovery.before)
    committed = recovery.entries_of(run_id, recovery.before)
    count = COMMITTED_AT_STOP[scenario.stop]
    assert [e.kind for e in committed] == FULL_RUN[:count]
    assert [e.idempotency_key for e in committed] == FULL_KEYS[:count]
    lines = [line.split(' ', 2) for line in recovery.calls]
    assert [what for mode, name, what in lines if mode == 'start' and name == scenario.name][-1] == (
        'tool:1' if scenario.stop == 'append:5' else scenario.stop
    )


# --- the recovered run: once, complete, consistent ---------------------------------------------


@pytest.mark.parametrize('scenario', WITH_IDS, ids=lambda s: s.name)
def test_the_recovered_run_is_recorded_once(recovery: Recovery, scenario: Scenario) -> None:
    """Exactly once under re-execution: one run record, every entry once, the entries committed
    before the kill kept as they were and the rest appended after them."""
    outcome = recovery.outcomes[scenario.name]
    assert outcome['status'] == 'SUCCESS'
    assert outcome['output'] == ANSWER
    run_id = outcome['run_id']
    if scenario.variant == 'wrapper':
        assert (run_id, outcome['conversation_id']) == (scenario.run_id, scenario.conversation_id)
    else:
        # `DBOSDurability` derives the run id from the workflow id: the same in both processes.
        assert run_id.startswith(f'{scenario.name}:')
    assert recovery.runs_of(scenario) == [run_id]

    record = recovery.run(run_id)
    assert record.status == 'completed'
    assert record.conversation_id == outcome['conversation_id']
    assert [r.run_id for r in recovery.runs if r.conversation_id == record.conversation_id] == [run_id]
    entries = recovery.entries_of(run_id)
    assert [e.kind for e in entries] == FULL_RUN
    assert [e.idempotency_key for e in entries] == FULL_KEYS
    result_messages = json.loads(recovery.messages[scenario.name])
    assert record.message_count == len(result_messages) == FULL_RUN.count('message')
    committed = recovery.entries_of(run_id, recovery.before)
    assert entries[: len(committed)] == committed

    # Which path made the appends durable: DBOS steps with the capability, idempotency keys only
    # with the wrapper (whose workflow records model requests only).
    journaled = [s for s in outcome['steps'] if 'eventlog_persistence' in s]
    assert bool(journaled) == (scenario.variant == 'durable')


@pytest.mark.parametrize('scenario', WITH_IDS, ids=lambda s: s.name)
def test_the_log_holds_the_recovered_messages_in_order(recovery: Recovery, scenario: Scenario) -> None:
    """The replay has the recovered run's messages, in order, each once: the same parts, ids and
    contents, whatever the timestamps (`test_replay_is_byte_exact_after_recovery` checks those)."""
    run_id = recovery.outcomes[scenario.name]['run_id']
    replayed = json.loads(recovery.replays[run_id])
    recovered = json.loads(recovery.messages[scenario.name])
    assert _without_timestamps(replayed) == _without_timestamps(recovered)


@pytest.mark.parametrize('scenario', WITH_IDS, ids=lambda s: s.name)
def test_replay_is_byte_exact_after_recovery(recovery: Recovery, scenario: Scenario) -> None:
    """Invariant 1 across a crash: `run_messages(run_id)` dumps byte for byte to the recovered
    run's `result.all_messages()`."""
    run_id = recovery.outcomes[scenario.name]['run_id']
    replayed = recovery.replays[run_id]
    recovered = recovery.messages[scenario.name]
    differing = _differences(json.loads(replayed), json.loads(recovered))
    assert replayed == recovered, f'the replay differs from the recovered run at {differing}'


@pytest.mark.parametrize('scenario', WITH_IDS, ids=lambda s: s.name)
def test_tool_effects_are_recorded_once_per_call(recovery: Recovery, scenario: Scenario) -> None:
    """Each tool call has one `started` and one `completed` entry, between the call and its return,
    even where the tool itself ran again on recovery (tools are not DBOS steps here)."""
    run_id = recovery.outcomes[scenario.name]['run_id']
    entries = recovery.entries_of(run_id)
    effects = [(e.seq, msgspec.json.decode(e.payload, type=ToolEffectInfo)) for e in entries if e.kind == 'tool_effect']
    assert Counter((info.tool_call_id, info.status) for _, info in effects) == {
        ('call-1', 'started'): 1,
        ('call-1', 'completed'): 1,
        ('call-2', 'started'): 1,
        ('call-2', 'completed'): 1,
    }
    assert all(info.tool_name == 'lookup' and info.error is None for _, info in effects)
    messages = [e for e in entries if e.kind == 'message']
    for step, call_id in enumerate(['call-1', 'call-2'], start=1):
        call_seq = next(e.seq for e in messages if b'"tool-call"' in e.payload and call_id.encode() in e.payload)
        return_seq = next(e.seq for e in messages if b'"tool-return"' in e.payload and call_id.encode() in e.payload)
        started = next(seq for seq, info in effects if info.tool_call_id == call_id and info.status == 'started')
        completed = next(seq for seq, info in effects if info.tool_call_id == call_id and info.status == 'completed')
        assert call_seq < started < completed < return_seq
        runs = [line for line in recovery.calls if line.endswith(f' {scenario.name} tool:{step}')]
        stopped_before = COMMITTED_AT_STOP[scenario.stop] <= FULL_KEYS.index(f'tool:{call_id}:0:started')
        # A tool runs again on recovery unless the workflow was killed before reaching it.
        assert len(runs) == (1 if stopped_before else 2)


def test_the_whole_log_verifies_and_holds_each_key_once(recovery: Recovery) -> None:
    assert recovery.report.ok, recovery.report.problems
    assert recovery.report.entries_checked == len(recovery.after)
    keys = Counter((e.run_id, e.idempotency_key) for e in recovery.after)
    assert [key for key, count in keys.items() if count > 1] == []


# --- DBOSAgent given no ids ----------------------------------------------------------------------


def test_dbos_agent_without_ids_records_the_recovered_run_as_a_new_run(recovery: Recovery) -> None:
    """The `DBOSAgent` wrapper, given neither `run_id` nor `conversation_id`, draws new ones when
    DBOS re-executes its workflow: it has no durability capability, so no capability answers
    `get_default_run_id()` and pydantic-ai's `resolve_run_id` falls back to a fresh UUID7 (and
    the conversation id to another). The log then holds two runs in two conversations: the killed
    attempt, left `running` with what it had committed, and the recovered run, complete and
    replaying byte for byte. Nothing is written twice under one run id."""
    [scenario] = [s for s in SCENARIOS if s.variant == 'wrapper-no-ids']
    outcome = recovery.outcomes[scenario.name]
    assert outcome['status'] == 'SUCCESS'
    [killed_id] = recovery.runs_of(scenario, recovery.before)
    assert recovery.runs_of(scenario) == [killed_id, outcome['run_id']]

    killed = recovery.run(killed_id)
    assert killed.status == 'running'
    assert killed.finished_at is None
    assert recovery.entries_of(killed_id) == recovery.entries_of(killed_id, recovery.before)
    assert len(recovery.entries_of(killed_id)) == COMMITTED_AT_STOP[scenario.stop]

    recovered = recovery.run(outcome['run_id'])
    assert recovered.status == 'completed'
    assert recovered.conversation_id == outcome['conversation_id'] != killed.conversation_id
    assert [e.idempotency_key for e in recovery.entries_of(recovered.run_id)] == FULL_KEYS
    assert recovery.replays[recovered.run_id] == recovery.messages[scenario.name]
