"""BM25 scoring: the formula, the ordering, and agreement with a plain Python scorer."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from search.bm25 import TermPostings, average_length, idf, score_postings, unique_terms


def plain_bm25(query: list[str], documents: list[list[str]], k1: float, b: float) -> list[tuple[int, float]]:
    """A straightforward scorer written from the formula, for comparison."""
    terms = list(dict.fromkeys(query))
    counts = [Counter(document) for document in documents]
    lengths = [len(document) for document in documents]
    n = len(documents)
    avgdl = sum(lengths) / n if n else 0.0
    ranked: list[tuple[int, float]] = []
    for doc, (count, dl) in enumerate(zip(counts, lengths, strict=True)):
        if dl == 0 or avgdl == 0:
            continue
        score = 0.0
        for term in terms:
            tf = count[term]
            if tf == 0:
                continue
            df = sum(1 for other in counts if term in other)
            weight = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
            score += weight * (tf * (k1 + 1.0)) / (tf + k1 * (1.0 - b + b * dl / avgdl))
        if score > 0:
            ranked.append((doc, score))
    ranked.sort(key=lambda item: item[1], reverse=True)
    return ranked


def postings_of(documents: list[list[str]], terms: list[str]) -> dict[str, TermPostings]:
    out: dict[str, TermPostings] = {}
    for term in terms:
        ids = [doc for doc, document in enumerate(documents) if term in document]
        out[term] = TermPostings.from_lists(
            ids, [documents[doc].count(term) for doc in ids], [len(documents[doc]) for doc in ids]
        )
    return out


def scored(query: list[str], documents: list[list[str]], k1: float, b: float) -> list[tuple[int, float]]:
    terms = unique_terms(query)
    n = len(documents)
    ids, scores = score_postings(
        terms,
        postings_of(documents, terms),
        n_docs=n,
        avgdl=average_length(sum(len(document) for document in documents), n),
        k1=k1,
        b=b,
    )
    return [(int(doc), float(score)) for doc, score in zip(ids, scores, strict=True)]


def test_idf_formula() -> None:
    assert idf(10, 0) == 0.0
    assert idf(10, 1) == math.log((10 - 1 + 0.5) / (1 + 0.5) + 1.0)
    assert idf(1, 1) == math.log(0.5 / 1.5 + 1.0)
    assert idf(5, 5) > 0


def test_average_length() -> None:
    assert average_length(0, 0) == 0.0
    assert average_length(7, 2) == 3.5


def test_unique_terms_keeps_first_occurrence_order() -> None:
    assert unique_terms(['b', 'a', 'b', 'c', 'a']) == ['b', 'a', 'c']


def test_rare_terms_weigh_more_and_ties_keep_document_order() -> None:
    documents = [['common', 'x'], ['common', 'rare'], ['common', 'x'], ['y'], ['common', 'x']]
    ranked = scored(['common', 'rare'], documents, 1.5, 0.75)
    assert ranked[0][0] == 1
    assert [doc for doc, _ in ranked[1:]] == [0, 2, 4]
    assert ranked[1][1] == ranked[2][1] == ranked[3][1]


def test_no_postings_means_no_results() -> None:
    ids, scores = score_postings(['nothing'], {}, n_docs=3, avgdl=2.0)
    assert ids.shape == (0,) and scores.shape == (0,)
    ids, scores = score_postings([], {}, n_docs=0, avgdl=0.0)
    assert ids.shape == (0,)


def test_postings_of_terms_not_in_the_query_are_ignored() -> None:
    postings = {'a': TermPostings.from_lists([0], [1], [2]), 'b': TermPostings.from_lists([1], [1], [2])}
    ids, _ = score_postings(['a'], postings, n_docs=2, avgdl=2.0)
    assert ids.tolist() == [0]


def test_sparse_large_document_ids() -> None:
    postings = {'a': TermPostings.from_lists([5, 10_000_000_000], [1, 3], [4, 4])}
    ids, scores = score_postings(['a'], postings, n_docs=20, avgdl=4.0)
    assert ids.tolist() == [10_000_000_000, 5]
    assert scores[0] > scores[1] > 0
    assert ids.dtype == np.int64


@settings(max_examples=100, deadline=None)
@given(
    documents=st.lists(st.lists(st.sampled_from('abcdefg'), max_size=12), max_size=25),
    query=st.lists(st.sampled_from('abcdefgz'), min_size=1, max_size=6),
    k1=st.sampled_from([0.0, 0.5, 1.2, 1.5, 2.0, 10.0]),
    b=st.sampled_from([0.0, 0.25, 0.75, 1.0]),
)
def test_scores_equal_a_plain_scorer_exactly(documents: list[list[str]], query: list[str], k1: float, b: float) -> None:
    assert scored(query, documents, k1, b) == plain_bm25(query, documents, k1, b)


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.5, 7.25]), min_size=1, max_size=400),
    reads=st.lists(st.integers(min_value=0, max_value=399), max_size=20),
)
def test_lazy_ranking_equals_a_full_stable_sort(scores: list[float], reads: list[int]) -> None:
    from search.backend import RankedHits

    ids = np.arange(len(scores), dtype=np.int64) * 3
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind='stable')
    expected = [(int(ids[i]), float(values[i])) for i in order]
    lazy = RankedHits(ids, values, lambda doc: (f'run{doc}', doc), ranked=False)
    assert len(lazy) == len(scores)
    for index in [*reads, *range(len(scores))]:
        if index < len(scores):
            hit = lazy[index]
            assert (hit.position, hit.score) == expected[index]
