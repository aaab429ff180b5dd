"""The lease of a durable run: renewed while a long unit runs, taken from another execution only
once it lapsed (never because of a process id or a host name), and lost by a holder whose lease
was taken over, which then appends nothing more.

The in-process tests use every backend; the process tests run a real holder
(`_durable_worker.py hold`) that is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _durable_worker import ANSWER
from _helpers import stop_lease_clock
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_durability_crash import LEASE, WAIT, finish, kill, open_log, store, wait_hung, worker  # noqa: F401

from capability import EventLogDurability, EventLogPersistence
from eventlog import RunLease, RunLeaseError, durable_step_entry, run_started_entry
from eventlog._lease import get_lease
from eventlog.log import EventLogBase

DEADLINE = 120.0
"""Seconds a condition may take to come true before the test fails."""


def read_lease(log: EventLogBase, run_id: str) -> RunLease | None:
    """The run's lease as the store holds it, read synchronously (for `until` conditions)."""
    return log._read_sync(lambda txn: get_lease(txn, run_id))  # pyright: ignore[reportPrivateUsage]


async def until(condition: Any, what: str) -> None:
    """Wait until `condition()` is true (or fail after `DEADLINE`)."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f'{what} did not happen in time')
        await asyncio.sleep(0.02)


def held_agent(
    log: EventLogBase, gate: asyncio.Event, entered: asyncio.Event, lease_seconds: float
) -> Agent[None, str]:
    """An agent whose one model request waits for `gate` (a long unit)."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        await gate.wait()
        return ModelResponse(parts=[TextPart('done')])

    return Agent(
        FunctionModel(model),
        name='held',
        capabilities=[EventLogPersistence(log), EventLogDurability(log, lease_seconds=lease_seconds)],
    )


async def test_a_lease_is_renewed_while_a_long_unit_runs(log: EventLogBase) -> None:
    clock = stop_lease_clock(log)
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = held_agent(log, gate, entered, lease_seconds=3)
    running = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    first = read_lease(log, 'r1')
    assert first is not None
    # The holder renews a third of the way through (a second of real time): each renewal runs
    # from the clock's now, and the clock then moves past the first lease's end.
    clock.advance(2.0)
    await until(lambda: (read_lease(log, 'r1') or first).expires > first.expires, 'a renewal')
    clock.advance(1.5)
    assert clock() > first.expires
    renewed = read_lease(log, 'r1')
    assert renewed is not None and renewed.owner == first.owner and renewed.epoch == first.epoch
    assert renewed.expires > clock()
    with pytest.raises(RunLeaseError, match='only one process may execute a run at a time'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    gate.set()
    assert (await running).output == 'done'
    assert read_lease(log, 'r1') is None  # dropped when the run ended


async def test_a_lease_held_by_another_execution_is_taken_over_once_lapsed_and_not_before(log: EventLogBase) -> None:
    clock = stop_lease_clock(log)
    gate, entered = asyncio.Event(), asyncio.Event()
    gate.set()
    agent = held_agent(log, gate, entered, lease_seconds=60)
    # Another execution (anywhere: no pid or host name is kept) whose lease has a few seconds left.
    elsewhere = await log.take_run_lease('r1', 'someone-else', 3.0)
    with pytest.raises(RunLeaseError, match=r"run 'r1' is being executed by another process .* unless renewed") as err:
        await agent.run('go', run_id='r1', conversation_id='c1')
    assert err.value.held_until is not None and abs(err.value.held_until.timestamp() - elsewhere.expires) < 1e-3
    clock.advance(2.9)  # not yet lapsed
    with pytest.raises(RunLeaseError, match='is being executed by another process'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    assert not entered.is_set()
    assert read_lease(log, 'r1') == elsewhere  # untouched
    clock.advance(0.2)
    assert clock() > elsewhere.expires
    assert (await agent.run('go', run_id='r1', conversation_id='c1')).output == 'done'
    assert entered.is_set()
    assert read_lease(log, 'r1') is None


async def test_resume_waits_for_a_dead_holders_lease_when_asked(log: EventLogBase) -> None:
    clock = stop_lease_clock(log)
    entered = asyncio.Event()

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        return ModelResponse(parts=[TextPart('done')])

    durability = EventLogDurability(log, lease_seconds=60)
    agent = Agent(FunctionModel(model), name='held', capabilities=[durability])
    # A run left running by a holder that crashed right after recording its input.
    dead = await log.take_run_lease('r1', 'crashed-holder', 0.3)
    with log.run_lease_fence(dead):
        await log.append_many(
            [
                run_started_entry(conversation_id='c1', run_id='r1', agent_name='held', idempotency_key='start'),
                durable_step_entry(
                    conversation_id='c1',
                    run_id='r1',
                    step=0,
                    name='run_input',
                    result=b'{"prompt":"go"}',
                    idempotency_key='durable:0',
                ),
            ]
        )
    with pytest.raises(RunLeaseError):
        await durability.resume(agent, 'r1')
    with pytest.raises(RunLeaseError):
        await durability.resume(agent, 'r1', wait_for_lease=0.2)
    assert not entered.is_set()
    # A resume that waits: it retries when the lease's end comes (0.35 s of real time from now);
    # by then the clock has passed it.
    waiting = asyncio.create_task(durability.resume(agent, 'r1', wait_for_lease=30))
    await asyncio.sleep(0.05)
    assert not entered.is_set()
    clock.advance(0.4)
    result = await waiting
    assert result.output == 'done'
    assert clock() >= dead.expires
    assert (await log.get_run('r1')).status == 'completed'  # pyright: ignore[reportOptionalMemberAccess]


async def test_a_holder_whose_lease_was_taken_over_stops(log: EventLogBase) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = held_agent(log, gate, entered, lease_seconds=0.6)
    renew = log.renew_run_lease
    paused = asyncio.Event()
    attempts: list[RunLease] = []

    async def stalled(lease: RunLease, seconds: float) -> RunLease:
        await paused.wait()  # the holder is stalled: no renewal reaches the store
        attempts.append(lease)
        return await renew(lease, seconds)

    running = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    log.renew_run_lease = stalled  # pyright: ignore[reportAttributeAccessIssue]
    held = read_lease(log, 'r1')
    assert held is not None
    await until(lambda: time.time() > held.expires, 'the stalled lease lapsing')
    usurper = await log.take_run_lease('r1', 'usurper', 3600)
    assert usurper.epoch == held.epoch + 1
    before = await log.last_seq()
    paused.set()
    await until(lambda: len(attempts) >= 1, 'a renewal attempt after the takeover')
    gate.set()
    with pytest.raises(RunLeaseError, match=r"run 'r1' lost its lease"):
        await running
    assert read_lease(log, 'r1') == usurper  # the new holder's lease stays
    assert await log.last_seq() == before  # the lost holder appended nothing, not even its end
    run = await log.get_run('r1')
    assert run is not None and run.status == 'running'
    entries = Counter(e.kind for e in await log.entries(run_id='r1'))
    assert entries['message'] == 1  # the request; the response the lost holder got is not recorded


def test_a_holder_process_renews_its_lease_and_a_killed_one_is_taken_over_once_lapsed(
    tmp_path: Path,
    store: list[str],  # noqa: F811  (the fixture)
) -> None:
    """A real holder renews its lease while a unit runs (a rival gets `RunLeaseError` after the
    first lease expired); once killed, its lease holds off a rival until it lapses (the rival is
    told until when), and is then taken over."""
    name = 'basic-in-model-2'
    first = worker(tmp_path, 'start', store, name, env=LEASE)
    try:
        wait_hung(tmp_path, first, [name], 'start')
    finally:
        kill(first)
    (tmp_path / f'hung-{name}').unlink()
    log = open_log(tmp_path, store)
    try:
        long_lease = {'DURABLE_LEASE_SECONDS': '3', 'DURABLE_LEASE_WAIT': '30'}  # renewed every second
        holder = worker(tmp_path, 'hold', store, name, env=long_lease)
        try:
            wait_hung(tmp_path, holder, [name], 'hold')
            lease = read_lease(log, f'{name}-run')
            assert lease is not None
            asyncio.run(until(lambda: time.time() > lease.expires, 'the first lease expiring'))
            renewed = read_lease(log, f'{name}-run')
            assert renewed is not None and renewed.owner == lease.owner and renewed.expires > lease.expires
            rival = worker(tmp_path, 'resume', store, name, env=long_lease | {'DURABLE_LEASE_WAIT': '0'})
            finish(tmp_path, rival, 'resume')
            outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
            assert outcome['error'] == 'RunLeaseError', outcome
        finally:
            kill(holder)
        held = read_lease(log, f'{name}-run')
        assert held is not None and held.owner == renewed.owner
        rival = worker(tmp_path, 'resume', store, name, env={'DURABLE_LEASE_SECONDS': '3'})
        finish(tmp_path, rival, 'resume')
        if time.time() < held.expires:  # the rival ran before the lease lapsed (the usual case)
            outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
            assert outcome['error'] == 'RunLeaseError', outcome
            assert 'its lease runs until' in outcome['message']
        last = worker(tmp_path, 'resume', store, name, env=WAIT)
        finish(tmp_path, last, 'resume')
        outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
        assert outcome['output'] == ANSWER
        assert read_lease(log, f'{name}-run') is None
    finally:
        log.close()
    calls = [line.split(' ') for line in (tmp_path / 'calls.txt').read_text().splitlines()]
    # model 2 was in flight in the first and the holding process; the rivals executed nothing.
    assert Counter(unit for _, _, unit in calls) == {
        'model:1': 1,
        'tool:alpha': 1,
        'model:2': 3,
        'tool:beta': 1,
        'model:3': 1,
    }
