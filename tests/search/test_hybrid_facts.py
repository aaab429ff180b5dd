"""Hybrid fusion's weight passed through the options, and hybrid against its halves on a slice of the
second realistic set: questions in a later chat about a fact stated in an earlier one (the Chit-Chat
corpus, MIT licence, `tests/search/data`, made by `bench/slice_facts.py`), with the packaged MiniLM.
(The lead this file once tested, a bonus for BM25's first matches, was dropped with the move of the
default weight to 0.6: on LoCoMo it changed no question's recall at any weight from 0.3 up.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.embeddings import Embedder

from eventlog import InvalidArgumentError
from search import SearchOptions
from search.local_model import minilm_embedder
from search.semantic import fuse_scores
from tests.search.slicetools import SEMANTIC, ranking, recall_by_mode, stored_slice

SLICE = Path(__file__).parent / 'data' / 'chitchat_facts_dev_slice.json'


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
