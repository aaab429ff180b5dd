"""What both hybrid-fusion test modules use: rankings made by hand, and the committed slices of
the realistic recall sets (tests/search/data) stored and searched the way `bench/bench_recall.py`
does."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage

from eventlog import InMemoryEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.backend import RankedHits
from search.persistent_index import PersistentIndex
from search.vector_index import VectorIndex
from tests.search.searchtools import reply, user


def ranking(scores: dict[int, float]) -> RankedHits:
    """An unranked hit list scoring each document id as given."""
    ids = np.array(sorted(scores), dtype=np.int64)
    return RankedHits(ids, np.array([scores[i] for i in ids], dtype=np.float64), lambda d: ('r', d), ranked=False)


def order(hits: RankedHits) -> list[int]:
    """The document ids of `hits`, in their order."""
    return [hit.position for hit in hits]


SEMANTIC = ranking({d: 0.9 - d * 0.004 for d in range(200)})
"""200 documents, document 0 the closest in meaning, evenly spread."""


async def stored_slice(path: Path, embedder: Embedder) -> tuple[InMemoryEventLog, list[dict[str, object]]]:
    """The slice at `path` in an in-memory log with its vectors embedded, and its questions (each
    with its `conversation_id`)."""
    data = json.loads(path.read_text())
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


async def recall_by_mode(
    log: InMemoryEventLog, questions: list[dict[str, object]], modes: Mapping[str, SearchOptions]
) -> dict[str, int]:
    """How many questions each mode recalls: the evidence among the first five hits of the
    conversation, the asking message left out (as the engine leaves out the searching run)."""
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
    return recall
