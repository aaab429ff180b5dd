"""Semantic and hybrid ranking: the search modes beside BM25.

- `'bm25'` (the default): lexical ranking, unchanged.
- `'semantic'`: every document of the corpus that has an embedding, ranked by the cosine
  similarity of its embedding to the query's (exact: one matrix-vector product with numpy).
- `'hybrid'`: both rankings fused (`HybridFusion`). By default (`'zscore'`) each ranking's scores
  are standardised over the documents searched (`(score - mean) / std`; a message BM25 does not
  match scores 0), so a ranking counts as much as its best documents stand out from the rest for
  this query: a rare word that only a few messages contain lifts them far above BM25's mean, while
  a query whose words are everywhere (or nowhere) leaves BM25 flat and the semantic ranking
  decides. The fused score is `w * z_bm25 + (1 - w) * z_semantic` with `w` =
  `HYBRID_LEXICAL_WEIGHT` (0.6): BM25 has the larger say, so where it tells messages apart a weak
  semantic half cannot overturn it (a message needs `w / (1 - w)` = 1.5 deviations of meaning to
  make up one of BM25), and where BM25 is flat meaning still orders the messages.
  `SearchOptions.lexical_weight` sets another `w`. `'rrf'` is reciprocal-rank fusion
  (`fuse_rankings`). Equal fused scores go to the semantically closer document.

Analyzers: `'bm25'` and the lexical half of `'hybrid'` tokenize with `SearchOptions.analyzer`
(`'default'` unless set; `'english'` stems with PyStemmer). `'semantic'` uses none: the embedder
reads the raw text. On real English conversations (LoCoMo, docs/semantic.md) the english analyzer
recalls more in both BM25 and hybrid; it is language-specific and a store's index is built with one
analyzer, so it is chosen per store, never by default.

Both rank the same corpus the BM25 search opens, so scope rules, `run_id` confinement and the
exclusion of the searching run apply identically in every mode. Embeddings come from the log's
`VectorIndex` when the search reads an event log (looked up by the `seq` of each message), and
otherwise from embedding the corpus's texts, remembered per engine.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal

import numpy as np
from numpy.typing import NDArray

from eventlog.errors import InvalidArgumentError
from search.backend import CorpusDocuments, Hit, ListedCorpus, RankedHits

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

    from search.backend import Corpus
    from search.vector_index import VectorIndex

__all__ = [
    'HYBRID_FUSIONS',
    'HYBRID_LEXICAL_WEIGHT',
    'RRF_DEPTH',
    'RRF_K',
    'SEARCH_MODES',
    'HybridFusion',
    'SearchMode',
    'TextVectors',
    'fuse_rankings',
    'fuse_scores',
    'semantic_ranking',
]

SearchMode = Literal['bm25', 'semantic', 'hybrid']
"""How a search ranks: `'bm25'` (lexical, the default), `'semantic'` (embeddings) or `'hybrid'` (both, fused)."""

SEARCH_MODES: Final[tuple[SearchMode, ...]] = ('bm25', 'semantic', 'hybrid')
"""Every search mode."""

HybridFusion = Literal['zscore', 'rrf']
"""How `'hybrid'` fuses its two rankings: standardised scores, weighted (`'zscore'`, the default,
`fuse_scores`) or reciprocal ranks (`'rrf'`, the former default, `fuse_rankings`)."""

HYBRID_FUSIONS: Final[tuple[HybridFusion, ...]] = ('zscore', 'rrf')
"""Every hybrid fusion."""

HYBRID_LEXICAL_WEIGHT: Final = 0.6
"""The weight of BM25's standardised scores in `'zscore'` fusion (the semantic ranking's weight is 1
minus it).

Chosen on LoCoMo's development half (five real multi-session conversations, 841 questions;
`bench/tune_locomo.py`), leaving one conversation out: 0.6 was chosen in every fold with the default
analyzer, and 0.5 to 0.7 with the english one (MiniLM); from 0.4 to 0.95 hybrid recalled at least as
much as BM25 alone with either analyzer, and at 0.6 so did it with e5 (`search.local_model`), where the
previous 0.175 (tuned on generated and Chit-Chat sets) recalled less than BM25 (docs/semantic.md)."""

RRF_K: Final = 60
"""The `k` of reciprocal-rank fusion: a document ranked `r` scores `1 / (RRF_K + r)` per ranking."""

RRF_DEPTH: Final = 50
"""How far down each ranking fusion reads: a document beyond a ranking's first `RRF_DEPTH` gets nothing
from it. Semantic ranking orders every message, so without a depth any message matching one query word
would beat the best semantic match that matches none."""

CATCH_UP_ON_SEARCH: Final = 512
"""Messages a semantic search embeds itself, at most, when the vector index is behind; the rest
is reported as pending (`SearchResult.pending`) and embedded by later searches or `catch_up`."""

_TEXT_BATCH: Final = 64


class TextVectors:
    """Embeddings of texts, remembered (least recently used first out), for corpora without a vector index."""

    def __init__(self, embedder: Embedder, size: int = 50_000) -> None:
        """Embed with `embedder`, remembering up to `size` texts."""
        self.embedder = embedder
        self._size = size
        self._items: OrderedDict[str, NDArray[np.float32]] = OrderedDict()

    async def matrix(self, texts: Sequence[str]) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
        """The unit embedding of each text (a zero row for blank text), and which texts have one."""
        from search.vector_index import unit_rows

        missing = list(dict.fromkeys(text for text in texts if text.strip() and text not in self._items))
        for start in range(0, len(missing), _TEXT_BATCH):
            chunk = missing[start : start + _TEXT_BATCH]
            result = await self.embedder.embed_documents(chunk)
            for text, vector in zip(chunk, unit_rows(result.embeddings, len(chunk)), strict=True):
                self._items[text] = vector
        present = np.fromiter((bool(text.strip()) for text in texts), dtype=np.bool_, count=len(texts))
        dims = {vector.shape[0] for vector in self._items.values()}
        dim = max(dims) if dims else 1
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            vector = self._items.get(text)
            if vector is not None:
                out[row] = vector
                self._items.move_to_end(text)
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return out, present


async def semantic_ranking(
    corpus: Corpus,
    query: str,
    *,
    embedder: Embedder,
    vectors: VectorIndex | None,
    texts: TextVectors | None,
) -> tuple[RankedHits, int]:
    """Every document of `corpus` that has an embedding, by cosine similarity to `query`; and how many
    log entries the vector index is behind (0 without one).

    Raises:
        InvalidArgumentError: the corpus cannot list its documents.
    """
    if not isinstance(corpus, ListedCorpus):
        raise InvalidArgumentError(
            f'semantic and hybrid search need a corpus that lists its documents; {type(corpus).__name__} does not'
        )
    docs: CorpusDocuments = await corpus.documents()
    pending = 0
    if vectors is not None and bool((docs.seqs >= 0).all()):
        await vectors.catch_up(limit=CATCH_UP_ON_SEARCH)
        pending = vectors.pending()
        query_vector = await vectors.embed_query(query)
        scores, present = vectors.similarities(docs.seq_list, query_vector)
    else:
        from search.vector_index import unit_rows

        if docs.texts is None:
            raise InvalidArgumentError('semantic search over this corpus needs a vector index of its log')
        cache = texts if texts is not None else TextVectors(embedder)
        matrix, present = await cache.matrix(docs.texts())
        query_vector = unit_rows((await embedder.embed_query(query)).embeddings, 1)[0]
        if matrix.shape[1] != query_vector.shape[0]:
            matrix = np.zeros((matrix.shape[0], query_vector.shape[0]), dtype=np.float32)
            present = np.zeros(matrix.shape[0], dtype=np.bool_)
        scores = (matrix @ query_vector).astype(np.float64)
    keep = present & np.isfinite(scores)
    return RankedHits(docs.doc_ids[keep], scores[keep], docs.locate, ranked=False), pending


def _ranks(doc_ids: NDArray[np.int64], scores: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each document's rank (1 for the best; ties in document order)."""
    order = np.lexsort((doc_ids, -scores))
    ranks = np.empty(doc_ids.shape[0], dtype=np.float64)
    ranks[order] = np.arange(1, doc_ids.shape[0] + 1, dtype=np.float64)
    return ranks


def fuse_rankings(rankings: Sequence[Sequence[Hit]], *, k: int = RRF_K, depth: int = RRF_DEPTH) -> RankedHits:
    """Reciprocal-rank fusion of rankings of one corpus (each a `RankedHits`): `sum 1 / (k + rank)` over
    the rankings that place a document within their first `depth`.

    Equal fused scores (a document first in one ranking against another first in the other) go to
    the one ranked better by the last ranking (the semantic one, as the engine passes them), then
    to corpus order.

    Raises:
        InvalidArgumentError: a ranking is not a `RankedHits` (its document ids are unknown).
    """
    parts: list[tuple[NDArray[np.int64], NDArray[np.float64]]] = []
    locate = None
    for ranking in rankings:
        if not isinstance(ranking, RankedHits):
            raise InvalidArgumentError(f'hybrid search needs ranked document ids; got {type(ranking).__name__}')
        ids, scores = ranking.scored()
        ranks = _ranks(ids, scores)
        keep = ranks <= depth
        parts.append((ids[keep], ranks[keep]))
        locate = ranking.locate
    assert locate is not None
    union = np.unique(np.concatenate([ids for ids, _ in parts])) if parts else np.zeros(0, dtype=np.int64)
    fused = np.zeros(union.shape[0], dtype=np.float64)
    for ids, ranks in parts:
        np.add.at(fused, np.searchsorted(union, ids), 1.0 / (k + ranks))
    if parts:
        # a tie-break far below any difference between distinct rank sums within `depth`
        ids, ranks = parts[-1]
        tie = np.zeros(union.shape[0], dtype=np.float64)
        tie[np.searchsorted(union, ids)] = (depth + 1 - ranks) / (depth + 1)
        fused += tie * 1e-12
    return RankedHits(union.astype(np.int64), fused, locate, ranked=False)


def _standardised(scores: NDArray[np.float64], count: int) -> NDArray[np.float64]:
    """`scores` as deviations from their mean in standard deviations, where `count - len(scores)` more
    documents score 0; all zeros when every document scores the same."""
    flat: NDArray[np.float64] = np.zeros(len(scores), dtype=np.float64)
    if count == 0 or scores.shape[0] == 0:
        return flat
    mean = float(scores.sum()) / count
    variance = float(np.square(scores).sum()) / count - mean * mean
    if not variance > 1e-18:
        return flat
    standardised: NDArray[np.float64] = (scores - mean) / math.sqrt(variance)
    return standardised


def _union(lexical: NDArray[np.int64], semantic: NDArray[np.int64]) -> NDArray[np.int64]:
    """The sorted document ids of both rankings. The semantic ranking usually holds every document in
    corpus order and BM25's matches among them: then it is the union as it is, with no sort."""
    if semantic.shape[0] and bool((semantic[1:] > semantic[:-1]).all()):
        at = np.searchsorted(semantic, lexical).clip(max=semantic.shape[0] - 1)
        if bool((semantic[at] == lexical).all()):
            return semantic
    return np.union1d(lexical, semantic).astype(np.int64)


def fuse_scores(lexical: Sequence[Hit], semantic: Sequence[Hit], *, lexical_weight: float | None = None) -> RankedHits:
    """Fusion of a BM25 ranking and a semantic ranking of one corpus (each a `RankedHits`) by
    standardised scores: `w * z_lexical + (1 - w) * z_semantic`, `w` being `lexical_weight` or, when
    it is `None` (the default), `HYBRID_LEXICAL_WEIGHT`.

    Each ranking's scores are standardised over every document either ranking holds (the semantic
    one holds every document with an embedding); a document BM25 does not match counts as a BM25
    score of 0, and one without an embedding gets the semantic mean (z = 0). A ranking whose scores
    are all equal contributes nothing. Equal fused scores go to the semantically closer document,
    then to corpus order.

    Raises:
        InvalidArgumentError: a ranking is not a `RankedHits`, or `lexical_weight` is not from 0 to 1.
    """
    if lexical_weight is not None and not 0.0 <= lexical_weight <= 1.0:
        raise InvalidArgumentError(f'lexical_weight must be from 0.0 to 1.0, got {lexical_weight!r}')
    if not isinstance(lexical, RankedHits) or not isinstance(semantic, RankedHits):
        wrong = lexical if not isinstance(lexical, RankedHits) else semantic
        raise InvalidArgumentError(f'hybrid search needs ranked document ids; got {type(wrong).__name__}')
    lex_ids, lex_scores = lexical.scored()
    sem_ids, sem_scores = semantic.scored()
    locate = semantic.locate
    union = _union(lex_ids, sem_ids)
    count = int(union.shape[0])
    lex_z = _standardised(lex_scores, count)
    weight = HYBRID_LEXICAL_WEIGHT if lexical_weight is None else lexical_weight
    lexical_part = weight * lex_z
    fused = np.zeros(count, dtype=np.float64)
    # each ranking holds a document once, so plain indexed assignment is exact
    fused[np.searchsorted(union, lex_ids)] = lexical_part
    sem_z = np.zeros(count, dtype=np.float64)
    if sem_ids.shape[0]:
        # documents without an embedding sit at the semantic mean: standardise over those that have one
        sem_z[np.searchsorted(union, sem_ids)] = _standardised(sem_scores, int(sem_ids.shape[0]))
    fused += (1.0 - weight) * sem_z
    # a tie-break far below any real difference: the semantically closer first
    fused += sem_z * 1e-12
    return RankedHits(union.astype(np.int64), fused, locate, ranked=False)
