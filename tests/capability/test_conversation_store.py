"""`EventLogConversationStore` against pydantic-ai's own `InMemoryConversationStore`.

One scripted sequence (saves, loads with limits, conflicts, scopes, branches and branching back,
forks, a rewritten history, deferred tool requests, list order, deletes) runs against the
reference store and against the log's on every backend; every observable result must be equal,
with the stores' random ids and revisions named by order of appearance. A store reopened in a
fresh process must load the same.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip('pydantic_ai.conversation_store', reason='the conversation store needs pydantic-ai-slim 2.66+')

from backends import BACKENDS, ENCRYPTED_BACKENDS, make_log, postgres_dsn
from pydantic_ai import DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

from capability import EventLogConversationStore

_T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _ask(text: str, run: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=_T0)], run_id=run, timestamp=_T0)


def _say(text: str, run: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], run_id=run, timestamp=_T0, model_name='scripted')


def _call(tool: str, call_id: str, run: str) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(tool, {'x': 1}, tool_call_id=call_id)], run_id=run, timestamp=_T0, model_name='scripted'
    )


def _back(tool: str, call_id: str, run: str) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart(tool, 'done', tool_call_id=call_id, timestamp=_T0)], run_id=run)


class _Names:
    """Random ids and revisions named by order of first appearance, so two stores compare."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, value: str | None) -> str | None:
        if value is None:
            return None
        return self.seen.setdefault(value, f'#{len(self.seen)}')


def _messages(messages: list[ModelMessage]) -> Any:
    return json.loads(ModelMessagesTypeAdapter.dump_json(messages))


class _Observer:
    def __init__(self) -> None:
        self.name = _Names()
        self.seen: list[Any] = []

    def conversation(self, conversation: Conversation | None) -> Any:
        if conversation is None:
            return None
        deferred = conversation.deferred_tool_requests
        return {
            'id': conversation.conversation_id,
            'messages': _messages(conversation.messages),
            'usage': dataclasses.asdict(conversation.usage),
            'deferred': None
            if deferred is None
            else [
                [(c.tool_name, c.tool_call_id, c.args) for c in deferred.calls],
                [(c.tool_name, c.tool_call_id, c.args) for c in deferred.approvals],
                deferred.metadata,
            ],
            'revision': self.name(conversation.revision),
            'new_message_index': conversation.new_message_index,
        }

    def entries(self, entries: list[ConversationEntry] | None) -> Any:
        if entries is None:
            return None
        return [[self.name(e.id), self.name(e.parent_id), _messages([e.message])] for e in entries]

    def record(self, record: ConversationRecord | None) -> Any:
        if record is None:
            return None
        return {
            'id': record.conversation_id,
            'head': self.name(record.head_id),
            'usage': dataclasses.asdict(record.usage),
            'scope': record.scope,
            'forked_from': record.forked_from,
            'forked_at': self.name(record.forked_at),
            'branches': [self.name(b) for b in record.branches],
            'revision': self.name(record.revision),
            'deferred': record.deferred_tool_requests is not None,
        }

    async def outcome(self, label: str, call: Awaitable[Any], show: Callable[[Any], Any]) -> Any:
        try:
            value = await call
        except ConversationConflict as exc:
            self.seen.append([label, 'ConversationConflict', exc.conversation_id])
            return None
        except UserError as exc:
            self.seen.append([label, 'UserError', str(exc)])
            return None
        except LookupError:
            self.seen.append([label, 'LookupError'])
            return None
        self.seen.append([label, show(value)])
        return value


async def _script(store: ConversationStore) -> list[Any]:
    """Every observable result of one sequence of calls, ids named by appearance."""
    o = _Observer()
    c, e, r = o.conversation, o.entries, o.record

    def each(records: Any) -> Any:
        return [r(x) for x in records]

    # A new conversation, saved for a scope, then continued the way an app does after each run.
    a = Conversation(conversation_id='a', messages=[_ask('q1', 'r1'), _say('a1', 'r1')])
    a.usage = RunUsage(requests=1, input_tokens=10, output_tokens=3)
    await o.outcome('save a', store.save(a, scope='u1'), e)
    loaded = await o.outcome('load a', store.load('a', scope='u1'), c)
    assert loaded is not None
    stale = copy.deepcopy(loaded)
    loaded.messages.extend([_ask('q2', 'r2'), _call('lookup', 'call-1', 'r2'), _back('lookup', 'call-1', 'r2')])
    loaded.messages.append(_say('a2', 'r2'))
    loaded.usage = RunUsage(requests=3, input_tokens=40, output_tokens=9, tool_calls=1)
    await o.outcome('save a again', store.save(loaded, scope='u1'), e)
    await o.outcome('save a stale', store.save(stale), e)
    for limit in (0, 1, 3, 6, 100):
        await o.outcome(f'load a limit {limit}', store.load('a', limit=limit), c)
        await o.outcome(f'entries a limit {limit}', store.load_entries('a', limit=limit), e)
    await o.outcome('load a negative', store.load('a', limit=-1), c)
    await o.outcome('load a other scope', store.load('a', scope='u2'), c)
    await o.outcome('save a other scope', store.save(await store.load('a') or a, scope='u2'), e)
    await o.outcome('record a', store.read_record('a'), r)

    # A second conversation, no scope; one that exists already cannot be created again.
    b = Conversation(conversation_id='b', messages=[_ask('hello', 'r3'), _say('hi', 'r3')])
    await o.outcome('save b', store.save(b), e)
    await o.outcome('create b twice', store.save(Conversation(conversation_id='b', messages=[_ask('x', 'r4')])), e)
    await o.outcome('list', store.list_conversations(), each)
    await o.outcome('list limit 1', store.list_conversations(limit=1), each)
    await o.outcome('list u1', store.list_conversations(scope='u1'), each)
    await o.outcome('list u2', store.list_conversations(scope='u2'), each)
    await o.outcome('list negative', store.list_conversations(limit=-1), each)

    # A history rewritten from its third message (not loaded: compared with what is stored).
    current = await store.load('a')
    assert current is not None
    rewritten = Conversation(
        conversation_id='a',
        messages=[*current.messages[:2], _ask('q2 edited', 'r5'), _say('a2 edited', 'r5')],
        revision=current.revision,
    )
    await o.outcome('save rewritten', store.save(rewritten), e)
    await o.outcome('load rewritten', store.load('a'), c)
    record = await o.outcome('record rewritten', store.read_record('a'), r)
    assert record is not None

    # Branch: regenerate the last answer, then go back to the branch left.
    branched = await o.outcome('branch at 3', store.branch('a', at=3, expected_revision=record.revision), c)
    assert branched is not None
    branched.messages.append(_say('a2 regenerated', 'r6'))
    await o.outcome('save on branch', store.save(branched), e)
    await o.outcome('branch stale', store.branch('a', at=1, expected_revision=record.revision), c)
    record = await o.outcome('record after branch', store.read_record('a'), r)
    assert record is not None
    await o.outcome('branch out of range', store.branch('a', at=99, expected_revision=record.revision), c)
    await o.outcome('branch both', store.branch('a', at=1, from_entry='x', expected_revision=record.revision), c)
    await o.outcome('branch unknown entry', store.branch('a', from_entry='nope', expected_revision=record.revision), c)
    back = await o.outcome(
        'branch back', store.branch('a', from_entry=record.branches[0], expected_revision=record.revision), c
    )
    assert back is not None
    await o.outcome('load after branch back', store.load('a'), c)

    # Forks share what they keep; a fork may not take an id in use.
    fork = await o.outcome('fork a at 2', store.fork('a', at=2, new_conversation_id='f', scope='u3'), c)
    assert fork is not None
    fork.messages.extend([_ask('in the fork', 'r7'), _say('forked answer', 'r7')])
    await o.outcome('save fork', store.save(fork), e)
    await o.outcome('fork onto b', store.fork('a', new_conversation_id='b'), c)
    await o.outcome('fork whole', store.fork('a', new_conversation_id='g'), c)
    await o.outcome('fork at 0', store.fork('b', at=0, new_conversation_id='h'), c)
    await o.outcome('fork other scope', store.fork('a', new_conversation_id='i', source_scope='u9'), c)
    await o.outcome('load fork', store.load('f'), c)
    await o.outcome('entries fork', store.load_entries('f'), e)
    await o.outcome('record fork', store.read_record('f'), r)

    # A run paused for deferred tool calls: the record carries them until the next save.
    paused = await store.load('b')
    assert paused is not None
    paused.messages.extend(
        [
            _ask('delete it', 'r8'),
            ModelResponse(
                parts=[
                    ToolCallPart('approve_me', {'path': '/tmp/x'}, tool_call_id='call-2'),
                    ToolCallPart('external', '{"q": 2}', tool_call_id='call-3'),
                ],
                run_id='r8',
                timestamp=_T0,
            ),
        ]
    )
    paused.deferred_tool_requests = DeferredToolRequests(
        calls=[ToolCallPart('external', '{"q": 2}', tool_call_id='call-3')],
        approvals=[ToolCallPart('approve_me', {'path': '/tmp/x'}, tool_call_id='call-2')],
        metadata={'call-2': {'reason': 'destructive'}},
    )
    await o.outcome('save paused', store.save(paused), e)
    await o.outcome('load paused', store.load('b'), c)
    await o.outcome('load paused limit 1', store.load('b', limit=1), c)

    await o.outcome('list all', store.list_conversations(), each)
    await o.outcome('list limit 2', store.list_conversations(limit=2), each)

    # Deletes: scoped ones leave other scopes' conversations; a fork keeps what it shares.
    await o.outcome('delete a wrong scope', store.delete('a', scope='u2'), lambda _: None)
    await o.outcome('load a after wrong delete', store.load('a'), c)
    entries_a = await store.load_entries('a')
    assert entries_a is not None
    await o.outcome('delete a', store.delete('a'), lambda _: None)
    await o.outcome('load a deleted', store.load('a'), c)
    await o.outcome('load fork after delete', store.load('f'), c)
    await o.outcome('entries fork after delete', store.load_entries('f'), e)
    for index, entry in enumerate(entries_a):
        await o.outcome(f'read entry {index} of a', store.read_entry(entry.id), lambda x: e([x]))
    await o.outcome('delete missing', store.delete('zz'), lambda _: None)
    await o.outcome('list after delete', store.list_conversations(), each)
    await o.outcome('delete fork', store.delete('f'), lambda _: None)
    for index, entry in enumerate(entries_a):
        await o.outcome(f'read entry {index} of a after fork gone', store.read_entry(entry.id), lambda x: e([x]))
    again = Conversation(conversation_id='a', messages=[_ask('new life', 'r9')])
    await o.outcome('recreate a', store.save(again), e)
    await o.outcome('load recreated', store.load('a'), c)
    await o.outcome('list final', store.list_conversations(), each)
    return o.seen


STORE_BACKENDS = [*BACKENDS, *ENCRYPTED_BACKENDS]


@pytest.fixture
async def reference() -> list[Any]:
    return await _script(InMemoryConversationStore())


@pytest.mark.parametrize('backend', STORE_BACKENDS)
async def test_every_observable_result_equals_the_in_memory_store(
    backend: str, tmp_path: Path, reference: list[Any]
) -> None:
    log = make_log(backend, tmp_path)
    try:
        seen = await _script(EventLogConversationStore(log))
        for want, got in zip(reference, seen, strict=True):
            assert got == want, want[0]
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()


_RELOAD = """
import asyncio, json, sys
sys.path.insert(0, {tests!r})
from backends import make_log
from pathlib import Path
from pydantic_ai.messages import ModelMessagesTypeAdapter
from capability import EventLogConversationStore

async def main():
    log = make_log({backend!r}, Path({path!r}))
    store = EventLogConversationStore(log)
    out = {{}}
    for record in await store.list_conversations():
        loaded = await store.load(record.conversation_id)
        out[record.conversation_id] = [
            json.loads(ModelMessagesTypeAdapter.dump_json(loaded.messages)), loaded.revision, record.branches,
        ]
    print(json.dumps(out))
    log.close()

asyncio.run(main())
"""


@pytest.mark.parametrize('backend', ['lmdb', 'postgres', 'lmdb-encrypted'])
async def test_a_fresh_process_loads_the_same(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    store = EventLogConversationStore(log)
    await _script(store)
    here: dict[str, Any] = {}
    for record in await store.list_conversations():
        loaded = await store.load(record.conversation_id)
        assert loaded is not None
        here[record.conversation_id] = [_messages(loaded.messages), loaded.revision, record.branches]
    log.close()
    tests = str(Path(__file__).parents[1])
    code = _RELOAD.format(tests=tests, backend=backend, path=str(tmp_path))
    env = dict(os.environ)
    if backend.startswith('postgres'):
        env['EVENTLOG_TEST_DSN'] = postgres_dsn()  # the same server, not a new one
    done = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == here
    assert list(here) == ['a', 'b', 'h', 'g']  # newest save first
