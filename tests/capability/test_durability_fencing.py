"""The lease of a durable run is a fencing token in the log's own store.

Real processes (`_durable_worker.py`) attack it the ways that used to execute a run twice: a
rival in another PID namespace under the same host name, two PostgreSQL handles that keep their
projections in local directories of their own, and a holder stopped (SIGSTOP) past its lease
that continues after another process took the run over. Every tool execution is counted in
`calls.txt`. At the API level, an append under a stale fence writes nothing, on every backend
(on PostgreSQL also after the one-round-trip path cached the lease record).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _durable_worker import ANSWER, UNITS
from _helpers import stop_lease_clock
from backends import postgres_dsn, schema_for
from pgserver import drop_schema
from test_durability_crash import finish, kill, open_log, output_of, read_log, store, wait_hung, worker  # noqa: F401

from eventlog import NewEntry, RunLeaseError, message_entry, run_started_entry
from eventlog.log import EventLogBase

PAUSE_LEASE = 2.0
"""The lease of the holder that is stopped past it (seconds)."""


def calls(workdir: Path) -> list[tuple[str, str, str]]:
    path = workdir / 'calls.txt'
    lines = path.read_text().splitlines() if path.exists() else []
    return [tuple(line.split(' ')) for line in lines]  # pyright: ignore[reportReturnType]


def outcome(workdir: Path, name: str, prefix: str = 'outcome') -> dict[str, Any]:
    return json.loads((workdir / f'{prefix}-{name}.json').read_text())


def one_executes(workdir: Path, name: str) -> None:
    """The rival executed nothing and got `RunLeaseError`; no unit ran twice."""
    result = outcome(workdir, name)
    assert result.get('error') == 'RunLeaseError', result
    made = calls(workdir)
    assert [unit for mode, _, unit in made if mode == 'resume'] == []
    assert all(count == 1 for count in Counter(unit for _, _, unit in made).values()), made


@pytest.mark.skipif(shutil.which('unshare') is None, reason='needs unshare(1)')
def test_a_rival_in_another_pid_namespace_with_the_same_host_name_does_not_take_a_live_lease(tmp_path: Path) -> None:
    """The holder and the rival run in PID namespaces of their own, under this host name: in the
    rival's namespace no process has the holder's pid, which must not free the lease."""
    name = 'basic-in-tool-beta'
    # The holder's namespace starts a few hundred processes first: its pid is not one of the
    # rival's own thread ids, which a signal 0 would find alive.
    spawn = 'i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; "$@"; exit $?'
    holder = worker(
        tmp_path,
        'start',
        ['lmdb'],
        name,
        prefix=['unshare', '-p', '-f', '--kill-child', '--mount-proc', 'sh', '-c', spawn, 'sh'],
    )
    try:
        wait_hung(tmp_path, holder, [name], 'start')
        rival = worker(
            tmp_path, 'resume', ['lmdb'], name, prefix=['unshare', '-p', '-f', '--kill-child', '--mount-proc']
        )
        finish(tmp_path, rival, 'resume')
        one_executes(tmp_path, name)
    finally:
        kill(holder)
    assert [unit for _, _, unit in calls(tmp_path)] == UNITS['basic'][:4]


def test_two_postgres_handles_with_projections_dirs_of_their_own_share_the_lease(tmp_path: Path) -> None:
    """Leases live in the database's tables, not in the local projections directory."""
    found = ['postgres', postgres_dsn(), schema_for(tmp_path)]
    name = 'basic-in-tool-beta'
    try:
        holder = worker(tmp_path, 'start', found, name, env={'DURABLE_PROJECTIONS_DIR': str(tmp_path / 'a')})
        try:
            wait_hung(tmp_path, holder, [name], 'start')
            rival = worker(tmp_path, 'resume', found, name, env={'DURABLE_PROJECTIONS_DIR': str(tmp_path / 'b')})
            finish(tmp_path, rival, 'resume')
            one_executes(tmp_path, name)
        finally:
            kill(holder)
    finally:
        drop_schema(found[1], found[2])


def test_a_holder_stopped_past_its_lease_appends_nothing_once_taken_over(tmp_path: Path, store: list[str]) -> None:  # noqa: F811
    """SIGSTOP the holder just before it journals a tool's result, past its lease; another process
    takes the run over and completes it; the holder, continued, appends nothing and fails with
    `RunLeaseError` (recording no end); the run stays completed and verifies."""
    name = 'basic-returned-tool-alpha'
    lease = {'DURABLE_LEASE_SECONDS': str(PAUSE_LEASE)}
    holder = worker(tmp_path, 'pause', store, name, env=lease)
    try:
        wait_hung(tmp_path, holder, [name], 'pause')
        holder.send_signal(signal.SIGSTOP)
        time.sleep(PAUSE_LEASE + 1.0)  # its last renewal lapses while it is stopped
        rival = worker(tmp_path, 'resume', store, name, env=lease)
        finish(tmp_path, rival, 'resume')
        assert outcome(tmp_path, name)['output'] == ANSWER
        taken_over, _, _, _ = asyncio.run(read_log(tmp_path, store))
        (tmp_path / f'go-{name}').write_text('')
        holder.send_signal(signal.SIGCONT)
        finish(tmp_path, holder, 'pause')
    finally:
        if holder.poll() is None:
            holder.send_signal(signal.SIGCONT)
            kill(holder)
    paused = outcome(tmp_path, name, 'paused')
    assert paused.get('error') == 'RunLeaseError', (paused, output_of(tmp_path, 'pause'))
    entries, runs, _, report = asyncio.run(read_log(tmp_path, store))
    assert [(e.seq, e.kind, e.payload) for e in entries] == [(e.seq, e.kind, e.payload) for e in taken_over]
    [run] = [r for r in runs if r.run_id == f'{name}-run']
    assert run.status == 'completed'
    assert report.ok, report.problems
    made = calls(tmp_path)
    # tool alpha had returned in the stopped holder: the new holder executed it again, and the rest once.
    assert [unit for mode, _, unit in made if mode == 'pause'] == ['model:1', 'tool:alpha']
    assert [unit for mode, _, unit in made if mode == 'resume'] == UNITS['basic'][1:]


def _entries(n: int) -> list[NewEntry]:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return [
        message_entry(ModelRequest(parts=[UserPromptPart(f'u{i}')]), conversation_id='c1', run_id='r1')
        for i in range(n)
    ]


async def test_an_append_under_a_stale_fence_writes_nothing(log: EventLogBase) -> None:
    clock = stop_lease_clock(log)
    old = await log.take_run_lease('r1', 'old', 0.3)
    with log.run_lease_fence(old):
        await log.append(run_started_entry(conversation_id='c1', run_id='r1'))
        await log.append_many(_entries(2))
    with pytest.raises(RunLeaseError, match='only one process may execute a run at a time') as raised:
        await log.take_run_lease('r1', 'new', 60)
    assert raised.value.held_until is not None
    assert abs(raised.value.held_until.timestamp() - old.expires) < 1e-3
    clock.advance(0.35)  # lapsed: nothing but time frees it
    new = await log.take_run_lease('r1', 'new', 60)
    assert new.epoch == old.epoch + 1
    last = await log.last_seq()
    with log.run_lease_fence(old):
        with pytest.raises(RunLeaseError, match="run 'r1' lost its lease"):
            await log.append_many(_entries(3))
        with pytest.raises(RunLeaseError):
            await log.append(_entries(1)[0])
    with pytest.raises(RunLeaseError):
        await log.renew_run_lease(old, 60)
    assert not await log.release_run_lease(old)
    assert await log.last_seq() == last
    with log.run_lease_fence(new):
        await log.append_many(_entries(1))
    assert await log.last_seq() == last + 1
    assert await log.get_run_lease('r1') == new
    assert await log.release_run_lease(new)
    assert await log.get_run_lease('r1') is None
    assert (await log.verify()).ok


async def test_a_postgres_append_on_one_trip_under_a_lease_taken_over_elsewhere_writes_nothing(tmp_path: Path) -> None:
    """The one-trip path's guard covers the lease record: a handle that cached it appends nothing
    once another handle took the lease over."""
    from eventlog.postgres_log import PostgresEventLog

    dsn, schema = postgres_dsn(), schema_for(tmp_path)
    first = PostgresEventLog(dsn, schema=schema)
    second = PostgresEventLog(dsn, schema=schema)
    clock = stop_lease_clock(second)
    try:
        old = await first.take_run_lease('r1', 'old', 0.5)
        with first.run_lease_fence(old):
            await first.append(run_started_entry(conversation_id='c1', run_id='r1'))
            for entry in _entries(6):
                await first.append(entry)
        assert first._trips['one'] > 0  # pyright: ignore[reportPrivateUsage]
        clock.advance(0.55)  # lapsed by the clock of the handle that takes it over
        new = await second.take_run_lease('r1', 'new', 60)
        last = await second.last_seq()
        with first.run_lease_fence(old), pytest.raises(RunLeaseError):
            await first.append(_entries(1)[0])
        assert await second.last_seq() == last
        with second.run_lease_fence(new):
            await second.append(_entries(1)[0])
        assert await first.last_seq() == last + 1
    finally:
        first.close()
        second.close()
        drop_schema(dsn, schema)
