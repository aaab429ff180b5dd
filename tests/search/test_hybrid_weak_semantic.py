"""Hybrid fusion's default weight (`search.semantic.HYBRID_LEXICAL_WEIGHT`, BM25 the larger half): a
weak semantic half (an embedding model that knows nothing about the question) cannot push BM25's clear
matches out of the top five, while a BM25 ranking that tells nothing apart still leaves meaning to
decide. On real conversations (LoCoMo, docs/semantic.md) the semantic half is that weak often enough
that the previous, semantic-led default recalled less than BM25 alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.embeddings.settings import EmbeddingSettings
from pydantic_ai.messages import ModelMessage

from eventlog import InMemoryEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.persistent_index import PersistentIndex
from search.semantic import HYBRID_LEXICAL_WEIGHT, fuse_scores
from tests.search.searchtools import reply, user
from tests.search.slicetools import SEMANTIC, order, ranking

DOCUMENTS = 200
RUN = 20


def noise(seed: int) -> dict[int, float]:
    """Cosine similarities of a model that knows nothing about the query: small random differences."""
    rng = np.random.default_rng(seed)
    return {d: float(rng.normal(0.3, 0.02)) for d in range(DOCUMENTS)}


def test_a_weak_semantic_half_cannot_push_bm25s_clear_matches_out_of_the_top_five() -> None:
    # BM25 matches five of 200 documents, none far ahead of the next (no single rare word)
    matches = {17: 5.0, 83: 4.6, 121: 4.2, 150: 3.9, 190: 3.5}
    for seed in range(40):
        fused = order(fuse_scores(ranking(matches), ranking(noise(seed))))
        assert set(fused[:5]) == set(matches), seed


def test_a_flat_bm25_ranking_leaves_meaning_to_decide_at_the_default_weight() -> None:
    # a word every message holds once tells nothing apart: the semantic order is kept whole
    flat = ranking(dict.fromkeys(range(DOCUMENTS), 1.3))
    assert order(fuse_scores(flat, SEMANTIC)) == order(SEMANTIC)
    # BM25 leads: a document it ranks above another stays above unless meaning puts the other
    # more than w / (1 - w) of BM25's deviations ahead
    assert HYBRID_LEXICAL_WEIGHT > 0.5
    assert order(fuse_scores(ranking({20: 9.0, 120: 6.0, 10: 1.0}), SEMANTIC))[:2] == [20, 120]


class KnowsNothing(EmbeddingModel):
    """An embedding model whose vectors come from a hash of the whole text: unrelated to meaning."""

    @property
    def model_name(self) -> str:
        return 'knows-nothing'

    @property
    def system(self) -> str:
        return 'test'

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        rows: list[list[float]] = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), 'little')
            rows.append(np.random.default_rng(seed).normal(size=32).tolist())
        return EmbeddingResult(
            embeddings=rows, inputs=texts, input_type=input_type, model_name='knows-nothing', provider_name='test'
        )


FILLER = [
    'how was your weekend, anything fun going on',
    'I went for a walk and cooked dinner with friends',
    'work has been busy but the team is great',
    'we watched a movie and ordered some food',
    'the weather was nice so we sat outside for a while',
    'I have been reading a lot lately, mostly novels',
]

FACTS = [
    ('My sister moved to Lisbon for her new architecture job.', 'where did my sister move for the job'),
    ('The garage door code is 4417, do not share it.', 'what is the garage door code'),
    ('Our dog Biscuit is scared of thunderstorms and fireworks.', 'what is our dog scared of'),
    ('I signed up for the Porto half marathon in October.', 'which half marathon did I sign up for'),
    ('The landlord raised the rent on the flat to 1450.', 'how much is the rent on the flat'),
]


async def test_hybrid_finds_what_bm25_finds_when_the_embedding_model_knows_nothing() -> None:
    log = InMemoryEventLog()
    messages: list[ModelMessage] = []
    where: dict[str, tuple[str, int]] = {}
    for i in range(120):
        messages += [user(FILLER[i % len(FILLER)] + f' {i}'), reply(FILLER[(i + 3) % len(FILLER)])]
        if i % 24 == 5:
            statement, _ = FACTS[i // 24]
            where[statement] = (f'run{len(messages) // RUN}', len(messages) % RUN)
            messages += [user(statement), reply('Noted, I will keep that in mind.')]
    for start in range(0, len(messages), RUN):
        run_id = f'run{start // RUN}'
        await log.append(run_started_entry(conversation_id='c', run_id=run_id))
        await log.append_many(
            [message_entry(m, conversation_id='c', run_id=run_id) for m in messages[start : start + RUN]]
        )
    embedder = Embedder(KnowsNothing())
    index = PersistentIndex.for_log(log)
    bm25 = SearchEngine(index, SearchOptions(context_lines=0))
    hybrid = SearchEngine(index, SearchOptions(context_lines=0, mode='hybrid', embedder=embedder))
    for statement, question in FACTS:
        found: dict[str, list[tuple[str, int]]] = {}
        for label, engine in (('bm25', bm25), ('hybrid', hybrid)):
            result = await engine.find(question, scope='conversation', conversation_id='c', entry_numbers=False)
            found[label] = [(hit.run_id, hit.position) for hit in result.ranked[:5]]
        assert where[statement] in found['bm25'], question
        assert where[statement] in found['hybrid'], question
