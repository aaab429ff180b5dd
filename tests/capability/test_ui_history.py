"""History a UI client sends again is recognised, not stored again (issue 41).

pydantic-ai's UI adapters in their default client-managed mode rebuild the whole chat from the
client's messages on every turn. The tests drive the real adapters through HTTP requests built
as a browser builds them (a Vercel AI SDK v5 chat request, an AG-UI `RunAgentInput`), read the
streamed answer back into the client's next history as the client libraries do, and count the
`message` entries the log holds.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from _helpers import dump
from backends import make_log
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from capability._equivalence import canonical, same_message
from capability.persistence import EventLogPersistence
from eventlog import Entry, encode_message
from eventlog.log import EventLogBase

_RELEASE = tuple(int(x) for x in version('pydantic-ai-slim').split('.')[:2])
if _RELEASE < (2, 68):
    pytest.skip(
        'the UI adapters load a client-managed history as tested here from pydantic-ai-slim 2.68',
        allow_module_level=True,
    )
pytest.importorskip('ag_ui', reason='the AG-UI tests need the ag-ui-protocol package')

from pydantic_ai.ui.ag_ui import AGUIAdapter  # noqa: E402
from pydantic_ai.ui.vercel_ai import VercelAIAdapter  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

pytestmark = pytest.mark.filterwarnings('error::capability.persistence.EventLogPersistenceWarning')

BACKENDS = ['memory', 'lmdb']
ADAPTERS = ['vercel', 'agui']


# --- the server ------------------------------------------------------------------------------


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ''


class Server:
    """A chat app: one agent with `EventLogPersistence`, both adapters behind HTTP routes.

    The model numbers its answers, so a regenerated answer differs from the one it replaces; a
    prompt `call <arg>` makes it call the `lookup` tool.
    """

    def __init__(self, log: EventLogBase) -> None:
        self.log = log
        self.answers = itertools.count(1)
        # The first request as the model received it: whether a history-driven run adds the system
        # prompt to it differs between pydantic-ai releases, and the log must hold what was sent.
        self.opening: str | None = None
        agent = Agent(
            FunctionModel(self._answer, stream_function=self._stream),
            capabilities=[EventLogPersistence(log)],
            system_prompt='Be brief.',
            name='chat',
        )

        @agent.tool_plain
        def lookup(arg: str) -> dict[str, Any]:
            """Look something up."""
            return {'arg': arg, 'found': [1, 2.5, None]}

        async def vercel(request: Request) -> Response:
            return await VercelAIAdapter.dispatch_request(request, agent=agent)

        async def agui(request: Request) -> Response:
            return await AGUIAdapter.dispatch_request(request, agent=agent)

        app = Starlette(routes=[Route('/vercel', vercel, methods=['POST']), Route('/agui', agui, methods=['POST'])])
        self.client = TestClient(app)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.opening is None:
            self.opening = message_text(messages[0])
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(f'answer {next(self.answers)}: the tool answered')])
        prompt = _prompt(messages)
        if prompt.startswith('call '):
            step = sum(isinstance(m, ModelResponse) for m in messages)
            return ModelResponse(parts=[ToolCallPart('lookup', {'arg': prompt[5:]}, tool_call_id=f'call-{step}')])
        return ModelResponse(parts=[TextPart(f'answer {next(self.answers)} to: {prompt}')])

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        for part in self._answer(messages, info).parts:
            if isinstance(part, TextPart):
                head, _, tail = part.content.partition(' ')
                yield head
                yield ' ' + tail
            elif isinstance(part, ToolCallPart):
                call = DeltaToolCall(
                    name=part.tool_name, json_args=part.args_as_json_str(), tool_call_id=part.tool_call_id
                )
                yield {0: call}

    def post(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """POST `body` as JSON and return the streamed events (server-sent events)."""
        response = self.client.post(path, json=body, headers={'accept': 'text/event-stream'})
        assert response.status_code == 200, response.text
        return [
            json.loads(line[6:])
            for line in response.text.splitlines()
            if line.startswith('data: ') and line[6:] != '[DONE]'
        ]


# --- the clients -----------------------------------------------------------------------------

_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f'{prefix}-{next(_ids)}'


def vercel_assistant(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant UI message the AI SDK (v5, `useChat`) builds from a streamed answer."""
    message: dict[str, Any] = {'id': _new_id('msg'), 'role': 'assistant', 'parts': []}
    texts: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event['type']
        if kind == 'start':
            message['id'] = event.get('messageId') or message['id']
        elif kind == 'start-step':
            message['parts'].append({'type': 'step-start'})
        elif kind in ('text-start', 'reasoning-start'):
            part = {'type': kind.split('-')[0], 'text': '', 'state': 'streaming'}
            texts[event['id']] = part
            message['parts'].append(part)
        elif kind in ('text-delta', 'reasoning-delta'):
            texts[event['id']]['text'] += event['delta']
        elif kind in ('text-end', 'reasoning-end'):
            texts[event['id']]['state'] = 'done'
        elif kind == 'tool-input-start':
            part = {'type': f'tool-{event["toolName"]}', 'toolCallId': event['toolCallId'], 'state': 'input-streaming'}
            tools[event['toolCallId']] = part
            message['parts'].append(part)
        elif kind == 'tool-input-available':
            tools[event['toolCallId']].update(state='input-available', input=event['input'])
        elif kind == 'tool-output-available':
            tools[event['toolCallId']].update(state='output-available', output=event['output'])
        elif kind == 'tool-output-error':
            tools[event['toolCallId']].update(state='output-error', errorText=event['errorText'])
        elif kind == 'message-metadata' or (kind in ('start', 'finish') and event.get('messageMetadata')):
            message['metadata'] = {**message.get('metadata', {}), **event['messageMetadata']}
    return message


def agui_apply(messages: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client's messages after a run's events, as `@ag-ui/client` applies them."""
    messages = copy.deepcopy(messages)
    for event in events:
        kind = event['type']
        if kind == 'TEXT_MESSAGE_START':
            messages.append({'id': event['messageId'], 'role': 'assistant', 'content': ''})
        elif kind == 'TEXT_MESSAGE_CONTENT':
            target = next(m for m in reversed(messages) if m['id'] == event['messageId'])
            target['content'] += event['delta']
        elif kind == 'TOOL_CALL_START':
            call = {
                'id': event['toolCallId'],
                'type': 'function',
                'function': {'name': event['toolCallName'], 'arguments': ''},
            }
            parent = event.get('parentMessageId')
            if parent and messages and messages[-1]['id'] == parent:
                messages[-1].setdefault('toolCalls', []).append(call)
            else:
                messages.append({'id': parent or _new_id('msg'), 'role': 'assistant', 'toolCalls': [call]})
        elif kind == 'TOOL_CALL_ARGS':
            call = next(c for m in reversed(messages) for c in m.get('toolCalls', []) if c['id'] == event['toolCallId'])
            call['function']['arguments'] += event['delta']
        elif kind == 'TOOL_CALL_RESULT':
            messages.append(
                {
                    'id': event['messageId'],
                    'role': 'tool',
                    'toolCallId': event['toolCallId'],
                    'content': event['content'],
                }
            )
        elif kind == 'REASONING_ENCRYPTED_VALUE' and event.get('subtype') == 'message':
            for message in messages:
                if message['id'] == event['entityId']:
                    message['encryptedValue'] = event['encryptedValue']
    return messages


class Chat:
    """One browser tab: the client's messages of one chat, sent whole on every turn."""

    def __init__(self, server: Server, adapter: str, chat_id: str) -> None:
        self.server = server
        self.adapter = adapter
        self.chat_id = chat_id
        self.messages: list[dict[str, Any]] = []

    def user(self, text: str) -> dict[str, Any]:
        if self.adapter == 'vercel':
            return {'id': _new_id('user'), 'role': 'user', 'parts': [{'type': 'text', 'text': text}]}
        return {'id': _new_id('user'), 'role': 'user', 'content': text}

    def send(self, text: str) -> None:
        """The user submits `text`."""
        self.messages.append(self.user(text))
        self._run('submit-message')

    def regenerate(self) -> None:
        """The user asks for another answer to the last prompt (the last answer is dropped)."""
        while self.messages[-1]['role'] != 'user':
            self.messages.pop()
        self._run('regenerate-message')

    def edit(self, index: int, text: str) -> None:
        """The user edits their message at `index`: what followed it is dropped, and it is sent."""
        del self.messages[index:]
        self.messages.append(self.user(text))
        self._run('submit-message')

    def _run(self, trigger: str) -> None:
        if self.adapter == 'vercel':
            body: dict[str, Any] = {'trigger': trigger, 'id': self.chat_id, 'messages': self.messages}
            if trigger == 'regenerate-message':
                body['messageId'] = _new_id('msg')
            self.messages = [*self.messages, vercel_assistant(self.server.post('/vercel', body))]
            return
        body = {
            'threadId': self.chat_id,
            'runId': _new_id('run'),
            'state': None,
            'messages': self.messages,
            'tools': [],
            'context': [],
            'forwardedProps': None,
        }
        self.messages = agui_apply(self.messages, self.server.post('/agui', body))


# --- reading the log -------------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def messages_of(log: EventLogBase, conversation_id: str) -> list[Entry]:
    return run(log.entries(conversation_id=conversation_id, kinds=['message']))


def runs_of(log: EventLogBase, conversation_id: str) -> list[str]:
    return [r.run_id for r in run(log.list_runs(conversation_id=conversation_id))]


def text_of(entry: Entry) -> str:
    """The user prompt or text a message entry holds, for readable assertions."""
    return message_text(entry.message())


def message_text(message: ModelMessage) -> str:
    """The prompts, texts, tool calls and returns of `message`, joined by `|`."""
    out: list[str] = []
    for part in message.parts:
        if isinstance(part, (SystemPromptPart, UserPromptPart, TextPart)) and isinstance(part.content, str):
            out.append(part.content)
        elif isinstance(part, ToolCallPart):
            out.append(f'call {part.tool_name}')
        elif isinstance(part, ToolReturnPart):
            out.append(f'return {part.tool_name}')
    return ' | '.join(out)


def assert_replays(log: EventLogBase, run_id: str, expected: list[Entry]) -> None:
    """The run's record is exactly the recorded messages `expected`, byte for byte."""
    assert run(log.run_messages_json(run_id)) == dump([e.message() for e in expected])
    assert [encode_message(m) for m in run(log.run_messages(run_id))] == [e.payload for e in expected]


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Server:
    return Server(make_log(request.param, tmp_path))


# --- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_three_turns_store_each_message_once(server: Server, adapter: str) -> None:
    chat = Chat(server, adapter, 'chat-1')
    chat.send('hello')
    chat.send('call x')
    chat.send('bye')
    entries = messages_of(server.log, 'chat-1')
    assert server.opening in ('Be brief. | hello', 'hello')
    assert [text_of(e) for e in entries] == [
        server.opening,
        'answer 1 to: hello',
        'call x',
        'call lookup',
        'return lookup',
        'answer 2: the tool answered',
        'bye',
        'answer 3 to: bye',
    ]
    assert not any(e.inherited for e in entries)
    assert not run(server.log.entries(conversation_id='chat-1', kinds=['compaction']))
    first, second, third = runs_of(server.log, 'chat-1')
    assert_replays(server.log, first, entries[:2])
    assert_replays(server.log, second, entries[:6])
    assert_replays(server.log, third, entries)
    assert dump(run(server.log.context('chat-1'))) == dump([e.message() for e in entries])


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_regenerate_branches_from_the_prompt(server: Server, adapter: str) -> None:
    chat = Chat(server, adapter, 'chat-r')
    chat.send('hello')
    chat.send('bye')
    chat.regenerate()
    entries = messages_of(server.log, 'chat-r')
    assert [text_of(e) for e in entries] == [
        server.opening,
        'answer 1 to: hello',
        'bye',
        'answer 2 to: bye',
        'answer 3 to: bye',
    ]
    prompt, old, new = entries[2], entries[3], entries[4]
    regen = runs_of(server.log, 'chat-r')[-1]
    record = run(server.log.get_run(regen))
    assert record is not None and record.branch_parent == prompt.seq  # a branch from the prompt
    assert_replays(server.log, regen, [*entries[:3], new])
    assert_replays(server.log, runs_of(server.log, 'chat-r')[1], entries[:4])  # the old answer is kept
    assert old.run_id != new.run_id
    chat.send('thanks')  # goes on from the regenerated answer
    after = messages_of(server.log, 'chat-r')
    assert [text_of(e) for e in after[5:]] == ['thanks', 'answer 4 to: thanks']
    assert_replays(server.log, runs_of(server.log, 'chat-r')[-1], [*entries[:3], new, *after[5:]])


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_regenerating_the_first_answer(server: Server, adapter: str) -> None:
    chat = Chat(server, adapter, 'chat-f')
    chat.send('hello')
    chat.regenerate()
    entries = messages_of(server.log, 'chat-f')
    assert [text_of(e) for e in entries] == [server.opening, 'answer 1 to: hello', 'answer 2 to: hello']
    assert_replays(server.log, runs_of(server.log, 'chat-f')[-1], [entries[0], entries[2]])


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_an_edited_prompt_is_a_new_message_on_a_branch(server: Server, adapter: str) -> None:
    chat = Chat(server, adapter, 'chat-e')
    chat.send('hello')
    chat.send('call x')
    chat.send('bye')
    before = messages_of(server.log, 'chat-e')
    chat.edit(2, 'call y')  # the second prompt, edited
    entries = messages_of(server.log, 'chat-e')
    assert entries[:8] == before
    added = entries[8:]
    assert [text_of(e) for e in added] == ['call y', 'call lookup', 'return lookup', 'answer 4: the tool answered']
    assert b'"arg":"y"' in added[2].payload and not any(e.inherited for e in added)
    edit = runs_of(server.log, 'chat-e')[-1]
    record = run(server.log.get_run(edit))
    assert record is not None and record.branch_parent == before[1].seq  # branches after the first answer
    assert_replays(server.log, edit, [*before[:2], *added])


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_a_tampered_answer_is_not_taken_for_the_recorded_one(server: Server, adapter: str) -> None:
    chat = Chat(server, adapter, 'chat-t')
    chat.send('hello')
    chat.send('bye')
    before = messages_of(server.log, 'chat-t')
    answer = chat.messages[1]
    if adapter == 'vercel':
        text = next(p for p in answer['parts'] if p['type'] == 'text')
        text['text'] = 'answer 1 to: hello, and you owe me money'
    else:
        answer['content'] = 'answer 1 to: hello, and you owe me money'
    chat.send('really?')
    entries = messages_of(server.log, 'chat-t')
    assert entries[:4] == before
    added = entries[4:]
    # From the tampered answer on, the client's history is not the recorded one: stored as handed in.
    assert [text_of(e) for e in added] == [
        'answer 1 to: hello, and you owe me money',
        'bye',
        'answer 2 to: bye',
        'really?',
        'answer 3 to: really?',
    ]
    assert [e.inherited for e in added] == [True, True, True, False, False]
    assert_replays(server.log, runs_of(server.log, 'chat-t')[-1], [before[0], *added])


@pytest.mark.parametrize('adapter', ADAPTERS)
def test_another_conversation_with_the_same_text_is_not_matched(server: Server, adapter: str) -> None:
    first = Chat(server, adapter, 'chat-a')
    first.send('hello')
    first.send('bye')
    theirs = messages_of(server.log, 'chat-a')
    second = Chat(server, adapter, 'chat-b')
    second.messages = copy.deepcopy(first.messages)  # the same chat, sent under another id
    second.send('more')
    assert messages_of(server.log, 'chat-a') == theirs
    mine = messages_of(server.log, 'chat-b')
    assert len(mine) == len(theirs) + 2
    assert [e.inherited for e in mine] == [True] * len(theirs) + [False, False]
    assert {e.seq for e in mine}.isdisjoint(e.seq for e in theirs)


def test_a_client_resending_the_same_history_twice_matches_both_times(server: Server) -> None:
    """A retried submit (the same history and the same prompt again) is a regenerate: the prompt is
    the recorded one, the second answer a branch from it."""
    chat = Chat(server, 'vercel', 'chat-2')
    chat.send('hello')
    history = copy.deepcopy(chat.messages)
    chat.send('bye')
    chat.messages = history
    chat.send('bye')
    texts = [text_of(e) for e in messages_of(server.log, 'chat-2')]
    assert texts == [server.opening, 'answer 1 to: hello', 'bye', 'answer 2 to: bye', 'answer 3 to: bye']


# --- the matching rule -----------------------------------------------------------------------


def _c(message: ModelMessage) -> Any:
    return canonical(encode_message(message))


def _same(copy_: ModelMessage, original: ModelMessage) -> bool:
    return same_message(_c(copy_), _c(original))


def test_what_a_round_trip_may_change() -> None:
    recorded = ModelResponse(
        parts=[ThinkingPart('hmm', signature='sig'), TextPart('hi'), ToolCallPart('f', '{"a": 1}', tool_call_id='c1')],
        model_name='m',
        provider_response_id='r1',
        run_id='run-1',
    )
    rebuilt = ModelResponse(parts=[TextPart('hi'), ToolCallPart('f', {'a': 1}, tool_call_id='c1')])
    assert _same(rebuilt, recorded)  # thinking dropped, args as an object, ids and model fields gone
    assert not _same(ModelResponse(parts=[TextPart('hi!'), ToolCallPart('f', {'a': 1}, tool_call_id='c1')]), recorded)
    assert not _same(ModelResponse(parts=[TextPart('hi'), ToolCallPart('f', {'a': 2}, tool_call_id='c1')]), recorded)
    assert not _same(ModelResponse(parts=[TextPart('hi'), ToolCallPart('f', {'a': 1}, tool_call_id='c2')]), recorded)
    assert not _same(ModelResponse(parts=[ThinkingPart('other'), *rebuilt.parts]), recorded)  # kept, so compared
    assert not _same(ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hi')]))

    returns = ModelRequest(
        parts=[
            ToolReturnPart('f', {'x': [1, 2.5]}, tool_call_id='c1'),
            ToolReturnPart('g', 'plain', tool_call_id='c2', outcome='failed'),
        ]
    )
    reordered = ModelRequest(
        parts=[ToolReturnPart('g', 'plain', tool_call_id='c2'), ToolReturnPart('f', '{"x":[1,2.5]}', tool_call_id='c1')]
    )
    assert _same(reordered, returns)  # order of returns, outcome, JSON as text
    assert not _same(ModelRequest(parts=[ToolReturnPart('f', {'x': [1]}, tool_call_id='c1')]), returns)

    prompt = ModelRequest(parts=[SystemPromptPart('Be brief.'), UserPromptPart('hello')], instructions='x')
    assert _same(ModelRequest(parts=[UserPromptPart('hello')]), prompt)  # the adapter stripped the system prompt
    assert not _same(ModelRequest(parts=[SystemPromptPart('Be rude.'), UserPromptPart('hello')]), prompt)
    assert not _same(ModelRequest(parts=[UserPromptPart('hello!')]), prompt)
    assert not _same(ModelRequest(parts=[UserPromptPart('hello'), UserPromptPart('again')]), prompt)


def test_matching_is_deterministic() -> None:
    original = ModelRequest(parts=[UserPromptPart('a'), ToolReturnPart('f', 1, tool_call_id='c1')])
    forms: list[Callable[[], ModelMessage]] = [
        lambda: ModelRequest(parts=[ToolReturnPart('f', '1', tool_call_id='c1'), UserPromptPart('a')]),
        lambda: ModelRequest(parts=[UserPromptPart('a'), ToolReturnPart('f', 1, tool_call_id='c1')]),
    ]
    assert all(_c(f()) == _c(f()) and _same(f(), original) for f in forms)
