"""`capability.rerun.check`: re-executing a recorded run with today's agent, hermetically.

Runs are recorded on real LMDB stores by real agents driven by `FunctionModel` (two steps of tool
calls, one of them parallel, then an answer), in three ways: `EventLogDurability` with
`EventLogPersistence`, `EventLogDurability` alone, `EventLogPersistence` alone. Each is then
checked with agents whose model and tools raise when called (and count it): unchanged, with other
instructions, with a tool's signature changed, with a tool gone or renamed. The store's bytes and
entry count are compared before and after the checks.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogDurability, EventLogPersistence
from capability.rerun import RerunReport, check
from eventlog import InvalidArgumentError, LmdbEventLog, RunNotFound

Recording = Literal['durable+messages', 'durable', 'messages']
RECORDINGS: list[Recording] = ['durable+messages', 'durable', 'messages']


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The recorded model: `lookup('alpha')`, then `lookup('beta')` and `add(2, 3)` together, then an answer."""
    del info
    step = sum(isinstance(m, ModelResponse) for m in messages)
    if step == 0:
        return ModelResponse(parts=[ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id='c1')])
    if step == 1:
        return ModelResponse(
            parts=[
                ToolCallPart('lookup', {'key': 'beta'}, tool_call_id='c2'),
                ToolCallPart('add', {'a': 2, 'b': 3}, tool_call_id='c3'),
            ]
        )
    return ModelResponse(parts=[TextPart('alpha and beta found, 5')])


class Calls:
    """Counts every call of the model and the tools of agents made for checking; each raises."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del messages, info
        self.counts['model'] += 1
        raise AssertionError('the model was called during a check')

    def tool(self, name: str) -> None:
        self.counts[name] += 1
        raise AssertionError(f'tool {name} was called during a check')


def build(
    log: LmdbEventLog,
    recording: Recording,
    *,
    calls: Calls | None = None,
    instructions: str = 'Look things up, then answer.',
    variant: Literal['same', 'new parameter', 'renamed argument', 'renamed tool'] = 'same',
    recorded_model: Callable[[list[ModelMessage], AgentInfo], ModelResponse] = script,
) -> Agent[None, str]:
    """The agent as recorded (`calls=None`: the scripted model, working tools) or as checked (counting, raising)."""
    capabilities: list[EventLogPersistence[None] | EventLogDurability[None]] = []
    if recording != 'durable':
        capabilities.append(EventLogPersistence(log))
    if recording != 'messages':
        capabilities.append(EventLogDurability(log))
    # One model name for both: pydantic-ai (2.68 on) stamps each response with the model's id, so a
    # check with another model diverges at the first response.
    model = FunctionModel(recorded_model if calls is None else calls.model, model_name='scripted')
    agent = Agent(model, name='finder', instructions=instructions, capabilities=capabilities)

    def ran(name: str) -> None:
        if calls is not None:
            calls.tool(name)

    if variant == 'same':

        @agent.tool_plain
        def lookup(key: str) -> str:  # pyright: ignore[reportUnusedFunction]
            ran('lookup')
            return f'{key} is here'

    elif variant == 'new parameter':

        @agent.tool_plain
        def lookup(key: str, exact: bool = True) -> str:  # pyright: ignore[reportUnusedFunction]
            ran('lookup')
            return f'{key} is here ({exact})'

    elif variant == 'renamed argument':

        @agent.tool_plain
        def lookup(name: str) -> str:  # pyright: ignore[reportUnusedFunction]
            ran('lookup')
            return f'{name} is here'

    elif variant == 'renamed tool':

        @agent.tool_plain
        def find(key: str) -> str:  # pyright: ignore[reportUnusedFunction]
            ran('find')
            return f'{key} is here'

    @agent.tool_plain
    def add(a: int, b: int) -> int:  # pyright: ignore[reportUnusedFunction]
        ran('add')
        return a + b

    return agent


def store_state(path: Path) -> tuple[str, int]:
    """A digest of the store's data file and its size: any write changes one."""
    data = (path / 'data.mdb').read_bytes()
    return hashlib.sha256(data).hexdigest(), len(data)


@pytest.fixture(params=RECORDINGS)
def recording(request: pytest.FixtureRequest) -> Recording:
    return request.param


@pytest.fixture
async def recorded(tmp_path: Path, recording: Recording) -> LmdbEventLog:
    """A store holding run `r1` of conversation `c1`, recorded as `recording` says."""
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    result = await build(log, recording).run('find alpha and beta', run_id='r1', conversation_id='c1')
    assert result.output == 'alpha and beta found, 5'
    return log


async def checked(
    log: LmdbEventLog, recording: Recording, *, agent: Agent[None, str] | None = None, **changes: str
) -> tuple[RerunReport, Calls]:
    """Check run `r1` with a counting, raising agent, and assert the store was not touched."""
    calls = Calls()
    before = store_state(Path(log.path)), await log.last_seq()
    if agent is None:
        agent = build(log, recording, calls=calls, **changes)  # pyright: ignore[reportArgumentType]
    report = await check(agent, 'r1', log=log)
    assert (store_state(Path(log.path)), await log.last_seq()) == before
    assert calls.counts == Counter()
    return report, calls


async def test_the_unchanged_agent_reproduces_the_run(recorded: LmdbEventLog, recording: Recording) -> None:
    report, _ = await checked(recorded, recording)
    assert report.reproduces, report.render()
    assert report.first_divergence is None
    assert report.against == ('messages' if recording == 'messages' else 'journal')
    # journal: 3 model requests and 3 tool calls, plus EventLogPersistence's appends when it records the run
    expected = {'durable': 6, 'messages': 6}.get(recording)
    if expected is not None:
        assert report.units_compared == expected
    else:
        assert report.units_compared > 6
    assert 'reproduces' in report.render()


async def test_changed_instructions_diverge_at_the_first_model_request(
    recorded: LmdbEventLog, recording: Recording
) -> None:
    report, _ = await checked(recorded, recording, instructions='Look nothing up.')
    assert not report.reproduces
    divergence = report.first_divergence
    assert divergence is not None
    assert divergence.unit == 1 and report.units_compared == 0
    text = report.render()
    if recording == 'durable+messages':
        # the first unit records the first request (with its instructions) before the model sees it
        assert divergence.recorded.kind == divergence.current.kind == 'record'
        assert 'request msg:0' in divergence.reason
    else:
        assert divergence.recorded.kind == divergence.current.kind == 'model request'
    assert 'Look nothing up.' in divergence.current.detail
    if recording != 'durable':  # a journal without messages keeps digests, not the request
        assert 'Look things up, then answer.' in divergence.recorded.detail
        assert '.instructions: "Look things up, then answer." -> "Look nothing up."' in divergence.reason
    else:
        assert 'digest' in divergence.recorded.detail
        assert 'messages differ' in divergence.reason
    assert 'recorded:' in text and 'now:' in text


async def test_a_new_tool_parameter_diverges_at_the_tool_call(recorded: LmdbEventLog, recording: Recording) -> None:
    report, _ = await checked(recorded, recording, variant='new parameter')
    if recording == 'messages':
        # The model's arguments are the recorded ones and the tool's result comes from the
        # recording: a default the tool now fills in is not seen without the journal.
        assert report.reproduces
        return
    divergence = report.first_divergence
    assert divergence is not None and not report.reproduces
    assert divergence.recorded.kind == divergence.current.kind == 'tool call'
    assert divergence.current.name == 'lookup'
    assert '"exact": true' in divergence.current.detail and '"key": "alpha"' in divergence.recorded.detail
    assert 'arguments differ' in divergence.reason and '.exact: (absent) -> true' in divergence.reason


async def test_a_renamed_tool_argument_diverges_where_the_tool_ran(
    recorded: LmdbEventLog, recording: Recording
) -> None:
    report, _ = await checked(recorded, recording, variant='renamed argument')
    divergence = report.first_divergence
    assert divergence is not None and not report.reproduces
    # the recorded call no longer validates: the tool does not run, the next request carries a retry
    if recording == 'durable':
        assert divergence.recorded.kind == 'tool call' and divergence.recorded.name == 'lookup'
        assert divergence.current.kind == 'model request'
        assert divergence.unit == 2
    elif recording == 'messages':
        assert divergence.recorded.kind == 'tool call' and divergence.recorded.name == 'lookup'
        assert divergence.current.kind == 'model request'
        assert divergence.unit == 2
        assert 'Field required' in divergence.current.detail
    else:
        assert divergence.recorded.kind == divergence.current.kind == 'record'
        assert "tool call 'lookup' started (c1)" in divergence.reason
        assert 'Field required' in divergence.current.detail


async def test_another_tool_called_diverges_at_that_unit(tmp_path: Path) -> None:
    """The recorded second response calls `lookup` then `add`; with `lookup` renamed to `find`, the
    run's third unit is now the call of `add` where the journal has the call of `lookup`."""
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    await build(log, 'durable').run('find alpha and beta', run_id='r1', conversation_id='c1')
    report, _ = await checked(log, 'durable', variant='renamed tool')
    divergence = report.first_divergence
    assert divergence is not None
    # units: 1 model request, 2 lookup(alpha) -> now no lookup: the next unit asked is the second request
    assert divergence.unit == 2
    assert (divergence.recorded.kind, divergence.recorded.name) == ('tool call', 'lookup')
    assert divergence.current.kind == 'model request'
    assert "Unknown tool name: 'lookup'" in divergence.current.detail


@pytest.mark.parametrize('recording', ['durable', 'messages'])
async def test_a_tool_call_order_that_changed_diverges_at_that_tool(tmp_path: Path, recording: Recording) -> None:
    """A run whose first response calls `add` then `lookup`: checked against a recording whose
    agent had no `add` yet (its first response called `lookup` alone, `add` got an unknown-tool
    retry), the call of `add` now comes where the recording has the call of `lookup`."""

    def two_calls(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(
                parts=[
                    ToolCallPart('add', {'a': 1, 'b': 1}, tool_call_id='k1'),
                    ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id='k2'),
                ]
            )
        return ModelResponse(parts=[TextPart('done')])

    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    old = build(log, recording, recorded_model=two_calls)
    old._function_toolset.tools.pop('add')  # pyright: ignore[reportPrivateUsage]  # the agent before `add` existed
    await old.run('go', run_id='r1', conversation_id='c1')
    report, _ = await checked(log, recording)
    divergence = report.first_divergence
    assert divergence is not None, report.render()
    assert divergence.unit == 2
    assert (divergence.recorded.kind, divergence.recorded.name) == ('tool call', 'lookup')
    assert (divergence.current.kind, divergence.current.name) == ('tool call', 'add')
    assert '"a": 1' in divergence.current.detail


async def test_a_run_continuing_a_history_reproduces_on_its_own(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    await build(log, 'messages').run('find alpha and beta', run_id='r1', conversation_id='c1')
    history = await log.run_messages('r1')
    await build(log, 'messages').run('again', run_id='r2', conversation_id='c1', message_history=history)
    calls = Calls()
    report = await check(build(log, 'messages', calls=calls), 'r2', log=log)
    assert calls.counts == Counter()
    assert report.reproduces and report.units_compared == 1, report.render()  # its one request, history included


async def test_a_run_that_now_asks_for_another_request_diverges_after_the_recorded_end(
    recorded: LmdbEventLog, recording: Recording
) -> None:
    calls = Calls()
    picky = build(recorded, recording, calls=calls)

    @picky.output_validator
    def say_it_again(output: str) -> str:  # pyright: ignore[reportUnusedFunction]
        raise ModelRetry(f'say {output!r} differently')

    report, _ = await checked(recorded, recording, agent=picky)
    assert calls.counts == Counter()
    divergence = report.first_divergence
    assert divergence is not None and not report.reproduces, report.render()
    assert 'differently' in divergence.current.detail
    if recording != 'durable+messages':
        assert divergence.recorded.kind == 'end' and divergence.current.kind == 'model request'
        assert 'after its recorded end' in divergence.reason


async def test_an_unknown_run_and_a_run_with_nothing_to_compare_are_refused(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    await build(log, 'durable').run('find alpha and beta', run_id='r1', conversation_id='c1')
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        await check(build(log, 'durable', calls=Calls()), 'nope', log=log)
    # a journal without messages needs the agent's EventLogDurability to be compared with
    with pytest.raises(InvalidArgumentError, match='EventLogDurability'):
        await check(build(log, 'messages', calls=Calls()), 'r1', log=log)


async def test_a_durable_run_checked_by_an_agent_without_durability_uses_its_messages(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    await build(log, 'durable+messages').run('find alpha and beta', run_id='r1', conversation_id='c1')
    report, _ = await checked(log, 'messages')
    assert report.reproduces and report.against == 'messages'
    report, _ = await checked(log, 'messages', instructions='Look nothing up.')
    assert not report.reproduces and report.against == 'messages'


async def test_a_failed_run_reproduces_up_to_where_its_recording_ends(tmp_path: Path) -> None:
    def calls_explode(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del messages, info
        return ModelResponse(parts=[ToolCallPart('explode', {}, tool_call_id='x1')])

    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    agent = build(log, 'durable+messages', recorded_model=calls_explode)

    @agent.tool_plain
    def explode() -> str:  # pyright: ignore[reportUnusedFunction]
        raise RuntimeError('disk on fire')

    with pytest.raises(RuntimeError, match='disk on fire'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    checker = build(log, 'durable+messages', calls=Calls())

    @checker.tool_plain(name='explode')
    def explode_again() -> str:  # pyright: ignore[reportUnusedFunction]
        raise AssertionError('tool explode was called during a check')

    report = await check(checker, 'r1', log=log)
    assert report.reproduces and report.note is not None and 'failed' in report.note, report.render()


@pytest.mark.parametrize('recording', RECORDINGS)
async def test_a_tool_that_asked_for_a_retry_reproduces(tmp_path: Path, recording: Recording) -> None:
    """The recorded `lookup('alpha')` raised `ModelRetry`; replayed, the call is retried again, the same way."""

    def retry_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < 2:
            return ModelResponse(parts=[ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id=f'r{step}')])
        return ModelResponse(parts=[TextPart('alpha found the second time')])

    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    agent = build(log, recording, recorded_model=retry_then_answer, variant='renamed tool')
    tried: list[str] = []

    @agent.tool_plain(retries=2)
    def lookup(key: str) -> str:  # pyright: ignore[reportUnusedFunction]
        tried.append(key)
        if len(tried) == 1:
            raise ModelRetry(f'{key} is busy, try again')
        return f'{key} is here'

    await agent.run('find alpha', run_id='r1', conversation_id='c1')
    assert tried == ['alpha', 'alpha']
    checker = build(log, recording, calls=Calls(), variant='renamed tool')

    @checker.tool_plain(name='lookup', retries=2)
    def lookup_again(key: str) -> str:  # pyright: ignore[reportUnusedFunction]
        raise AssertionError(f'lookup({key}) was called during a check')

    report, _ = await checked(log, recording, agent=checker)
    assert report.reproduces, report.render()


@pytest.mark.parametrize('checker', ['durable+messages', 'durable'])
async def test_a_run_without_a_journal_checked_by_a_durable_agent_uses_its_messages(
    tmp_path: Path, checker: Recording
) -> None:
    log = LmdbEventLog(tmp_path / 'runs.lmdb')
    await build(log, 'messages').run('find alpha and beta', run_id='r1', conversation_id='c1')
    report, _ = await checked(log, checker)
    assert report.reproduces and report.against == 'messages' and report.units_compared == 6, report.render()
    report, _ = await checked(log, checker, instructions='Look nothing up.')
    assert not report.reproduces and report.first_divergence is not None
    assert report.first_divergence.unit == 1 and report.first_divergence.current.kind == 'model request'
    assert await log.get_run_lease('r1') is None
