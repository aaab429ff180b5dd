"""A second realistic recall set from the Chit-Chat corpus: questions about facts stated in an EARLIER chat.

The first set (`bench._chitchat`) asks a question and looks for the next turn, which answers it in
other words: it favours meaning. This one is built like a long-term memory benchmark (questions about
facts stated earlier in long multi-session conversations): each pair of participants who chatted
`MIN_SESSIONS` to `MAX_SESSIONS` times is one conversation (each chat a run, each turn a message,
exactly as in `bench._chitchat`), and a question is a participant's own question in a LATER chat
that takes up something the other participant said in an EARLIER chat ("How was the Eagle
project?" after "I'm helping with my brothers eagle project" a chat before). Nothing is generated:
the query is the asker's own sentence and the evidence the other participant's own turn.

The rule that finds them (all of it; `build`):

1. The question: a turn whose last sentence ends in `?` and has at least `MIN_QUESTION_WORDS` words
   (as in the first set), in the pair's second chat or later.
2. Its key words: the question's content words (letters only, at least 4 of them, not in `STOPWORDS`)
   that at most `RARE_CHATS` of the corpus's 7,168 chats use and at most `RARE_TURNS` turns of this
   pair's conversation hold: words specific to a topic, not chat filler.
3. The evidence: the turns of EARLIER chats, by the other participant, that are not questions (do
   not end in `?`), have at least `MIN_EVIDENCE_WORDS` words and hold a key word. The question is kept
   only when exactly one such turn exists (its evidence is unambiguous), and a key word counts only
   when no earlier turn of the question's own chat holds it (the topic comes back from an earlier
   chat, it is not the topic of this one).

Words are compared lowercased, whole (no stemming), so the rule selects by shared words: this set
favours lexical matching much as a fact benchmark does (a question about a fact names its topic),
and is the counterweight to the first set. The labels are noisy: of 25 questions drawn at random,
3 to 5 plainly take up a fact of an earlier chat; the others share such a word by chance, and then
the labelled turn is simply the one earlier message of the other participant holding the question's
rare word. The turn that asked is left out of the ranking; every other turn of every chat of the
pair, later ones included, competes.

Split and sampling as in the first set: the pairs split into halves by a hash of their ids
(`bench._chitchat.split_of`), at most `QUESTIONS_PER_CONVERSATION` questions per pair (a
deterministic sample).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from bench._chitchat import (
    MAX_SESSIONS,
    MIN_SESSIONS,
    Conversation,
    Question,
    Split,
    _digest,  # pyright: ignore[reportPrivateUsage]
    _pairs,  # pyright: ignore[reportPrivateUsage]
    _question_of,  # pyright: ignore[reportPrivateUsage]
    _turn_text,  # pyright: ignore[reportPrivateUsage]
    _within,  # pyright: ignore[reportPrivateUsage]
)

RARE_TURNS = 8
RARE_CHATS = 300
MIN_EVIDENCE_WORDS = 6
QUESTIONS_PER_CONVERSATION = 40

STOPWORDS = frozenset(
    [
        'about',
        'above',
        'after',
        'again',
        'against',
        'also',
        'been',
        'before',
        'being',
        'below',
        'between',
        'both',
        'could',
        'does',
        'doing',
        'down',
        'during',
        'each',
        'ever',
        'from',
        'further',
        'have',
        'having',
        'here',
        'hers',
        'herself',
        'himself',
        'into',
        'itself',
        'just',
        'like',
        'more',
        'most',
        'much',
        'myself',
        'only',
        'other',
        'ours',
        'ourselves',
        'over',
        'same',
        'should',
        'some',
        'such',
        'than',
        'that',
        "that's",
        'their',
        'theirs',
        'them',
        'themselves',
        'then',
        'there',
        "there's",
        'these',
        'they',
        'this',
        'those',
        'through',
        'under',
        'until',
        'very',
        'were',
        'what',
        "what's",
        'when',
        'where',
        'which',
        'while',
        'will',
        'with',
        'would',
        'your',
        'yours',
        'yourself',
        'yourselves',
        'really',
        'think',
        'know',
        'yeah',
        'okay',
        'going',
        'things',
        'thing',
        'something',
        'anything',
        'everything',
        'good',
        'well',
        'actually',
        'pretty',
        'maybe',
        'probably',
        'kind',
        'sure',
        'right',
        'time',
        'want',
        'make',
        'made',
        'want',
        'wanna',
        'gonna',
        'cool',
        'nice',
        'love',
        'lots',
        'alot',
        'done',
        'still',
        'even',
        'though',
        'because',
        'said',
    ]
)

_LETTERS = re.compile(r"[a-z']+")
_WORDS = re.compile(r"[\w']+")


def _content_words(text: str) -> set[str]:
    return {w for w in _LETTERS.findall(text.lower()) if len(w) >= 4 and "'" not in w and w not in STOPWORDS}


def build(data: dict[str, Any]) -> list[Conversation]:
    """Every conversation of the set that has at least one question, in a fixed order."""
    out: list[Conversation] = []
    chats_using = Counter(
        word for chat in data.values() for word in set().union(*map(_content_words, map(_turn_text, chat['messages'])))
    )
    for (first, _), chats in sorted(_pairs(data).items()):
        if not MIN_SESSIONS <= len(chats) <= MAX_SESSIONS:
            continue
        conversation_id = 'cf-' + _digest(''.join(sorted(str(chat['start']) for chat in chats)) + first)
        sessions: list[tuple[str, list[list[dict[str, Any]]]]] = []
        for number, chat in enumerate(sorted(chats, key=lambda chat: str(chat['start']))):
            sessions.append((f'{conversation_id}-s{number:02d}', [t for t in chat['messages'] if _turn_text(t)]))
        turn_words = {
            (run_id, position): _content_words(_turn_text(turn))
            for run_id, turns in sessions
            for position, turn in enumerate(turns)
        }
        spread = Counter(word for words in turn_words.values() for word in words)
        candidates: list[Question] = []
        for number, (run_id, turns) in enumerate(sessions):
            if number == 0:
                continue
            for position, turn in enumerate(turns):
                question = _question_of(turn)
                if question is None:
                    continue
                keys = {w for w in _content_words(question) if spread[w] <= RARE_TURNS and chats_using[w] <= RARE_CHATS}
                # a topic of this chat already (said before the question) is no recall of an earlier one
                keys -= set().union(*(turn_words[(run_id, before)] for before in range(position)))
                if not keys:
                    continue
                asker = turn[0]['sender']
                evidence = [
                    (earlier_run, earlier_position)
                    for earlier_run, earlier_turns in sessions[:number]
                    for earlier_position, earlier in enumerate(earlier_turns)
                    if earlier[0]['sender'] != asker
                    and not _turn_text(earlier).rstrip().endswith('?')
                    and len(_WORDS.findall(_turn_text(earlier))) >= MIN_EVIDENCE_WORDS
                    and keys & turn_words[(earlier_run, earlier_position)]
                ]
                if len(evidence) == 1:
                    candidates.append(Question(question, conversation_id, (run_id, position), evidence[0]))
        if not candidates:
            continue
        runs: list[tuple[str, tuple[ModelMessage, ...]]] = []
        for run_id, turns in sessions:
            messages: list[ModelMessage] = []
            for turn in turns:
                text = _turn_text(turn)
                if str(turn[0]['sender']) == first:
                    messages.append(ModelRequest(parts=[UserPromptPart(text)]))
                else:
                    messages.append(ModelResponse(parts=[TextPart(text)]))
            runs.append((run_id, tuple(messages)))
        candidates.sort(key=lambda q: _digest(q.text + q.asked[0] + str(q.asked[1])))
        chosen = sorted(candidates[:QUESTIONS_PER_CONVERSATION], key=lambda q: (q.asked[0], q.asked[1]))
        out.append(Conversation(conversation_id, tuple(runs), tuple(chosen)))
    return out


def load(split: Split | None = None, limit_messages: int | None = None) -> list[Conversation]:
    """The conversations of `split` (both halves when `None`) from the installed `chitchat-dataset`,
    at most `limit_messages` messages per half when given (whole conversations, in order)."""
    import chitchat_dataset  # pyright: ignore[reportMissingTypeStubs]

    conversations = build(dict(chitchat_dataset.Dataset()))  # pyright: ignore[reportUnknownArgumentType]
    return list(_within(conversations, split, limit_messages))
