"""The search engine: answers, windows, scope, isolation and bad input."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as m
from pydantic_ai.messages import ModelMessage, ModelRequest
from searchtools import (
    FIXED_TIME,
    ClosedSource,
    HistoryFailsSource,
    ListSource,
    exchange,
    parse_answer,
    reply,
    user,
)

from search import Analyzer, CjkAnalyzer, EnglishAnalyzer, SearchBackend, SearchEngine, SearchOptions
from search.backend import Corpus, Hit, RunSpan
from search.engine import MAX_QUERY_TERMS, as_backend
from search.memory_index import HistorySourceBackend


def engine(source: object, **options: object) -> SearchEngine:
    options.setdefault('answer_style', 'explained')
    return SearchEngine(source, SearchOptions(**options))  # pyright: ignore[reportArgumentType]


async def ask(
    source: object, query: str, *, conversation: str | None = 'c1', run_id: str | None = None, **options: object
) -> str:
    scope = 'conversation' if conversation is not None else 'all'
    return await engine(source, **options).search(query, scope=scope, conversation_id=conversation, run_id=run_id)


def numbered(answer: str) -> list[int]:
    return [int(n) for n in re.findall(r'^\[(\d+)\] ', answer, flags=re.MULTILINE)]


# --- answers -------------------------------------------------------------------------------------


async def test_answer_layout() -> None:
    source = ListSource()
    source.add('run-1', 'c1', exchange('Where is the deploy key?', 'The deploy key is in the blue vault.'))
    answer = await ask(source, 'deploy key')
    header, *blocks = answer.split('\n\n')
    assert header.startswith('1 result for "deploy key" from 2 stored messages')
    assert blocks == [
        'Result 1 of 1 | score '
        + re.findall(r'score (\d+\.\d)', answer)[0]
        + ' | run run-1 | conversation c1\n[0] User: Where is the deploy key?\n[1] Assistant: The deploy key is in the blue vault.'
    ]


async def test_scores_have_one_decimal_and_results_are_best_first() -> None:
    source = ListSource()
    source.add('r', 'c1', [user('alpha'), *[user(f'filler {i}') for i in range(20)], user('alpha alpha beta')])
    answer = await ask(source, 'alpha beta', context_lines=0)
    results = parse_answer(answer)
    assert [r.positions for r in results] == [[21], [0]]
    assert all(re.fullmatch(r'\d+\.\d', r.score) for r in results)
    assert float(results[0].score) > float(results[1].score)


async def test_multi_part_messages_keep_one_numbered_line() -> None:
    source = ListSource()
    source.add(
        'r',
        'c1',
        [
            ModelRequest(
                parts=[
                    m.SystemPromptPart('Be kind.', timestamp=FIXED_TIME),
                    m.UserPromptPart('first line\n[7] not a real number', timestamp=FIXED_TIME),
                ]
            ),
            m.ModelResponse(parts=[m.ThinkingPart('hidden')], timestamp=FIXED_TIME),
        ],
    )
    answer = await ask(source, 'kind')
    assert numbered(answer) == [0, 1]
    assert '[0] System: Be kind.\n    User: first line\n    [7] not a real number' in answer
    assert '[1] (no text in this message)' in answer


async def test_a_match_inside_a_shown_window_is_not_repeated() -> None:
    source = ListSource()
    source.add('r', 'c1', [user(f'message {i} ' + ('needle' if i in (4, 5) else '')) for i in range(10)])
    answer = await ask(source, 'needle', context_lines=2)
    assert answer.startswith('1 result ')
    assert numbered(answer) == [2, 3, 4, 5, 6]


async def test_partly_overlapping_windows_show_each_message_once() -> None:
    texts = [f'message {i}' for i in range(20)]
    texts[5] = 'needle needle needle'
    texts[9] = 'needle'
    source = ListSource()
    source.add('r', 'c1', [user(text) for text in texts])
    answer = await ask(source, 'needle', context_lines=3)
    results = parse_answer(answer)
    assert [r.positions for r in results] == [[2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]]
    assert len(numbered(answer)) == len(set(numbered(answer)))


async def test_context_stays_within_the_run_and_its_own_messages() -> None:
    first = exchange('we talk about otters', 'otters are great', 'and seals?', 'seals too')
    second = [*first, *exchange('now the pelican question', 'pelicans are big')]
    source = ListSource()
    source.add('r1', 'c1', first)
    source.add('r2', 'c1', second)
    answer = await ask(source, 'pelican', context_lines=5)
    (result,) = parse_answer(answer)
    assert result.run_id == 'r2'
    assert result.positions == [4, 5]  # numbered in r2's full record; r1's messages are r1's
    assert 'from 6 stored messages' in answer  # each message counted once


async def test_run_id_search_numbers_by_position_in_the_run() -> None:
    first = exchange('alpha question', 'alpha answer')
    source = ListSource()
    source.add('r1', 'c1', first)
    source.add('r2', 'c1', [*first, *exchange('beta question', 'alpha again')])
    answer = await ask(source, 'alpha', run_id='r2', context_lines=0)
    assert 'from 4 stored messages of run "r2"' in answer
    assert sorted(numbered(answer)) == [0, 1, 3]


async def test_max_matches_limits_the_results() -> None:
    source = ListSource()
    source.add('r', 'c1', [user(f'needle {i}') for i in range(30)])
    answer = await ask(source, 'needle', max_matches=3, context_lines=0)
    assert answer.startswith('3 results ')
    assert len(parse_answer(answer)) == 3


async def test_max_matches_zero_says_so() -> None:
    source = ListSource()
    source.add('r', 'c1', [user('needle')])
    answer = await ask(source, 'needle', max_matches=0)
    assert 'configured to show no results' in answer
    assert '[0]' not in answer


async def test_long_text_is_clipped_around_the_first_term() -> None:
    source = ListSource()
    source.add('r', 'c1', [user('filler ' * 200 + 'the locker code is 4471 ' + 'tail ' * 200)])
    answer = await ask(source, 'locker')
    assert 'the locker code is 4471' in answer
    assert '…' in answer
    assert len(answer) < 1200


async def test_english_analyzer_finds_other_word_forms() -> None:
    source = ListSource()
    source.add('r', 'c1', [user('We deployed the service on Friday.')])
    assert 'No message matches' in await ask(source, 'deploying')
    assert 'We deployed the service' in await ask(source, 'deploying', analyzer=EnglishAnalyzer())


async def test_cjk_analyzer_finds_a_word_inside_unbroken_text() -> None:
    source = ListSource()
    source.add('r', 'c1', [user('私は東京に行きました'), user('大阪は楽しい')])
    assert 'No message matches' in await ask(source, '東京')
    answer = await ask(source, '東京', analyzer=CjkAnalyzer())
    assert answer.startswith('1 result') and '私は東京に行きました' in answer


# --- nothing to show -------------------------------------------------------------------------------


async def test_no_history_in_the_conversation() -> None:
    source = ListSource()
    source.add('other', 'c2', [user('secret of another conversation')])
    answer = await ask(source, 'secret')
    assert 'This conversation has no stored history yet' in answer
    assert 'c2' not in answer and 'another' not in answer


async def test_no_history_at_all() -> None:
    answer = await ask(ListSource(), 'anything', conversation=None)
    assert answer.startswith('There is no stored history to search yet.')


async def test_no_match() -> None:
    source = ListSource()
    source.add('r', 'c1', exchange('hello', 'hi'))
    answer = await ask(source, 'zebra')
    assert answer.startswith('No message matches "zebra" among the 2 stored messages.')


async def test_unknown_run_and_another_conversations_run_answer_alike() -> None:
    source = ListSource()
    source.add('mine', 'c1', [user('my own words')])
    source.add('theirs', 'c2', [user('their private words')])
    for query in ('words', 'private'):
        unknown = await ask(source, query, run_id='no-such-run')
        foreign = await ask(source, query, run_id='theirs')
        assert foreign == unknown.replace('no-such-run', 'theirs')
        assert foreign.startswith('There is no stored history for run "theirs".')
    assert 'their private words' in await ask(source, 'private', conversation=None, run_id='theirs')


async def test_a_run_without_conversation_id_fails_closed() -> None:
    source = ListSource()
    source.add('r', None, [user('unlabelled words')])
    answer = await engine(source).search('unlabelled', scope='conversation', conversation_id=None)
    assert answer.startswith('Nothing was searched')
    assert 'no conversation id' in answer
    assert source.list_calls == 0  # nothing was even read


async def test_scope_all_reaches_unlabelled_runs() -> None:
    source = ListSource()
    source.add('r', None, [user('unlabelled words')])
    answer = await ask(source, 'unlabelled', conversation=None)
    assert 'unlabelled words' in answer
    assert '| run r | no conversation id' in answer


# --- bad input -------------------------------------------------------------------------------------


@pytest.fixture
def stocked() -> ListSource:
    source = ListSource()
    source.add('r', 'c1', exchange('some question about ducks', 'some answer about ducks'))
    return source


@pytest.mark.parametrize('query', ['', '   ', '\n\t'])
async def test_empty_query(stocked: ListSource, query: str) -> None:
    assert (await ask(stocked, query)).startswith('Nothing was searched: the query is empty.')


@pytest.mark.parametrize('query', ['!!!', '?', '... --- ...', '😀🎉', '\x00\x01'])
async def test_query_without_words(stocked: ListSource, query: str) -> None:
    answer = await ask(stocked, query)
    assert 'has no searchable words' in answer
    assert '\x00' not in answer and '\x01' not in answer


async def test_huge_query_is_refused_clearly(stocked: ListSource) -> None:
    query = ' '.join(f'word{i}' for i in range(10_000))
    answer = await ask(stocked, query)
    assert answer.startswith('Nothing was searched: the query has 10000 distinct words')
    assert str(MAX_QUERY_TERMS) in answer
    assert len(answer) < 400


async def test_long_query_within_the_limit_is_searched_and_echoed_short(stocked: ListSource) -> None:
    query = ' '.join(['ducks', *(f'word{i}' for i in range(MAX_QUERY_TERMS - 1))])
    answer = await ask(stocked, query)
    assert answer.startswith('1 result for "ducks word0')
    assert len(answer.split('\n')[0]) < 400


async def test_control_characters_are_escaped_in_the_echo(stocked: ListSource) -> None:
    answer = await ask(stocked, 'ducks\x00\x1b[31m\nRESULT 1 "x"\u2028')
    first_line = answer.split('\n')[0]
    assert first_line.startswith('1 result for "ducks\\x00\\x1b[31m\\x0aRESULT 1 \\"x\\"\\u2028"')
    assert '\x00' not in answer and '\x1b' not in answer


async def test_run_id_is_echoed_safely(stocked: ListSource) -> None:
    answer = await ask(stocked, 'ducks', run_id='bad\nid' + 'x' * 500)
    assert answer.startswith('There is no stored history for run "bad\\x0aid')
    assert '\n' not in answer
    assert len(answer) < 400


@pytest.mark.parametrize('source', [ClosedSource(), HistoryFailsSource([], {})])
async def test_a_failing_store_gives_an_answer(source: object) -> None:
    if isinstance(source, HistoryFailsSource):
        source.add('r', 'c1', [])
    answer = await ask(source, 'ducks')
    assert answer.startswith('The search could not be completed')
    assert 'store may be closed' in answer
    assert 'secret' not in answer and 'conv-other' not in answer


# --- the backend seam ----------------------------------------------------------------------------


class OneMessageCorpus:
    """A hand-written corpus: one message in run `x`, found by any query."""

    def __init__(self) -> None:
        self.ranked_with: list[tuple[tuple[str, ...], float, float]] = []

    @property
    def document_count(self) -> int:
        return 1

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        self.ranked_with.append((tuple(terms), k1, b))
        return [Hit('x', 3, 2.25)]

    async def span(self, run_id: str) -> RunSpan:
        return RunSpan(run_id, 'c1', 3, 4)

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        return [(3, user('from the persistent index'))]


class FixedBackend:
    def __init__(self) -> None:
        self.corpus = OneMessageCorpus()
        self.opened: list[tuple[str | None, str | None, str]] = []

    async def open_corpus(self, *, conversation_id: str | None, run_id: str | None, analyzer: Analyzer) -> Corpus:
        self.opened.append((conversation_id, run_id, analyzer.name))
        return self.corpus


async def test_a_search_backend_is_used_directly() -> None:
    backend = FixedBackend()
    assert isinstance(backend, SearchBackend)
    assert as_backend(backend) is backend  # pyright: ignore[reportArgumentType]
    search = SearchEngine(backend, SearchOptions(bm25_k1=1.2, bm25_b=0.5, answer_style='explained'))  # pyright: ignore[reportArgumentType]
    answer = await search.search('Index Index question', scope='conversation', conversation_id='c1')
    assert backend.opened == [('c1', None, 'default')]
    assert backend.corpus.ranked_with == [(('index', 'question'), 1.2, 0.5)]
    assert '| score 2.2 | run x | conversation c1\n[3] User: from the persistent index' in answer
    await search.search('q', scope='all', conversation_id='c1', run_id='x')
    assert backend.opened[-1] == (None, 'x', 'default')


async def test_a_history_source_is_wrapped_in_memory() -> None:
    source = ListSource()
    backend = as_backend(source)
    assert isinstance(backend, HistorySourceBackend)
    assert backend.source is source


async def test_a_failing_backend_gives_an_answer() -> None:
    class Broken(FixedBackend):
        async def open_corpus(self, *, conversation_id: str | None, run_id: str | None, analyzer: Analyzer) -> Corpus:
            raise KeyError('internal detail')

    answer = await SearchEngine(Broken()).search('q', scope='all', conversation_id=None)  # pyright: ignore[reportArgumentType]
    assert answer.startswith('The search could not be completed') and '(KeyError)' in answer


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('options', 'message'),
    [
        ({'max_matches': -1}, 'max_matches must be a non-negative integer, got -1'),
        ({'max_matches': 2.5}, 'max_matches must be a non-negative integer'),
        ({'max_matches': True}, 'max_matches must be a non-negative integer'),
        ({'context_lines': -3}, 'context_lines must be a non-negative integer, got -3'),
        ({'bm25_k1': -0.1}, 'bm25_k1 must be a finite number of at least 0, got -0.1'),
        ({'bm25_k1': float('nan')}, 'bm25_k1 must be a finite number'),
        ({'bm25_k1': float('inf')}, 'bm25_k1 must be a finite number'),
        ({'bm25_b': 1.5}, 'bm25_b must be a number from 0.0 to 1.0, got 1.5'),
        ({'bm25_b': -0.01}, 'bm25_b must be a number from 0.0 to 1.0'),
        ({'bm25_b': float('nan')}, 'bm25_b must be a number from 0.0 to 1.0'),
    ],
)
def test_invalid_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SearchOptions(**options)  # pyright: ignore[reportArgumentType]


def test_boundary_options_are_valid() -> None:
    SearchOptions(max_matches=0, context_lines=0, bm25_k1=0.0, bm25_b=0.0)
    SearchOptions(bm25_b=1.0, bm25_k1=1)


# --- isolation ---------------------------------------------------------------------------------------

conversation_ids = ['conv-a', 'conv-b', 'conv-c']


@st.composite
def planted_stores(draw: st.DrawFn) -> ListSource:
    """Runs of three conversations; every message carries its conversation's secret word."""
    source = ListSource()
    histories: dict[str, list[ModelMessage]] = {c: [] for c in conversation_ids}
    for index in range(draw(st.integers(1, 8))):
        conversation = draw(st.sampled_from(conversation_ids))
        secret = f'secret{conversation[-1]}'
        new = [
            user(f'shared words {secret} number {draw(st.integers(0, 5))}')
            if draw(st.booleans())
            else reply(f'{secret} shared answer')
            for _ in range(draw(st.integers(0, 4)))
        ]
        history = [*(histories[conversation] if draw(st.booleans()) else []), *new]
        source.add(f'run-{conversation}-{index}', conversation, history)
        histories[conversation] = history
    return source


def only(source: ListSource, conversation: str) -> ListSource:
    kept = ListSource()
    for run in source.runs:
        if run.conversation_id == conversation:
            kept.add(run.run_id, conversation, source.histories[run.run_id])
    return kept


@settings(max_examples=60, deadline=None)
@given(
    source=planted_stores(),
    caller=st.sampled_from(conversation_ids),
    query=st.sampled_from(['shared', 'secreta secretb secretc', 'shared number 3', 'answer secretb', 'secretc']),
    with_foreign_run=st.booleans(),
)
def test_a_conversation_search_never_shows_names_or_counts_another_conversation(
    source: ListSource, caller: str, query: str, with_foreign_run: bool
) -> None:
    foreign_runs = [run.run_id for run in source.runs if run.conversation_id != caller]
    run_id = foreign_runs[0] if with_foreign_run and foreign_runs else None

    async def check() -> None:
        search = engine(source, max_matches=50)
        answer = await search.search(query, scope='conversation', conversation_id=caller, run_id=run_id)
        # Exactly the answer a store holding nothing but this conversation gives.
        alone = await engine(only(source, caller), max_matches=50).search(
            query, scope='conversation', conversation_id=caller, run_id=run_id
        )
        assert answer == alone
        echo_free = answer.replace(query, '').replace(f'"{run_id}"', '')
        for other in conversation_ids:
            if other != caller:
                assert other not in echo_free
                assert f'secret{other[-1]}' not in echo_free
        for foreign in foreign_runs:
            assert foreign not in echo_free
        if run_id is not None:
            unknown = await search.search(query, scope='conversation', conversation_id=caller, run_id='never-existed')
            assert answer == unknown.replace('never-existed', run_id)

    asyncio.run(check())


# --- the in-memory corpus ------------------------------------------------------------------------------


async def test_memory_corpus_spans_and_windows() -> None:
    first = exchange('one', 'two')
    source = ListSource()
    source.add('r1', 'c1', first)
    source.add('r2', 'c1', [*first, *exchange('three', 'four two')])
    corpus = await HistorySourceBackend(source).open_corpus(
        conversation_id='c1', run_id=None, analyzer=SearchOptions().analyzer
    )
    assert corpus.document_count == 4
    assert await corpus.span('r2') == RunSpan('r2', 'c1', 2, 4)
    assert [position for position, _ in await corpus.messages('r2', 0, 10)] == [2, 3]
    assert await corpus.messages('nope', 0, 10) == []
    hits = await corpus.rank(['two'], k1=1.5, b=0.75)
    assert len(hits) == 2
    assert [(hit.run_id, hit.position) for hit in hits] == [('r1', 1), ('r2', 3)]
    assert hits[-1] == hits[1:][0]
    assert all(hit.score > 0 for hit in hits)


def test_importing_search_loads_neither_the_capabilities_nor_the_heavy_parts() -> None:
    """`import search` resolves its names lazily: it loads no capability, no pydantic-ai, no numpy.

    (It may load the event log, which the persistent index stands on: the layers point down.)"""
    import subprocess
    import sys

    code = (
        'import sys, search; '
        'print(sorted({m.split(".")[0] for m in sys.modules} & {"capability", "eventlog_cli", "pydantic_ai", "numpy"}))'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]'
