"""Parity with the reference (pydantic-ai-harness's conversation search), used as an oracle.

Skipped where the reference is not installed (the newest pydantic-ai-slim run).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as m
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from searchtools import (
    FIXED_TIME,
    ListSource,
    every_part_kind,
    parse_answer,
    parse_reference_answer,
    user,
)

from search import DefaultAnalyzer, SearchEngine, SearchOptions
from search.memory_index import HistorySourceBackend, message_identity
from search.render import EXCERPT_CHARS, SHORT_EXCERPT_CHARS, clip, index_text

harness = pytest.importorskip('pydantic_ai_harness')

pytestmark = pytest.mark.reference

from pydantic_ai_harness.conversation_search import (  # noqa: E402
    ConversationSearchToolset,
    SnapshotHistorySource,
)
from pydantic_ai_harness.conversation_search import _source as ref_source  # noqa: E402
from pydantic_ai_harness.conversation_search import _toolset as ref_toolset  # noqa: E402

ANALYZER = DefaultAnalyzer()


def reference_tokens(text: str) -> list[str]:
    return ref_toolset._tokenize(text)  # pyright: ignore[reportPrivateUsage]


def reference_index_text(message: ModelMessage) -> str:
    return ref_toolset._format_message(message, terms=None)  # pyright: ignore[reportPrivateUsage]


def reference_toolset(source: Any, *, scope: str, k1: float = 1.5, b: float = 0.75, **options: int) -> Any:
    return ConversationSearchToolset(
        source,
        tool_id='reference-search',
        max_matches=options.get('max_matches', 10),
        context_lines=options.get('context_lines', 5),
        bm25_k1=k1,
        bm25_b=b,
        scope=scope,  # pyright: ignore[reportArgumentType]
    )


async def reference_ranking(
    source: Any, query: str, *, conversation_id: str | None, run_id: str | None, k1: float = 1.5, b: float = 0.75
) -> tuple[int, list[tuple[str, int, float]]]:
    """The reference's corpus size and ranked `(run_id, position, score)` list, from its own internals."""
    toolset = reference_toolset(source, scope='conversation' if conversation_id else 'all', k1=k1, b=b)
    sections = await toolset._load_sections(run_id, conversation_id)  # pyright: ignore[reportPrivateUsage]
    lines: list[str] = []
    locations: list[tuple[str, int]] = []
    for section in sections:
        section_run = re.match(r'run: (.+?)(?: \| conversation: .*)?$', section.label)
        assert section_run is not None
        for index, line in enumerate(section.index_lines):
            lines.append(line)
            locations.append((section_run[1], section.first_index + index))
    ranked = ref_toolset._bm25_rank(query, lines, ref_toolset._Bm25Params(k1=k1, b=b))  # pyright: ignore[reportPrivateUsage]
    return len(lines), [(*locations[doc], score) for doc, score in ranked]


async def our_ranking(
    source: Any, query: str, *, conversation_id: str | None, run_id: str | None, k1: float = 1.5, b: float = 0.75
) -> tuple[int, list[tuple[str, int, float]]]:
    corpus = await HistorySourceBackend(source).open_corpus(
        conversation_id=conversation_id, run_id=run_id, analyzer=ANALYZER
    )
    terms = list(dict.fromkeys(ANALYZER.tokens(query)))
    hits = await corpus.rank(terms, k1=k1, b=b)
    return corpus.document_count, [(hit.run_id, hit.position, hit.score) for hit in hits]


# --- rendering ---------------------------------------------------------------------------------


@pytest.mark.parametrize('message', every_part_kind(), ids=lambda message: type(message).__name__)
def test_index_text_has_the_reference_tokens(message: ModelMessage) -> None:
    ours = index_text(message)
    assert ANALYZER.tokens(ours) == reference_tokens(reference_index_text(message))
    assert ours == reference_index_text(message)


def test_every_part_kind_covers_every_part_class() -> None:
    """The sample list holds an instance of every part class of this pydantic-ai version."""
    seen = {type(part) for message in every_part_kind() for part in message.parts}
    part_classes = {
        getattr(m, name)
        for name in dir(m)
        if name.endswith('Part') and isinstance(getattr(m, name), type) and not name.startswith('Base')
    }
    part_classes.discard(m.InstructionPart)  # an instruction block, never a message part
    assert part_classes <= seen


def test_tokenizer_matches_the_reference_on_awkward_text() -> None:
    text = (
        'İstanbul ǅemal ΣΊΣΥΦΟΣ straße_42 x²³ 東京タワー 한국어 e\u0301 \u00a0tab\there \U0001f600 \uff21\uff22\uff23'
    )
    assert ANALYZER.tokens(text) == reference_tokens(text)


@pytest.mark.parametrize(
    ('text', 'term'),
    [
        ('short text with needle', 'needle'),
        ('x' * 600 + ' needle', 'needle'),
        ('needle ' + 'y' * 900, 'needle'),
        ('a ' * 300 + 'needle ' + 'b ' * 300, 'needle'),
        ('a ' * 300 + 'needle' + 'z' * 400 + ' tail', 'needle' + 'z' * 400),
        ('w ' * 400 + 'needle end', 'needle'),
        ('w ' * 400, 'absent'),
    ],
)
@pytest.mark.parametrize('limit', [EXCERPT_CHARS, SHORT_EXCERPT_CHARS])
def test_clip_window_matches_the_reference(text: str, term: str, limit: int) -> None:
    theirs = ref_toolset._clip(text, limit, frozenset({term}))  # pyright: ignore[reportPrivateUsage]
    match = re.search(rf'\b{re.escape(term)}\b', text)
    ours = clip(text, limit, (match.start(), match.end()) if match else None)
    assert ours.strip('…') == theirs.removeprefix('...').removesuffix('...')
    assert ours.startswith('…') == (theirs.startswith('...') and not text.startswith('...'))


# --- message identity --------------------------------------------------------------------------


def test_message_identity_agrees_with_the_reference_hash() -> None:
    messages = every_part_kind()
    variants: list[ModelMessage] = []
    for message in messages:
        variants.append(message)
        variants.append(replace(message, run_id='other-run', conversation_id='other-conv'))  # pyright: ignore[reportCallIssue]
        variants.append(replace(message, timestamp=None))  # pyright: ignore[reportCallIssue]
        if isinstance(message, ModelRequest):
            variants.append(replace(message, instructions='be nice'))
            delta = ModelMessagesTypeAdapter.validate_python(
                [{'kind': 'request', 'parts': [{'part_kind': 'instruction-delta', 'id': 'agent:x', 'content': 'y'}]}]
            )[0].parts[0]
            variants.append(replace(message, parts=[*message.parts, delta]))
    ours = [message_identity(message) for message in variants]
    theirs = [ref_source.message_hash(message) for message in variants]
    for first in range(len(variants)):
        for second in range(len(variants)):
            assert (ours[first] == ours[second]) == (theirs[first] == theirs[second])


# --- generated corpora -------------------------------------------------------------------------

WORDS = [
    'alpha',
    'beta',
    'gamma',
    'delta',
    'Kraków',
    'café',
    '東京',
    'naïve',
    'Straße',
    'ÉTÉ',
    'x1',
    '42',
    'foo_bar',
    'İstanbul',
    'ß',
    'Ωmega',
    'pelican',
]
texts = st.lists(st.sampled_from(WORDS), max_size=9).flatmap(
    lambda words: st.lists(
        st.sampled_from([' ', ', ', '\n', '-', '. ', '']), min_size=len(words), max_size=len(words)
    ).map(lambda seps: ''.join(word + sep for word, sep in zip(words, seps, strict=True)))
)
tool_names = st.sampled_from(['lookup', 'search_db', 'alpha'])


@st.composite
def request_parts(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 9))
    text = draw(texts)
    if kind <= 2:
        return m.UserPromptPart(text, timestamp=FIXED_TIME)
    if kind == 3:
        return m.UserPromptPart([text, m.TextContent(draw(texts))], timestamp=FIXED_TIME)
    if kind == 4:
        return m.SystemPromptPart(text, timestamp=FIXED_TIME)
    if kind == 5:
        return m.ToolReturnPart(draw(tool_names), {'result': text}, tool_call_id='c1', timestamp=FIXED_TIME)
    if kind == 6:
        return m.ToolReturnPart(draw(tool_names), text, tool_call_id='c2', outcome='retried', timestamp=FIXED_TIME)
    if kind == 7:
        return m.CompactionPart(text or None)
    if kind == 8:
        return m.SpeechPart(speaker='user', transcript=text or None)
    return ModelMessagesTypeAdapter.validate_python(
        [
            {
                'kind': 'request',
                'parts': [{'part_kind': 'retry-feedback', 'content': text, 'retry': {'cause': 'model_retry'}}],
            }
        ]
    )[0].parts[0]


@st.composite
def response_parts(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    text = draw(texts)
    if kind <= 2:
        return m.TextPart(text)
    if kind == 3:
        return m.ToolCallPart(draw(tool_names), {'q': text, 'n': draw(st.integers(0, 3))}, tool_call_id='c1')
    if kind == 4:
        return m.ThinkingPart(text)
    return m.SpeechPart(speaker='assistant', transcript=text or None)


@st.composite
def messages(draw: st.DrawFn) -> ModelMessage:
    if draw(st.booleans()):
        return ModelRequest(parts=draw(st.lists(request_parts(), min_size=1, max_size=3)), timestamp=FIXED_TIME)
    return ModelResponse(parts=draw(st.lists(response_parts(), min_size=1, max_size=3)), timestamp=FIXED_TIME)


def _restamped(message: ModelMessage, run_id: str) -> ModelMessage:
    """A copy as a later run holds it: same content, its own run id and timestamp."""
    copy = ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python([message]))[0]
    return replace(copy, run_id=run_id)  # pyright: ignore[reportCallIssue]


def _with_instruction_change(message: ModelMessage) -> ModelMessage:
    if not isinstance(message, ModelRequest):
        return message
    delta = ModelMessagesTypeAdapter.validate_python(
        [{'kind': 'request', 'parts': [{'part_kind': 'instruction-delta', 'id': 'agent:tone', 'content': 'be brief'}]}]
    )[0].parts[0]
    return replace(message, parts=[*message.parts, delta])


@st.composite
def corpora(draw: st.DrawFn) -> ListSource:
    """Several conversations; runs that start fresh, continue the latest run, branch from an older one, or repeat one."""
    source = ListSource()
    pool: list[ModelMessage] = []
    run_count = draw(st.integers(1, 7))
    for index in range(run_count):
        run_id = f'r{index}'
        conversation = draw(st.sampled_from(['c1', 'c2', None]))
        earlier = [run.run_id for run in source.runs if run.conversation_id == conversation]
        mode = draw(st.sampled_from(['fresh', 'continue', 'branch', 'repeat'])) if earlier else 'fresh'
        inherited: list[ModelMessage] = []
        if mode == 'continue':
            inherited = list(source.histories[earlier[-1]])
        elif mode == 'branch':
            base = source.histories[draw(st.sampled_from(earlier))]
            inherited = list(base[: draw(st.integers(0, len(base)))])
        elif mode == 'repeat':
            inherited = [_restamped(message, run_id) for message in source.histories[draw(st.sampled_from(earlier))]]
        if inherited and draw(st.booleans()):
            at = draw(st.integers(0, len(inherited) - 1))
            inherited[at] = _with_instruction_change(inherited[at])
        added: list[ModelMessage] = []
        for _ in range(draw(st.integers(0, 5))):
            # Reuse an earlier message now and then, so equal documents (and equal scores) are common.
            reuse = pool and draw(st.integers(0, 3)) == 0
            added.append(draw(st.sampled_from(pool)) if reuse else draw(messages()))
        pool.extend(added)
        source.add(run_id, conversation, [*inherited, *added])
    return source


queries = st.lists(
    st.sampled_from([*WORDS, 'absent', 'KRAKÓW', 'Tool', 'user', 'assistant']), min_size=1, max_size=3
).map(' '.join)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    source=corpora(),
    query=queries,
    conversation=st.sampled_from(['c1', 'c2', None]),
    run_choice=st.sampled_from([None, None, 'r0', 'r1', 'r3', 'missing']),
    k1=st.sampled_from([1.5, 0.0, 1.2, 3.7]),
    b=st.sampled_from([0.75, 0.0, 1.0, 0.3]),
)
def test_ranking_equals_the_reference(
    source: ListSource, query: str, conversation: str | None, run_choice: str | None, k1: float, b: float
) -> None:
    async def both() -> None:
        theirs = await reference_ranking(source, query, conversation_id=conversation, run_id=run_choice, k1=k1, b=b)
        ours = await our_ranking(source, query, conversation_id=conversation, run_id=run_choice, k1=k1, b=b)
        assert ours == theirs
        event('some hits' if theirs[1] else 'no hits')
        event('ties' if len({score for *_, score in theirs[1]}) < len(theirs[1]) else 'no ties')
        stored = sum(len(history) for history in source.histories.values())
        event('messages left out as inherited' if theirs[0] < stored and run_choice is None else 'nothing inherited')

    asyncio.run(both())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    source=corpora(),
    query=queries,
    conversation=st.sampled_from(['c1', 'c2']),
    scope=st.sampled_from(['conversation', 'all']),
    run_choice=st.sampled_from([None, None, 'r0', 'r2', 'missing']),
    max_matches=st.integers(1, 4),
    context_lines=st.integers(0, 3),
)
def test_answers_carry_the_reference_results(
    source: ListSource,
    query: str,
    conversation: str,
    scope: str,
    run_choice: str | None,
    max_matches: int,
    context_lines: int,
) -> None:
    async def both() -> None:
        toolset = reference_toolset(source, scope=scope, max_matches=max_matches, context_lines=context_lines)
        ctx = SimpleNamespace(conversation_id=conversation)
        theirs = await toolset.search_conversation_history(ctx, query, run_choice)
        engine = SearchEngine(
            source,
            SearchOptions(max_matches=max_matches, context_lines=context_lines, answer_style='explained'),
        )
        ours = await engine.search(query, scope=scope, conversation_id=conversation, run_id=run_choice)  # pyright: ignore[reportArgumentType]

        their_results = parse_reference_answer(theirs)
        our_results = parse_answer(ours)
        assert [(r.score, r.run_id, r.conversation_id) for r in our_results] == [
            (r.score, r.run_id, r.conversation_id) for r in their_results
        ]
        for our_result, their_result in zip(our_results, their_results, strict=True):
            assert set(our_result.positions) <= set(their_result.positions)
            assert our_result.positions  # a result always shows at least its match
        assert {(r.run_id, p) for r in our_results for p in r.positions} == {
            (r.run_id, p) for r in their_results for p in r.positions
        }
        if theirs.startswith('Found '):
            total = re.search(r'in (\d+) persisted messages', theirs)
            assert total is not None
            assert f'from {total[1]} stored message' in ours
        elif theirs.startswith('No matches'):
            total = re.search(r'in (\d+) persisted messages', theirs)
            assert total is not None
            assert ours.startswith('No message matches') and f'among the {total[1]} stored message' in ours
        elif theirs.startswith('No persisted history for run'):
            assert ours.startswith('There is no stored history for run')
        else:
            assert theirs.startswith('No persisted')
            assert 'no stored history' in ours

    asyncio.run(both())


# --- either side reads the other's source -------------------------------------------------------


async def test_the_reference_snapshot_source_is_a_source_for_us() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai_harness.step_persistence import InMemoryStepStore, StepPersistence

    from search import HistorySource

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[m.TextPart('The pelican password is heron-7731.')])

    store = InMemoryStepStore()
    agent = Agent(FunctionModel(model), capabilities=[StepPersistence(store=store)])
    first = await agent.run('What is the pelican password?', conversation_id='conv-a')
    await agent.run('Thanks, and the otter one?', message_history=first.all_messages())
    await agent.run('Unrelated conversation about pelican food', conversation_id='conv-b')

    source = SnapshotHistorySource(store)
    assert isinstance(source, HistorySource)
    for conversation in ('conv-a', 'conv-b'):
        theirs = await reference_ranking(source, 'pelican password', conversation_id=conversation, run_id=None)
        ours = await our_ranking(source, 'pelican password', conversation_id=conversation, run_id=None)
        assert ours == theirs
    answer = await SearchEngine(source).search('pelican password', scope='conversation', conversation_id='conv-a')
    assert 'heron-7731' in answer
    assert 'food' not in answer


async def test_our_source_is_a_source_for_the_reference() -> None:
    source = ListSource()
    source.add('r1', 'c1', [user('the walrus sleeps at noon')])
    toolset = reference_toolset(source, scope='conversation')
    answer = await toolset.search_conversation_history(SimpleNamespace(conversation_id='c1'), 'walrus')
    assert 'the walrus sleeps at noon' in answer


async def test_equal_scores_keep_corpus_order_like_the_reference() -> None:
    source = ListSource()
    same = [user('walrus facts'), user('unrelated'), user('walrus facts')]
    source.add('r0', 'c1', same)
    source.add('r1', 'c2', [user('walrus facts'), *same])
    source.add('r2', 'c1', [*same, user('walrus facts'), user('walrus facts')])
    source.add('r3', None, [user('facts walrus')])
    for conversation in ('c1', 'c2', None):
        theirs = await reference_ranking(source, 'walrus', conversation_id=conversation, run_id=None)
        ours = await our_ranking(source, 'walrus', conversation_id=conversation, run_id=None)
        assert ours == theirs
        assert len({score for *_, score in ours[1]}) == 1  # all tied


# --- the model's text, byte for byte ------------------------------------------------------------

odd_queries = st.one_of(
    queries,
    st.sampled_from(['', '   ', '?!', "it's", 'ALPHA beta alpha', 'x1\tpelican', '42 {q}']),
)


async def _tool_text(capability: Any, conversation_id: str | None, query: str, run_id: str | None) -> str:
    """What a capability's `search_conversation_history` tool returns, called as a model would."""
    toolset = capability.get_toolset()
    ctx = SimpleNamespace(conversation_id=conversation_id, run_id=None)
    return await toolset.tools['search_conversation_history'].function(ctx, query=query, run_id=run_id)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    source=corpora(),
    query=odd_queries,
    conversation=st.sampled_from(['c1', 'c2', None]),
    scope=st.sampled_from(['conversation', 'all']),
    run_choice=st.sampled_from([None, None, 'r0', 'r2', 'missing']),
    options=st.sampled_from([{}, {}, {'max_matches': 2, 'context_lines': 1}, {'max_matches': 0}, {'context_lines': 0}]),
)
def test_default_answers_are_the_reference_text_byte_for_byte(
    source: ListSource,
    query: str,
    conversation: str | None,
    scope: str,
    run_choice: str | None,
    options: dict[str, int],
) -> None:
    """With default options (and the same explicit ones) the tool's answer is the reference's,
    so swapping its capability for ours changes no prompt."""
    from pydantic_ai_harness.conversation_search import ConversationSearch as ReferenceSearch

    from capability.search import ConversationSearch

    async def both() -> None:
        theirs = await _tool_text(
            ReferenceSearch(source, scope=scope, **options),  # pyright: ignore[reportArgumentType]
            conversation,
            query,
            run_choice,
        )
        ours = await _tool_text(
            ConversationSearch(source, scope=scope, **options),  # pyright: ignore[reportArgumentType]
            conversation,
            query,
            run_choice,
        )
        assert ours == theirs
        event(theirs.split(' ', 1)[0])

    asyncio.run(both())


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('scope', ['conversation', 'all'])
async def test_default_answers_over_a_real_store_are_the_reference_text(tmp_path: Any, seed: int, scope: str) -> None:
    """A seeded store recorded by real agent runs, searched through the persistent index and
    through the reference over the same history: the same text, byte for byte."""
    import random

    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai_harness.conversation_search import ConversationSearch as ReferenceSearch

    from capability.persistence import EventLogPersistence
    from capability.search import ConversationSearch
    from eventlog import LmdbEventLog, ReplayHistorySource

    rng = random.Random(seed)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        words = rng.sample(WORDS, rng.randint(1, 6))
        return ModelResponse(parts=[m.TextPart(' '.join(words) + ' ' + 'filler ' * rng.randint(0, 120))])

    log = LmdbEventLog(tmp_path / f'store-{seed}')
    agent = Agent(FunctionModel(model), capabilities=[EventLogPersistence(log)])
    history: dict[str, list[ModelMessage]] = {}
    for turn in range(rng.randint(3, 9)):
        conversation = rng.choice(['c1', 'c2'])
        prompt = ' '.join(rng.sample(WORDS, rng.randint(1, 4)))
        earlier = history.get(conversation)
        if earlier is not None and rng.random() < 0.7:
            result = await agent.run(prompt, message_history=earlier)
        else:
            result = await agent.run(prompt, conversation_id=conversation)
        history[conversation] = result.all_messages()
        del turn
    runs = [run.run_id for run in await log.list_runs()]
    source = ReplayHistorySource(log)
    for query in ['alpha', 'pelican Kraków', '東京 42', 'absent', 'filler', '']:
        for conversation in ['c1', 'c2']:
            for run_id in [None, rng.choice(runs)]:
                theirs = await _tool_text(ReferenceSearch(source, scope=scope), conversation, query, run_id)  # pyright: ignore[reportArgumentType]
                ours = await _tool_text(ConversationSearch(log, scope=scope), conversation, query, run_id)  # pyright: ignore[reportArgumentType]
                assert ours == theirs
    log.close()
