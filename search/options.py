"""How a search ranks and how much it shows: `SearchOptions`, and the checks of its values.

A module of its own so that the search (`search.engine`) and the wording of its answers
(`search.answer`) both read the options without importing each other. `search.engine` and
the `search` package re-export these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from search.analyzers import Analyzer, DefaultAnalyzer
from search.bm25 import DEFAULT_B, DEFAULT_K1
from search.semantic import HYBRID_FUSIONS, SEARCH_MODES, HybridFusion, SearchMode

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ['MAX_QUERY_TERMS', 'AnswerStyle', 'SearchOptions', 'validate_mode', 'validate_search_options']

MAX_QUERY_TERMS = 1000
"""A query with more distinct terms than this is refused rather than ranked."""

AnswerStyle = Literal['reference', 'explained']
"""How an answer is worded: the reference's text (`'reference'`), or with explanations (`'explained'`)."""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_search_options(*, max_matches: int, context_lines: int, bm25_k1: float, bm25_b: float) -> None:
    """Check the search options, raising `ValueError` naming the first bad one.

    `max_matches` and `context_lines` are non-negative integers, `bm25_k1` a finite
    non-negative number (a negative one can zero a denominator, and `nan` or `inf` would turn
    every score into `nan`), and `bm25_b` a number from 0 to 1.
    """
    if not _is_count(max_matches) or max_matches < 0:
        raise ValueError(f'max_matches must be a non-negative integer, got {max_matches!r}.')
    if not _is_count(context_lines) or context_lines < 0:
        raise ValueError(f'context_lines must be a non-negative integer, got {context_lines!r}.')
    if not _is_real(bm25_k1) or not math.isfinite(bm25_k1) or bm25_k1 < 0:
        raise ValueError(f'bm25_k1 must be a finite number of at least 0, got {bm25_k1!r}.')
    if not _is_real(bm25_b) or not 0.0 <= bm25_b <= 1.0:
        raise ValueError(f'bm25_b must be a number from 0.0 to 1.0, got {bm25_b!r}.')


@dataclass(frozen=True)
class SearchOptions:
    """How a search ranks and how much it shows; validated on creation."""

    max_matches: int = 10
    """The most results one answer shows."""

    context_lines: int = 5
    """Messages shown before and after each match, from the match's own run."""

    bm25_k1: float = DEFAULT_K1
    """BM25 term-frequency saturation."""

    bm25_b: float = DEFAULT_B
    """BM25 length normalisation."""

    analyzer: Analyzer = field(default_factory=DefaultAnalyzer)
    """How messages and queries become terms."""

    answer_style: AnswerStyle = 'reference'
    """How the model's answer is worded (`search.answer`): `'reference'`, the text the reference's
    `ConversationSearch` gives, byte for byte; `'explained'`, answers that say why nothing was
    found and what to try, and do not repeat a message an earlier result already showed."""

    mode: SearchMode = 'bm25'
    """How results are ranked (`search.semantic`): `'bm25'` (lexical; answers unchanged), `'semantic'`
    (cosine similarity of embeddings) or `'hybrid'` (both, fused as `fusion` says)."""

    fusion: HybridFusion = 'zscore'
    """How `'hybrid'` fuses BM25 and semantic rankings: `'zscore'` (standardised scores, weighted;
    `search.semantic.fuse_scores`) or `'rrf'` (reciprocal ranks, the former default)."""

    lexical_weight: float | None = None
    """The weight of BM25 in `'zscore'` fusion, from 0 to 1 (the semantic ranking gets 1 minus it).
    `None` (the default) is `search.semantic.HYBRID_LEXICAL_WEIGHT` (0.6, measured on real conversations,
    docs/semantic.md); `0.175` was the default before."""

    embedder: Embedder | None = field(default=None, compare=False)
    """The pydantic-ai `Embedder` that embeds messages and queries; required by `'semantic'` and `'hybrid'`."""

    def __post_init__(self) -> None:
        """Reject invalid values with a `ValueError`."""
        validate_search_options(
            max_matches=self.max_matches,
            context_lines=self.context_lines,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
        )
        if self.answer_style not in ('reference', 'explained'):
            raise ValueError(f"answer_style must be 'reference' or 'explained', got {self.answer_style!r}.")
        validate_mode(self.mode, self.embedder)
        if self.fusion not in HYBRID_FUSIONS:
            raise ValueError(f"fusion must be 'zscore' or 'rrf', got {self.fusion!r}.")
        if self.lexical_weight is not None and (
            not _is_real(self.lexical_weight) or not 0.0 <= self.lexical_weight <= 1.0
        ):
            raise ValueError(f'lexical_weight must be a number from 0.0 to 1.0 or None, got {self.lexical_weight!r}.')


def validate_mode(mode: object, embedder: object) -> None:
    """Check a search mode and its embedder, raising `ValueError` for an unknown mode, or for
    `'semantic'` or `'hybrid'` without an `Embedder`."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"mode must be 'bm25', 'semantic' or 'hybrid', got {mode!r}.")
    if mode != 'bm25':
        from pydantic_ai.embeddings import Embedder

        if not isinstance(embedder, Embedder):
            raise ValueError(
                f"mode={mode!r} needs embedder=, a pydantic-ai Embedder (such as Embedder('sentence-transformers:"
                f"all-MiniLM-L6-v2')); got {type(embedder).__name__}."
            )
