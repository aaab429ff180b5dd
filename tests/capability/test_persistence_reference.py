"""`EventLogPersistence` next to the reference (pydantic-ai-harness): its compaction capabilities,
its conversation search reading our `ReplayHistorySource`, and its `StepPersistence` +
`SnapshotHistorySource` recovering the same runs. Skipped where the reference is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip('pydantic_ai_harness')

from _helpers import chat, chat_model, dump, last_prompt
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai_harness.compaction import SlidingWindowCompaction, SummarizingCompaction
from pydantic_ai_harness.conversation_search import ConversationSearch, SnapshotHistorySource
from pydantic_ai_harness.step_persistence import SqliteStepStore, StepPersistence

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog, ReplayHistorySource
from eventlog.log import EventLogBase

pytestmark = pytest.mark.reference

SUMMARY_TEXT = 'SUMMARY-OF-EARLIER-TURNS'


def summarizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(SUMMARY_TEXT)])


def summarizing() -> SummarizingCompaction[Any]:
    return SummarizingCompaction(model=FunctionModel(summarizer), max_messages=6, keep_messages=2)


def sliding() -> SlidingWindowCompaction[Any]:
    return SlidingWindowCompaction(max_messages=5, keep_messages=3)


def is_summary(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, CompactionPart) for p in message.parts)


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]


async def converse(agent: Agent[None, str], turns: list[str], conversation_id: str) -> list[Any]:
    history: list[ModelMessage] | None = None
    results: list[Any] = []
    for i, turn in enumerate(turns):
        result = await agent.run(turn, message_history=history, conversation_id=conversation_id if i == 0 else None)
        history = result.all_messages()
        results.append(result)
    return results


TURNS = [f'turn {i}: the code word is word{i}x' for i in range(8)]


def compaction_agent(log: EventLogBase, compaction: AbstractCapability[Any], *, first: bool) -> Agent[None, str]:
    persistence = EventLogPersistence[None](log)
    capabilities: list[AbstractCapability[Any]] = [persistence, compaction] if first else [compaction, persistence]
    return Agent(chat_model(), capabilities=capabilities)


@pytest.mark.parametrize('first', [True, False], ids=['persistence-outer', 'persistence-inner'])
@pytest.mark.parametrize('make', [summarizing, sliding], ids=['summarizing', 'sliding'])
async def test_compaction_keeps_every_original(log: EventLogBase, make: Any, first: bool) -> None:
    agent = compaction_agent(log, make(), first=first)
    results = await converse(agent, TURNS, 'cmp')
    final = results[-1].all_messages()
    assert len(prompts(final)) < len(TURNS)  # the compaction did drop turns from the live context

    transcript = await log.transcript('cmp')
    assert prompts(transcript) == TURNS
    assert not any(is_summary(m) for m in transcript)
    assert SUMMARY_TEXT not in dump(transcript).decode()
    # What the agent continues from, with the summaries folded in:
    assert dump(await log.context('cmp')) == dump(final)
    compactions = await log.entries(conversation_id='cmp', kinds=['compaction'])
    assert compactions
    originals: list[ModelMessage] = []
    for result in results:
        originals.extend(result.new_messages())
        record = await log.run_messages(result.run_id)
        # Each run's record is the originals, byte for byte: every message each run of the
        # conversation added, up to and including this run, and never a summary.
        assert dump(record) == dump(originals)
        assert not any(is_summary(m) for m in record)
        assert len(await log.entries(run_id=result.run_id, kinds=['message'])) == 2
    if make is summarizing:
        assert any(SUMMARY_TEXT in c.payload.decode() for c in compactions)


async def test_compaction_within_one_run_with_tools(log: EventLogBase) -> None:
    """A long tool loop inside one run compacted mid-run: the run's record is still every original."""
    calls = 0

    def looping(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls <= 6:
            return ModelResponse(parts=[ToolCallPart('lookup', {'arg': f'a{calls}'}, tool_call_id=f'c{calls}')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(looping), capabilities=[EventLogPersistence(log), summarizing()])

    @agent.tool_plain
    def lookup(arg: str) -> str:
        return f'result {arg}'

    result = await agent.run('start the loop', conversation_id='loop')
    record = await log.run_messages(result.run_id)
    assert len(record) == 14  # prompt + 6 x (call, return) + answer
    returns = [p.content for m in record for p in getattr(m, 'parts', []) if isinstance(p, ToolReturnPart)]
    assert returns == [f'result a{i}' for i in range(1, 7)]
    assert not any(is_summary(m) for m in record)
    assert dump(await log.context('loop')) == dump(result.all_messages())


# --- the reference's search over our source -----------------------------------------------------


def searching_model(query: str) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart('searched')])
        if last_prompt(messages).startswith('search'):
            return ModelResponse(parts=[ToolCallPart('search_conversation_history', {'query': query})])
        return chat(messages, info)

    return model


def tool_output(messages: list[ModelMessage]) -> str:
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, ToolReturnPart) and p.tool_name == 'search_conversation_history':
                    return str(p.content)
    raise AssertionError('no search result')


async def search_once(log: EventLogBase, history: list[ModelMessage], query: str) -> str:
    agent = Agent(
        FunctionModel(searching_model(query)),
        capabilities=[
            ConversationSearch(ReplayHistorySource(log), scope='conversation', max_matches=50, context_lines=0)
        ],
    )
    result = await agent.run('search please', message_history=history)
    return tool_output(result.new_messages())


async def test_reference_search_finds_each_message_of_a_threaded_conversation_once(log: EventLogBase) -> None:
    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    turns = [f'note {i} mentions marker{i}' for i in range(6)]
    results = await converse(agent, turns, 'conv')
    query = ' '.join(f'marker{i}' for i in range(6))
    output = await search_once(log, results[-1].all_messages(), query)
    assert output.startswith("Found 12 match(es) for '")  # each prompt and each answer, once
    assert 'in 12 persisted messages' in output
    for i in range(6):
        assert output.count(f'User: note {i} mentions marker{i}') == 1
        assert output.count(f'Assistant: answer to: note {i} mentions marker{i}') == 1


async def test_reference_search_finds_a_compacted_away_detail(log: EventLogBase) -> None:
    agent = compaction_agent(log, summarizing(), first=True)
    turns = ['hi there', 'remember: the vault combination is 31-41-59', *[f'small talk {i}' for i in range(8)]]
    results = await converse(agent, turns, 'vault')
    assert '31-41-59' not in dump(results[-1].all_messages()).decode()  # compacted away
    output = await search_once(log, results[-1].all_messages(), 'vault combination')
    assert 'the vault combination is 31-41-59' in output
    assert SUMMARY_TEXT not in output
    assert len(re.findall(r'\[score: ', output)) >= 1


# --- the same runs recovered both ways -----------------------------------------------------------


def both_ways(log: EventLogBase, tmp_path: Path, *extra: AbstractCapability[Any]) -> tuple[Agent[None, str], Any]:
    store = SqliteStepStore(database=str(tmp_path / 'reference.db'))
    agent = Agent(
        chat_model(),
        capabilities=[StepPersistence(store=store), EventLogPersistence(log), *extra],
    )

    @agent.tool_plain
    def lookup(arg: str) -> str:
        return f'value of {arg}'

    @agent.tool_plain
    def explode(arg: str) -> str:
        raise RuntimeError('boom')

    return agent, store


async def test_run_history_matches_the_reference_where_it_recovers(log: EventLogBase, tmp_path: Path) -> None:
    agent, store = both_ways(log, tmp_path)
    turns = ['hello', 'call lookup alpha', 'how are you', 'call lookup beta', 'bye']
    results = await converse(agent, turns, 'same')
    ours = ReplayHistorySource(log)
    theirs = SnapshotHistorySource(store)
    assert [r.run_id for r in await ours.list_runs()] == [r.run_id for r in await theirs.list_runs()]
    for result in results:
        mine = await ours.run_history(run_id=result.run_id)
        reference = await theirs.run_history(run_id=result.run_id)
        assert dump(mine) == dump(reference) == dump(result.all_messages())


async def test_failed_run_reference_loses_the_failing_step(log: EventLogBase, tmp_path: Path) -> None:
    """Where they differ: a failed run. The reference saves a failed run's history only as an
    `interrupted` snapshot, which its source leaves out, so its record stops at the last settled
    step; the log kept every message the run produced, as pydantic-ai reports them."""
    from pydantic_ai import capture_run_messages

    agent, store = both_ways(log, tmp_path)
    first = await agent.run('call lookup first', conversation_id='fail')
    with capture_run_messages() as captured, pytest.raises(RuntimeError):
        await agent.run('call explode now', message_history=first.all_messages())
    [_, failed] = await log.list_runs(conversation_id='fail')
    mine = await ReplayHistorySource(log).run_history(run_id=failed.run_id)
    reference = await SnapshotHistorySource(store).run_history(run_id=failed.run_id)
    assert dump(mine) == dump(captured)  # right: everything up to the failure, byte for byte
    assert len(reference) < len(mine)  # the reference lost the failing step
    assert dump(reference) == dump(mine[: len(reference)])  # what it has agrees with ours


async def test_run_history_under_compaction_both_ways(log: EventLogBase, tmp_path: Path) -> None:
    """With compaction, both aim at the originals; ours also reproduces the exact context."""
    agent, store = both_ways(log, tmp_path, sliding())
    results = await converse(agent, TURNS, 'cmp2')
    ours = ReplayHistorySource(log)
    theirs = SnapshotHistorySource(store)
    originals: list[ModelMessage] = []
    differ = 0
    for result in results:
        originals.extend(result.new_messages())
        mine = await ours.run_history(run_id=result.run_id)
        assert dump(mine) == dump(originals)  # right by construction: each message appended once
        reference = await theirs.run_history(run_id=result.run_id)
        if dump(reference) != dump(mine):
            differ += 1
            # The reference can only recover what this run's own snapshots held: turns a sliding
            # window had dropped before the run started are gone from all of them.
            assert set(prompts(reference)) < set(prompts(mine))
    assert differ > 0
    assert dump(await log.context('cmp2')) == dump(results[-1].all_messages())


def test_lmdb_store_is_used(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    log.close()
    assert (tmp_path / 's' / 'data.mdb').exists()
