"""examples/chat_app.py as a browser uses it: the app runs under uvicorn in its own process, over an
LMDB store, and is spoken to over real HTTP with the Vercel AI SDK's and AG-UI's request bodies and
streamed responses. Then the store, the server stopped, is checked as a whole: each message stored
once, `verify` (in process and through the CLI), replay byte for byte, the regenerated turn's old
answer kept as a branch the store can return to, and the viewer (`eventlog serve`) showing both."""

from __future__ import annotations

import html
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip(
    'pydantic_ai.conversation_store', reason='the chat app needs pydantic-ai-slim 2.68+ (conversation stores)'
)
pytest.importorskip('ag_ui', reason='the chat app needs ag-ui-protocol (the `test` extra)')

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.ui.vercel_ai import VercelAIAdapter

from capability import EventLogConversationStore
from eventlog import LmdbEventLog

if 'conversation_store' not in VercelAIAdapter.__dataclass_fields__:  # 2.66 and 2.67 have the store, not the adapters'
    pytest.skip(
        'the chat app needs pydantic-ai-slim 2.68+ (UI adapters with conversation_store=)', allow_module_level=True
    )

ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB = 'alice', 'bob'
JsonObject = dict[str, Any]


# -- the server, as `uvicorn examples.chat_app:app` runs it -----------------------------------------


@dataclass
class ChatServer:
    """The app in a uvicorn subprocess: its base URL and store; `stop()` ends it (SIGTERM: a clean shutdown)."""

    process: subprocess.Popen[bytes]
    base: str
    store: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture
def chat_server(tmp_path: Path) -> Iterator[ChatServer]:
    store, port = tmp_path / 'chat.lmdb', _free_port()
    env = {**os.environ, 'CHAT_APP_STORE': str(store), 'CHAT_APP_MODEL': '', 'PYTHONPATH': str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, '-m', 'uvicorn', 'examples.chat_app:app', '--host', '127.0.0.1', '--port', str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = ChatServer(process, f'http://127.0.0.1:{port}', store)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ''
            assert time.monotonic() < deadline, 'the chat app did not listen within 60 s'
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield server
    finally:
        server.stop()
        if process.stderr is not None:
            process.stderr.close()


# -- a browser client's side ------------------------------------------------------------------------


def _events(response: httpx.Response) -> list[JsonObject]:
    """The server-sent events of a streamed response (`data:` lines; the Vercel `[DONE]` ends it)."""
    assert response.status_code == 200, response.text
    assert response.headers['content-type'].startswith('text/event-stream')
    events: list[JsonObject] = []
    for line in response.text.splitlines():
        if line.startswith('data: ') and line != 'data: [DONE]':
            events.append(json.loads(line.removeprefix('data: ')))
    return events


@dataclass
class VercelTurn:
    """One streamed answer, as `useChat` assembles it."""

    message: JsonObject
    """The assistant UI message the client keeps and sends back with its next turn."""
    text: str
    entry_ids: list[str]
    """The entries the store saved (the transient `data-conversation-saved` part)."""


def _vercel_turn(events: list[JsonObject]) -> VercelTurn:
    types = [event['type'] for event in events]
    assert types[0] == 'start' and types[-1] == 'finish' and 'error' not in types, events
    parts: list[JsonObject] = []
    texts: dict[str, JsonObject] = {}
    saved: list[str] = []
    for event in events:
        if event['type'] == 'text-start':
            texts[event['id']] = {'type': 'text', 'text': '', 'state': 'done'}
            parts.append(texts[event['id']])
        elif event['type'] == 'text-delta':
            texts[event['id']]['text'] += event['delta']
        elif event['type'] == 'tool-input-available':
            call = {'type': f'tool-{event["toolName"]}', 'toolCallId': event['toolCallId'], 'input': event['input']}
            parts.append({**call, 'state': 'input-available'})
        elif event['type'] == 'tool-output-available':
            call = next(part for part in parts if part.get('toolCallId') == event['toolCallId'])
            call.update(state='output-available', output=event['output'])
        elif event['type'] == 'data-conversation-saved':
            saved += event['data']['entry_ids']
    message = {'id': f'assistant-{uuid.uuid4().hex[:8]}', 'role': 'assistant', 'parts': parts}
    return VercelTurn(message, ''.join(part['text'] for part in texts.values()), saved)


def _user_message(text: str) -> JsonObject:
    return {'id': f'user-{uuid.uuid4().hex[:8]}', 'role': 'user', 'parts': [{'type': 'text', 'text': text}]}


@dataclass
class VercelClient:
    """A `useChat` of one user: the chat id and the UI messages it holds, sent whole with each turn."""

    http: httpx.AsyncClient
    user: str
    chat_id: str
    messages: list[JsonObject] = field(default_factory=list[JsonObject])

    async def post(self, body: JsonObject) -> httpx.Response:
        return await self.http.post('/api/chat', json=body, headers={'X-User': self.user})

    async def send(self, text: str, *, whole_history: bool = True) -> VercelTurn:
        """Submit `text`, with the whole history (`useChat`'s default) or alone (as a
        `prepareSendMessagesRequest` that sends only the last message does)."""
        self.messages.append(_user_message(text))
        sent = self.messages if whole_history else self.messages[-1:]
        response = await self.post({'trigger': 'submit-message', 'id': self.chat_id, 'messages': sent})
        turn = _vercel_turn(_events(response))
        self.messages.append(turn.message)
        return turn

    async def regenerate(self) -> VercelTurn:
        """`useChat`'s `regenerate()`: the last answer dropped, its id named, the rest sent again."""
        dropped = self.messages.pop()
        body = {
            'trigger': 'regenerate-message',
            'id': self.chat_id,
            'messageId': dropped['id'],
            'messages': self.messages,
        }
        turn = _vercel_turn(_events(await self.post(body)))
        self.messages.append(turn.message)
        return turn


# -- the store, the server stopped -----------------------------------------------------------------


def _text(message: ModelMessage) -> str:
    return ''.join(part.content for part in message.parts if isinstance(part, TextPart))


def _run_paths(paths: list[list[ModelMessage]]) -> dict[str, list[ModelMessage]]:
    """For each run on these histories, the history it saw followed by the messages it added (the
    longest such stretch: a regenerate's history ends with the request of the run it replaced)."""
    seen: dict[str, list[ModelMessage]] = {}
    for path in paths:
        for index, message in enumerate(path):
            assert message.run_id is not None, message
            ends = index + 1 == len(path) or path[index + 1].run_id != message.run_id
            if ends and len(seen.get(message.run_id, [])) < index + 1:
                seen[message.run_id] = path[: index + 1]
    for run_id, messages in seen.items():
        first = next(i for i, m in enumerate(messages) if m.run_id == run_id)
        assert all(m.run_id == run_id for m in messages[first:]), f'run {run_id} is not contiguous'
    return seen


async def _check_store(
    log: LmdbEventLog, chat_id: str, *, branch_tips: list[str], turns: int, saves: int, user: str
) -> tuple[list[ModelMessage], list[list[ModelMessage]]]:
    """What every chat must satisfy; returns the current history and the branches left."""
    store = EventLogConversationStore(log)
    record = await store.read_record(chat_id)
    assert record is not None and record.scope == user and record.branches == branch_tips
    conversation = await store.load(chat_id, scope=user)
    assert conversation is not None
    assert await store.load(chat_id, scope=f'not-{user}') is None and await store.load(chat_id) is not None
    branches = [[entry.message for entry in await store.read_history(tip)] for tip in record.branches]
    # Each message once: the log's message entries are the current history's and what each branch
    # adds after the part it shares with the current history, no more.
    current = conversation.messages
    added = 0
    for branch in branches:
        shared = next((i for i, (a, b) in enumerate(zip(branch, current, strict=False)) if a != b), len(branch))
        added += len(branch) - shared
    message_entries = await log.entries(conversation_id=chat_id, kinds=['message'])
    assert len(message_entries) == len(current) + added, (len(message_entries), len(current), added)
    # Replay is exact for every run of the chat: the history it saw and its own messages, byte for byte.
    runs = _run_paths([current, *branches])
    recorded = await log.list_runs(conversation_id=chat_id)
    assert {run.run_id for run in recorded} == set(runs)
    # Every message was recorded by EventLogPersistence as the run went, and linked by the saves:
    # the store appended no run of its own (it does for messages the log lacks).
    assert [run.metadata.get('source') for run in recorded] == [None] * turns
    assert all(run.status == 'completed' for run in recorded)
    assert len(await log.entries(conversation_id=chat_id, kinds=['saved'])) == saves
    assert len(runs) == turns
    for run_id, messages in runs.items():
        assert await log.run_messages_json(run_id) == ModelMessagesTypeAdapter.dump_json(messages), run_id
    report = await log.verify()
    assert report.ok, report
    return current, branches


def _cli_verify(store: Path) -> None:
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'verify', '--store', str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    assert done.returncode == 0, (done.stdout, done.stderr)


@contextmanager
def _viewer(store: Path) -> Iterator[str]:
    """`eventlog serve --store STORE --port 0` in a subprocess: the base URL it prints."""
    process = subprocess.Popen(
        [sys.executable, '-m', 'eventlog_cli', 'serve', '--store', str(store), '--port', '0'],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        stdout = process.stdout
        assert stdout is not None
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        line = lines.get(timeout=60)
        assert ' at http://' in line, line
        yield line.split(' at ', 1)[1].split()[0].split('/?', 1)[0].rstrip('/')
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


# -- the scenarios ----------------------------------------------------------------------------------


async def test_vercel_ai_chat_three_turns_a_regenerate_and_another_user(chat_server: ChatServer) -> None:
    chat_id = f'chat-{uuid.uuid4()}'
    async with httpx.AsyncClient(base_url=chat_server.base, timeout=60) as http:
        anonymous = await http.post('/api/chat', json={'trigger': 'submit-message', 'id': chat_id, 'messages': []})
        assert anonymous.status_code == 401 and 'X-User' in anonymous.json()['error']

        alice = VercelClient(http, ALICE, chat_id)
        first = await alice.send('hello there')
        assert first.text.endswith("you said 'hello there'")
        second = await alice.send('please count the words of this question')
        tools = [part for part in second.message['parts'] if part['type'] == 'tool-word_count']
        assert [tool['output'] for tool in tools] == [7] and second.text == 'That question has 7 words.'
        third = await alice.send('tell me a story', whole_history=False)
        regenerated = await alice.regenerate()
        assert regenerated.text.endswith("you said 'tell me a story'") and regenerated.text != third.text
        # Only the new turn was saved each time, whether the client sent its whole history or not.
        assert [len(turn.entry_ids) for turn in (first, second, third, regenerated)] == [2, 4, 2, 2]

        # Another user naming alice's chat: 404 before anything runs, none of alice's words in the answer.
        bob = VercelClient(http, BOB, chat_id)
        for body in (
            {'trigger': 'submit-message', 'id': chat_id, 'messages': [_user_message('what did alice say?')]},
            {
                'trigger': 'regenerate-message',
                'id': chat_id,
                'messageId': alice.messages[-1]['id'],
                'messages': alice.messages[:-1],
            },
            {'trigger': 'submit-message', 'id': chat_id, 'messages': alice.messages},
        ):
            refused = await bob.post(body)
            assert refused.status_code == 404, refused.text
            assert 'story' not in refused.text and 'hello' not in refused.text and 'Reply' not in refused.text
    chat_server.stop()

    old_tip = third.entry_ids[-1]
    log = LmdbEventLog(chat_server.store, read_only=True)
    try:
        current, (branch,) = await _check_store(log, chat_id, branch_tips=[old_tip], turns=4, saves=4, user=ALICE)
        assert [_text(m) for m in current if isinstance(m, ModelResponse)] == [
            first.text,
            '',
            second.text,
            regenerated.text,
        ]
        assert _text(branch[-1]) == third.text and branch[:6] == current[:6]
        # Bob's requests left no trace anywhere in the log.
        everything = b''.join(entry.payload for entry in await log.entries())
        assert b'what did alice say' not in everything and len(await log.list_conversations()) == 1
    finally:
        log.close()
    _cli_verify(chat_server.store)

    # The viewer shows the regenerated turn's two answers, the old one marked as the branch left
    # and the new one as the branch the regenerate made.
    with _viewer(chat_server.store) as base:
        async with httpx.AsyncClient(timeout=60) as viewer:
            page = await viewer.get(f'{base}/c/{chat_id}')
        assert page.status_code == 200
        shown = html.unescape(page.text)
        assert third.text in shown and regenerated.text in shown and first.text in shown
        left, made = shown.index('↰ branch left'), shown.index('↳ branch from')
        assert 'regenerated' in shown[left : left + 400] and 'regenerated' in shown[made : made + 400]
        assert shown.index(third.text) < made < shown.index(regenerated.text)

    # The store branches back to the old answer, and the log stays sound.
    log = LmdbEventLog(chat_server.store)
    try:
        store = EventLogConversationStore(log)
        record = await store.read_record(chat_id)
        assert record is not None
        back = await store.branch(chat_id, from_entry=old_tip, expected_revision=record.revision, scope=ALICE)
        reloaded = await store.load(chat_id, scope=ALICE)
        assert back.messages == branch and reloaded is not None and reloaded.messages == branch
        current_now, _ = await _check_store(
            log, chat_id, branch_tips=[regenerated.entry_ids[-1]], turns=4, saves=5, user=ALICE
        )
        assert current_now == branch
    finally:
        log.close()
    _cli_verify(chat_server.store)


async def _agui_run(http: httpx.AsyncClient, user: str, thread_id: str, messages: list[JsonObject]) -> httpx.Response:
    body = {
        'threadId': thread_id,
        'runId': f'run-{uuid.uuid4()}',
        'state': None,
        'messages': messages,
        'tools': [],
        'context': [],
        'forwardedProps': None,
    }
    return await http.post('/api/agui', json=body, headers={'X-User': user, 'Accept': 'text/event-stream'})


def _agui_answer(events: list[JsonObject]) -> tuple[list[JsonObject], str, list[str]]:
    """The AG-UI messages a client adds from one run's events, the answer's text, and the saved entry ids."""
    types = [event['type'] for event in events]
    assert types[0] == 'RUN_STARTED' and types[-1] == 'RUN_FINISHED' and 'RUN_ERROR' not in types, events
    added: list[JsonObject] = []
    by_id: dict[str, JsonObject] = {}
    text = ''
    saved: list[str] = []
    for event in events:
        if event['type'] == 'TEXT_MESSAGE_START':
            by_id[event['messageId']] = {'id': event['messageId'], 'role': 'assistant', 'content': ''}
            added.append(by_id[event['messageId']])
        elif event['type'] == 'TEXT_MESSAGE_CONTENT':
            by_id[event['messageId']]['content'] += event['delta']
            text += event['delta']
        elif event['type'] == 'TOOL_CALL_START':
            function = {'name': event['toolCallName'], 'arguments': ''}
            calls = by_id[event['parentMessageId']].setdefault('toolCalls', [])
            calls.append({'id': event['toolCallId'], 'type': 'function', 'function': function})
            by_id[event['toolCallId']] = function
        elif event['type'] == 'TOOL_CALL_ARGS':
            by_id[event['toolCallId']]['arguments'] += event['delta']
        elif event['type'] == 'TOOL_CALL_RESULT':
            result = {
                'id': event['messageId'],
                'role': 'tool',
                'toolCallId': event['toolCallId'],
                'content': event['content'],
            }
            added.append(result)
        elif event['type'] == 'CUSTOM' and event['name'] == 'pydantic_ai_conversation_saved':
            saved += event['value']['entry_ids']
    return added, text, saved


async def test_ag_ui_chat_two_turns_and_another_user(chat_server: ChatServer) -> None:
    thread_id = f'thread-{uuid.uuid4()}'
    messages: list[JsonObject] = []
    async with httpx.AsyncClient(base_url=chat_server.base, timeout=60) as http:
        assert (
            await _agui_run(http, '', thread_id, [{'id': 'u0', 'role': 'user', 'content': 'hi'}])
        ).status_code == 401

        messages.append({'id': 'u1', 'role': 'user', 'content': 'good morning'})
        added, first, saved_first = _agui_answer(_events(await _agui_run(http, ALICE, thread_id, messages)))
        assert first.endswith("you said 'good morning'") and len(saved_first) == 2
        messages += added
        messages.append({'id': 'u2', 'role': 'user', 'content': 'count my words please'})
        added, second, saved_second = _agui_answer(_events(await _agui_run(http, ALICE, thread_id, messages)))
        assert second == 'That question has 4 words.' and len(saved_second) == 4
        assert [(m['role'], 'toolCalls' in m) for m in added] == [
            ('assistant', True),
            ('tool', False),
            ('assistant', False),
        ]
        assert json.loads(added[0]['toolCalls'][0]['function']['arguments']) == {'text': 'count my words please'}
        messages += added

        refused = await _agui_run(
            http, BOB, thread_id, [{'id': 'b1', 'role': 'user', 'content': 'what did alice say?'}]
        )
        assert refused.status_code == 404 and 'morning' not in refused.text
        refused = await _agui_run(http, BOB, thread_id, messages)
        assert refused.status_code == 404 and 'morning' not in refused.text and '4 words' not in refused.text
    chat_server.stop()

    log = LmdbEventLog(chat_server.store, read_only=True)
    try:
        current, branches = await _check_store(log, thread_id, branch_tips=[], turns=2, saves=2, user=ALICE)
        assert branches == [] and len(current) == 6
        assert [_text(m) for m in current if isinstance(m, ModelResponse)] == [first, '', second]
        everything = b''.join(entry.payload for entry in await log.entries())
        assert b'what did alice say' not in everything
    finally:
        log.close()
    _cli_verify(chat_server.store)


def test_the_docs_show_the_example_s_own_lines() -> None:
    """docs/conversations.md's excerpt of the example: every line of it is in examples/chat_app.py."""
    page = (ROOT / 'docs' / 'conversations.md').read_text()
    section = page.split('## A chat app', 1)[1].split('\n## ', 1)[0]
    [block] = re.findall(r'```python\n(.*?)```', section, re.S)
    example = {line.strip() for line in (ROOT / 'examples' / 'chat_app.py').read_text().splitlines()}
    shown = [line.strip() for line in block.splitlines() if line.strip() not in ('', '...')]
    assert len(shown) > 10 and [line for line in shown if line not in example] == []
    assert '(../examples/chat_app.py)' in section
