"""Sub-agents: runs started inside a tool of another run, recorded under the same conversation id.

A sub-agent's run is recorded as its parent's child (`parent_run_id`) and never becomes what the
conversation continues from: `log.context()` stays the parent's messages, the transcript keeps
every message where it was recorded, and a parent run threaded with the parent's history
continues the parent's branch. Real agents on every backend, the persistent ones also encrypted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _helpers import chat_model, dump, replayed
from backends import BACKENDS, ENCRYPTED_BACKENDS
from clirunner import run_cli
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from capability import EventLogPersistence
from eventlog import (
    Entry,
    LmdbEventLog,
    encode_message,
    message_entry,
    run_finished_entry,
    run_started_entry,
    top_level_runs,
)
from eventlog.log import EventLogBase

pytestmark = pytest.mark.filterwarnings('error::capability.persistence.EventLogPersistenceWarning')


@pytest.fixture(params=[*BACKENDS, *ENCRYPTED_BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend, and the persistent ones encrypted (docs/encryption.md)."""
    return request.param


async def message_entries(log: EventLogBase, run_id: str) -> list[Entry]:
    return await log.entries(run_id=run_id, kinds=['message'])


def delegating_agents(log: EventLogBase, conversation_id: str | None) -> tuple[Agent[None, str], list[ModelMessage]]:
    """An outer agent whose tool `delegate` runs an inner agent (recorded by a capability of its
    own) under `conversation_id`; the inner run's messages are collected in the list."""
    inner = Agent(chat_model(), capabilities=[EventLogPersistence(log)], name='inner')
    outer = Agent(chat_model(), capabilities=[EventLogPersistence(log)], name='outer')
    inner_messages: list[ModelMessage] = []

    @outer.tool_plain
    async def delegate(arg: str) -> str:
        """Hand the work to the inner agent."""
        result = await inner.run(f'inner work on {arg}', conversation_id=conversation_id)
        inner_messages.extend(result.all_messages())
        return result.output

    return outer, inner_messages


async def test_context_is_the_parents_not_the_sub_agents(log: EventLogBase) -> None:
    outer, inner_messages = delegating_agents(log, 'c')
    result = await outer.run('call delegate job', conversation_id='c')
    parent = result.all_messages()
    assert len(parent) == 4 and len(inner_messages) == 2
    assert dump(await log.context('c')) == dump(parent)
    # The sub-agent's run: the parent's child, its own record exactly, continuing from nothing.
    [child] = await log.list_runs(parent_run_id=result.run_id)
    assert child.conversation_id == 'c' and child.agent_name == 'inner'
    assert child.branch_parent is None
    assert await replayed(log, child.run_id) == dump(inner_messages)
    assert await replayed(log, result.run_id) == dump(parent)
    runs = await log.list_runs(conversation_id='c')
    assert [r.run_id for r in runs] == [result.run_id, child.run_id]
    assert [r.run_id for r in top_level_runs(runs)] == [result.run_id]
    # Every message once, as recorded: the sub-agent's inside the parent's tool call.
    assert await log.transcript_json('c') == dump(parent[:2] + inner_messages + parent[2:])
    # A fork by default ends at the parent's last message.
    forked = await log.fork('c')
    assert dump(await log.context(forked)) == dump(parent)

    # The next turn, threaded with the parent's history, continues the parent's branch.
    following = await outer.run('and now?', message_history=parent, conversation_id='c')
    assert dump(await log.context('c')) == dump(following.all_messages())
    run = await log.get_run(following.run_id)
    assert run is not None and run.parent_run_id is None
    assert run.branch_parent == (await message_entries(log, result.run_id))[-1].seq
    assert len(await message_entries(log, following.run_id)) == 2  # only what it added
    assert (await log.verify()).ok


async def test_a_new_process_continues_the_parents_context(log: EventLogBase) -> None:
    """Without the memory of recent runs (another capability, as in a new process), the history
    read back with `log.context()` is matched in the log: to the parent's branch, not the child's."""
    outer, _ = delegating_agents(log, 'c')
    result = await outer.run('call delegate job', conversation_id='c')
    fresh = Agent(chat_model(), capabilities=[EventLogPersistence(log)], name='outer')
    following = await fresh.run('go on', message_history=await log.context('c'), conversation_id='c')
    run = await log.get_run(following.run_id)
    assert run is not None
    assert run.branch_parent == (await message_entries(log, result.run_id))[-1].seq
    assert len(await message_entries(log, following.run_id)) == 2
    assert dump(await log.context('c')) == dump(following.all_messages())


async def test_a_history_naming_no_run_continues_the_main_line(log: EventLogBase) -> None:
    """A handed-in history whose messages name no recorded run (written through the log's API) is
    matched against the conversation's latest top-level run, never a later sub-agent's."""
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('first question')]),
        ModelResponse(parts=[TextPart('first answer')]),
    ]
    await log.append(run_started_entry(conversation_id='c', run_id='p'))
    seqs = [await log.append(message_entry(m, conversation_id='c', run_id='p')) for m in history]
    await log.append(run_finished_entry(conversation_id='c', run_id='p', status='completed'))
    await log.append(run_started_entry(conversation_id='c', run_id='child', parent_run_id='p'))
    for m in [ModelRequest(parts=[UserPromptPart('sub question')]), ModelResponse(parts=[TextPart('sub answer')])]:
        await log.append(message_entry(m, conversation_id='c', run_id='child'))
    await log.append(run_finished_entry(conversation_id='c', run_id='child', status='completed'))
    assert dump(await log.context('c')) == dump(history)

    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    following = await agent.run('second question', message_history=await log.context('c'), conversation_id='c')
    run = await log.get_run(following.run_id)
    assert run is not None and run.branch_parent == seqs[-1]
    stored = await log.entries(run_id=following.run_id, kinds=['message'])
    assert not any(e.inherited for e in stored)  # nothing of the history stored again
    assert dump(await log.context('c')) == dump(following.all_messages())
    assert len(await log.transcript('c')) == 6


async def test_sub_agents_in_parallel_tool_calls(log: EventLogBase) -> None:
    """Two sub-agents running at once, in two parallel tool calls of one response, their entries
    interleaved in the log: each replays exactly, and neither becomes the context."""
    both_started = asyncio.Event()
    started: list[str] = []

    async def inner_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        prompt = next(p.content for p in request.parts if isinstance(p, UserPromptPart))
        assert isinstance(prompt, str)
        started.append(prompt)
        if len(started) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 10)  # neither answers before both asked
        return ModelResponse(parts=[TextPart(f'done: {prompt}')])

    def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart('delegate', {'arg': arg}, tool_call_id=f'call-{arg}') for arg in ('a', 'b')]
            return ModelResponse(parts=calls)
        return ModelResponse(parts=[TextPart('both done')])

    inner = Agent(FunctionModel(inner_model), capabilities=[EventLogPersistence(log)], name='inner')
    outer = Agent(FunctionModel(outer_model), capabilities=[EventLogPersistence(log)], name='outer')
    inner_results: dict[str, list[ModelMessage]] = {}

    @outer.tool
    async def delegate(ctx: RunContext[None], arg: str) -> str:
        """Hand one part of the work to an inner agent."""
        result = await inner.run(f'part {arg}', conversation_id=ctx.conversation_id)
        inner_results[result.run_id] = result.all_messages()
        return result.output

    result = await outer.run('split the work', conversation_id='c')
    parent = result.all_messages()
    assert len(parent) == 4 and len(inner_results) == 2
    assert dump(await log.context('c')) == dump(parent)
    children = await log.list_runs(parent_run_id=result.run_id)
    assert {r.run_id for r in children} == set(inner_results)
    assert [r.start_seq for r in children] == sorted(r.start_seq for r in children)
    for run_id, messages in inner_results.items():
        assert await replayed(log, run_id) == dump(messages)
    # Interleaved: the second sub-agent asked before the first answered.
    first, second = children
    assert second.start_seq < first.last_seq
    # The transcript: the parent's call, both sub-agents' messages as recorded (both requests before
    # either answer), each sub-agent's in its own order, the parent's end.
    payloads = await log.transcript_payloads('c')
    assert payloads[:2] + payloads[-2:] == [encode_message(m) for m in parent]
    subs = [[encode_message(m) for m in messages] for messages in inner_results.values()]
    middle = payloads[2:-2]
    assert sorted(middle) == sorted(p for sub in subs for p in sub)
    assert sorted(middle[:2]) == sorted(sub[0] for sub in subs)
    for sub in subs:
        assert [p for p in middle if p in sub] == sub

    following = await outer.run('thanks', message_history=parent, conversation_id='c')
    assert dump(await log.context('c')) == dump(following.all_messages())
    run = await log.get_run(following.run_id)
    assert run is not None and run.branch_parent == (await message_entries(log, result.run_id))[-1].seq
    assert (await log.verify()).ok


async def test_a_sub_agent_given_the_earlier_turns_continues_from_them(log: EventLogBase) -> None:
    """A sub-agent handed the conversation's finished turns continues from them by reference
    (nothing stored twice), and still does not become the conversation's context."""
    inner = Agent(TestModel(custom_output_text='inner answer'), capabilities=[EventLogPersistence(log)])
    outer = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    inner_messages: list[ModelMessage] = []

    @outer.tool
    async def delegate(ctx: RunContext[None], arg: str) -> str:
        """Hand the work, with the earlier turns, to the inner agent."""
        earlier = ctx.messages[:2]  # the first turn: a complete exchange
        result = await inner.run(f'work on {arg}', message_history=earlier, conversation_id=ctx.conversation_id)
        inner_messages.extend(result.all_messages())
        return result.output

    first = await outer.run('hello', conversation_id='c')
    result = await outer.run('call delegate job', message_history=first.all_messages(), conversation_id='c')
    parent = result.all_messages()
    assert len(parent) == 6
    assert dump(await log.context('c')) == dump(parent)
    [child] = await log.list_runs(parent_run_id=result.run_id)
    assert child.branch_parent == (await message_entries(log, first.run_id))[-1].seq
    assert await replayed(log, child.run_id) == dump(inner_messages)
    assert dump(inner_messages[:2]) == dump(parent[:2])
    assert len(await message_entries(log, child.run_id)) == 2  # only what it added
    assert await log.transcript_json('c') == dump(parent[:4] + inner_messages[2:] + parent[4:])
    assert [r.run_id for r in top_level_runs(await log.list_runs(conversation_id='c'))] == [
        first.run_id,
        result.run_id,
    ]


async def test_a_sub_agent_with_a_conversation_of_its_own(log: EventLogBase) -> None:
    """A sub-agent run under a conversation id of its own is that conversation's context."""
    outer, inner_messages = delegating_agents(log, 'research')
    result = await outer.run('call delegate job', conversation_id='c')
    [child] = await log.list_runs(parent_run_id=result.run_id)
    assert child.conversation_id == 'research'
    assert dump(await log.context('research')) == dump(inner_messages)
    assert dump(await log.context('c')) == dump(result.all_messages())
    assert [r.run_id for r in top_level_runs(await log.list_runs(conversation_id='research'))] == [child.run_id]


async def test_a_new_conversation_starts_from_an_empty_context(log: EventLogBase) -> None:
    """`context` of a conversation not recorded yet is `[]`: the same code starts and continues one."""
    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    outputs: list[list[ModelMessage]] = []
    for prompt in ('hello', 'again'):
        history = await log.context('fresh')
        result = await agent.run(prompt, message_history=history, conversation_id='fresh')
        outputs.append(result.all_messages())
    assert len(outputs[0]) == 2 and dump(outputs[1][:2]) == dump(outputs[0])
    assert dump(await log.context('fresh')) == dump(outputs[1])
    assert len(await log.transcript('fresh')) == 4


def test_the_cli_context_is_the_parents(tmp_path: Path) -> None:
    """`eventlog context` prints the parent's messages, and a conversation that does not exist is
    a one-line error (with `--json` too), not an empty context."""
    store = tmp_path / 'store.lmdb'

    async def record() -> list[ModelMessage]:
        log = LmdbEventLog(store)
        try:
            outer, _ = delegating_agents(log, 'c')
            return (await outer.run('call delegate job', conversation_id='c')).all_messages()
        finally:
            log.close()

    parent = asyncio.run(record())
    shown = run_cli(['context', 'c', '--json', '--store', str(store)])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.encode() == dump(parent) + b'\n'
    for extra in ([], ['--json']):
        missing = run_cli(['context', 'nope', *extra, '--store', str(store)])
        assert (missing.exit_code, missing.stdout) == (1, '')
        assert missing.stderr == "eventlog: no conversation 'nope' in this store\n"
