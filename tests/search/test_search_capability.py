"""The `ConversationSearch` capability, driven by real agents."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from searchtools import ListSource, exchange, user

import search
from capability.search import TOOL_NAME, ConversationSearch, ScopeDefaultWarning


def scoped(source: Any, **options: Any) -> ConversationSearch[None]:
    options.setdefault('answer_style', 'explained')
    return ConversationSearch(source, scope=options.pop('scope', 'conversation'), **options)


def tool_answers(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == TOOL_NAME
    ]


def searching_model(*queries: dict[str, Any]) -> FunctionModel:
    """A model that calls the search tool with each of `queries`, then answers with the last tool answer."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = sum(1 for message in messages for part in message.parts if isinstance(part, ToolReturnPart))
        if calls < len(queries):
            return ModelResponse(parts=[ToolCallPart(TOOL_NAME, queries[calls], tool_call_id=f'call-{calls}')])
        answers = tool_answers(messages)
        return ModelResponse(parts=[TextPart(answers[-1] if answers else 'no search')])

    return FunctionModel(respond)


# --- end to end --------------------------------------------------------------------------------------


async def test_the_model_recalls_a_planted_detail() -> None:
    source = ListSource()
    source.add('earlier', 'user-42', exchange('My locker code is 7715, remember it.', 'Noted: locker code 7715.'))
    source.add('elsewhere', 'user-99', exchange('My locker code is 0000.', 'Noted.'))
    agent = Agent(searching_model({'query': 'locker code'}), capabilities=[scoped(source)])
    result = await agent.run('What was my locker code?', conversation_id='user-42')
    (answer,) = tool_answers(result.all_messages())
    assert 'My locker code is 7715' in answer
    assert '| run earlier | conversation user-42' in answer
    assert '0000' not in answer and 'user-99' not in answer
    assert 'My locker code is 7715' in result.output


async def test_recall_across_real_threaded_runs() -> None:
    """Real runs, threaded with `message_history`, recorded as a store would record them."""
    source = ListSource()
    chat = Agent(TestModel(custom_output_text='The harbour gate opens with code 5581.'))
    first = await chat.run('How do I open the harbour gate?', conversation_id='conv-h')
    source.add(first.run_id, first.conversation_id, first.all_messages())
    second = await chat.run('Thanks!', message_history=first.all_messages())
    source.add(second.run_id, second.conversation_id, second.all_messages())
    other = await chat.run('Tell me about the harbour gate', conversation_id='conv-other')
    source.add(other.run_id, other.conversation_id, other.all_messages())

    agent = Agent(searching_model({'query': 'harbour gate code'}), capabilities=[scoped(source)])
    result = await agent.run('What was the code?', message_history=second.all_messages())
    assert result.conversation_id == 'conv-h'
    (answer,) = tool_answers(result.all_messages())
    assert 'code 5581' in answer
    assert 'from 4 stored messages' in answer  # the second run's copy of the first is not counted again
    assert other.run_id not in answer and 'conv-other' not in answer
    assert answer.count('How do I open the harbour gate?') == 1


async def test_search_by_run_id_through_the_tool() -> None:
    source = ListSource()
    source.add('r-1', 'c', exchange('alpha detail', 'ok'))
    source.add('r-2', 'c', exchange('alpha other detail', 'ok'))
    agent = Agent(searching_model({'query': 'alpha', 'run_id': 'r-2'}), capabilities=[scoped(source)])
    result = await agent.run('go', conversation_id='c')
    (answer,) = tool_answers(result.all_messages())
    assert 'alpha other detail' in answer and 'run r-1' not in answer


async def test_bad_input_never_fails_the_run() -> None:
    class Closed:
        async def list_runs(self) -> list[Any]:
            raise RuntimeError('closed')

        async def run_history(self, *, run_id: str) -> list[ModelMessage]:
            raise RuntimeError('closed')

    queries = [{'query': ''}, {'query': '?!'}, {'query': ' '.join(['w'] * 10_000)}, {'query': 'x\x00\x07'}]
    agent = Agent(searching_model(*queries, {'query': 'ok'}), capabilities=[scoped(Closed())])
    result = await agent.run('go', conversation_id='c')
    answers = tool_answers(result.all_messages())
    assert len(answers) == 5
    assert answers[0].startswith('Nothing was searched: the query is empty')
    assert 'no searchable words' in answers[1]
    assert answers[2].startswith('The search could not be completed')  # 'w' is one distinct word
    assert answers[4].startswith('The search could not be completed')


async def test_conversation_scope_fails_closed_without_a_conversation_id() -> None:
    source = ListSource()
    source.add('r', None, [user('unlabelled secret')])
    toolset = scoped(source).get_toolset()
    assert isinstance(toolset, FunctionToolset)
    tool = toolset.tools[TOOL_NAME]
    answer = await tool.function(SimpleNamespace(conversation_id=None, run_id=None), query='secret')  # pyright: ignore[reportCallIssue]
    assert answer.startswith('Nothing was searched') and 'no conversation id' in answer
    answer = (
        await scoped(source, scope='all')
        .get_toolset()
        .tools[TOOL_NAME]
        .function(  # pyright: ignore[reportAttributeAccessIssue, reportOptionalMemberAccess]
            SimpleNamespace(conversation_id=None, run_id=None), query='secret'
        )
    )
    assert 'unlabelled secret' in answer


# --- the tool and the instructions -------------------------------------------------------------------


async def test_tool_definition_and_instructions_reach_the_model() -> None:
    seen: dict[str, Any] = {}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen['tools'] = {tool.name: tool for tool in info.function_tools}
        seen['instructions'] = info.instructions
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[scoped(ListSource())])
    await agent.run('hi', conversation_id='c')
    tool = seen['tools'][TOOL_NAME]
    assert 'current conversation only' in tool.description
    assert set(tool.parameters_json_schema['properties']) == {'query', 'run_id'}
    assert tool.parameters_json_schema['required'] == ['query']
    assert 'words to look for' in tool.parameters_json_schema['properties']['query']['description']
    assert TOOL_NAME in seen['instructions'] and 'this conversation' in seen['instructions']


def test_instructions_follow_the_scope() -> None:
    conversation = scoped(ListSource()).get_instructions()
    everything = scoped(ListSource(), scope='all').get_instructions()
    assert isinstance(conversation, str) and isinstance(everything, str)
    assert 'stored messages of this conversation' in conversation
    assert 'every stored conversation' in everything
    assert scoped(ListSource(), add_instructions=False).get_instructions() is None
    all_toolset = scoped(ListSource(), scope='all').get_toolset()
    assert isinstance(all_toolset, FunctionToolset)
    assert 'every run in the store' in (all_toolset.tools[TOOL_NAME].description or '')


def test_tool_id_names_the_toolset() -> None:
    toolset = scoped(ListSource(), tool_id='recall').get_toolset()
    assert isinstance(toolset, FunctionToolset) and toolset.id == 'recall'


# --- options -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('options', 'message'),
    [
        ({'max_matches': -1}, 'max_matches must be a non-negative integer'),
        ({'context_lines': -1}, 'context_lines must be a non-negative integer'),
        ({'bm25_k1': -1.0}, 'bm25_k1 must be a finite number of at least 0'),
        ({'bm25_k1': float('nan')}, 'bm25_k1 must be a finite number of at least 0'),
        ({'bm25_b': 2.0}, 'bm25_b must be a number from 0.0 to 1.0'),
        ({'analyzer': 'klingon'}, "Unknown analyzer 'klingon'"),
        ({'scope': 'everything'}, "scope must be 'conversation' or 'all'"),
    ],
)
def test_invalid_options_raise_value_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scoped(ListSource(), **options)


def test_defaults() -> None:
    capability = scoped(ListSource())
    assert (capability.max_matches, capability.context_lines, capability.bm25_k1, capability.bm25_b) == (
        10,
        5,
        1.5,
        0.75,
    )
    assert capability.add_instructions is True
    assert capability.tool_id == 'conversation-search'
    assert capability.id == 'conversation_search'


def test_analyzer_option_reaches_the_engine() -> None:
    engine = scoped(ListSource(), analyzer='english').build_engine()
    assert engine.options.analyzer.name == 'english'


# --- the scope warning ---------------------------------------------------------------------------------


async def test_unset_scope_warns_once_per_instance() -> None:
    source = ListSource()
    source.add('r', 'c', [user('the answer is 42')])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        capability = ConversationSearch(source)
        agent = Agent(searching_model({'query': 'answer'}), capabilities=[capability])
        first = await agent.run('q', conversation_id='c')
        await agent.run('q', conversation_id='c')
    scope_warnings = [w for w in caught if issubclass(w.category, ScopeDefaultWarning)]
    assert len(scope_warnings) == 1
    assert scope_warnings[0].filename == __file__
    assert "scope='conversation'" in str(scope_warnings[0].message)
    assert capability.effective_scope == 'conversation'
    assert 'the answer is 42' in tool_answers(first.all_messages())[0]


def test_each_instance_warns_and_explicit_scopes_do_not() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        ConversationSearch(ListSource())
        ConversationSearch[None](ListSource())
        ConversationSearch(ListSource(), scope='conversation')
        ConversationSearch(ListSource(), scope='all')
    scope_warnings = [w for w in caught if issubclass(w.category, ScopeDefaultWarning)]
    assert len(scope_warnings) == 2
    assert all(w.filename == __file__ for w in scope_warnings)


def test_the_warning_class() -> None:
    assert issubclass(ScopeDefaultWarning, DeprecationWarning)
    assert search.ScopeDefaultWarning is ScopeDefaultWarning


# --- two of them ---------------------------------------------------------------------------------------


def test_two_alike_combine_into_one_and_two_different_raise() -> None:
    source = ListSource()
    first, same = scoped(source), scoped(source)
    assert ConversationSearch.combine([first, same]) is first
    with pytest.raises(UserError, match='differ in max_matches'):
        ConversationSearch.combine([first, scoped(source, max_matches=3)])
    with pytest.raises(UserError, match='differ in source'):
        ConversationSearch.combine([first, scoped(ListSource())])  # another store


def test_two_different_searches_in_one_agent_are_refused() -> None:
    source = ListSource()
    with pytest.raises(UserError, match='differ in scope'):
        Agent(TestModel(), capabilities=[scoped(source), scoped(source, scope='all')])
    Agent(TestModel(), capabilities=[scoped(source), scoped(source)])  # the same search twice is fine
