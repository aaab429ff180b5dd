"""Reciprocal-rank fusion (`search.semantic.fuse_rankings`): ranks, depth and ties."""

from __future__ import annotations

import numpy as np

from search.backend import RankedHits
from search.semantic import RRF_DEPTH, RRF_K, fuse_rankings


def ranking(scores: dict[int, float]) -> RankedHits:
    ids = np.array(sorted(scores), dtype=np.int64)
    return RankedHits(ids, np.array([scores[i] for i in ids], dtype=np.float64), lambda d: ('r', d), ranked=False)


def test_a_document_in_both_rankings_sums_its_reciprocal_ranks() -> None:
    fused = fuse_rankings([ranking({1: 9.0, 2: 5.0}), ranking({2: 0.9, 1: 0.1, 3: 0.5})])
    order = [hit.position for hit in fused]
    assert order == [2, 1, 3]
    assert abs(fused[0].score - pts(2, 1)) < 1e-9 and abs(fused[2].score - pts(2)) < 1e-9


def pts(*ranks: int) -> float:
    return sum(1.0 / (RRF_K + r) for r in ranks)


def test_ranks_past_the_depth_count_for_nothing() -> None:
    # the semantic ranking orders every document; the lexical one matches only document 0
    semantic = ranking({d: 1.0 - d / 1000 for d in range(200)})
    fused = fuse_rankings([ranking({199: 3.0}), semantic])
    scores = {hit.position: hit.score for hit in fused}
    assert 199 in scores and len(scores) == RRF_DEPTH + 1
    assert abs(scores[199] - 1.0 / (RRF_K + 1)) < 1e-9  # nothing from the semantic ranking (rank 200)
    assert fused[0].position == 0  # a tie with the lexical first goes to the semantic first


def test_fusion_of_nothing_is_empty() -> None:
    assert len(fuse_rankings([ranking({}), ranking({})])) == 0
