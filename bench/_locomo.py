"""LoCoMo's development half (long real-style conversations with labelled evidence) stored in a real log and
searched through the project's API, by the measure of the folder's README.

The data is evaluation data only and is never part of the project: it is read from
`../shared/data/locomo-dev` beside the project's root (or `--locomo DIR`) when that folder exists.

The measure: each conversation becomes an agent's history, `speaker_a` the user and `speaker_b` the
assistant; consecutive turns of one speaker are joined with a space into one message, and each exchange
(a `ModelRequest` with the user's prompt and the `ModelResponse` after it) is one run of one
conversation, appended through `InMemoryEventLog`. Each message remembers the `dia_id`s it joined.
Every question of categories 1 to 4 is asked with `scope='conversation'` through `SearchEngine`; it is
recalled when one of the first `TOP` messages holds one of its evidence `dia_id`s (recall@5, over
questions).

Shared by `bench/bench_locomo.py` (recall per mode and embedder) and `bench/tune_locomo.py` (the
fusion's choice, cross-validated by conversation).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import InMemoryEventLog, ReplayHistorySource, message_entry, run_started_entry
from search import SearchEngine, SearchOptions
from search.backend import Hit, RankedHits
from search.persistent_index import PersistentIndex
from search.vector_index import VectorIndex

TOP = 5
"""Recall@TOP."""

DEFAULT_FOLDER = Path(__file__).resolve().parent.parent.parent / 'shared' / 'data' / 'locomo-dev'
"""Where the development half is looked for: `../shared/data/locomo-dev` from the project's root."""

ANSWERABLE = frozenset({1, 2, 3, 4})
"""The question categories answerable from the conversation (5 is adversarial)."""


@dataclass(frozen=True)
class Question:
    """One question and the `dia_id`s of its evidence."""

    text: str
    conversation_id: str
    evidence: frozenset[str]


@dataclass
class Conversation:
    """One LoCoMo conversation as runs of messages, each message with the `dia_id`s it joined."""

    conversation_id: str
    runs: list[tuple[str, list[ModelMessage]]] = field(default_factory=list[tuple[str, list[ModelMessage]]])
    dia_ids: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict[tuple[str, int], frozenset[str]])
    questions: list[Question] = field(default_factory=list[Question])

    @property
    def message_count(self) -> int:
        return sum(len(messages) for _, messages in self.runs)


def _sessions(data: dict[str, object]) -> list[list[dict[str, str]]]:
    numbers = sorted(
        int(key.removeprefix('session_'))
        for key in data
        if key.startswith('session_') and key.removeprefix('session_').isdigit()
    )
    return [data[f'session_{n}'] for n in numbers]  # pyright: ignore[reportReturnType]


def load_conversation(path: Path) -> Conversation:
    """One conversation file of the folder, by the README's measure."""
    data = json.loads(path.read_text())
    user_speaker = data['speaker_a']
    conversation = Conversation(conversation_id=f'locomo-{path.stem}')
    exchange = 0
    for turns in _sessions(data):
        # consecutive turns of one speaker joined into one message
        merged: list[tuple[bool, str, list[str]]] = []
        for turn in turns:
            is_user = turn['speaker'] == user_speaker
            if merged and merged[-1][0] == is_user:
                merged[-1][1] += ' ' + turn['text']  # pyright: ignore[reportUnknownOperation]
                merged[-1][2].append(turn['dia_id'])
            else:
                merged.append([is_user, turn['text'], [turn['dia_id']]])  # pyright: ignore[reportArgumentType]
        # each exchange (a user prompt and the reply after it) one run; a reply with no prompt before it
        # (a session the assistant opens) is a run of its own
        at = 0
        while at < len(merged):
            run_id = f'{path.stem}-{exchange}'
            exchange += 1
            messages: list[ModelMessage] = []
            is_user, text, ids = merged[at]
            if is_user:
                messages.append(ModelRequest(parts=[UserPromptPart(text)]))
                conversation.dia_ids[(run_id, 0)] = frozenset(ids)
                at += 1
            if at < len(merged) and not merged[at][0]:
                _, text, ids = merged[at]
                conversation.dia_ids[(run_id, len(messages))] = frozenset(ids)
                messages.append(ModelResponse(parts=[TextPart(text)]))
                at += 1
            conversation.runs.append((run_id, messages))
    for qa in data['qa']:
        if qa.get('category') in ANSWERABLE:
            evidence = frozenset(str(e) for e in qa.get('evidence', []))
            conversation.questions.append(Question(str(qa['question']), conversation.conversation_id, evidence))
    return conversation


def load(folder: Path) -> list[Conversation]:
    """Every conversation file of `folder` (`*.json`), in name order."""
    return [load_conversation(path) for path in sorted(folder.glob('*.json'))]


@dataclass
class Stored:
    """The conversations in one in-memory log, its default-analyzer index and its vectors caught up."""

    log: InMemoryEventLog
    conversations: list[Conversation]
    embedded: int
    embed_seconds: float

    def dia_ids(self, question: Question, hit: Hit) -> frozenset[str]:
        conversation = next(c for c in self.conversations if c.conversation_id == question.conversation_id)
        return conversation.dia_ids.get((hit.run_id, hit.position), frozenset())


async def store(conversations: Sequence[Conversation], embedder: Embedder | None) -> Stored:
    """The conversations appended to a fresh in-memory log, one run per exchange, indexed (default
    analyzer) and, with an `embedder`, embedded."""
    import time

    log = InMemoryEventLog()
    for conversation in conversations:
        cid = conversation.conversation_id
        for run_id, messages in conversation.runs:
            await log.append(run_started_entry(conversation_id=cid, run_id=run_id))
            await log.append_many([message_entry(m, conversation_id=cid, run_id=run_id) for m in messages])
    PersistentIndex.for_log(log).catch_up()
    began = time.perf_counter()
    embedded = 0 if embedder is None else await VectorIndex.for_log(log, embedder).catch_up()
    return Stored(log, list(conversations), embedded, time.perf_counter() - began)


def engine(stored: Stored, options: SearchOptions) -> SearchEngine:
    """A search engine over the stored log: its persistent index for the default analyzer; for another,
    the log replayed and indexed per search (the same ranking an index built with it gives). Either
    reads the log's vector index."""
    if options.analyzer.name == 'default':
        return SearchEngine(PersistentIndex.for_log(stored.log), options)
    return SearchEngine(ReplayHistorySource(stored.log), options)


async def ranking(search: SearchEngine, question: Question) -> list[Hit]:
    """The question's first `TOP` hits."""
    result = await search.find(
        question.text, scope='conversation', conversation_id=question.conversation_id, entry_numbers=False
    )
    return list(result.ranked[:TOP])


async def recalled(stored: Stored, options: SearchOptions) -> dict[str, list[bool]]:
    """Per conversation, whether each of its questions is recalled at `TOP` with `options`."""
    search = engine(stored, options)
    found: dict[str, list[bool]] = {}
    for conversation in stored.conversations:
        row = found.setdefault(conversation.conversation_id, [])
        for question in conversation.questions:
            hits = await ranking(search, question)
            row.append(any(stored.dia_ids(question, hit) & question.evidence for hit in hits))
    return found


@dataclass
class Rankings:
    """A question's two rankings as the hybrid mode receives them: BM25's and the semantic one."""

    question: Question
    lexical: RankedHits | None
    """`None` when the question has no searchable words (every fusion answers nothing)."""
    semantic: RankedHits | None


async def rankings(stored: Stored, options: SearchOptions) -> list[Rankings]:
    """Every question's BM25 and semantic rankings, caught where hybrid search fuses them (`options` in
    hybrid mode), so that fusions can be compared without searching again."""
    caught: list[tuple[RankedHits, RankedHits]] = []

    def catch(lexical: RankedHits, semantic: RankedHits, *, lexical_weight: float | None = None) -> RankedHits:
        caught.append((lexical, semantic))
        return semantic

    search = engine(stored, options)
    out: list[Rankings] = []
    with mock.patch('search.engine.fuse_scores', catch):
        for conversation in stored.conversations:
            for question in conversation.questions:
                caught.clear()
                await search.find(
                    question.text, scope='conversation', conversation_id=question.conversation_id, entry_numbers=False
                )
                if caught:
                    out.append(Rankings(question, *caught[0]))
                else:
                    out.append(Rankings(question, None, None))
    return out


Fusion = Callable[[RankedHits, RankedHits], Sequence[Hit]]


def fused_recall(stored: Stored, caught: Sequence[Rankings], fusion: Fusion) -> dict[str, list[bool]]:
    """Per conversation, whether each question is recalled when its caught rankings are fused by `fusion`."""
    found: dict[str, list[bool]] = {}
    for item in caught:
        question = item.question
        row = found.setdefault(question.conversation_id, [])
        if item.lexical is None or item.semantic is None:
            row.append(False)
            continue
        hits = list(fusion(item.lexical, item.semantic)[:TOP])
        row.append(any(stored.dia_ids(question, hit) & question.evidence for hit in hits))
    return found
