"""The vector index (`search.vector_index.VectorIndex`) on the in-memory, LMDB and PostgreSQL backends
(and PostgreSQL with projections in a local directory), and the semantic and hybrid modes over it.

Catching up step by step gives the records a rebuild gives; deleted and erased messages leave no
vector; another model is refused until a rebuild; an append commits while the model is still
embedding, and a search says how far behind the index is; the persistent index ranks as the
in-memory corpus does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from backends import postgres_dsn, schema_for
from pgserver import drop_schema
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import LmdbEventLog, ReplayHistorySource, message_entry, run_started_entry
from eventlog.errors import VectorIndexMismatch
from eventlog.log import EventLogBase
from search import SearchEngine, SearchOptions
from search.memory_index import HistorySourceBackend
from search.persistent_index import PersistentIndex as LmdbIndex
from search.vector_index import VectorIndex
from tests.search.semtools import HashingEmbeddingModel
from tests.search.test_index_conformance import QUERIES, History, make


@pytest.fixture(params=['memory', 'lmdb', 'postgres', 'postgres-local'])
async def log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLogBase]:
    instance = make(request.param, tmp_path / 'store')
    try:
        yield instance
    finally:
        instance.close()
        if request.param.startswith('postgres'):
            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store' / 'store.lmdb'))


async def answers(backend: object, log: EventLogBase, queries: list[str], options: SearchOptions) -> list[str]:
    engine = SearchEngine(backend, options)  # type: ignore[arg-type]
    conversations = [c.conversation_id for c in await log.list_conversations(include_archived=True)]
    runs = [r.run_id for r in await log.list_runs()]
    out = [await engine.search(query, scope='all', conversation_id=None) for query in queries]
    for conv in conversations:
        out.extend([await engine.search(query, scope='conversation', conversation_id=conv) for query in queries])
    for run_id in runs[:3]:
        out.append(
            await engine.search(queries[0], scope='conversation', conversation_id=conversations[0], run_id=run_id)
        )
    return out


def prompt(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


async def say(log: EventLogBase, conversation: str, run_id: str, *texts: str) -> list[int]:
    if await log.get_run(run_id) is None:
        await log.append(run_started_entry(conversation_id=conversation, run_id=run_id))
    return list(
        await log.append_many([message_entry(prompt(t), conversation_id=conversation, run_id=run_id) for t in texts])
    )


@pytest.mark.parametrize('seed', range(2))
async def test_catching_up_step_by_step_gives_what_a_rebuild_gives(log: EventLogBase, seed: int) -> None:
    history = History(log, seed)
    vectors = VectorIndex(log, Embedder(HashingEmbeddingModel()), batch_size=3)
    for step in range(30):
        await history.step()
        if step % 4 == 0:
            await vectors.catch_up()
    await vectors.catch_up()
    incremental = vectors.vector_records()
    state = vectors.state()
    assert state.position == await log.last_seq() and state.pending == 0
    assert state.vectors > 20 and state.dimension == 64 and state.model == 'test:hashing'
    assert await vectors.rebuild() == state.vectors
    assert vectors.vector_records() == incremental
    # every message the log still holds has a vector, and nothing else has
    held = {e.seq for e in await log.entries(kinds=['message'])}
    assert set(vectors.seqs_with_vectors()) == held


async def test_deleted_and_erased_messages_leave_no_vector(log: EventLogBase) -> None:
    secret = await say(log, 'secret', 's1', 'my password is hunter2', 'the vault code is 4711')
    kept = await say(log, 'kept', 'k1', 'lunch at noon')
    erased = await say(log, 'kept', 'k1', 'my card number is 4242')
    vectors = VectorIndex(log, Embedder(HashingEmbeddingModel()))
    await vectors.catch_up()
    assert set(vectors.seqs_with_vectors()) == {*secret, *kept, *erased}
    await log.delete_conversation('secret')
    await log.erase('kept', where=lambda entry: entry.seq in erased)
    await vectors.catch_up()
    assert set(vectors.seqs_with_vectors()) == set(kept)
    records = vectors.vector_records()
    assert not any(key.startswith(b'conv/secret') for key in records)
    await vectors.rebuild()
    assert vectors.vector_records() == records


async def test_another_model_is_refused_until_rebuilt(log: EventLogBase) -> None:
    await say(log, 'c', 'r', 'hello there')
    first = VectorIndex(log, Embedder(HashingEmbeddingModel(name='one')))
    await first.catch_up()
    with pytest.raises(VectorIndexMismatch, match="built with the embedding model 'test:one'"):
        VectorIndex(log, Embedder(HashingEmbeddingModel(name='two')))
    # the same name with another dimension is refused when vectors are written
    same_name = VectorIndex(log, Embedder(HashingEmbeddingModel(dimensions=32, name='one')))
    await say(log, 'c', 'r', 'more text')
    with pytest.raises(VectorIndexMismatch, match='32 dimensions'):
        await same_name.catch_up()
    assert await first.rebuild(Embedder(HashingEmbeddingModel(name='two'))) == 2
    assert first.state().model == 'test:two'
    VectorIndex(log, Embedder(HashingEmbeddingModel(name='two')))  # accepted now


async def test_an_append_commits_while_the_model_embeds(log: EventLogBase) -> None:
    await say(log, 'c', 'r', 'first message')
    model = HashingEmbeddingModel()
    model.gate = asyncio.Event()
    vectors = VectorIndex(log, Embedder(model))
    task = asyncio.create_task(vectors.catch_up())
    await model.entered.wait()  # the model is embedding the first message now, and waits
    seq = (await say(log, 'c', 'r', 'second message'))[0]
    assert (await log.entries(conversation_id='c'))[-1].seq == seq
    assert vectors.pending() >= 2
    model.gate.set()
    assert await task == 2  # the catch-up went on to embed the message appended meanwhile
    assert vectors.pending() == 0
    assert set(vectors.seqs_with_vectors()) == {seq - 1, seq}


async def test_a_search_says_how_far_behind_the_index_is(log: EventLogBase, monkeypatch: pytest.MonkeyPatch) -> None:
    import search.semantic

    monkeypatch.setattr(search.semantic, 'CATCH_UP_ON_SEARCH', 2)
    await say(log, 'c', 'r', *(f'note number {i} about apples' for i in range(10)))
    embedder = Embedder(HashingEmbeddingModel())
    VectorIndex.for_log(log, embedder).batch_size = 2  # the index the engine reads, shared per log and model
    engine = SearchEngine(LmdbIndex(log), SearchOptions(mode='semantic', embedder=embedder))
    result = await engine.find('apples', scope='conversation', conversation_id='c')
    assert result.outcome == 'found' and result.pending > 0
    assert len(result.ranked) < 10
    text = await engine.search('apples', scope='conversation', conversation_id='c')
    assert 'The semantic index is' in text and 'log entries behind' in text
    await VectorIndex.for_log(log, embedder).catch_up()
    current = await engine.find('apples', scope='conversation', conversation_id='c')
    assert current.pending == 0 and len(current.ranked) == 10
    assert 'behind' not in await engine.search('apples', scope='conversation', conversation_id='c')


@pytest.mark.parametrize('mode', ['semantic', 'hybrid'])
async def test_the_persistent_index_ranks_as_the_in_memory_corpus(log: EventLogBase, mode: str) -> None:
    history = History(log, 21)
    for _ in range(25):
        await history.step()
    embedder = Embedder(HashingEmbeddingModel())
    options = SearchOptions(context_lines=2, max_matches=8, mode=mode, embedder=embedder)  # type: ignore[arg-type]
    mine = await answers(LmdbIndex(log), log, QUERIES, options)
    reference = await answers(HistorySourceBackend(ReplayHistorySource(log)), log, QUERIES, options)
    assert mine == reference
    assert sum(answer.startswith('Found ') for answer in mine) > 5


async def test_a_constant_model_ranks_in_corpus_order(log: EventLogBase) -> None:
    seqs = await say(log, 'c', 'r', 'alpha', 'beta', 'gamma')
    options = SearchOptions(mode='semantic', embedder=Embedder(TestEmbeddingModel()), context_lines=0)
    engine = SearchEngine(LmdbIndex(log), options)
    result = await engine.find('anything at all', scope='conversation', conversation_id='c')
    assert [hit.seq for hit in result.hits] == seqs
    assert all(hit.score == pytest.approx(1.0) for hit in result.hits)


async def test_vectors_survive_a_restart(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'store', sync=False)
    await say(log, 'c', 'r', 'a persistent thought')
    model = HashingEmbeddingModel()
    await VectorIndex(log, Embedder(model)).catch_up()
    log.close()
    again = LmdbEventLog(tmp_path / 'store', sync=False)
    try:
        other = HashingEmbeddingModel()
        reopened = VectorIndex(again, Embedder(other))
        assert reopened.state().vectors == 1 and reopened.pending() == 0
        assert await reopened.catch_up() == 0 and other.calls == []
    finally:
        again.close()
