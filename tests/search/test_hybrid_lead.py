"""The lead of hybrid fusion (`search.semantic.lexical_lead`, part of `fuse_scores`' default and of
`SearchOptions(lexical_weight=None)`): BM25's first matches gain `HYBRID_LEAD_BONUS / rank` when its
first stands `HYBRID_LEAD_GAP` deviations above its second. Then hybrid against its halves on a slice
of the second realistic set: questions in a later chat about a fact stated in an earlier one (the
Chit-Chat corpus, MIT licence, `tests/search/data`, made by `bench/slice_facts.py`), with the packaged
MiniLM.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic_ai.embeddings import Embedder

from eventlog import InvalidArgumentError
from search import SearchOptions
from search.local_model import minilm_embedder
from search.semantic import (
    HYBRID_LEAD_BONUS,
    HYBRID_LEAD_DEPTH,
    HYBRID_LEAD_GAP,
    HYBRID_LEXICAL_WEIGHT,
    fuse_scores,
    lexical_lead,
)
from tests.search.slicetools import SEMANTIC, order, ranking, recall_by_mode, stored_slice

SLICE = Path(__file__).parent / 'data' / 'chitchat_facts_dev_slice.json'


def lead(z: list[float], documents: int, ids: list[int] | None = None) -> list[float]:
    doc_ids = np.array(ids if ids is not None else range(len(z)), dtype=np.int64)
    return lexical_lead(doc_ids, np.array(z, dtype=np.float64), documents).tolist()


def test_the_lead_goes_by_rank_to_the_first_matches_once_the_gap_is_met() -> None:
    # the first stands exactly the gap above the second: its first DEPTH matches lead by 1/rank
    z = [2.0, 3.0, HYBRID_LEAD_GAP + 3.0, 1.0, 0.5, 0.25, 0.1, -0.2]
    expected = [HYBRID_LEAD_BONUS / r for r in range(1, HYBRID_LEAD_DEPTH + 1)]
    got = lead(z, documents=len(z))
    ranked = sorted(range(len(z)), key=lambda i: -z[i])
    assert [got[i] for i in ranked[:HYBRID_LEAD_DEPTH]] == pytest.approx(expected)
    assert all(got[i] == 0.0 for i in ranked[HYBRID_LEAD_DEPTH:])
    # a hair under the gap: no lead at all
    z[2] = HYBRID_LEAD_GAP + 3.0 - 1e-9
    assert lead(z, documents=len(z)) == [0.0] * len(z)


def test_one_match_is_measured_against_the_documents_bm25_does_not_match() -> None:
    # the only match: its second is an unmatched document (z 0), so the gap is its own z
    assert lead([HYBRID_LEAD_GAP], documents=200) == [HYBRID_LEAD_BONUS]
    assert lead([HYBRID_LEAD_GAP - 0.5], documents=200) == [0.0]
    # when every match sits below the unmatched documents' 0, the gap is still taken from 0
    assert lead([HYBRID_LEAD_GAP + 1.0, -3.0], documents=200) == [HYBRID_LEAD_BONUS, HYBRID_LEAD_BONUS / 2]
    # a corpus that BM25 matches entirely, with one document: no second to compare, the gap is met
    assert lead([0.0], documents=1) == [HYBRID_LEAD_BONUS]
    assert lead([], documents=10) == []


def test_equal_scores_lead_in_document_order() -> None:
    z = [HYBRID_LEAD_GAP + 1.0] + [0.5] * 8
    ids = [40, 90, 80, 70, 60, 50, 30, 20, 10]
    got = lead(z, documents=300, ids=ids)
    assert got[0] == HYBRID_LEAD_BONUS
    by_doc = {doc: value for doc, value in zip(ids, got, strict=True)}
    assert [by_doc[d] for d in (10, 20, 30, 50)] == pytest.approx([HYBRID_LEAD_BONUS / r for r in (2, 3, 4, 5)])
    assert all(by_doc[d] == 0.0 for d in (60, 70, 80, 90))


def reference_lead(doc_ids: list[int], z: list[float], documents: int) -> list[float]:
    """The rule as written, over a full sort."""
    order = sorted(range(len(z)), key=lambda i: (-z[i], doc_ids[i]))
    out = [0.0] * len(z)
    if not z:
        return out
    second = z[order[1]] if len(z) > 1 else -math.inf
    if documents > len(z):
        second = max(second, 0.0)
    if z[order[0]] - second >= HYBRID_LEAD_GAP:
        for rank, i in enumerate(order[:HYBRID_LEAD_DEPTH], start=1):
            out[i] = HYBRID_LEAD_BONUS / rank
    return out


def test_the_lead_matches_a_full_sort_with_many_ties() -> None:
    rng = np.random.default_rng(30)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        z = rng.choice([-1.0, 0.5, 2.0, 2.0, 3.0, 12.0, 20.0], size=n).tolist()
        ids = rng.permutation(1000)[:n].tolist()
        documents = n + int(rng.integers(0, 3))
        assert lead(z, documents, ids) == pytest.approx(reference_lead(ids, z, documents))


def test_a_word_one_message_alone_holds_leads_where_a_fixed_weight_does_not_lift_it() -> None:
    # one match among 200: about sqrt(199) = 14 deviations above BM25's mean, the gap is met
    only = ranking({199: 6.0})
    best = (6.0 - 6.0 / 200) / math.sqrt(36.0 / 200 - (6.0 / 200) ** 2)
    assert best >= HYBRID_LEAD_GAP
    # document 199 is the last by meaning: the lead puts it first; the same weight without it, and
    # the fusion before the lead (fixed 0.15), leave it behind the semantic first
    assert order(fuse_scores(only, SEMANTIC))[:2] == [199, 0]
    assert order(fuse_scores(only, SEMANTIC, lexical_weight=HYBRID_LEXICAL_WEIGHT))[0] == 0
    assert order(fuse_scores(only, SEMANTIC, lexical_weight=0.15))[0] == 0


def test_a_word_many_messages_share_gets_no_lead() -> None:
    # two equal matches: no gap between BM25's first and second, so the default is the weight alone
    shared = ranking({150: 6.0, 120: 6.0})
    assert order(fuse_scores(shared, SEMANTIC)) == order(
        fuse_scores(shared, SEMANTIC, lexical_weight=HYBRID_LEXICAL_WEIGHT)
    )
    fused = order(fuse_scores(shared, SEMANTIC))
    assert fused.index(150) > fused.index(0)  # 151st by meaning: the weight alone does not lift it first


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


async def test_hybrid_recalls_at_least_the_better_of_its_halves_on_fact_questions(minilm: Embedder) -> None:
    log, questions = await stored_slice(SLICE, minilm)
    assert len(questions) >= 16
    modes = {
        'bm25': SearchOptions(context_lines=0),
        'semantic': SearchOptions(context_lines=0, mode='semantic', embedder=minilm),
        'hybrid': SearchOptions(context_lines=0, mode='hybrid', embedder=minilm),
        'hybrid 0.15': SearchOptions(context_lines=0, mode='hybrid', embedder=minilm, lexical_weight=0.15),
        'hybrid rrf': SearchOptions(context_lines=0, mode='hybrid', embedder=minilm, fusion='rrf'),
    }
    recall = await recall_by_mode(log, questions, modes)
    assert recall['hybrid'] >= max(recall['bm25'], recall['semantic']), recall
