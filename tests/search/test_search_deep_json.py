"""One deeply nested message does not stop search (issue 42).

A tool call whose arguments nest 600 levels deep (recorded by a real agent) and one nesting
100,000 levels (stored through the log API) are indexed like any message; every search (the
persistent index, one run, the in-memory corpus, decoded windows, AutoRecall through a real
agent) answers over everything else; a message pydantic-ai cannot read (an earlier version
stored it) is indexed without its text, counted and reported, and the search goes on.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from deepjson import (
    AFTER,
    DEPTH,
    FACT,
    HUGE_DEPTH,
    HUGE_TEXT,
    NEEDLE,
    OTHER,
    DeepStore,
    add_deep_conversations,
    unreadable_payload,
)
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import AutoRecall, EventLogPersistence
from eventlog import (
    EventLogBase,
    InvalidPayloadError,
    LmdbEventLog,
    NewEntry,
    decode_messages,
    message_entry,
    run_started_entry,
)
from eventlog.nesting import CLIPPED, DEPTH_LIMIT, clip_json, decode_clipped, json_depth, may_nest_deeper
from eventlog.replay import ReplayHistorySource
from search.engine import SearchEngine, SearchOptions
from search.index_writer import indexed_text
from search.memory_index import HistorySourceBackend
from search.persistent_index import PersistentIndex
from search.render import index_text
from search.result import SearchResult
from search.wire_text import wire_lines


@dataclass
class Opened:
    log: LmdbEventLog
    store: DeepStore


@pytest.fixture
def deep(tmp_path: Path) -> Iterator[Opened]:
    log = LmdbEventLog(tmp_path / 'store.lmdb')
    try:
        yield Opened(log, asyncio.run(add_deep_conversations(log)))
    finally:
        log.close()


def _texts(result: SearchResult) -> str:
    return '\n'.join(shown.text() for hit in result.hits for shown in hit.window)


# --- the clipping rule -------------------------------------------------------------------------


@pytest.mark.parametrize('depth', [600, 2_000, 10_000, 100_000])
def test_deep_json_text_is_measured_and_decoded_clipped_never_recursing(depth: int) -> None:
    text = '[' * depth + '"x"' + ']' * depth
    assert json_depth(text) == depth
    decoded = decode_clipped(text)
    for _ in range(DEPTH_LIMIT):
        assert isinstance(decoded, list) and len(decoded) == 1  # pyright: ignore[reportUnknownArgumentType]
        decoded = decoded[0]  # pyright: ignore[reportUnknownVariableType]
    assert decoded == CLIPPED
    # Bytes too, as payloads are stored.
    assert json_depth(text.encode()) == depth


def test_clipping_keeps_what_is_shallow_and_brackets_inside_strings() -> None:
    text = '{"a": [1, [2, {"b": 3}]], "s": "]}[{", "c": {"d": [[["e"]]]}}'
    assert json_depth(text) == 5
    assert clip_json(text, 5) == text
    assert msgspec.json.decode(clip_json(text, 2)) == {'a': [1, CLIPPED], 's': ']}[{', 'c': {'d': CLIPPED}}
    with pytest.raises(msgspec.DecodeError):
        decode_clipped('{"a": [1, 2}')  # not JSON stays not JSON


@pytest.mark.parametrize('depth', [0, 1, 5, 31, 32, 33, 100, 600])
def test_the_quick_bound_never_says_shallow_of_a_deeper_value(depth: int) -> None:
    value: object = 'x'
    for level in range(depth):  # strings holding brackets at every level, which must not fool it
        value = [']}', value, '{['] if level % 2 else {'s': '}]', 'a': value}
    data = msgspec.json.encode(value)
    assert json_depth(data) == depth
    for bound in (0, depth - 1, depth, depth + 1):
        if bound >= 0 and not may_nest_deeper(data, bound):
            assert depth <= bound
    assert may_nest_deeper(data, depth - 1) if depth else not may_nest_deeper(data, 0)


# --- the text a deep message is indexed by -----------------------------------------------------


@pytest.mark.parametrize('depth', [DEPTH, HUGE_DEPTH])
def test_a_deep_tool_call_is_indexed_as_pydantic_ai_reads_it(depth: int) -> None:
    args = '{"a":' * depth + '"' + NEEDLE + '"' + '}' * depth
    payload = message_entry(
        ModelResponse(parts=[ToolCallPart('inspect', args), TextPart('after it')]), conversation_id='c', run_id='r'
    ).payload
    assert wire_lines(payload) is None  # read in full: pydantic-ai takes text this deep as invalid JSON
    text = indexed_text(payload, 1)
    assert text == index_text(decode_messages([payload])[0])
    assert NEEDLE in text and text.endswith('Assistant: after it')


def test_a_message_pydantic_ai_could_not_read_back_is_refused_when_written() -> None:
    inner: dict[str, object] = {}
    args = {'kind': 'tree', 'a': inner}
    for _ in range(220):  # pydantic-ai writes this, and fails to read it back (its reader stops near 200)
        inner['a'] = inner = {}
    with pytest.raises(InvalidPayloadError, match='deeper than pydantic-ai reads back'):
        message_entry(ModelResponse(parts=[ToolCallPart('t', args)]), conversation_id='c', run_id='r')
    shallow: dict[str, object] = {'a': {'a': {'a': 1}}}
    message_entry(ModelResponse(parts=[ToolCallPart('t', shallow)]), conversation_id='c', run_id='r')


# --- searches ----------------------------------------------------------------------------------


async def test_every_persistent_index_search_answers_around_the_deep_messages(deep: Opened) -> None:
    engine = SearchEngine(PersistentIndex.for_log(deep.log))
    everywhere = await engine.find('ferry noon', scope='all', conversation_id=None, decode=False)
    assert everywhere.outcome == 'found' and OTHER in _texts(everywhere) and everywhere.unindexed == ()
    found = await engine.find('marmot attic', scope='conversation', conversation_id='deep', decode=False)
    assert AFTER in _texts(found)  # the rest of the conversation, after the deep call
    found = await engine.find('heron vault', scope='conversation', conversation_id='deep')  # decoded windows
    assert FACT in _texts(found)
    needle = await engine.find(NEEDLE, scope='all', conversation_id=None, decode=False)
    assert needle.matches >= 2
    seqs = {shown.seq for hit in needle.hits for shown in hit.window}
    assert {deep.store.deep_call_seq, deep.store.huge_call_seq} <= seqs  # the deep calls are found themselves
    huge = await engine.find('giraffe acacia', scope='conversation', conversation_id='huge')
    assert HUGE_TEXT in _texts(huge)
    one_run = await engine.find('marmot', scope='all', conversation_id=None, run_id=deep.store.deep_runs[1])
    assert AFTER in _texts(one_run)


async def test_the_in_memory_search_answers_around_the_deep_messages(deep: Opened) -> None:
    engine = SearchEngine(HistorySourceBackend(ReplayHistorySource(deep.log)))
    assert OTHER in _texts(await engine.find('ferry', scope='all', conversation_id=None))
    assert HUGE_TEXT in _texts(await engine.find('giraffe', scope='conversation', conversation_id='huge'))


class Recorder:
    """A FunctionModel keeping what it was sent, answering 'ok'."""

    def __init__(self) -> None:
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(messages)
        return ModelResponse(parts=[TextPart('ok')])

    def recalled(self) -> str:
        request = self.seen[-1][-1]
        assert isinstance(request, ModelRequest)
        for part in request.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str) and part.content.startswith('<'):
                return html.unescape(part.content)
        return ''


async def test_auto_recall_keeps_recalling_the_conversation_around_the_deep_call(deep: Opened) -> None:
    model = Recorder()
    agent = Agent(FunctionModel(model), capabilities=[AutoRecall(deep.log), EventLogPersistence[None](deep.log)])
    await agent.run('what was the vault code, heron?', conversation_id='deep')
    assert FACT in model.recalled()
    await agent.run('where does the marmot sleep?', conversation_id='deep')
    assert AFTER in model.recalled()


# --- a message pydantic-ai cannot read: counted, reported, passed over -------------------------


async def test_an_unreadable_message_is_counted_and_every_search_goes_on(log: EventLogBase) -> None:
    await add_deep_conversations(log, huge=False)
    payload = unreadable_payload()
    with pytest.raises(InvalidPayloadError):  # the API refuses it today
        await log.append(NewEntry(conversation_id='old', run_id='run-old', kind='message', payload=payload))
    await log.append(run_started_entry(conversation_id='old', run_id='run-old'))
    first = await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('the otter swims')]), conversation_id='old', run_id='run-old')
    )
    # As an earlier version stored it (checked by that version's rules only).
    bad = await log.append(
        NewEntry(conversation_id='old', run_id='run-old', kind='message', payload=payload, prevalidated=True)
    )
    await log.append(
        message_entry(ModelResponse(parts=[TextPart('the otter naps')]), conversation_id='old', run_id='run-old')
    )
    assert first < bad

    index = PersistentIndex.for_log(log)
    engine = SearchEngine(index, SearchOptions(context_lines=2))
    everywhere = await engine.find('otter', scope='all', conversation_id=None, decode=True)
    assert everywhere.outcome == 'found' and everywhere.unindexed == (bad,)
    assert 'the otter naps' in _texts(everywhere) and 'the otter swims' in _texts(everywhere)
    assert all(shown.seq != bad for hit in everywhere.hits for shown in hit.window)  # left out of windows
    assert (await engine.find('ferry', scope='conversation', conversation_id='other')).unindexed == ()
    assert (await engine.find('otter', scope='conversation', conversation_id='old')).unindexed == (bad,)
    assert (await engine.find('otter', scope='all', conversation_id=None, run_id='run-old')).unindexed == (bad,)
    assert index.state().unindexed == (bad,)
    assert not index.verify()  # the count is derived like the rest: a rebuild gives it again

    await log.delete_conversation('old')
    assert (await engine.find('ferry', scope='all', conversation_id=None)).unindexed == ()
    assert index.state().unindexed == ()


def test_the_unreadable_payload_is_what_pydantic_ai_cannot_read() -> None:
    with pytest.raises(Exception, match=re.escape('cannot be decoded')):
        decode_messages([unreadable_payload()])
