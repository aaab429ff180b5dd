"""A realistic recall set from real conversations: the BYU PCC Chit-Chat Challenge corpus (MIT licence).

The corpus (package `chitchat-dataset`, installed by the extra `recall-bench`; nothing is fetched at
run time) holds 7,168 real typed chats between students, and many pairs of participants chatted
again and again. Each pair that chatted at least `MIN_SESSIONS` times is one long multi-session
conversation here: each chat is a run (a session), each turn (one participant's consecutive lines)
one message, the pair's first participant the user and the other the assistant.

The questions are the participants' own: a turn whose last sentence is a question of at least
`MIN_QUESTION_WORDS` words, answered by the other participant's next turn of at least
`MIN_ANSWER_WORDS` words. That sentence is the query and the answering turn is the labelled evidence, so nothing is
generated from templates. A search must find the answer among every turn of every session of the
pair; the turn that asked is left out of the ranking (it would find itself).

The pairs are split by a hash of their ids into a development half (tune here) and a held-out half
(report only). `QUESTIONS_PER_CONVERSATION` caps the questions of one pair (a deterministic sample).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

MIN_SESSIONS = 6
MAX_SESSIONS = 40
MIN_QUESTION_WORDS = 5
MIN_ANSWER_WORDS = 6
QUESTIONS_PER_CONVERSATION = 50

Split = Literal['dev', 'heldout']

_WORD = re.compile(r"[\w']+")
_SENTENCE = re.compile(r'(?<=[.!?])\s+')


@dataclass(frozen=True)
class Question:
    """One real question and where its answer is."""

    text: str
    conversation_id: str
    asked: tuple[str, int]
    """(run id, position) of the turn that asked: left out of the ranking."""
    evidence: tuple[str, int]
    """(run id, position) of the answering turn."""


@dataclass(frozen=True)
class Conversation:
    """One pair's chats, as runs of messages."""

    conversation_id: str
    runs: tuple[tuple[str, tuple[ModelMessage, ...]], ...]
    questions: tuple[Question, ...]

    @property
    def message_count(self) -> int:
        return sum(len(messages) for _, messages in self.runs)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def split_of(conversation_id: str) -> Split:
    """The half a conversation belongs to: decided by its id's hash, never by its content."""
    return 'dev' if int(conversation_id[-4:], 16) % 2 == 0 else 'heldout'


def _turn_text(turn: list[dict[str, Any]]) -> str:
    return ' '.join(str(line['text']).strip() for line in turn if str(line['text']).strip())


def _question_of(turn: list[dict[str, Any]]) -> str | None:
    """The turn's last line when it is a real question of enough words."""
    lines = [str(line['text']).strip() for line in turn if str(line['text']).strip()]
    if not lines or not lines[-1].endswith('?'):
        return None
    sentence = _SENTENCE.split(lines[-1])[-1]
    return sentence if len(_WORD.findall(sentence)) >= MIN_QUESTION_WORDS else None


def _pairs(data: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    pairs: defaultdict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for chat in data.values():
        senders = sorted({str(line['sender']) for turn in chat['messages'] for line in turn})
        if len(senders) == 2:
            pairs[(senders[0], senders[1])].append(chat)
    return pairs


def build(data: dict[str, Any]) -> list[Conversation]:
    """Every conversation of the set, in a fixed order."""
    out: list[Conversation] = []
    for (first, _), chats in sorted(_pairs(data).items()):
        if not MIN_SESSIONS <= len(chats) <= MAX_SESSIONS:
            continue
        conversation_id = 'cc-' + _digest(''.join(sorted(str(chat['start']) for chat in chats)) + first)
        runs: list[tuple[str, tuple[ModelMessage, ...]]] = []
        candidates: list[Question] = []
        for number, chat in enumerate(sorted(chats, key=lambda chat: str(chat['start']))):
            run_id = f'{conversation_id}-s{number:02d}'
            turns = [turn for turn in chat['messages'] if _turn_text(turn)]
            messages: list[ModelMessage] = []
            for turn in turns:
                text = _turn_text(turn)
                if str(turn[0]['sender']) == first:
                    messages.append(ModelRequest(parts=[UserPromptPart(text)]))
                else:
                    messages.append(ModelResponse(parts=[TextPart(text)]))
            for position in range(len(turns) - 1):
                question = _question_of(turns[position])
                answer = turns[position + 1]
                if (
                    question is not None
                    and answer[0]['sender'] != turns[position][0]['sender']
                    and len(_WORD.findall(_turn_text(answer))) >= MIN_ANSWER_WORDS
                ):
                    candidates.append(Question(question, conversation_id, (run_id, position), (run_id, position + 1)))
            runs.append((run_id, tuple(messages)))
        candidates.sort(key=lambda q: _digest(q.text + q.asked[0] + str(q.asked[1])))
        chosen = sorted(candidates[:QUESTIONS_PER_CONVERSATION], key=lambda q: (q.asked[0], q.asked[1]))
        if chosen:
            out.append(Conversation(conversation_id, tuple(runs), tuple(chosen)))
    return out


def load(split: Split | None = None, limit_messages: int | None = None) -> list[Conversation]:
    """The conversations of `split` (both halves when `None`) from the installed `chitchat-dataset`,
    at most `limit_messages` messages per half when given (whole conversations, in order)."""
    import chitchat_dataset  # pyright: ignore[reportMissingTypeStubs]

    conversations = build(dict(chitchat_dataset.Dataset()))  # pyright: ignore[reportUnknownArgumentType]
    return list(_within(conversations, split, limit_messages))


def _within(conversations: Iterable[Conversation], split: Split | None, limit: int | None) -> Iterator[Conversation]:
    used: dict[Split, int] = {'dev': 0, 'heldout': 0}
    for conversation in conversations:
        half = split_of(conversation.conversation_id)
        if split is not None and half != split:
            continue
        if limit is not None and used[half] + conversation.message_count > limit:
            continue
        used[half] += conversation.message_count
        yield conversation
