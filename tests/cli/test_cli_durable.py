"""`eventlog runs --interrupted`, and how `replay` shows the `durable_step` entries of a durable run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from clitools import invoke
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from capability import EventLogDurability, EventLogPersistence
from eventlog import LmdbEventLog, run_started_entry


def build(path: Path) -> None:
    async def work() -> None:
        log = LmdbEventLog(path)
        agent = Agent(TestModel(), name='durable', capabilities=[EventLogPersistence(log), EventLogDurability(log)])
        await agent.run('hello', run_id='done-run', conversation_id='c1')
        await log.append(run_started_entry(conversation_id='c2', run_id='cut-run', agent_name='durable'))
        log.close()

    asyncio.run(work())


def test_runs_interrupted_lists_only_the_unfinished_runs(tmp_path: Path) -> None:
    store = tmp_path / 'store.lmdb'
    build(store)
    everything = json.loads(invoke('runs', '--json', store=store).stdout)
    assert sorted(r['run_id'] for r in everything) == ['cut-run', 'done-run']
    result = invoke('runs', '--interrupted', '--json', store=store)
    assert result.exit_code == 0, result.output
    assert [r['run_id'] for r in json.loads(result.stdout)] == ['cut-run']
    table = invoke('runs', '--interrupted', store=store).stdout
    assert 'cut-run'[:4] in table and '1 runs: 1 running' in table
    assert invoke('runs', 'c1', '--interrupted', store=store).stdout.strip().endswith('no interrupted runs')


def test_replay_names_each_durable_step(tmp_path: Path) -> None:
    store = tmp_path / 'store.lmdb'
    build(store)
    out = invoke('replay', 'done-run', store=store).stdout
    assert 'durable run input' in out
    assert 'durable step 2 durable__model.request' in out
