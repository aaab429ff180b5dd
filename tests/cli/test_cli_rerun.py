"""`eventlog rerun RUN --agent module:attribute`, through the console script in real processes.

The agents live in a module written to the test's directory and put on `PYTHONPATH`, as an
application's would be. The runs are recorded by a separate process (one with the durable
journal and `EventLogPersistence`, one with `EventLogPersistence` alone); the checking agents'
model and tool raise if called, so a check that reproduces shows neither was.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EVENTLOG = Path(sys.executable).parent / 'eventlog'
"""The console script, as installed next to the interpreter."""

AGENTS = """
import os

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from capability import EventLogDurability, EventLogPersistence
from eventlog import LmdbEventLog

LOG = LmdbEventLog(os.environ['RERUN_STORE'])


def script(messages, info):
    step = sum(isinstance(m, ModelResponse) for m in messages)
    if step == 0:
        return ModelResponse(parts=[ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id='c1')])
    if step == 1:
        return ModelResponse(parts=[ToolCallPart('lookup', {'key': 'beta'}, tool_call_id='c2')])
    return ModelResponse(parts=[TextPart('found both')])


def refuse(messages, info):
    raise AssertionError('the model was called during a check')


def make(*, instructions='Look things up.', durable=True, recording=False):
    capabilities = [EventLogPersistence(LOG)] + ([EventLogDurability(LOG)] if durable else [])
    model = FunctionModel(script if recording else refuse, model_name='scripted')
    agent = Agent(model, name='finder', instructions=instructions, capabilities=capabilities)

    @agent.tool_plain
    def lookup(key: str) -> str:
        if not recording:
            raise AssertionError('the tool was called during a check')
        return key + ' is here'

    return agent


recorder = make(recording=True)
plain_recorder = make(recording=True, durable=False)
agent = make()
changed = make(instructions='Look nothing up.')
plain = make(durable=False)
plain_changed = make(durable=False, instructions='Look nothing up.')
not_an_agent = 42
"""

RECORD = """
import asyncio
import rerun_agents as m

async def main():
    await m.recorder.run('find alpha and beta', run_id='refund-0001', conversation_id='c1')
    await m.recorder.run('find alpha and beta', run_id='refund-0002', conversation_id='c2')
    await m.plain_recorder.run('find alpha and beta', run_id='plain-0001', conversation_id='c3')

asyncio.run(main())
"""


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / 'runs.lmdb'
        (root / 'rerun_agents.py').write_text(AGENTS)
        (root / 'broken_agents.py').write_text("raise RuntimeError('no API key in the environment')\n")
        done = subprocess.run(
            [sys.executable, '-c', RECORD], env=self.env(), capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr

    def env(self) -> dict[str, str]:
        env = {**os.environ, 'COLUMNS': '200', 'RERUN_STORE': str(self.path)}
        env['PYTHONPATH'] = os.pathsep.join([str(self.root), str(ROOT), env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
        env.pop('EVENTLOG_STORE', None)
        return env

    def rerun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(EVENTLOG), 'rerun', *args, '--store', str(self.path)],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=self.root,
        )

    def state(self) -> str:
        return hashlib.sha256((self.path / 'data.mdb').read_bytes()).hexdigest()


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp('rerun'))


def test_an_unchanged_agent_reproduces_with_status_0(store: Store) -> None:
    before = store.state()
    done = store.rerun('refund-0001', '--agent', 'rerun_agents:agent')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('run refund-0001 reproduces: ')
    assert done.stderr == ''
    plain = store.rerun('plain-0001', '--agent', 'rerun_agents:plain')
    assert plain.returncode == 0, plain.stderr
    assert 'reproduces: 5 units compared with its recorded messages' in plain.stdout
    assert store.state() == before


def test_changed_instructions_diverge_with_status_1_and_both_sides(store: Store) -> None:
    before = store.state()
    for run, agent in (('refund-0001', 'changed'), ('plain-0001', 'plain_changed')):
        done = store.rerun(run, '--agent', f'rerun_agents:{agent}')
        assert done.returncode == 1, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f'run {run} diverges at unit 1 '), done.stdout
        assert '"Look things up." -> "Look nothing up."' in lines[1]
        recorded = next(i for i, line in enumerate(lines) if line.lstrip().startswith('recorded:'))
        now = next(i for i, line in enumerate(lines) if line.lstrip().startswith('now:'))
        assert 'Look things up.' in lines[recorded + 1] and 'Look nothing up.' in lines[now + 1]
    assert store.state() == before


def test_a_unique_prefix_names_the_run_and_json_reports_it(store: Store) -> None:
    done = store.rerun('plain', '--agent', 'rerun_agents:plain', '--json')
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report['run_id'] == 'plain-0001' and report['reproduces'] is True and report['against'] == 'messages'
    diverged = json.loads(store.rerun('plain', '--agent', 'rerun_agents:plain_changed', '--json').stdout)
    assert diverged['reproduces'] is False
    assert diverged['first_divergence']['unit'] == 1
    assert 'Look nothing up.' in diverged['first_divergence']['current']['detail']


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (
            ['refund-0001', '--agent', 'rerun_agents'],
            "--agent takes module:attribute (such as myapp.agents:support), not 'rerun_agents'",
        ),
        (
            ['refund-0001', '--agent', 'no_such_module:agent'],
            "--agent no_such_module:agent: no module named 'no_such_module'",
        ),
        (
            ['refund-0001', '--agent', 'rerun_agents:missing'],
            "--agent rerun_agents:missing: 'rerun_agents' has no attribute 'missing'",
        ),
        (['refund-0001', '--agent', 'rerun_agents:not_an_agent'], "'not_an_agent' is a int, not a pydantic-ai Agent"),
        (
            ['refund-0001', '--agent', 'broken_agents:agent'],
            "importing 'broken_agents' failed: RuntimeError: no API key",
        ),
        (['nope', '--agent', 'rerun_agents:agent'], "no run 'nope' in this log"),
        (
            ['refund', '--agent', 'rerun_agents:agent'],
            "run id prefix 'refund' is ambiguous: it starts refund-0001, refund-0002",
        ),
    ],
)
def test_what_cannot_be_checked_is_one_line_and_status_2(store: Store, args: list[str], message: str) -> None:
    done = store.rerun(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ''
    assert done.stderr.count('\n') == 1 and done.stderr.startswith('eventlog: '), done.stderr
    assert message in done.stderr


def test_a_missing_agent_option_and_a_missing_store_are_usage_errors(store: Store, tmp_path: Path) -> None:
    missing = subprocess.run(
        [str(EVENTLOG), 'rerun', 'refund-0001', '--store', str(store.path)],
        env=store.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2 and 'required: --agent' in missing.stderr
    nowhere = subprocess.run(
        [str(EVENTLOG), 'rerun', 'refund-0001', '--agent', 'rerun_agents:agent', '--store', str(tmp_path / 'none')],
        env=store.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert nowhere.returncode == 2 and nowhere.stderr.count('\n') == 1 and 'no store at' in nowhere.stderr
