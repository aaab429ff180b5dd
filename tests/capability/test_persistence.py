"""`EventLogPersistence` with real agents (driven by `FunctionModel`) on both log backends.

The byte-exact replay tests double as pins of where pydantic-ai makes messages final (see the
module docstring of `capability.persistence`): if an upgrade moves stamping, a replay stops
matching `result.all_messages()` here, or `test_hook_points_see_final_messages` fails.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _helpers import chat, chat_model, dump, replayed
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRequestNode, ModelRetry, RunContext, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability.persistence import EventLogPersistence, EventLogPersistenceError, EventLogPersistenceWarning
from eventlog import (
    Entry,
    InMemoryEventLog,
    LmdbEventLog,
    ReplayHistorySource,
    RunFinishedInfo,
    StorageError,
    ToolEffectInfo,
    encode_message,
)
from eventlog.log import EventLogBase

pytestmark = pytest.mark.filterwarnings('error::capability.persistence.EventLogPersistenceWarning')


def make_agent(log: EventLogBase, **kwargs: Any) -> Agent[None, str]:
    capabilities = kwargs.pop('capabilities', [])
    agent = Agent(chat_model(), capabilities=[*capabilities, EventLogPersistence(log)], name='helper', **kwargs)

    @agent.tool_plain
    def lookup(arg: str) -> str:
        """Look something up."""
        return f'value of {arg}'

    @agent.tool_plain
    def explode(arg: str) -> str:
        """Fail."""
        raise RuntimeError(f'exploded on {arg}')

    @agent.tool_plain
    def picky(arg: str) -> str:
        """Ask for a retry."""
        raise ModelRetry(f'try again, not {arg}')

    return agent


def kinds(entries: list[Entry]) -> list[str]:
    return [e.kind for e in entries]


async def message_entries(log: EventLogBase, run_id: str) -> list[Entry]:
    return await log.entries(run_id=run_id, kinds=['message'])


async def finished(log: EventLogBase, run_id: str) -> RunFinishedInfo:
    [entry] = await log.entries(run_id=run_id, kinds=['run_finished'])
    return msgspec.json.decode(entry.payload, type=RunFinishedInfo)


# --- exact replay ------------------------------------------------------------------------------


async def test_plain_run_replays_byte_exact(log: EventLogBase) -> None:
    agent = make_agent(log, instructions='Be brief.')
    result = await agent.run('hello there', conversation_id='conv-1')

    assert await replayed(log, result.run_id) == dump(result.all_messages())
    assert await log.run_messages_json(result.run_id) == dump(result.all_messages())
    run = await log.get_run(result.run_id)
    assert run is not None
    assert (run.conversation_id, run.agent_name, run.status, run.parent_run_id) == (
        'conv-1',
        'helper',
        'completed',
        None,
    )
    assert run.branch_parent is None
    assert run.usage['requests'] == result.usage.requests == 1
    assert run.usage['input_tokens'] == result.usage.input_tokens > 0
    assert run.usage['output_tokens'] == result.usage.output_tokens > 0
    entries = await log.entries(run_id=result.run_id)
    assert kinds(entries) == ['run_started', 'message', 'message', 'run_finished']


async def test_conversation_id_is_the_one_pydantic_ai_resolves(log: EventLogBase) -> None:
    agent = make_agent(log)
    result = await agent.run('no id given')
    run = await log.get_run(result.run_id)
    assert run is not None
    assert run.conversation_id == result.conversation_id
    assert result.all_messages()[0].conversation_id == run.conversation_id


async def test_tool_run_replays_and_records_tool_effects(log: EventLogBase) -> None:
    agent = make_agent(log)
    result = await agent.run('call lookup the answer')

    assert await replayed(log, result.run_id) == dump(result.all_messages())
    entries = await log.entries(run_id=result.run_id)
    assert kinds(entries) == [
        'run_started',
        'message',  # the prompt
        'message',  # the tool call: durable before the tool runs
        'tool_effect',
        'tool_effect',
        'message',  # the tool return
        'message',  # the answer
        'run_finished',
    ]
    started, completed = (msgspec.json.decode(e.payload, type=ToolEffectInfo) for e in entries[3:5])
    assert (started.status, completed.status) == ('started', 'completed')
    assert started.tool_call_id == completed.tool_call_id == 'call-0'
    assert started.tool_name == 'lookup'


async def test_failing_tool_keeps_everything_up_to_the_failure(log: EventLogBase) -> None:
    agent = make_agent(log)
    with capture_run_messages() as captured, pytest.raises(RuntimeError, match='exploded on it'):
        await agent.run('call explode it', conversation_id='c')

    [run] = await log.list_runs(conversation_id='c')
    assert run.status == 'failed'
    assert run.error is not None and 'exploded on it' in run.error
    stored = await log.run_messages(run.run_id)
    # The prompt and the tool call were committed before the tool ran; nothing is lost, and what
    # was stored is exactly what pydantic-ai holds for the run at the failure.
    assert len(stored) >= 2
    assert dump(stored[:2]) == dump(captured[:2])
    assert dump(stored) == dump(captured)
    effects = [msgspec.json.decode(e.payload, type=ToolEffectInfo) for e in await log.entries(kinds=['tool_effect'])]
    assert [(e.status, e.tool_name) for e in effects] == [('started', 'explode'), ('failed', 'explode')]
    assert effects[1].error is not None and 'exploded on it' in effects[1].error


async def test_failing_model_keeps_earlier_steps(log: EventLogBase) -> None:
    calls = 0

    def flaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError('model went away')
        return chat(messages, info)

    agent = Agent(FunctionModel(flaky), capabilities=[EventLogPersistence(log)])

    @agent.tool_plain
    def lookup(arg: str) -> str:
        return arg.upper()

    with capture_run_messages() as captured, pytest.raises(ConnectionError):
        await agent.run('call lookup x', conversation_id='c')
    [run] = await log.list_runs(conversation_id='c')
    assert run.status == 'failed'
    assert run.error == 'ConnectionError: model went away'
    stored = await log.run_messages(run.run_id)
    assert len(stored) == 3  # prompt, tool call, tool return (sent when the model failed)
    assert dump(stored) == dump(captured)


async def test_model_retry_from_a_tool(log: EventLogBase) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart('picky', {'arg': 'a'}, tool_call_id='t1')])
        return ModelResponse(parts=[TextPart('gave up')])

    agent = Agent(FunctionModel(model), capabilities=[EventLogPersistence(log)])

    @agent.tool_plain
    def picky(arg: str) -> str:
        raise ModelRetry('no')

    result = await agent.run('go')
    assert await replayed(log, result.run_id) == dump(result.all_messages())
    effects = [msgspec.json.decode(e.payload, type=ToolEffectInfo) for e in await log.entries(kinds=['tool_effect'])]
    assert [e.status for e in effects] == ['started', 'failed']


async def test_structured_output_tool_run(log: EventLogBase) -> None:
    class City(BaseModel):
        name: str

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        [tool] = info.output_tools
        return ModelResponse(parts=[ToolCallPart(tool.name, {'name': 'Lyon'}, tool_call_id='out-1')])

    agent = Agent(FunctionModel(model), output_type=City, capabilities=[EventLogPersistence(log)])
    result = await agent.run('where?')
    assert result.output == City(name='Lyon')
    # The closing tool-return request is added when the run ends; it is recorded too.
    assert len(result.all_messages()) == 3
    assert await replayed(log, result.run_id) == dump(result.all_messages())


async def test_run_stream_replays_byte_exact(log: EventLogBase) -> None:
    agent = make_agent(log)
    async with agent.run_stream('stream this please', conversation_id='s') as stream:
        output = await stream.get_output()
    assert output == 'answer to: stream this please'
    [run] = await log.list_runs(conversation_id='s')
    assert run.status == 'completed'
    assert await replayed(log, run.run_id) == dump(stream.all_messages())


async def test_run_stream_with_a_tool_call(log: EventLogBase) -> None:
    agent = make_agent(log)
    async with agent.run_stream('call lookup streamed', conversation_id='s') as stream:
        await stream.get_output()
    [run] = await log.list_runs(conversation_id='s')
    assert await replayed(log, run.run_id) == dump(stream.all_messages())
    assert len(stream.all_messages()) == 4


async def test_iter_replays_byte_exact(log: EventLogBase) -> None:
    agent = make_agent(log)
    async with agent.iter('call lookup iterated') as agent_run:
        nodes = [node async for node in agent_run]
    assert nodes
    result = agent_run.result
    assert result is not None
    assert await replayed(log, result.run_id) == dump(result.all_messages())


async def test_iter_with_next_is_recorded_step_by_step(log: EventLogBase) -> None:
    """Driving `iter()` by hand: each message is in the log as soon as its node has run."""
    agent = make_agent(log)
    async with agent.iter('call lookup stepwise', conversation_id='i') as agent_run:
        node = agent_run.next_node
        while not isinstance(node, ModelRequestNode):
            node = await agent_run.next(node)
        node = await agent_run.next(node)  # the model answered with a tool call
        [run] = await log.list_runs(conversation_id='i')
        assert run.message_count == 2
        assert dump(await log.run_messages(run.run_id)) == dump(agent_run.all_messages())
        while not agent_run.result:
            node = await agent_run.next(node)
    assert await replayed(log, agent_run.result.run_id) == dump(agent_run.result.all_messages())


def test_run_sync_replays_byte_exact(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    try:
        agent = make_agent(log)
        result = agent.run_sync('call lookup synchronously')
        stored = asyncio.run(log.run_messages_json(result.run_id))
        assert stored == dump(result.all_messages())
    finally:
        log.close()


async def test_cancelled_run_is_recorded_as_cancelled(log: EventLogBase) -> None:
    started = asyncio.Event()

    async def slow_tool(arg: str) -> str:
        started.set()
        await asyncio.sleep(30)
        return arg

    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    agent.tool_plain(name='lookup')(slow_tool)
    task = asyncio.create_task(agent.run('call lookup forever', conversation_id='x'))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [run] = await log.list_runs(conversation_id='x')
    assert run.status == 'cancelled'
    effects = [msgspec.json.decode(e.payload, type=ToolEffectInfo) for e in await log.entries(kinds=['tool_effect'])]
    # The call started and was cut off: the application sees it may have had side effects.
    assert effects[0].status == 'started'
    assert len(await log.run_messages(run.run_id)) >= 2


async def test_concurrent_runs_on_one_capability_are_isolated(log: EventLogBase) -> None:
    agent = make_agent(log)
    results = await asyncio.gather(*(agent.run(f'call lookup item{i}', conversation_id=f'c{i}') for i in range(6)))
    for result in results:
        assert await replayed(log, result.run_id) == dump(result.all_messages())
        run = await log.get_run(result.run_id)
        assert run is not None and run.message_count == 4


class _Spy(AbstractCapability[Any]):
    """Records what a capability sees at the hook points `EventLogPersistence` relies on."""

    def __init__(self) -> None:
        self.at_request: list[bytes] = []
        self.at_response_node: list[bytes] = []
        self.at_after_model_request: list[bytes] = []

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.at_request.append(encode_message(ctx.messages[-1]))
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self.at_after_model_request.append(encode_message(response))
        return response

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        if isinstance(node, ModelRequestNode):
            self.at_response_node.append(encode_message(ctx.messages[-1]))
        return result


async def test_hook_points_see_final_messages(log: EventLogBase) -> None:
    """The facts the capability is built on (where each message becomes final, docs/persistence.md), pinned.

    The request at the end of `ctx.messages` in `before_model_request` and the response at the
    end of `ctx.messages` in `after_node_run` of a `ModelRequestNode` are already final; the
    response handed to `after_model_request` is not (pydantic-ai stamps it afterwards), which is
    why responses are recorded one hook later.
    """
    spy = _Spy()
    agent = make_agent(log, capabilities=[spy], instructions=lambda: 'dynamic instructions')
    result = await agent.run('call lookup facts')
    final = [encode_message(m) for m in result.all_messages()]
    requests = [b for m, b in zip(result.all_messages(), final, strict=True) if isinstance(m, ModelRequest)]
    responses = [b for m, b in zip(result.all_messages(), final, strict=True) if isinstance(m, ModelResponse)]
    assert spy.at_request == requests
    assert spy.at_response_node == responses
    assert all(seen not in responses for seen in spy.at_after_model_request)


# --- threading -----------------------------------------------------------------------------------


async def test_threaded_runs_store_only_what_they_add(log: EventLogBase) -> None:
    agent = make_agent(log)
    history: list[ModelMessage] | None = None
    results = []
    for i in range(5):
        prompt = f'call lookup k{i}' if i % 2 else f'turn number {i}'
        result = await agent.run(prompt, message_history=history, conversation_id='thread' if i == 0 else None)
        history = result.all_messages()
        results.append(result)

    previous_tip = None
    for result in results:
        run = await log.get_run(result.run_id)
        assert run is not None and run.conversation_id == 'thread'
        assert await replayed(log, result.run_id) == dump(result.all_messages())
        added = len(result.new_messages())
        assert len(await message_entries(log, result.run_id)) == added == run.message_count
        assert run.branch_parent == previous_tip
        previous_tip = (await message_entries(log, result.run_id))[-1].seq
    conv = await log.get_conversation('thread')
    assert conv is not None and conv.message_count == len(results[-1].all_messages())
    assert dump(await log.transcript('thread')) == dump(results[-1].all_messages())
    assert dump(await log.context('thread')) == dump(results[-1].all_messages())


async def test_threading_through_a_new_capability_and_json_round_trip(tmp_path: Path) -> None:
    """A history that comes back from JSON (other objects) into a fresh process-like setup is
    still recognised in the log, so nothing is stored twice."""
    log = LmdbEventLog(tmp_path / 's')
    first = await make_agent(log).run('call lookup one', conversation_id='t')
    log.close()
    log = LmdbEventLog(tmp_path / 's')
    history = ModelMessagesTypeAdapter.validate_json(first.all_messages_json())
    second = await make_agent(log).run('and then', message_history=history)
    run = await log.get_run(second.run_id)
    assert run is not None
    assert run.message_count == 2
    assert run.branch_parent == (await message_entries(log, first.run_id))[-1].seq
    assert await replayed(log, second.run_id) == dump(second.all_messages())
    log.close()


async def test_unseen_history_is_stored_once_marked_inherited(log: EventLogBase) -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('imported question about the zanzibar ledger')]),
        ModelResponse(parts=[TextPart('imported answer')]),
    ]
    agent = make_agent(log)
    first = await agent.run('follow up', message_history=history, conversation_id='imp')
    entries = await message_entries(log, first.run_id)
    assert [e.inherited for e in entries] == [True, True, False, False]
    assert await replayed(log, first.run_id) == dump(first.all_messages())

    second = await agent.run('again', message_history=first.all_messages())
    assert [e.inherited for e in await message_entries(log, second.run_id)] == [False, False]
    assert await replayed(log, second.run_id) == dump(second.all_messages())
    transcript = await log.transcript('imp')
    assert sum('zanzibar' in dump([m]).decode() for m in transcript) == 1
    # Searchable: the search layer reads it like any other message.
    source = ReplayHistorySource(log)
    assert 'zanzibar' in dump(await source.run_history(run_id=first.run_id)).decode()


async def test_partly_seen_history_references_the_seen_part(log: EventLogBase) -> None:
    agent = make_agent(log)
    first = await agent.run('the start', conversation_id='p')
    extra: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('a turn from elsewhere')]),
        ModelResponse(parts=[TextPart('noted')]),
    ]
    second = await agent.run('continue', message_history=[*first.all_messages(), *extra])
    entries = await message_entries(log, second.run_id)
    assert [e.inherited for e in entries] == [True, True, False, False]
    run = await log.get_run(second.run_id)
    assert run is not None and run.branch_parent == (await message_entries(log, first.run_id))[-1].seq
    assert await replayed(log, second.run_id) == dump(second.all_messages())


async def test_forking_from_an_earlier_point(log: EventLogBase) -> None:
    agent = make_agent(log)
    first = await agent.run('one', conversation_id='f')
    second = await agent.run('two', message_history=first.all_messages())
    # Go back to after the first exchange, in a new conversation.
    fork = await agent.run('two, differently', message_history=second.all_messages()[:2], conversation_id='f2')
    run = await log.get_run(fork.run_id)
    assert run is not None and run.conversation_id == 'f2'
    assert run.message_count == 2
    assert run.branch_parent == (await message_entries(log, first.run_id))[-1].seq
    assert await replayed(log, fork.run_id) == dump(fork.all_messages())
    assert dump(await log.transcript('f2')) == dump(fork.all_messages())


async def test_resuming_without_a_prompt(log: EventLogBase) -> None:
    """A history ending in a request is sent again as this run's request: recorded as this run's."""
    agent = make_agent(log)
    first = await agent.run('hello', conversation_id='r')
    history = [*first.all_messages(), ModelRequest(parts=[UserPromptPart('queued question')])]
    second = await agent.run(message_history=history)
    assert await replayed(log, second.run_id) == dump(second.all_messages())


# --- compaction by a history processor -----------------------------------------------------------


def keep_last(count: int):
    def processor(messages: list[ModelMessage]) -> list[ModelMessage]:
        return messages[-count:]

    return processor


async def test_history_processor_trim_keeps_every_original(log: EventLogBase) -> None:
    agent = make_agent(log, capabilities=[ProcessHistory(keep_last(3))])
    history: list[ModelMessage] | None = None
    results = []
    for i in range(5):
        result = await agent.run(f'message {i}', message_history=history, conversation_id='trim' if i == 0 else None)
        history = result.all_messages()
        results.append(result)

    transcript = await log.transcript('trim')
    prompts = [m.parts[0].content for m in transcript if isinstance(m, ModelRequest)]
    assert prompts == [f'message {i}' for i in range(5)]
    assert len(transcript) == 10
    # What the agent continues from is the trimmed history...
    assert dump(await log.context('trim')) == dump(results[-1].all_messages())
    # ...and each run's record holds the originals it (and its inherited branch) produced.
    last_record = await log.run_messages(results[-1].run_id)
    assert dump(last_record) == dump(transcript)
    assert len(await log.entries(conversation_id='trim', kinds=['compaction'])) >= 1
    for result in results:
        assert len(await message_entries(log, result.run_id)) == 2


# --- nested runs ---------------------------------------------------------------------------------


async def test_nested_agent_run_records_its_parent(log: EventLogBase) -> None:
    inner = Agent(chat_model(), capabilities=[EventLogPersistence(log)], name='inner')
    outer = Agent(chat_model(), capabilities=[EventLogPersistence(log)], name='outer')
    inner_ids: list[str] = []

    @outer.tool_plain
    async def delegate(arg: str) -> str:
        result = await inner.run(f'inner work on {arg}')
        inner_ids.append(result.run_id)
        return result.output

    result = await outer.run('call delegate job', conversation_id='n')
    [inner_id] = inner_ids
    inner_run = await log.get_run(inner_id)
    assert inner_run is not None
    assert inner_run.parent_run_id == result.run_id
    assert inner_run.agent_name == 'inner'
    children = await log.list_runs(parent_run_id=result.run_id)
    assert [r.run_id for r in children] == [inner_id]
    outer_run = await log.get_run(result.run_id)
    assert outer_run is not None and outer_run.parent_run_id is None
    # After the outer run, a new top-level run has no parent.
    later = await inner.run('standalone')
    later_run = await log.get_run(later.run_id)
    assert later_run is not None and later_run.parent_run_id is None


# --- exactly once ------------------------------------------------------------------------------


async def test_rerunning_a_run_id_appends_nothing_twice(log: EventLogBase) -> None:
    """Re-executing a run's steps (as a durable engine does after a crash) writes nothing new."""
    agent = make_agent(log)
    first = await agent.run('call lookup again', run_id='fixed-run', conversation_id='d')
    before = await log.entries()
    second = await agent.run('call lookup again', run_id='fixed-run', conversation_id='d')
    assert second.run_id == first.run_id == 'fixed-run'
    after = await log.entries()
    assert [e.seq for e in after] == [e.seq for e in before]
    assert after == before
    assert await replayed(log, 'fixed-run') == dump(first.all_messages())


async def test_redriving_the_same_hooks_is_idempotent(log: EventLogBase) -> None:
    """The durable operation itself: the same batch twice gives the same seqs and one copy."""
    agent = make_agent(log)
    result = await agent.run('hello', conversation_id='d')
    run = EventLogPersistence[None](log)  # the operation needs no per-run state
    entries = await log.entries(run_id=result.run_id)
    from capability.persistence import WireEntry

    batch = [WireEntry(e.kind, e.payload, e.idempotency_key or '', parent=e.parent) for e in entries]  # type: ignore[arg-type]
    appended = await run._append(run_id=result.run_id, conversation_id='d', entries=batch)  # pyright: ignore[reportPrivateUsage]
    assert [seq for seq, _ in appended] == [e.seq for e in entries]
    assert await log.entries() == entries
    # The digests name what the log holds, so a re-driven step whose message came out different
    # (a request rebuilt with a new timestamp) can tell and take the recorded one.
    messages = [(e, digest) for e, (_, digest) in zip(entries, appended, strict=True) if e.kind == 'message']
    assert messages and all(digest for _, digest in messages)
    altered = [
        WireEntry(
            e.kind,
            e.payload.replace(b'hello', b'HELLO') if e.kind == 'message' else e.payload,
            e.idempotency_key or '',
            parent=e.parent,
        )  # type: ignore[arg-type]
        for e in entries
    ]
    again = await run._append(run_id=result.run_id, conversation_id='d', entries=altered)  # pyright: ignore[reportPrivateUsage]
    assert again == appended
    assert await log.entries() == entries


# --- when the log cannot be written ------------------------------------------------------------


class _FailingLog(InMemoryEventLog):
    """A log whose storage fails after `ok` successful appends."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok

    async def append_many(self, entries: Any) -> list[int]:
        if self.ok <= 0:
            raise StorageError('the disk is full; nothing was written')
        self.ok -= 1
        return await super().append_many(entries)


async def test_unwritable_log_fails_the_run_clearly() -> None:
    log = _FailingLog(ok=0)
    agent = make_agent(log)
    with pytest.raises(EventLogPersistenceError, match=r'could not record run .*disk is full'):
        await agent.run('hello')


async def test_log_failing_mid_run_keeps_what_was_committed() -> None:
    log = _FailingLog(ok=1)  # the prompt's transaction succeeds, the response's fails
    agent = make_agent(log)
    with pytest.raises(EventLogPersistenceError):
        await agent.run('hello', conversation_id='m')
    [run] = await log.list_runs(conversation_id='m')
    assert run.message_count == 1
    assert run.status == 'running'  # the end could not be recorded either; the run looks interrupted
    assert (await log.verify()).ok


async def test_closed_log_fails_the_run(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    log.close()
    with pytest.raises(EventLogPersistenceError, match='closed'):
        await make_agent(log).run('hello')


@pytest.mark.filterwarnings('default::capability.persistence.EventLogPersistenceWarning')
async def test_on_error_warn_lets_the_run_continue() -> None:
    log = _FailingLog(ok=0)
    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log, on_error='warn')])
    with pytest.warns(EventLogPersistenceWarning, match='goes on unrecorded') as caught:
        result = await agent.run('hello')
    assert result.output == 'answer to: hello'
    assert len([w for w in caught if issubclass(w.category, EventLogPersistenceWarning)]) == 1


def test_on_error_is_validated() -> None:
    with pytest.raises(ValueError, match='on_error'):
        EventLogPersistence(InMemoryEventLog(), on_error='ignore')  # type: ignore[arg-type]


# --- metadata and the history source -------------------------------------------------------------


async def test_agent_name_and_metadata_are_recorded(log: EventLogBase) -> None:
    agent = Agent(
        chat_model(),
        name='ignored',
        capabilities=[EventLogPersistence(log, agent_name='librarian', metadata={'tenant': 't1'})],
    )
    result = await agent.run('hi')
    run = await log.get_run(result.run_id)
    assert run is not None
    assert (run.agent_name, run.metadata) == ('librarian', {'tenant': 't1'})


async def test_replay_history_source(log: EventLogBase) -> None:
    agent = make_agent(log)
    first = await agent.run('one', conversation_id='src')
    second = await agent.run('two', message_history=first.all_messages())
    source = ReplayHistorySource(log)
    runs = await source.list_runs()
    assert [r.run_id for r in runs] == [first.run_id, second.run_id]
    assert all(r.conversation_id == 'src' for r in runs)
    assert dump(await source.run_history(run_id=second.run_id)) == dump(second.all_messages())
    assert await source.run_history(run_id='no-such-run') == []
    assert await source.run_history(run_id='') == []


@dataclass
class _Recorder(AbstractCapability[Any]):
    seen: list[str] = field(default_factory=list[str])


def test_no_warning_in_ordinary_runs(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            make_agent(log, capabilities=[_Recorder()]).run_sync('call lookup quiet')
    finally:
        log.close()


async def test_threading_from_a_deleted_conversation_stores_the_history_again(log: EventLogBase) -> None:
    agent = make_agent(log)
    first = await agent.run('to be forgotten', conversation_id='gone')
    await log.delete_conversation('gone')
    second = await agent.run('start over', message_history=first.all_messages(), conversation_id='kept')
    assert [e.inherited for e in await message_entries(log, second.run_id)] == [True, True, False, False]
    assert await replayed(log, second.run_id) == dump(second.all_messages())
    # The refused first write left nothing: one run_started, every key once, the chains intact.
    assert [e.kind for e in await log.entries(run_id=second.run_id)].count('run_started') == 1
    assert (await log.verify()).ok


def _count_reads(log: EventLogBase, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seqs `log.get_entry` is asked for from now on."""
    asked: list[int] = []
    get_entry = log.get_entry

    async def counting(seq: int) -> Entry | None:
        asked.append(seq)
        return await get_entry(seq)

    monkeypatch.setattr(log, 'get_entry', counting)
    return asked


async def test_a_threaded_run_checks_its_remembered_branch_with_its_first_write(
    log: EventLogBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a durable engine, a run continuing a remembered branch makes no read of its own to
    check the branch still exists: its `run_started` entry names the branch's tip as its parent,
    which the first write checks."""
    agent = make_agent(log)
    first = await agent.run('hello', conversation_id='c')
    tip = (await message_entries(log, first.run_id))[-1].seq
    asked = _count_reads(log, monkeypatch)
    second = await agent.run('and again', message_history=first.all_messages(), conversation_id='c')
    assert asked == []
    [started] = await log.entries(run_id=second.run_id, kinds=['run_started'])
    assert started.parent == tip
    assert [e.inherited for e in await message_entries(log, second.run_id)] == [False, False]
    assert await replayed(log, second.run_id) == dump(second.all_messages())


async def test_a_durable_run_keeps_the_read_that_checks_its_remembered_branch(
    log: EventLogBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run an engine may journal checks the branch with a read before its first write, so a
    write refused and made again never adds a step to its journal."""
    import capability.persistence as persistence_module

    agent = make_agent(log)
    first = await agent.run('hello', conversation_id='c')
    tip = (await message_entries(log, first.run_id))[-1].seq
    monkeypatch.setattr(persistence_module, '_unjournaled', lambda capability_id: False)
    asked = _count_reads(log, monkeypatch)
    await agent.run('and again', message_history=first.all_messages(), conversation_id='c')
    assert asked == [tip]


async def test_a_run_resumed_at_its_tool_calls_from_a_deleted_conversation_stores_the_history_again(
    log: EventLogBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's first write is then a tool's `started` record: refused (the branch's tip is gone),
    the history is matched against the log, stored again, and the record written after it."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ToolReturnPart

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart('launched')])
        return ModelResponse(parts=[ToolCallPart('launch', {'target': 'moon'}, tool_call_id='call-1')])

    agent = Agent(
        FunctionModel(model), capabilities=[EventLogPersistence(log)], output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def launch(target: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'on the way to the {target}'

    first = await agent.run('launch it', conversation_id='gone')
    assert isinstance(first.output, DeferredToolRequests)
    await log.delete_conversation('gone')
    asked = _count_reads(log, monkeypatch)
    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={'call-1': True}),
        conversation_id='kept',
    )
    assert second.output == 'launched'
    assert len(asked) == 1, 'one read, after the refused write, finds the branch gone'
    kinds = [(e.kind, e.inherited) for e in await log.entries(run_id=second.run_id)]
    assert kinds[:4] == [('run_started', False), ('message', True), ('message', True), ('tool_effect', False)]
    [started] = await log.entries(run_id=second.run_id, kinds=['run_started'])
    assert started.parent is None
    assert await replayed(log, second.run_id) == dump(second.all_messages())
    assert (await log.verify()).ok


def test_the_append_is_a_durable_operation_engines_can_journal() -> None:
    """What a durable engine does at bind time: collect the operation and round-trip its
    arguments through JSON (a journal). Private API of pydantic-ai, hence the guard."""
    try:
        from pydantic_ai.durable_exec._capability_operation import (  # pyright: ignore[reportPrivateUsage]
            collect_capability_operations,
        )
    except ImportError:  # pragma: no cover - moved in a newer pydantic-ai
        pytest.skip('pydantic-ai moved its durable-operation internals')
    import pydantic_core

    from capability.persistence import WireEntry

    declarations = collect_capability_operations(EventLogPersistence(InMemoryEventLog()))
    assert set(declarations) == {'append'}
    arguments = {
        'run_id': 'r',
        'conversation_id': 'c',
        'entries': [WireEntry('message', encode_message(ModelRequest(parts=[UserPromptPart('é ✓')])), 'msg:0')],
    }
    validator = declarations['append'].schema.validator
    assert validator.validate_json(pydantic_core.to_json(arguments)) == arguments


class _Killed(BaseException):
    """Stands for the process dying: nothing after it runs, no hook can record anything."""


class _DyingLog(InMemoryEventLog):
    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = budget

    async def append_many(self, entries: Any) -> list[int]:
        if self.budget <= 0:
            raise _Killed
        self.budget -= 1
        return await super().append_many(entries)


@pytest.mark.parametrize('budget', [1, 2, 3, 4])
async def test_re_executing_a_run_killed_mid_way_appends_nothing_twice(budget: int) -> None:
    """A durable engine re-executes a killed run under the same run id: the steps already
    committed are skipped by their keys and the rest is appended once."""
    log = _DyingLog(budget)
    agent = make_agent(log)
    with pytest.raises(_Killed):
        await agent.run('call lookup durable', run_id='durable-run', conversation_id='k')
    committed = await log.entries()
    log.budget = 1000
    result = await agent.run('call lookup durable', run_id='durable-run', conversation_id='k')
    entries = await log.entries(run_id='durable-run')
    assert entries[: len(committed)] == committed
    keys = [e.idempotency_key for e in entries]
    assert len(keys) == len(set(keys))
    assert kinds(entries) == [
        'run_started',
        'message',
        'message',
        'tool_effect',
        'tool_effect',
        'message',
        'message',
        'run_finished',
    ]
    run = await log.get_run('durable-run')
    assert run is not None and run.status == 'completed'
    assert run.message_count == len(result.all_messages())


def test_options_after_the_log_are_keyword_only() -> None:
    """`EventLogPersistence(log, *, agent_name=..., ...)`, as docs/guide.md documents it."""
    log = InMemoryEventLog()
    with pytest.raises(TypeError):
        EventLogPersistence(log, 'planner')  # pyright: ignore[reportCallIssue]
    assert EventLogPersistence(log, agent_name='planner').agent_name == 'planner'


class _CountingLog(InMemoryEventLog):
    """Counts the branches read back, the cost a threaded run recognised from memory avoids."""

    def __init__(self) -> None:
        super().__init__()
        self.branches_read = 0

    async def branch(self, tip: int) -> list[Entry]:
        self.branches_read += 1
        return await super().branch(tip)


async def test_a_run_threaded_from_the_last_result_continues_without_reading_the_log() -> None:
    """The layout a finished run leaves is remembered across runs (the recorder itself dies with
    its run): threading its result reads no branch; the same history as other objects is matched
    in the log, and both continue at the same point."""
    log = _CountingLog()
    agent = make_agent(log)
    first = await agent.run('call lookup one', conversation_id='mem')
    second = await agent.run('two', message_history=first.all_messages())
    assert log.branches_read == 0
    copied = ModelMessagesTypeAdapter.validate_json(first.all_messages_json())
    third = await agent.run('three', message_history=copied)
    assert log.branches_read >= 1
    tip = (await message_entries(log, first.run_id))[-1].seq
    for result in (second, third):
        run = await log.get_run(result.run_id)
        assert run is not None and run.branch_parent == tip and run.message_count == 2
        assert await replayed(log, result.run_id) == dump(result.all_messages())


async def test_runs_branching_from_one_remembered_result_each_record_their_own_branch() -> None:
    """Two runs threaded at once from the same result (the first borrows the remembered history,
    the second gets a copy), then a run threaded from each: none reads the log, and each records
    and replays its own branch."""
    log = _CountingLog()
    agent = make_agent(log)
    first = await agent.run('one', conversation_id='branches')
    left, right = await asyncio.gather(
        agent.run('left', message_history=first.all_messages()),
        agent.run('right', message_history=first.all_messages()),
    )
    left_on = await agent.run('left again', message_history=left.all_messages())
    right_on = await agent.run('right again', message_history=right.all_messages())
    assert log.branches_read == 0
    assert await log.entries(kinds=['compaction']) == []  # each history only grew, as each run saw it
    tip = (await message_entries(log, first.run_id))[-1].seq
    parents = {left.run_id: tip, right.run_id: tip}
    parents[left_on.run_id] = (await message_entries(log, left.run_id))[-1].seq
    parents[right_on.run_id] = (await message_entries(log, right.run_id))[-1].seq
    for result in (left, right, left_on, right_on):
        run = await log.get_run(result.run_id)
        assert run is not None and run.branch_parent == parents[result.run_id] and run.message_count == 2
        assert await replayed(log, result.run_id) == dump(result.all_messages())
