"""`EventLogDurability` with real agents (driven by `FunctionModel`) on memory, LMDB and PostgreSQL.

A run interrupted in-process is a run whose log "dies": from some append on, every write raises
an exception that is not an `Exception` (as a killed process writes nothing more), so the run
ends with no `run_finished` entry and stays `running`. A new agent on the real log then resumes
it. The real-process SIGKILL tests are in `test_durability_crash.py`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from _helpers import chat_model, dump, replayed
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogDurability, EventLogPersistence, persistence
from eventlog import (
    DurableDeterminismError,
    DurableRunFailedError,
    DurableStepInfo,
    InMemoryEventLog,
    InvalidArgumentError,
    NewEntry,
    RunLeaseError,
    RunNotFound,
)
from eventlog.log import EventLogBase


class Died(BaseException):
    """The process "died": nothing more reaches the log."""


class Dying:
    """A log that lets `budget` appends through and then dies (every later append raises `Died`)."""

    def __init__(self, log: EventLogBase, budget: int) -> None:
        self._log = log
        self.budget = budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        if self.budget <= 0:
            raise Died
        self.budget -= 1
        return await self._log.append_many(entries)

    async def append(self, entry: NewEntry) -> int:
        return (await self.append_many([entry]))[0]


class Script:
    """A model that calls `lookup` on each key in turn and then answers, counting its calls and the tool's."""

    def __init__(self, keys: Sequence[str] = ('alpha', 'beta'), parallel: bool = False) -> None:
        self.keys = list(keys)
        self.parallel = parallel
        self.calls: Counter[str] = Counter()

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        self.calls[f'model:{step}'] += 1
        if self.parallel and step == 1:
            return ModelResponse(
                parts=[ToolCallPart('lookup', {'key': k}, tool_call_id=f'call-{k}') for k in self.keys]
            )
        if not self.parallel and step <= len(self.keys):
            return ModelResponse(parts=[ToolCallPart('lookup', {'key': self.keys[step - 1]}, tool_call_id=f'c{step}')])
        return ModelResponse(parts=[TextPart('done: ' + ', '.join(self.keys))])

    def agent(
        self, log: Any, *, persistence: bool = True, name: str = 'scripted', extra: Sequence[Any] = ()
    ) -> Agent[None, str]:
        capabilities: list[Any] = [*extra, EventLogPersistence(log)] if persistence else [*extra]
        agent = Agent(FunctionModel(self.model), name=name, capabilities=[*capabilities, EventLogDurability(log)])

        @agent.tool_plain
        def lookup(key: str) -> str:
            """Look a key up."""
            self.calls[f'tool:{key}'] += 1
            return key.upper()

        return agent

    def units(self) -> list[str]:
        if self.parallel:
            return ['model:1', *(f'tool:{k}' for k in self.keys), 'model:2']
        out: list[str] = []
        for step, key in enumerate(self.keys, 1):
            out += [f'model:{step}', f'tool:{key}']
        return [*out, f'model:{len(self.keys) + 1}']


async def steps(log: EventLogBase, run_id: str) -> list[DurableStepInfo]:
    entries = await log.entries(run_id=run_id, kinds=['durable_step'])
    return [msgspec.json.decode(e.payload, type=DurableStepInfo) for e in entries]


async def interrupt(
    log: EventLogBase,
    script: Script,
    budget: int,
    run_id: str = 'r1',
    history: list[ModelMessage] | None = None,
    **kwargs: Any,
) -> None:
    """Run the script's agent on a log that dies after `budget` appends."""
    agent = script.agent(Dying(log, budget), **kwargs)
    with pytest.raises((Died, BaseExceptionGroup)):
        await agent.run('look things up', run_id=run_id, conversation_id='c1', message_history=history)


async def test_one_log_one_set_of_entries_and_exact_replay(log: EventLogBase) -> None:
    script = Script()
    result = await script.agent(log).run('look things up', run_id='r1', conversation_id='c1')
    assert result.output == 'done: alpha, beta'
    assert dict(script.calls) == dict.fromkeys(script.units(), 1)
    assert await replayed(log, 'r1') == dump(result.all_messages())
    entries = await log.entries(run_id='r1')
    keys = [e.idempotency_key for e in entries]
    assert len(keys) == len(set(keys))
    kinds = Counter(e.kind for e in entries)
    assert kinds['run_started'] == kinds['run_finished'] == 1
    assert kinds['message'] == len(result.all_messages())
    journal = await steps(log, 'r1')
    assert [s.step for s in journal] == list(range(len(journal)))
    names = [s.name for s in journal]
    assert names[0] == 'run_input'
    assert names.count('scripted__model.request') == 3
    assert names.count('scripted__function_toolset__<agent>.call_tool:lookup') == 2
    # Replay, transcript and context see messages only.
    assert dump(await log.transcript('c1')) == dump(result.all_messages())
    assert dump(await log.context('c1')) == dump(result.all_messages())
    report = await log.verify()
    assert report.ok, report.problems
    run = await log.get_run('r1')
    assert run is not None and run.status == 'completed'


async def test_a_finished_run_executed_again_executes_nothing(log: EventLogBase) -> None:
    script = Script()
    agent = script.agent(log)
    first = await agent.run('look things up', run_id='r1', conversation_id='c1')
    entries = await log.entries()
    again = await agent.run('look things up', run_id='r1', conversation_id='c1')
    resumed = await EventLogDurability(log).resume(agent, 'r1')
    assert dict(script.calls) == dict.fromkeys(script.units(), 1)
    assert again.output == resumed.output == first.output
    assert dump(again.all_messages()) == dump(resumed.all_messages()) == dump(first.all_messages())
    assert await log.entries() == entries  # nothing appended


@pytest.mark.parametrize('budget', range(1, 16, 2))
async def test_an_interrupted_run_resumes_from_its_first_unjournaled_unit(log: EventLogBase, budget: int) -> None:
    script = Script()
    await interrupt(log, script, budget)
    before = Counter(script.calls)
    journaled = await steps(log, 'r1')
    done = sum('model.request' in s.name or 'call_tool' in s.name for s in journaled)
    running = [r.run_id for r in await log.list_runs(status='running')]
    assert running == (['r1'] if await log.get_run('r1') else [])
    agent = script.agent(log)
    durability = EventLogDurability(log)
    if await log.get_run('r1') is None:
        with pytest.raises(RunNotFound):
            await durability.resume(agent, 'r1')
        result = await agent.run('look things up', run_id='r1', conversation_id='c1')
    elif budget % 4 == 1:  # the application passes the run's id, conversation and prompt itself
        result = await agent.run('look things up', run_id='r1', conversation_id='c1')
    else:
        result = await durability.resume(agent, 'r1')
    assert result.output == 'done: alpha, beta'
    units = script.units()
    for unit in units[:done]:
        assert script.calls[unit] == 1, (unit, script.calls)  # journaled: never executed again
    for unit in units[done:]:
        assert script.calls[unit] - before[unit] == 1, (unit, script.calls)
        assert script.calls[unit] <= 2
    assert await replayed(log, 'r1') == dump(result.all_messages())
    assert await log.list_runs(status='running') == []
    effects = Counter(e.idempotency_key for e in await log.entries(run_id='r1', kinds=['tool_effect']))
    assert sorted(effects) == [f'tool:c{i}:0:{s}' for i in (1, 2) for s in ('completed', 'started')]
    report = await log.verify()
    assert report.ok, report.problems


@pytest.mark.parametrize('budget', [1, 3, 6])
async def test_without_persistence_the_journal_records_the_run_itself(log: EventLogBase, budget: int) -> None:
    script = Script()
    await interrupt(log, script, budget, persistence=False)
    agent = script.agent(log, persistence=False)
    run = await log.get_run('r1')
    if run is None:
        result = await agent.run('look things up', run_id='r1', conversation_id='c1')
    else:
        assert run.status == 'running'
        result = await EventLogDurability(log).resume(agent, 'r1')
    assert result.output == 'done: alpha, beta'
    assert all(count <= 2 for count in script.calls.values())
    assert await log.run_messages('r1') == []  # no messages: EventLogPersistence records those
    kinds = Counter(e.kind for e in await log.entries(run_id='r1'))
    assert kinds['run_started'] == kinds['run_finished'] == 1
    finished = await log.get_run('r1')
    assert finished is not None and finished.status == 'completed'
    calls = Counter(script.calls)
    again = await EventLogDurability(log).resume(agent, 'r1')
    assert again.output == result.output and script.calls == calls
    assert (await log.verify()).ok


async def test_history_and_prompt_come_from_the_log(log: EventLogBase) -> None:
    script = Script(keys=['alpha'])
    agent = script.agent(log)
    first = await agent.run('first question', run_id='r0', conversation_id='c1')
    history = first.all_messages()
    await interrupt(log, script, 3, run_id='r1', history=history)
    result = await EventLogDurability(log).resume(script.agent(log), 'r1')
    assert dump(result.all_messages()[: len(history)]) == dump(history)
    own = result.new_messages()[0]
    assert isinstance(own, ModelRequest)
    assert [p.content for p in own.parts if isinstance(p, UserPromptPart)] == ['look things up']
    assert await replayed(log, 'r1') == dump(result.all_messages())
    assert len(await log.transcript('c1')) == len(result.all_messages())  # nothing stored twice
    assert (await log.verify()).ok


async def test_a_changed_agent_fails_with_the_step_and_both_operations(log: EventLogBase) -> None:
    script = Script()
    await interrupt(log, script, 6)
    renamed = script.agent(log, name='renamed')
    with pytest.raises(DurableDeterminismError) as caught:
        await EventLogDurability(log).resume(renamed, 'r1')
    error = caught.value
    assert error.step == 1
    assert error.journaled == 'scripted__capability__eventlog_persistence.append'
    assert error.requested == 'renamed__capability__eventlog_persistence.append'
    assert "at step 1: the journal holds 'scripted__capability__eventlog_persistence.append'" in str(error)


async def test_dropping_persistence_is_a_determinism_error_too(log: EventLogBase) -> None:
    script = Script()
    await interrupt(log, script, 6)
    with pytest.raises(DurableDeterminismError, match=r"the run now asks for 'scripted__model\.request'"):
        await EventLogDurability(log).resume(script.agent(log, persistence=False), 'r1')


async def test_parallel_tool_calls_run_one_at_a_time_and_resume(log: EventLogBase) -> None:
    script = Script(keys=['alpha', 'beta', 'gamma'], parallel=True)
    await interrupt(log, script, 8)
    result = await EventLogDurability(log).resume(script.agent(log), 'r1')
    assert result.output == 'done: alpha, beta, gamma'
    assert all(script.calls[u] <= 2 for u in script.units())
    assert await replayed(log, 'r1') == dump(result.all_messages())
    journal = await steps(log, 'r1')
    tools = [s.name for s in journal if 'call_tool' in s.name]
    assert len(tools) == 3
    assert (await log.verify()).ok


async def test_a_tool_that_raises_fails_the_run_for_good(log: EventLogBase) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart('boom', {}, tool_call_id='b1')])

    agent = Agent(FunctionModel(model), name='boom', capabilities=[EventLogPersistence(log), EventLogDurability(log)])

    @agent.tool_plain
    def boom() -> str:
        """Always fails."""
        raise RuntimeError('kaboom')

    with pytest.raises(RuntimeError, match='kaboom'):
        await agent.run('go', run_id='r1', conversation_id='c1')
    run = await log.get_run('r1')
    assert run is not None and run.status == 'failed'
    with pytest.raises(DurableRunFailedError, match="run 'r1' ended failed"):
        await EventLogDurability(log).resume(agent, 'r1')
    with pytest.raises(DurableRunFailedError):
        await agent.run('go', run_id='r1', conversation_id='c1')


async def test_model_retry_is_journaled_as_a_result(log: EventLogBase) -> None:
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        calls[f'model:{step}'] += 1
        if step <= 2:
            return ModelResponse(parts=[ToolCallPart('flaky', {}, tool_call_id=f'f{step}')])
        return ModelResponse(parts=[TextPart('ok')])

    def make(target: Any) -> Agent[None, str]:
        agent = Agent(
            FunctionModel(model), name='retry', capabilities=[EventLogPersistence(target), EventLogDurability(target)]
        )

        @agent.tool
        def flaky(ctx: RunContext[None]) -> str:
            """Fails once."""
            calls[f'flaky:{ctx.retry}'] += 1
            if ctx.retry == 0:
                raise ModelRetry('again')
            return 'fine'

        return agent

    with pytest.raises((Died, BaseExceptionGroup)):
        await make(Dying(log, 7)).run('go', run_id='r1', conversation_id='c1')
    assert calls['flaky:0'] == 1
    result = await EventLogDurability(log).resume(make(log), 'r1')
    assert result.output == 'ok'
    assert calls['flaky:0'] == 1  # its ModelRetry was journaled: not raised again
    assert calls['flaky:1'] == 1 and calls['model:3'] == 1
    assert await replayed(log, 'r1') == dump(result.all_messages())


class Answer(BaseModel):
    text: str
    count: int


async def test_structured_output_resumes(log: EventLogBase) -> None:
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        calls[f'model:{step}'] += 1
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'text': 'hi', 'count': step})])

    def make(target: Any) -> Agent[None, Answer]:
        return Agent(
            FunctionModel(model),
            name='structured',
            output_type=Answer,
            capabilities=[EventLogPersistence(target), EventLogDurability(target)],
        )

    with pytest.raises((Died, BaseExceptionGroup)):
        await make(Dying(log, 3)).run('go', run_id='r1', conversation_id='c1')
    result = await EventLogDurability(log).resume(make(log), 'r1')
    assert result.output == Answer(text='hi', count=1)
    assert calls['model:1'] == 1  # journaled before the log died
    assert await replayed(log, 'r1') == dump(result.all_messages())


async def test_run_stream_is_durable(log: EventLogBase) -> None:
    agent = Agent(chat_model(), name='streamer', capabilities=[EventLogPersistence(log), EventLogDurability(log)])
    async with agent.run_stream('hello there', run_id='r1', conversation_id='c1') as stream:
        output = await stream.get_output()
    assert output == 'answer to: hello there'
    assert await replayed(log, 'r1') == dump(stream.all_messages())
    names = [s.name for s in await steps(log, 'r1')]
    assert 'streamer__model.request_stream' in names
    again = await EventLogDurability(log).resume(agent, 'r1')
    assert again.output == output


async def test_one_process_at_a_time_per_run(log: EventLogBase) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        await release.wait()
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), name='held', capabilities=[EventLogPersistence(log), EventLogDurability(log)])
    first = asyncio.create_task(agent.run('go', run_id='r1', conversation_id='c1'))
    await entered.wait()
    with pytest.raises(RunLeaseError, match="run 'r1' is being executed by another process"):
        await agent.run('go', run_id='r1', conversation_id='c1')
    release.set()
    assert (await first).output == 'done'
    # the lease was released: executing the finished run again replays it
    assert (await agent.run('go', run_id='r1', conversation_id='c1')).output == 'done'
    assert (await log.verify()).ok


async def test_bad_arguments(log: EventLogBase) -> None:
    with pytest.raises(InvalidArgumentError, match='lease_seconds must be positive'):
        EventLogDurability(log, lease_seconds=0)
    with pytest.raises(InvalidArgumentError, match='status must be one of'):
        await log.list_runs(status='paused')  # pyright: ignore[reportArgumentType]
    script = Script(keys=[])
    agent = script.agent(log)
    await agent.run('hi', run_id='r1', conversation_id='c1')
    with pytest.raises(InvalidArgumentError, match="run 'r1' belongs to conversation 'c1', not 'c2'"):
        await agent.run('hi', run_id='r1', conversation_id='c2')
    with pytest.raises(RunNotFound):
        await EventLogDurability(log).resume(agent, 'nope')


async def test_erasing_a_run_erases_its_journal(log: EventLogBase) -> None:
    script = Script(keys=['secret-key'])
    agent = script.agent(log)
    await agent.run('look things up', run_id='r1', conversation_id='c1')
    erased = await log.erase('c1', run_id='r1', reason='test')
    journal = await log.entries(run_id='r1', kinds=['durable_step'])
    assert journal and {e.seq for e in journal} <= set(erased.seqs)
    assert all(e.erased and b'SECRET-KEY' not in e.payload for e in journal)
    assert all(bytes(msgspec.json.decode(e.payload, type=DurableStepInfo).result) == b'null' for e in journal)
    with pytest.raises(DurableRunFailedError, match='was erased'):
        await EventLogDurability(log).resume(agent, 'r1')
    report = await log.verify()
    assert report.ok, report.problems


async def test_a_durable_run_exports_and_imports(log: EventLogBase, tmp_path: Any) -> None:
    script = Script()
    await script.agent(log).run('look things up', run_id='r1', conversation_id='c1')
    path = tmp_path / 'export.jsonl'
    await log.export(path)
    other = InMemoryEventLog()
    await other.import_(path)
    assert await other.entries() == await log.entries()
    assert (await other.verify()).ok
    calls = Counter(script.calls)
    result = await EventLogDurability(other).resume(script.agent(other), 'r1')
    assert result.output == 'done: alpha, beta' and script.calls == calls  # replayed from the imported journal


async def test_conversation_search_tool_calls_are_journaled_and_ignore_the_journal(log: EventLogBase) -> None:
    from pydantic_ai.messages import ToolReturnPart

    from capability import TOOL_NAME, ConversationSearch
    from eventlog import ReplayHistorySource

    first = Script(keys=['locker'])
    await first.agent(log).run('my locker code is 7715', run_id='r0', conversation_id='c1')
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls['model'] += 1
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {'query': 'locker code'}, tool_call_id='s1')])
        return ModelResponse(parts=[TextPart(str(returns[-1].content))])

    def make(target: Any) -> Agent[None, str]:
        search = ConversationSearch(ReplayHistorySource(log), scope='conversation')
        return Agent(
            FunctionModel(model),
            name='searcher',
            capabilities=[search, EventLogPersistence(target), EventLogDurability(target)],
        )

    with pytest.raises((Died, BaseExceptionGroup)):
        await make(Dying(log, 4)).run('what was my locker code?', run_id='r1', conversation_id='c1')
    result = await EventLogDurability(log).resume(make(log), 'r1')
    assert 'my locker code is 7715' in result.output
    assert 'durable_step' not in result.output and 'run_input' not in result.output
    names = [s.name for s in await steps(log, 'r1')]
    assert names.count('searcher__function_toolset__conversation-search.call_tool:' + TOOL_NAME) == 1
    assert await replayed(log, 'r1') == dump(result.all_messages())
    assert calls['model'] <= 3


async def test_a_changed_prompt_fails_with_the_step_and_what_differs(log: EventLogBase) -> None:
    script = Script()
    await interrupt(log, script, 6)
    calls = Counter(script.calls)
    with pytest.raises(DurableDeterminismError) as caught:
        await script.agent(log).run('look other things up', run_id='r1', conversation_id='c1')
    error = caught.value
    # EventLogPersistence's append of the first request is the run's first unit.
    assert error.step == 1 and error.changed == 'entries to record'
    assert error.journaled == error.requested == 'scripted__capability__eventlog_persistence.append'
    assert str(error) == (
        "run 'r1' diverged from its journal at step 1: the input to "
        "'scripted__capability__eventlog_persistence.append' changed: its entries to record differ from "
        "those journaled for 'scripted__capability__eventlog_persistence.append'"
    )
    assert script.calls == calls  # nothing executed
    # Without EventLogPersistence the first unit is the model request, and its messages differ.
    other = InMemoryEventLog()
    await interrupt(other, script, 3, persistence=False)
    with pytest.raises(DurableDeterminismError) as caught:
        await script.agent(other, persistence=False).run('look other things up', run_id='r1', conversation_id='c1')
    assert caught.value.step == 1 and caught.value.changed == 'messages'
    assert "the input to 'scripted__model.request' changed: its messages differ" in str(caught.value)


async def test_changed_model_settings_fail(log: EventLogBase) -> None:
    script = Script()
    await interrupt(log, script, 3, persistence=False)
    agent = script.agent(log, persistence=False)
    with pytest.raises(DurableDeterminismError, match='its model settings differ') as caught:
        await EventLogDurability(log).resume(agent, 'r1', model_settings={'temperature': 0.5})
    assert caught.value.step == 1
    run = await log.get_run('r1')
    assert run is not None and run.status == 'failed'  # as every run whose error escaped
    assert run.error is not None and 'DurableDeterminismError' in run.error


async def test_changed_tool_arguments_fail(log: EventLogBase) -> None:
    """The model's response is journaled; the tool's arguments change because the code that
    prepares them did (here a capability that rewrites them)."""
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.capabilities.abstract import ValidatedToolArgs
    from pydantic_ai.tools import ToolDefinition

    class Shout(AbstractCapability[None]):
        async def before_tool_execute(
            self, ctx: RunContext[None], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
        ) -> ValidatedToolArgs:
            assert isinstance(args, dict)
            return {**args, 'key': str(args['key']).upper()}

    script = Script()
    await interrupt(log, script, 3, persistence=False)
    journal = await steps(log, 'r1')
    assert [s.name for s in journal][-1] == 'scripted__function_toolset__<agent>.call_tool:lookup'
    changed = script.agent(log, persistence=False, extra=[Shout()])
    calls = Counter(script.calls)
    with pytest.raises(DurableDeterminismError) as caught:
        await EventLogDurability(log).resume(changed, 'r1')
    error = caught.value
    assert error.step == journal[-1].step and error.changed == 'arguments'
    assert error.requested == 'scripted__function_toolset__<agent>.call_tool:lookup'
    assert script.calls == calls


async def test_digests_are_recorded_and_journals_without_them_still_resume(log: EventLogBase) -> None:
    script = Script()
    await interrupt(log, script, 6)
    journal = await steps(log, 'r1')
    assert journal[0].inputs is None  # the input record
    assert all(s.inputs for s in journal[1:])
    assert {k for s in journal[1:] if s.inputs for k in s.inputs} == {'entries', 'messages', 'model_settings', 'args'}
    # An entry journaled before digests were recorded is compared by name alone.
    old = InMemoryEventLog()
    for entry in await log.entries():
        if entry.kind == 'durable_step':
            info = msgspec.json.decode(entry.payload, type=DurableStepInfo)
            payload = msgspec.json.encode(DurableStepInfo(step=info.step, name=info.name, result=info.result))
        else:
            payload = entry.payload
        await old.append(
            NewEntry(
                conversation_id=entry.conversation_id,
                run_id=entry.run_id,
                kind=entry.kind,
                payload=payload,
                parent=entry.parent,
                idempotency_key=entry.idempotency_key,
                inherited=entry.inherited,
            )
        )
    assert all(s.inputs is None for s in await steps(old, 'r1'))
    result = await script.agent(old).run('look things up', run_id='r1', conversation_id='c1')
    assert result.output == 'done: alpha, beta'


@pytest.mark.parametrize('budget', [2, 4, 6, 8])
async def test_generated_tool_call_ids_instructions_and_system_prompts_resume(log: EventLogBase, budget: int) -> None:
    """Inputs a legitimate re-execution reproduces are not flagged: tool call ids the model left to
    pydantic-ai (random, but journaled with the response), instructions and a system prompt."""
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        calls[f'model:{step}'] += 1
        if step <= 2:
            return ModelResponse(parts=[ToolCallPart('lookup', {'key': f'k{step}'})])  # no tool_call_id
        return ModelResponse(parts=[TextPart('done')])

    def make(target: Any) -> Agent[None, str]:
        agent = Agent(
            FunctionModel(model),
            name='generated',
            instructions='Be brief.',
            system_prompt='You look things up.',
            capabilities=[EventLogPersistence(target), EventLogDurability(target)],
        )

        @agent.tool_plain
        def lookup(key: str) -> str:
            """Look a key up."""
            calls[f'tool:{key}'] += 1
            return key.upper()

        return agent

    with pytest.raises((Died, BaseExceptionGroup)):
        await make(Dying(log, budget)).run('go', run_id='r1', conversation_id='c1', model_settings={'seed': 1})
    if await log.get_run('r1') is None:
        result = await make(log).run('go', run_id='r1', conversation_id='c1', model_settings={'seed': 1})
    else:
        result = await EventLogDurability(log).resume(make(log), 'r1', model_settings={'seed': 1})
    assert result.output == 'done'
    assert all(count <= 2 for count in calls.values()), calls
    assert await replayed(log, 'r1') == dump(result.all_messages())
    journal = await steps(log, 'r1')
    assert sum(1 for s in journal if s.inputs and 'messages' in s.inputs) == 3


async def test_persistence_appends_go_through_the_engine_only_in_a_durable_run(
    log: EventLogBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a durable run `EventLogPersistence` skips its durable operation's decorator (which
    would await the method itself); in a durable run each append inside it is dispatched to the
    engine, so each is journaled as a unit of the run."""
    answers: list[bool] = []
    decide = persistence._runs_inline  # pyright: ignore[reportPrivateUsage]

    def spy(capability_id: str | None) -> bool:
        answers.append(decide(capability_id))
        return answers[-1]

    monkeypatch.setattr(persistence, '_runs_inline', spy)
    script = Script()
    plain = Agent(FunctionModel(script.model), capabilities=[EventLogPersistence(log)])

    @plain.tool_plain
    def lookup(key: str) -> str:
        return key.upper()

    result = await plain.run('look things up', run_id='plain', conversation_id='p')
    assert answers and all(answers)  # every append took the fast path...
    assert await replayed(log, 'plain') == dump(result.all_messages())  # ...and recorded everything
    answers.clear()
    durable = await script.agent(log).run('look things up', run_id='r1', conversation_id='c1')
    dispatched = answers.count(False)
    journaled = [step.name for step in await steps(log, 'r1')]
    assert dispatched > 0
    # Every dispatched append is a journaled unit but the last, the run's end: its journal entry
    # would follow the `run_finished` entry, and nothing is appended to a finished run.
    assert sum(name.endswith('eventlog_persistence.append') for name in journaled) == dispatched - 1
    assert await replayed(log, 'r1') == dump(durable.all_messages())
