"""The realistic recall sets (`bench._chitchat`, `bench._chitchat_facts`) stored in a real log and searched
through the project's API.

Used by `bench/bench_recall.py` (recall per mode).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

import numpy as np
from pydantic_ai.embeddings import Embedder

from bench._chitchat import Conversation, Question
from eventlog import InMemoryEventLog, ReplayHistorySource, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.backend import Hit, RankedHits
from search.persistent_index import PersistentIndex
from search.semantic import fuse_scores
from search.vector_index import VectorIndex

TOP = 5
"""Recall@TOP."""

OLDER_WEIGHT = 0.15
"""The fixed lexical weight of the first standardised-score fusion (`SearchOptions(lexical_weight=0.15)`)."""

PREVIOUS_RAMP = (10.0, 20.0, 0.15, 0.3)
"""The previous default fusion, before the lead (kept here only to measure it beside the new one): the
lexical weight 0.15 while BM25's best standardised score is under 10 deviations, rising linearly to
0.3 at 20 and above, with no lead."""


def previous_weight(lexical: RankedHits, semantic: RankedHits) -> float:
    """The previous default's lexical weight for this query (`PREVIOUS_RAMP`)."""
    low, high, base, top = PREVIOUS_RAMP
    ids, scores = lexical.scored()
    count = int(np.union1d(ids, semantic.scored()[0]).shape[0])
    if not scores.shape[0] or not count:
        return base
    mean = float(scores.sum()) / count
    variance = float(np.square(scores).sum()) / count - mean * mean
    best = (float(scores.max()) - mean) / math.sqrt(variance) if variance > 1e-18 else 0.0
    return base + (top - base) * min(1.0, max(0.0, (best - low) / (high - low)))


def previous_fusion(lexical: RankedHits, semantic: RankedHits) -> RankedHits:
    """The previous default fusion (`PREVIOUS_RAMP`), from the library's `fuse_scores` at a fixed weight."""
    return fuse_scores(lexical, semantic, lexical_weight=previous_weight(lexical, semantic))


@contextmanager
def previous_default() -> Iterator[None]:
    """Hybrid searches made inside rank by the previous default fusion where the options leave the
    lexical weight unset (the engine calls `fuse_scores`; it is swapped for `previous_fusion`)."""

    def fuse(lexical: RankedHits, semantic: RankedHits, *, lexical_weight: float | None = None) -> RankedHits:
        if lexical_weight is not None:
            return fuse_scores(lexical, semantic, lexical_weight=lexical_weight)
        return previous_fusion(lexical, semantic)

    with mock.patch('search.engine.fuse_scores', fuse):
        yield


@dataclass
class StoredSet:
    """One half of the set in an in-memory log, with its search index and vector index caught up."""

    log: InMemoryEventLog
    conversations: list[Conversation]
    embed_seconds: float
    embedded: int
    english: InMemoryEventLog | None = None
    """The same conversations in a second log whose search index uses the english analyzer (a store
    keeps one analyzer's index), with its own vectors; `None` unless asked for."""

    @property
    def questions(self) -> list[Question]:
        return [question for conversation in self.conversations for question in conversation.questions]


async def store(
    conversations: Sequence[Conversation], embedder: Embedder, *, english: bool = False, english_vectors: bool = True
) -> StoredSet:
    """The conversations appended to a fresh in-memory log (one run per session), indexed and embedded;
    with `english`, also to a second log indexed with the english analyzer (embedded too unless not
    `english_vectors`: BM25 alone needs no vectors, and embedding is most of the cost)."""
    log = await _log_of(conversations, 'default')
    began = time.perf_counter()
    embedded = await VectorIndex.for_log(log, embedder).catch_up()
    stored = StoredSet(log, list(conversations), time.perf_counter() - began, embedded)
    if english:
        stored.english = await _log_of(conversations, 'english')
        if english_vectors:
            await VectorIndex.for_log(stored.english, embedder).catch_up()
    return stored


async def _log_of(conversations: Sequence[Conversation], analyzer: str) -> InMemoryEventLog:
    log = InMemoryEventLog()
    for conversation in conversations:
        for run_id, messages in conversation.runs:
            # each session a run of its own (a fresh context, as a memory-backed assistant starts one)
            await log.append(run_started_entry(conversation_id=conversation.conversation_id, run_id=run_id))
            await log.append_many(
                [message_entry(m, conversation_id=conversation.conversation_id, run_id=run_id) for m in messages]
            )
    PersistentIndex.for_log(log, analyzer).catch_up()
    return log


def engine(stored: StoredSet, options: SearchOptions) -> SearchEngine:
    """A search engine over the stored set: the persistent index of the log with the options' analyzer,
    or when there is none, the log replayed and indexed per search (slower, same ranking)."""
    if options.analyzer.name == 'default':
        return SearchEngine(PersistentIndex.for_log(stored.log), options)
    if options.analyzer.name == 'english' and stored.english is not None:
        return SearchEngine(PersistentIndex.for_log(stored.english, 'english'), options)
    return SearchEngine(ReplayHistorySource(stored.log), options)


async def ranking(search: SearchEngine, question: Question, *, keep_asked: bool = False) -> list[Hit]:
    """The question's ranked hits, less the turn that asked it (unless `keep_asked`)."""
    result = await search.find(
        question.text, scope='conversation', conversation_id=question.conversation_id, entry_numbers=False
    )
    return [hit for hit in result.ranked if keep_asked or (hit.run_id, hit.position) != question.asked]


def recalled(hits: Sequence[Hit], question: Question) -> bool:
    """Whether the evidence is among the first `TOP` hits."""
    return question.evidence in [(hit.run_id, hit.position) for hit in hits[:TOP]]


async def recall_at(search: SearchEngine, questions: Sequence[Question]) -> float:
    """Recall@TOP of `search` over `questions`."""
    found = 0
    for question in questions:
        found += recalled(await ranking(search, question), question)
    return found / max(len(questions), 1)
