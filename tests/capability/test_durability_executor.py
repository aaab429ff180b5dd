"""An executor id (`EventLogDurability(..., executor_id=...)`, `take_run_lease(..., executor=...)`):
a process that persists its identity across restarts takes its own runs' leases over at once,
fenced as any takeover; another executor, or none, still waits for the lease to lapse (issue 42).

Real processes (`_durable_worker.py`) are SIGKILLed and SIGSTOPped with leases of an hour, so
that nothing but the executor id can let a resumer in: a restarted worker resumes at once, a
stopped holder continued after the takeover appends nothing, another executor id is refused.
At the API level, on every backend: who may take a held lease, the old token fenced, a renewal
keeping the executor, a stored record still read by a decoder of the old three fields.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from _durable_worker import ANSWER, UNITS
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_durability_crash import finish, kill, read_log, store, wait_hung, worker  # noqa: F401
from test_durability_fencing import calls, outcome

from capability import EventLogDurability, EventLogPersistence
from eventlog import InvalidArgumentError, RunLeaseError, message_entry, run_started_entry
from eventlog._keys import Table, lease_key
from eventlog.log import EventLogBase

HOUR = {'DURABLE_LEASE_SECONDS': '3600', 'DURABLE_LEASE_WAIT': '0'}
"""A lease that never lapses during a test, and a resumer that does not wait for it."""


def _as(executor: str) -> dict[str, str]:
    return {**HOUR, 'DURABLE_EXECUTOR': executor}


# -- real processes --------------------------------------------------------------------------


def test_a_restarted_worker_resumes_its_own_runs_at_once_and_another_executor_is_refused(
    tmp_path: Path,
    store: list[str],  # noqa: F811  (the fixture)
) -> None:
    name = 'basic-in-model-2'
    first = worker(tmp_path, 'start', store, name, env=_as('worker-a'))
    try:
        wait_hung(tmp_path, first, [name], 'start')
    finally:
        kill(first)
    before, _, _, _ = asyncio.run(read_log(tmp_path, store))
    # Another executor (and one with none) meets a lease of an hour: refused, nothing executed.
    for env in (_as('worker-b'), HOUR):
        rival = worker(tmp_path, 'resume', store, name, env=env)
        finish(tmp_path, rival, 'resume')
        refused = outcome(tmp_path, name)
        assert refused.get('error') == 'RunLeaseError' and 'its lease runs until' in refused['message'], refused
    assert [unit for mode, _, unit in calls(tmp_path) if mode == 'resume'] == []
    # The same executor, restarted: takes its run over at once and finishes it.
    restarted = worker(tmp_path, 'resume', store, name, env=_as('worker-a'))
    finish(tmp_path, restarted, 'resume')
    assert outcome(tmp_path, name) == {'output': ANSWER, 'run_id': f'{name}-run'}
    after, runs, _, report = asyncio.run(read_log(tmp_path, store))
    assert [(e.seq, e.payload) for e in after[: len(before)]] == [(e.seq, e.payload) for e in before]
    [run] = [r for r in runs if r.run_id == f'{name}-run']
    assert run.status == 'completed' and report.ok, report.problems
    # model 2 was in flight when the worker died; nothing journaled ran again.
    assert Counter(unit for _, _, unit in calls(tmp_path)) == {
        'model:1': 1,
        'tool:alpha': 1,
        'model:2': 2,
        'tool:beta': 1,
        'model:3': 1,
    }


def test_a_stopped_holder_of_the_same_executor_is_fenced_after_the_takeover(
    tmp_path: Path,
    store: list[str],  # noqa: F811
) -> None:
    """The holder is not dead but stopped (SIGSTOP) when its executor restarts elsewhere: the new
    process takes the run over at once (its lease has an hour left) and completes it; the holder,
    continued, appends nothing and fails with `RunLeaseError`."""
    name = 'basic-returned-tool-alpha'
    holder = worker(tmp_path, 'pause', store, name, env=_as('worker-a'))
    try:
        wait_hung(tmp_path, holder, [name], 'pause')
        holder.send_signal(signal.SIGSTOP)
        restarted = worker(tmp_path, 'resume', store, name, env=_as('worker-a'))
        finish(tmp_path, restarted, 'resume')
        assert outcome(tmp_path, name).get('output') == ANSWER, outcome(tmp_path, name)
        taken_over, _, _, _ = asyncio.run(read_log(tmp_path, store))
        (tmp_path / f'go-{name}').write_text('')
        holder.send_signal(signal.SIGCONT)
        finish(tmp_path, holder, 'pause')
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGCONT)
            kill(holder)
    paused = outcome(tmp_path, name, 'paused')
    assert paused.get('error') == 'RunLeaseError', paused
    entries, runs, _, report = asyncio.run(read_log(tmp_path, store))
    assert [(e.seq, e.kind, e.payload) for e in entries] == [(e.seq, e.kind, e.payload) for e in taken_over]
    [run] = [r for r in runs if r.run_id == f'{name}-run']
    assert run.status == 'completed' and report.ok, report.problems
    made = calls(tmp_path)
    assert [unit for mode, _, unit in made if mode == 'pause'] == ['model:1', 'tool:alpha']
    assert [unit for mode, _, unit in made if mode == 'resume'] == UNITS['basic'][1:]


# -- the log's API, every backend -------------------------------------------------------------


def _request(text: str) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(text)])]


async def test_only_the_same_executor_takes_a_held_lease_and_the_old_token_is_fenced(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='c1', run_id='r1'))
    old = await log.take_run_lease('r1', 'exec-1', 3600, executor='node-a')
    assert old.executor == 'node-a' and old.epoch == 1
    for owner, executor in (('exec-2', 'node-b'), ('exec-3', None)):
        with pytest.raises(RunLeaseError) as refused:
            await log.take_run_lease('r1', owner, 3600, executor=executor)
        assert refused.value.held_until is not None
    new = await log.take_run_lease('r1', 'exec-4', 3600, executor='node-a')
    assert (new.owner, new.epoch, new.executor) == ('exec-4', 2, 'node-a')
    before = await log.last_seq()
    with log.run_lease_fence(old), pytest.raises(RunLeaseError, match='lost its lease'):
        await log.append(message_entry(_request('stale')[0], conversation_id='c1', run_id='r1'))
    assert await log.last_seq() == before
    with pytest.raises(RunLeaseError):
        await log.renew_run_lease(old, 3600)
    assert not await log.release_run_lease(old)
    renewed = await log.renew_run_lease(new, 7200)
    assert renewed.executor == 'node-a' and await log.get_run_lease('r1') == renewed
    with log.run_lease_fence(renewed):
        await log.append(message_entry(_request('fresh')[0], conversation_id='c1', run_id='r1'))
    # A lease taken with no executor is never taken over early, not even by an executor id.
    await log.take_run_lease('r2', 'plain', 3600)
    with pytest.raises(RunLeaseError):
        await log.take_run_lease('r2', 'exec-5', 3600, executor='node-a')


async def test_an_executor_id_is_checked_like_an_id(log: EventLogBase) -> None:
    for bad in ('', 'a\x00b', 'x' * 5000):
        with pytest.raises(InvalidArgumentError, match='executor'):
            await log.take_run_lease('r1', 'exec-1', 30, executor=bad)
        with pytest.raises(InvalidArgumentError, match='executor_id'):
            EventLogDurability(log, executor_id=bad)
    assert await log.get_run_lease('r1') is None


async def test_a_lease_record_with_an_executor_reads_with_the_fields_of_before(log: EventLogBase) -> None:
    """Processes of the previous release sharing the store decode the record as three fields."""

    class Before(msgspec.Struct, frozen=True, array_like=True):
        owner: str
        epoch: int
        expires: float

    taken = await log.take_run_lease('r1', 'exec-1', 30, executor='node-a')
    raw = log._read_sync(lambda txn: txn.get(Table.META, lease_key('r1')))  # pyright: ignore[reportPrivateUsage]
    assert raw is not None
    assert msgspec.msgpack.decode(raw, type=Before) == Before('exec-1', 1, taken.expires)


async def test_the_same_run_twice_at_once_in_one_process_is_refused_not_taken_over(log: EventLogBase) -> None:
    """An executor id names a process: a second execution of a run already executing in this
    process gets `RunLeaseError` instead of fencing the first."""
    gate, entered = asyncio.Event(), asyncio.Event()

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        await gate.wait()
        return ModelResponse(parts=[TextPart('done')])

    durability = EventLogDurability(log, executor_id='node-a', lease_seconds=3600)
    agent = Agent(FunctionModel(model), name='held', capabilities=[EventLogPersistence(log), durability])
    first = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    with pytest.raises(RunLeaseError, match='in this process already'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    gate.set()
    assert (await first).output == 'done'
    # Once the first ended, the run may be executed again here (it replays from its journal).
    assert (await durability.resume(agent, 'r1')).output == 'done'
