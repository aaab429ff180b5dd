"""The search tool answers with earlier history, not with the question that prompted it.

A threaded app: one run states a fact, a later run asks for it and the model searches. The
asking run's own messages (its request, its tool call) are not results, and the search tool's
own calls and returns are not indexed, though they stay in the log. Also: the capability takes
the log itself as its source, and refuses at construction what cannot be searched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import ConversationSearch, EventLogPersistence
from capability.search import TOOL_NAME
from eventlog import InMemoryEventLog, LmdbEventLog, ReplayHistorySource
from eventlog.log import EventLogBase

FACT = 'my order number is ZX-99812, shipped to the Lisbon warehouse'
QUESTION = 'What was my order number again?'


def _searching_model(query: str):
    """Searches `query` when the last message is a user prompt asking something; else echoes."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart('found it')])
        prompt = str(last.parts[-1].content) if last.parts else ''  # pyright: ignore[reportAttributeAccessIssue]
        if prompt.endswith('?'):
            return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {'query': query}, tool_call_id=f'c{len(messages)}')])
        return ModelResponse(parts=[TextPart('noted')])

    return respond


def _tool_answers(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == TOOL_NAME
    ]


def _results(answer: str) -> str:
    """The answer without its first line, which repeats the query."""
    return answer.split('\n', 1)[1] if '\n' in answer else ''


@pytest.mark.parametrize('backend', ['memory', 'lmdb'])
async def test_a_threaded_app_gets_the_fact_not_its_own_question(backend: str, tmp_path: Path) -> None:
    log: EventLogBase = InMemoryEventLog() if backend == 'memory' else LmdbEventLog(tmp_path / 'store')
    try:
        agent = Agent(
            FunctionModel(_searching_model('order number')),
            capabilities=[
                EventLogPersistence(log),
                ConversationSearch(log, scope='conversation', answer_style='explained'),
            ],
        )
        first = await agent.run(f'Please remember: {FACT}', conversation_id='shop')
        second = await agent.run(QUESTION, message_history=first.all_messages())
        answer = _tool_answers(second.new_messages())[0]
        results = _results(answer)
        assert results.startswith('\nResult 1 of 1 |'), answer
        assert 'ZX-99812' in results and QUESTION not in results
        assert f'run {second.run_id}' not in results

        # A third run asks again: the second run's search call and its answer do not come back,
        # though the log keeps them.
        third = await agent.run(QUESTION, message_history=second.all_messages())
        answer3 = _tool_answers(third.new_messages())[0]
        results3 = _results(answer3)
        assert 'ZX-99812' in results3
        assert 'Tool Call [' not in results3 and 'Tool [' not in results3, answer3
        assert f'run {third.run_id}' not in results3  # the second run's question may come back: it is history now
        stored = await log.run_message_payloads(second.run_id)
        assert any(TOOL_NAME.encode() in payload for payload in stored)  # kept in the log
    finally:
        log.close()


async def test_the_searching_run_can_still_search_itself_by_id(tmp_path: Path) -> None:
    log = InMemoryEventLog()
    engine = ConversationSearch(log, scope='conversation', answer_style='explained').build_engine()
    agent = Agent(FunctionModel(_searching_model('warehouse')), capabilities=[EventLogPersistence(log)])
    run = await agent.run(f'Please remember: {FACT}', conversation_id='shop')
    left_out = await engine.search(
        'warehouse', scope='conversation', conversation_id='shop', searching_run_id=run.run_id
    )
    assert left_out.startswith('No message matches "warehouse"'), left_out
    by_id = await engine.search(
        'warehouse', scope='conversation', conversation_id='shop', run_id=run.run_id, searching_run_id=run.run_id
    )
    assert 'Lisbon warehouse' in _results(by_id)


async def test_conversation_search_takes_the_log_itself() -> None:
    log = InMemoryEventLog()
    search = ConversationSearch(log, scope='conversation', answer_style='explained')
    assert isinstance(search.source, ReplayHistorySource) and search.source.log is log
    # Stated twice over one log, it is one search (combine compares the sources).
    again = ConversationSearch(log, scope='conversation', answer_style='explained')
    assert ConversationSearch.combine([search, again]) is search


@pytest.mark.parametrize('source', [object(), 'sessions.lmdb', None])
def test_conversation_search_refuses_what_it_cannot_read_at_construction(source: object) -> None:
    with pytest.raises(TypeError, match='reads history from an event log, a HistorySource'):
        ConversationSearch(source, scope='conversation')  # pyright: ignore[reportArgumentType]


async def test_an_index_of_the_previous_format_is_rebuilt_without_search_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import search.render
    import search.wire_text
    from search.index_format import INDEX_FORMAT
    from search.persistent_index import PersistentIndex as LmdbIndex

    log = LmdbEventLog(tmp_path / 'store')
    try:
        agent = Agent(
            FunctionModel(_searching_model('zebrafinch')),
            capabilities=[
                EventLogPersistence(log),
                ConversationSearch(log, scope='conversation', answer_style='explained'),
            ],
        )
        first = await agent.run(f'Please remember: {FACT}', conversation_id='shop')
        await agent.run(QUESTION, message_history=first.all_messages())
        # Build the index as format 1 did: with the search tool's calls and returns indexed.
        # (both places that know the tool's name: decoded messages, and stored JSON read directly)
        monkeypatch.setattr(search.render, 'SEARCH_TOOL_NAME', 'no-such-tool')
        monkeypatch.setattr(search.wire_text, 'SEARCH_TOOL_NAME', 'no-such-tool')
        old = LmdbIndex(log)
        old.rebuild()
        meta = log.open_table(b'ix.meta')
        log.run_in_txn(lambda txn: txn.put(b'format', b'1', db=meta), write=True)
        stale = (
            await ConversationSearch(old, scope='conversation', answer_style='explained')
            .build_engine()
            .search('zebrafinch', scope='conversation', conversation_id='shop')
        )
        assert 'Tool Call [search_conversation_history]' in stale
        monkeypatch.undo()

        reopened = LmdbIndex(log)  # sees format 1 and rebuilds
        assert log.run_in_txn(lambda txn: bytes(txn.get(b'format', db=meta)), write=False) == str(INDEX_FORMAT).encode()
        fresh = (
            await ConversationSearch(reopened, scope='conversation', answer_style='explained')
            .build_engine()
            .search('zebrafinch', scope='conversation', conversation_id='shop')
        )
        assert fresh.startswith('No message matches "zebrafinch"'), fresh
    finally:
        log.close()
