"""The per-query lexical weight of hybrid fusion (`search.semantic.lexical_weight_for`, the default of
`fuse_scores` and `SearchOptions.lexical_weight`), and hybrid against its halves on a slice of the
second realistic set: questions in a later chat about a fact stated in an earlier one (the Chit-Chat
corpus, MIT licence, `tests/search/data`, made by `bench/slice_facts.py`), with the packaged MiniLM.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage

from eventlog import InMemoryEventLog, InvalidArgumentError, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.backend import RankedHits
from search.local_model import minilm_embedder
from search.persistent_index import PersistentIndex
from search.semantic import (
    HYBRID_LEXICAL_WEIGHT,
    HYBRID_PEAK_RAMP,
    HYBRID_PEAKED_LEXICAL_WEIGHT,
    fuse_scores,
    lexical_weight_for,
)
from search.vector_index import VectorIndex
from tests.search.searchtools import reply, user

SLICE = Path(__file__).parent / 'data' / 'chitchat_facts_dev_slice.json'


def ranking(scores: dict[int, float]) -> RankedHits:
    ids = np.array(sorted(scores), dtype=np.int64)
    return RankedHits(ids, np.array([scores[i] for i in ids], dtype=np.float64), lambda d: ('r', d), ranked=False)


def order(hits: RankedHits) -> list[int]:
    return [hit.position for hit in hits]


SEMANTIC = ranking({d: 0.9 - d * 0.004 for d in range(200)})
"""200 documents, document 0 the closest in meaning, evenly spread."""


def test_the_weight_rises_from_the_base_to_the_peaked_weight_across_the_ramp() -> None:
    low, high = HYBRID_PEAK_RAMP
    assert lexical_weight_for(0.0) == lexical_weight_for(low) == HYBRID_LEXICAL_WEIGHT
    assert lexical_weight_for(high) == lexical_weight_for(10 * high) == HYBRID_PEAKED_LEXICAL_WEIGHT
    middle = lexical_weight_for((low + high) / 2)
    assert middle == pytest.approx((HYBRID_LEXICAL_WEIGHT + HYBRID_PEAKED_LEXICAL_WEIGHT) / 2)
    steps = [lexical_weight_for(low + (high - low) * i / 10) for i in range(11)]
    assert steps == sorted(steps) and len(set(steps)) == 11
    assert lexical_weight_for(math.nan) == HYBRID_LEXICAL_WEIGHT
    assert lexical_weight_for(-math.inf) == HYBRID_LEXICAL_WEIGHT


def test_a_word_one_message_alone_holds_gets_the_peaked_weight_and_decides() -> None:
    # one match among 200: it stands about sqrt(199) = 14 deviations above BM25's mean
    only = ranking({150: 6.0})
    best = (6.0 - 6.0 / 200) / math.sqrt(36.0 / 200 - (6.0 / 200) ** 2)
    weight = lexical_weight_for(best)
    assert HYBRID_LEXICAL_WEIGHT < weight < HYBRID_PEAKED_LEXICAL_WEIGHT
    assert order(fuse_scores(only, SEMANTIC)) == order(fuse_scores(only, SEMANTIC, lexical_weight=weight))
    # document 150 is 151st by meaning: the per-query weight puts it first, the former fixed 0.15 does not
    assert order(fuse_scores(only, SEMANTIC))[:2] == [150, 0]
    assert 150 not in order(fuse_scores(only, SEMANTIC, lexical_weight=HYBRID_LEXICAL_WEIGHT))[:5]


def test_a_word_two_messages_share_keeps_the_base_weight() -> None:
    # two equal matches stand about 10 deviations above the mean: the ramp has not begun
    shared = ranking({150: 6.0, 120: 6.0})
    assert order(fuse_scores(shared, SEMANTIC)) == order(
        fuse_scores(shared, SEMANTIC, lexical_weight=HYBRID_LEXICAL_WEIGHT)
    )
    assert order(fuse_scores(shared, SEMANTIC))[:3] == [0, 1, 2]


def test_a_fixed_weight_is_checked_and_passed_through_the_options() -> None:
    with pytest.raises(ValueError, match='lexical_weight'):
        SearchOptions(mode='bm25', lexical_weight=1.5)
    with pytest.raises(ValueError, match='lexical_weight'):
        SearchOptions(lexical_weight=True)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidArgumentError, match='lexical_weight'):
        fuse_scores(ranking({1: 1.0}), SEMANTIC, lexical_weight=-0.1)
    assert SearchOptions(lexical_weight=0.15).lexical_weight == 0.15
    assert SearchOptions().lexical_weight is None


@pytest.fixture(scope='module')
def minilm() -> Embedder:
    return minilm_embedder()


async def stored_slice(embedder: Embedder) -> tuple[InMemoryEventLog, list[dict[str, object]]]:
    data = json.loads(SLICE.read_text())
    log = InMemoryEventLog()
    questions: list[dict[str, object]] = []
    for conversation in data['conversations']:
        cid = conversation['conversation_id']
        for run_id, turns in conversation['runs']:
            await log.append(run_started_entry(conversation_id=cid, run_id=run_id))
            messages: list[ModelMessage] = [user(text) if role == 'user' else reply(text) for role, text in turns]
            await log.append_many([message_entry(m, conversation_id=cid, run_id=run_id) for m in messages])
        questions += [dict(q, conversation_id=cid) for q in conversation['questions']]
    await VectorIndex.for_log(log, embedder).catch_up()
    return log, questions


async def test_hybrid_recalls_at_least_the_better_of_its_halves_on_fact_questions(minilm: Embedder) -> None:
    log, questions = await stored_slice(minilm)
    assert len(questions) >= 16
    modes = {
        'bm25': SearchOptions(context_lines=0),
        'semantic': SearchOptions(context_lines=0, mode='semantic', embedder=minilm),
        'hybrid': SearchOptions(context_lines=0, mode='hybrid', embedder=minilm),
        'hybrid 0.15': SearchOptions(context_lines=0, mode='hybrid', embedder=minilm, lexical_weight=0.15),
    }
    recall: dict[str, int] = {}
    for label, options in modes.items():
        engine = SearchEngine(PersistentIndex.for_log(log), options)
        recall[label] = 0
        for question in questions:
            result = await engine.find(
                str(question['text']), scope='conversation', conversation_id=str(question['conversation_id'])
            )
            asked, evidence = tuple(question['asked']), tuple(question['evidence'])  # pyright: ignore[reportArgumentType]
            top = [(hit.run_id, hit.position) for hit in result.ranked if (hit.run_id, hit.position) != asked][:5]
            recall[label] += evidence in top
    assert recall['hybrid'] >= max(recall['bm25'], recall['semantic']), recall
