"""Scope rules, `run_id` confinement and fail-closed answers are the same in every search mode.

Property tests (hypothesis) over seeded stores of several conversations, for `'bm25'`,
`'semantic'` and `'hybrid'`: a conversation search answers exactly as a store holding only that
conversation would, never names another conversation, its runs or its words; a run of another
conversation gets the unknown-run answer; a run id confines hits to that run; the searching run's
own messages are never results; a run without a conversation id searches nothing. Semantic ranks
every in-scope message with a vector, and only those.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel
from pydantic_ai.messages import ModelMessage

from eventlog import InMemoryEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchMode, SearchOptions
from search.persistent_index import PersistentIndex as LmdbIndex
from tests.search.searchtools import ListSource, reply, user
from tests.search.semtools import HashingEmbeddingModel

MODES: list[SearchMode] = ['bm25', 'semantic', 'hybrid']
conversation_ids = ['conv-a', 'conv-b', 'conv-c']
QUERIES = ['shared', 'secreta secretb secretc', 'shared number 3', 'answer secretb', 'secretc']


def engine(source: object, mode: SearchMode, embedder: Embedder | None = None, **options: object) -> SearchEngine:
    embedder = embedder or (Embedder(HashingEmbeddingModel()) if mode != 'bm25' else None)
    options.setdefault('answer_style', 'explained')
    return SearchEngine(source, SearchOptions(mode=mode, embedder=embedder, **options))  # type: ignore[arg-type]


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


@settings(max_examples=40, deadline=None)
@given(
    source=planted_stores(),
    caller=st.sampled_from(conversation_ids),
    query=st.sampled_from(QUERIES),
    with_foreign_run=st.booleans(),
    mode=st.sampled_from(MODES),
)
def test_a_conversation_search_never_shows_another_conversation_in_any_mode(
    source: ListSource, caller: str, query: str, with_foreign_run: bool, mode: SearchMode
) -> None:
    foreign_runs = [run.run_id for run in source.runs if run.conversation_id != caller]
    run_id = foreign_runs[0] if with_foreign_run and foreign_runs else None

    async def check() -> None:
        search = engine(source, mode, max_matches=50)
        answer = await search.search(query, scope='conversation', conversation_id=caller, run_id=run_id)
        alone = await engine(only(source, caller), mode, max_matches=50).search(
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


@st.composite
def logged_histories(draw: st.DrawFn) -> list[tuple[str, str, list[str]]]:
    """Runs `(conversation, run id, texts)`, each message naming its conversation's secret word."""
    runs: list[tuple[str, str, list[str]]] = []
    for index in range(draw(st.integers(1, 7))):
        conversation = draw(st.sampled_from(conversation_ids))
        texts = [
            f'shared secret{conversation[-1]} {draw(st.sampled_from(["apple", "pear", "deploy", "budget"]))} {index}'
            for _ in range(draw(st.integers(1, 4)))
        ]
        runs.append((conversation, f'run{index}', texts))
    return runs


async def stored(runs: list[tuple[str, str, list[str]]]) -> InMemoryEventLog:
    log = InMemoryEventLog()
    tips: dict[str, int] = {}
    for conversation, run_id, texts in runs:
        tip = await log.append(
            run_started_entry(conversation_id=conversation, run_id=run_id, parent=tips.get(conversation))
        )
        for text in texts:
            tip = await log.append(message_entry(user(text), conversation_id=conversation, run_id=run_id))
        tips[conversation] = tip
    return log


@settings(max_examples=30, deadline=None)
@given(
    runs=logged_histories(),
    caller=st.sampled_from(conversation_ids),
    query=st.sampled_from(['shared apple', 'budget deploy', 'secretb', 'pear 3']),
    pick=st.integers(0, 10),
    searching=st.booleans(),
)
def test_scope_run_confinement_and_own_run_exclusion_hold_in_every_mode_on_the_index(
    runs: list[tuple[str, str, list[str]]], caller: str, query: str, pick: int, searching: bool
) -> None:
    async def check() -> None:
        log = await stored(runs)
        index = LmdbIndex(log)
        run_ids = [run_id for _, run_id, _ in runs]
        chosen = run_ids[pick % len(run_ids)]
        searching_run = run_ids[(pick + 1) % len(run_ids)] if searching else None
        owner = {run_id: conversation for conversation, run_id, _ in runs}
        documents: set[int] = set()
        for mode in MODES:
            search = engine(index, mode, max_matches=100, context_lines=0)
            found = await search.find(
                query, scope='conversation', conversation_id=caller, searching_run_id=searching_run
            )
            documents.add(found.documents)
            for hit in found.ranked:
                assert owner[hit.run_id] == caller
                assert hit.run_id != searching_run
            confined = await search.find(query, scope='conversation', conversation_id=caller, run_id=chosen)
            if owner[chosen] != caller:
                assert confined.outcome == 'unknown_run'
            else:
                assert {hit.run_id for hit in confined.ranked} <= {chosen}
            every = await search.find(query, scope='all', conversation_id=None, searching_run_id=searching_run)
            assert all(hit.run_id != searching_run for hit in every.ranked)
            if mode == 'semantic':
                in_scope = sum(
                    len(texts)
                    for conversation, run_id, texts in runs
                    if conversation == caller and run_id != searching_run
                )
                assert len(found.ranked) == in_scope  # every in-scope message has a vector
            nobody = await search.find(query, scope='conversation', conversation_id=None)
            assert nobody.outcome == 'no_conversation' and not nobody.ranked
        assert len(documents) == 1  # the corpus is the same whatever the ranking

    asyncio.run(check())


async def test_a_run_without_conversation_id_fails_closed_with_the_same_answer_in_every_mode() -> None:
    source = ListSource()
    source.add('r1', 'c', [user('hello secret'), reply('ok')])
    texts = {
        mode: await engine(source, mode).search('secret', scope='conversation', conversation_id=None) for mode in MODES
    }
    assert len(set(texts.values())) == 1 and 'secret' not in texts['bm25'].replace("'secret'", '')


class FailingModel(HashingEmbeddingModel):
    async def embed(self, inputs, *, input_type, settings=None):  # type: ignore[override]
        raise ConnectionError('embedding service down: https://internal.example/key=abc')


@pytest.mark.parametrize('mode', ['semantic', 'hybrid'])
async def test_a_failing_embedding_model_gives_an_answer_not_an_exception(mode: SearchMode) -> None:
    log = await stored([('c', 'r', ['something stored'])])
    search = engine(LmdbIndex(log), mode, embedder=Embedder(FailingModel()))
    answer = await search.search('something', scope='conversation', conversation_id='c')
    assert answer.startswith('The search could not be completed') and 'ConnectionError' in answer
    assert 'internal.example' not in answer


def test_semantic_and_hybrid_need_an_embedder() -> None:
    for mode in ('semantic', 'hybrid'):
        with pytest.raises(ValueError, match='needs embedder='):
            SearchOptions(mode=mode)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode must be 'bm25', 'semantic' or 'hybrid'"):
        SearchOptions(mode='vector')  # type: ignore[arg-type]
    assert SearchOptions().mode == 'bm25'
    SearchOptions(mode='hybrid', embedder=Embedder(TestEmbeddingModel()))
