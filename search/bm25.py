"""BM25 scoring over postings, shared by every index.

The formula is the reference's, operation for operation, so scores are equal to the last bit:

    idf(t)      = ln((N - df + 0.5) / (df + 0.5) + 1)
    score(d, q) = sum over distinct query terms t in query order of
                  idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

`N` and `avgdl` are those of the documents in scope, `df` is the number of those
documents holding `t`, `tf` its count in `d` and `dl` the length of `d` in terms. Only
documents scoring above zero are returned, ordered by score, highest first; equal scores
keep ascending document id, so an index must number its documents in corpus order.

An index supplies postings: for each query term, the ids of the in-scope documents that
hold it, with the term's count and the document's length. The in-memory corpus builds
them per search; a persistent index reads them from storage. Both score with
`score_postings`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    'DEFAULT_B',
    'DEFAULT_K1',
    'TermPostings',
    'TextPostings',
    'average_length',
    'idf',
    'score_postings',
    'score_unranked',
    'unique_terms',
]

DEFAULT_K1 = 1.5
"""Term-frequency saturation (the reference's default; Lucene uses 1.2)."""

DEFAULT_B = 0.75
"""Length normalisation."""


@dataclass(frozen=True, slots=True)
class TermPostings:
    """The in-scope documents holding one term.

    The three arrays are aligned. Each document id appears at most once.
    """

    doc_ids: NDArray[np.int64]
    """Ids of the documents holding the term."""

    tfs: NDArray[np.int64]
    """How often the term occurs in each of those documents (at least 1)."""

    doc_lengths: NDArray[np.int64]
    """The length, in terms, of each of those documents."""

    @classmethod
    def from_lists(cls, doc_ids: Sequence[int], tfs: Sequence[int], doc_lengths: Sequence[int]) -> TermPostings:
        """Postings from plain lists."""
        return cls(
            np.asarray(doc_ids, dtype=np.int64),
            np.asarray(tfs, dtype=np.int64),
            np.asarray(doc_lengths, dtype=np.int64),
        )

    def __len__(self) -> int:
        """The document frequency of the term."""
        return int(self.doc_ids.shape[0])


def unique_terms(tokens: Iterable[str]) -> list[str]:
    """`tokens` without repeats, in order of first occurrence: the terms a query is scored on."""
    return list(dict.fromkeys(tokens))


def idf(n_docs: int, df: int) -> float:
    """Inverse document frequency `ln((N - df + 0.5) / (df + 0.5) + 1)`; `0.0` when no document holds the term."""
    if df == 0:
        return 0.0
    return math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)


def average_length(total_length: int, n_docs: int) -> float:
    """The average document length, `total_length / n_docs` (`0.0` for no documents)."""
    if n_docs == 0:
        return 0.0
    return total_length / n_docs


_EMPTY_IDS: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_EMPTY_SCORES: NDArray[np.float64] = np.zeros(0, dtype=np.float64)


def score_unranked(
    query_terms: Sequence[str],
    postings: Mapping[str, TermPostings],
    *,
    n_docs: int,
    avgdl: float,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Score and rank the documents holding any of `query_terms`.

    Args:
        query_terms: Distinct query terms in query order (see `unique_terms`); a term's
            contribution is added in this order, as the reference adds it.
        postings: The postings of each query term within scope; a term without postings
            contributes nothing.
        n_docs: The number of documents in scope (`N`).
        avgdl: Their average length (see `average_length`).
        k1: Term-frequency saturation, finite and non-negative.
        b: Length normalisation, between 0 and 1.

    Returns:
        The ids of the documents scoring above zero and their scores, in ascending id order
        (see `score_postings` for them ranked, or `RankedHits(..., ranked=False)` to rank lazily).
    """
    present = [(term, postings[term]) for term in query_terms if term in postings and len(postings[term]) > 0]
    if not present or avgdl == 0:
        return _EMPTY_IDS, _EMPTY_SCORES
    if len(present) == 1:
        # One term: its postings are the candidates (each document appears once), sorted by id.
        candidates: NDArray[np.int64] = np.sort(present[0][1].doc_ids)
    else:
        merged = np.sort(np.concatenate([term_postings.doc_ids for _, term_postings in present]))
        distinct = np.empty(len(merged), dtype=np.bool_)
        distinct[:1] = True
        np.not_equal(merged[1:], merged[:-1], out=distinct[1:])
        candidates = merged[distinct]
    scores: NDArray[np.float64] = np.zeros(len(candidates), dtype=np.float64)
    saturation = k1 + 1.0
    floor = 1.0 - b
    for _, term_postings in present:
        weight = idf(n_docs, len(term_postings))
        tf = term_postings.tfs.astype(np.float64)
        dl = term_postings.doc_lengths.astype(np.float64)
        numerator = tf * saturation
        denominator = tf + k1 * (floor + b * dl / avgdl)
        slots = np.searchsorted(candidates, term_postings.doc_ids)
        contribution: NDArray[np.float64] = weight * numerator / denominator
        scores[slots] = scores[slots] + contribution
    keep: NDArray[np.bool_] = scores > 0
    return candidates[keep], scores[keep]


def score_postings(
    query_terms: Sequence[str],
    postings: Mapping[str, TermPostings],
    *,
    n_docs: int,
    avgdl: float,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """`score_unranked`, ranked: best first, equal scores in ascending id order."""
    ids, scores = score_unranked(query_terms, postings, n_docs=n_docs, avgdl=avgdl, k1=k1, b=b)
    order = np.argsort(-scores, kind='stable')
    return ids[order], scores[order]


class TextPostings:
    """The postings of documents indexed in memory, document `i` being the `i`-th one added: what the
    in-memory corpora rank."""

    def __init__(self) -> None:
        """No documents yet."""
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._lengths: list[int] = []
        self._total = 0

    def add(self, counts: Mapping[str, int]) -> None:
        """Add the next document, by how often each of its terms occurs."""
        doc_id = len(self._lengths)
        for term, tf in counts.items():
            entry = self._postings.get(term)
            if entry is None:
                self._postings[term] = ([doc_id], [tf])
            else:
                entry[0].append(doc_id)
                entry[1].append(tf)
        length = sum(counts.values())
        self._lengths.append(length)
        self._total += length

    @property
    def document_count(self) -> int:
        """How many documents were added."""
        return len(self._lengths)

    def score(self, terms: Sequence[str], *, k1: float, b: float) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """`score_unranked` over these documents: the ids scoring above zero for `terms`, and their scores."""
        postings: dict[str, TermPostings] = {}
        for term in terms:
            entry = self._postings.get(term)
            if entry is not None:
                doc_ids, tfs = entry
                postings[term] = TermPostings.from_lists(doc_ids, tfs, [self._lengths[i] for i in doc_ids])
        n_docs = self.document_count
        return score_unranked(terms, postings, n_docs=n_docs, avgdl=average_length(self._total, n_docs), k1=k1, b=b)
