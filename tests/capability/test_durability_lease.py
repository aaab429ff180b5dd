"""The lease of a durable run: renewed while a long unit runs, taken over once it expired (and not
before) when its holder is on another host, and lost by a holder whose lease was taken over.

Other hosts are simulated by writing the lease record with another host name. The in-process
tests use every backend; the process tests run a real holder (`_durable_worker.py hold`) that is
killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _durable_worker import ANSWER
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_durability_crash import finish, kill, open_log, store, wait_hung, worker  # noqa: F401  (store: a fixture)

from capability import EventLogDurability, EventLogPersistence
from capability.durability import LEASE_PROJECTION
from eventlog import RunLeaseError
from eventlog.log import EventLogBase
from eventlog.projection import LogReader, ProjectionRecords, ProjectionStore, ProjectionWriter

DEADLINE = 120.0
"""Seconds a condition may take to come true before the test fails."""


class Lease(msgspec.Struct, frozen=True):
    """The lease record as the store holds it."""

    owner: str
    host: str
    pid: int
    expires: float


def read_lease(log: Any, run_id: str) -> Lease | None:
    assert isinstance(log, ProjectionStore)

    def read(records: ProjectionRecords, _reader: LogReader) -> bytes | None:
        return records.get('leases', run_id.encode())

    raw = log.read_projection(LEASE_PROJECTION, read)
    return None if raw is None else msgspec.json.decode(raw, type=Lease)


def write_lease(log: Any, run_id: str, lease: Lease) -> None:
    assert isinstance(log, ProjectionStore)

    def write(records: ProjectionWriter, _reader: LogReader) -> None:
        records.put('leases', run_id.encode(), msgspec.json.encode(lease))

    log.write_projection(LEASE_PROJECTION, write)


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
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = held_agent(log, gate, entered, lease_seconds=3)
    running = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    first = read_lease(log, 'r1')
    assert first is not None and first.pid == os.getpid() and first.host == socket.gethostname()
    # The first lease has expired by the clock, and the holder has renewed it meanwhile.
    await until(lambda: time.time() > first.expires, 'the first lease expiring')
    await until(lambda: (read_lease(log, 'r1') or first).expires > time.time() + 1, 'a renewal')
    renewed = read_lease(log, 'r1')
    assert renewed is not None and renewed.owner == first.owner and renewed.expires > first.expires
    with pytest.raises(RunLeaseError, match='only one process may execute a run at a time'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    gate.set()
    assert (await running).output == 'done'
    assert read_lease(log, 'r1') is None  # dropped when the run ended


async def test_a_lease_held_on_another_host_is_taken_over_once_expired_and_not_before(log: EventLogBase) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    gate.set()
    agent = held_agent(log, gate, entered, lease_seconds=60)
    # A holder on another host (its pid means nothing here) whose lease has a few seconds left.
    elsewhere = Lease('someone-else', 'another-host.example', 1, time.time() + 8.0)
    write_lease(log, 'r1', elsewhere)
    with pytest.raises(RunLeaseError, match=r"run 'r1' is being executed by process 1 on another-host\.example"):
        await agent.run('go', run_id='r1', conversation_id='c1')
    assert not entered.is_set()
    assert read_lease(log, 'r1') == elsewhere  # untouched
    await until(lambda: time.time() > elsewhere.expires, 'the lease expiring')
    assert (await agent.run('go', run_id='r1', conversation_id='c1')).output == 'done'
    assert entered.is_set()
    assert read_lease(log, 'r1') is None


async def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(log: EventLogBase) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    gate.set()
    agent = held_agent(log, gate, entered, lease_seconds=60)
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()  # reaped: its pid names no process
    write_lease(log, 'r1', Lease('dead-holder', socket.gethostname(), dead.pid, time.time() + 3600))
    assert (await agent.run('go', run_id='r1', conversation_id='c1')).output == 'done'


async def test_a_holder_whose_lease_was_taken_over_stops(log: EventLogBase) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = held_agent(log, gate, entered, lease_seconds=0.3)
    assert isinstance(log, ProjectionStore)
    write_projection = log.write_projection
    renewals: list[object] = []

    def counting(spec: Any, fn: Any) -> Any:
        try:
            return write_projection(spec, fn)
        finally:
            if spec == LEASE_PROJECTION:
                renewals.append(spec)

    running = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    # Another process on another host took the lease over (as it may once the holder stalled past expiry).
    write_lease(log, 'r1', Lease('usurper', 'another-host.example', 7, time.time() + 3600))
    log.write_projection = counting  # pyright: ignore[reportAttributeAccessIssue]
    await until(lambda: len(renewals) >= 1, 'a renewal attempt after the takeover')
    gate.set()
    with pytest.raises(RunLeaseError, match=r"run 'r1' lost its lease: .* on another-host\.example"):
        await running
    lease = read_lease(log, 'r1')
    assert lease is not None and lease.owner == 'usurper'  # the new holder's lease stays
    entries = Counter(e.kind for e in await log.entries(run_id='r1'))
    assert entries['message'] == 1  # the request; the response the lost holder got is not recorded


def test_a_holder_process_renews_its_lease_and_an_expired_one_elsewhere_is_taken_over(
    tmp_path: Path,
    store: list[str],  # noqa: F811  (the fixture)
) -> None:
    """A real holder renews its lease while a unit runs (a rival gets `RunLeaseError` after the
    first lease expired); once killed, its lease, moved to another host, holds off a rival until
    it expires, and is then taken over."""
    name = 'basic-in-model-2'
    os.environ['DURABLE_LEASE_SECONDS'] = '3'
    try:
        first = worker(tmp_path, 'start', store, name)
        try:
            wait_hung(tmp_path, first, [name], 'start')
        finally:
            kill(first)
        (tmp_path / f'hung-{name}').unlink()
        log = open_log(tmp_path, store)
        try:
            holder = worker(tmp_path, 'hold', store, name)
            try:
                wait_hung(tmp_path, holder, [name], 'hold')
                lease = read_lease(log, f'{name}-run')
                assert lease is not None and lease.pid == holder.pid
                asyncio.run(until(lambda: time.time() > lease.expires, 'the first lease expiring'))
                renewed = read_lease(log, f'{name}-run')
                assert renewed is not None and renewed.owner == lease.owner and renewed.expires > lease.expires
                rival = worker(tmp_path, 'resume', store, name)
                finish(tmp_path, rival, 'resume')
                outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
                assert outcome['error'] == 'RunLeaseError', outcome
            finally:
                kill(holder)
            # The dead holder was "on another host": its lease holds until it expires.
            held = read_lease(log, f'{name}-run')
            assert held is not None and held.pid == holder.pid
            elsewhere = Lease(held.owner, 'another-host.example', held.pid, time.time() + 8.0)
            write_lease(log, f'{name}-run', elsewhere)
            rival = worker(tmp_path, 'resume', store, name)
            finish(tmp_path, rival, 'resume')
            if time.time() < elsewhere.expires:  # the rival ran before the lease expired (the usual case)
                outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
                assert outcome['error'] == 'RunLeaseError', outcome
                assert 'another-host.example' in outcome['message']
            asyncio.run(until(lambda: time.time() > elsewhere.expires, 'the lease expiring'))
            last = worker(tmp_path, 'resume', store, name)
            finish(tmp_path, last, 'resume')
            outcome = json.loads((tmp_path / f'outcome-{name}.json').read_text())
            assert outcome['output'] == ANSWER
            assert read_lease(log, f'{name}-run') is None
        finally:
            log.close()
    finally:
        del os.environ['DURABLE_LEASE_SECONDS']
    calls = [line.split(' ') for line in (tmp_path / 'calls.txt').read_text().splitlines()]
    # model 2 was in flight in the first and the holding process; the rivals executed nothing.
    assert Counter(unit for _, _, unit in calls) == {
        'model:1': 1,
        'tool:alpha': 1,
        'model:2': 3,
        'tool:beta': 1,
        'model:3': 1,
    }
