"""What one search found, as data: `SearchResult`, its `SearchHit`s and their windows.

`SearchEngine.find` returns a `SearchResult`; the text a model reads (`search.answer`) and
the command line's views are both rendered from it, so they cannot disagree about which
messages matched, where they are, or which entry stored them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from search.wire_text import wire_index_text

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from search.backend import Hit
    from search.semantic import SearchMode

__all__ = ['SearchHit', 'SearchOutcome', 'SearchResult', 'SearchTimings', 'WindowMessage']

SearchOutcome = Literal[
    'found', 'no_match', 'no_terms', 'too_many_terms', 'no_conversation', 'unknown_run', 'nothing_stored', 'failed'
]
"""How a search ended.

- `'found'`: some messages matched (`hits` holds the best, at most `max_matches` of them).
- `'no_match'`: the corpus has messages, none of which matches.
- `'no_terms'`: the query has no searchable words (empty, or only punctuation and spaces).
- `'too_many_terms'`: the query has more distinct terms than `MAX_QUERY_TERMS`; nothing was read.
- `'no_conversation'`: the scope is `'conversation'` and the calling run has no conversation id.
- `'unknown_run'`: a `run_id` was given and the scope holds no message of it.
- `'nothing_stored'`: the scope holds no message at all.
- `'failed'`: reading or ranking failed (`error` names the exception).
"""


@dataclass(frozen=True)
class WindowMessage:
    """One message shown around a match: decoded, or as its stored payload (`SearchEngine.find(decode=False)`)."""

    position: int
    """Its position in the run's full record (0 is the run's first message)."""

    seq: int | None
    """The `seq` of the log entry that stored it (`None` when the source does not say)."""

    decoded: ModelMessage | None
    """The message as the search decoded it; `None` when it was asked for payloads only."""

    repeated: bool
    """Whether an earlier hit of the same result already shows it in its window."""

    payload: bytes | None = None
    """The message as pydantic-ai's JSON (the stored payload of a persistent index's message), when
    the search was asked for payloads (`decode=False`); `None` otherwise."""

    @cached_property
    def message(self) -> ModelMessage:
        """The message itself (`payload` decoded, with pydantic-ai, when the search did not decode it)."""
        if self.decoded is not None:
            return self.decoded
        assert self.payload is not None
        from eventlog.entries import decode_messages

        where = 'a stored message' if self.seq is None else f'entry {self.seq}'
        return decode_messages([self.payload], where=where)[0]

    def text(self) -> str:
        """The message's indexed text (`search.render.index_text`), read from `payload` without
        pydantic-ai where `search.wire_text` can."""
        if self.payload is not None:
            text = wire_index_text(self.payload)
            if text is not None:
                return text
        from search.render import index_text

        return index_text(self.message)

    def stored(self) -> bytes:
        """The message as pydantic-ai's JSON: `payload`, or the decoded message encoded."""
        if self.payload is not None:
            return self.payload
        assert self.decoded is not None
        from eventlog.entries import encode_message

        return encode_message(self.decoded)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One match shown in a result, with the messages around it."""

    rank: int
    """1 for the best hit shown, then 2, 3, ..."""

    score: float
    """Its score: BM25 (above zero), cosine similarity (`'semantic'`) or fused (`'hybrid'`)."""

    run_id: str
    """The run whose record holds the message."""

    conversation_id: str | None
    """That run's conversation, if it has one."""

    position: int
    """The message's position in the run's full record."""

    seq: int | None
    """The `seq` of the entry that stored the message (`None` when the source does not say)."""

    window: tuple[WindowMessage, ...]
    """The matched message and its neighbours in the run, in order (the match included)."""


@dataclass(frozen=True, slots=True)
class SearchTimings:
    """Where one search spent its time, in seconds."""

    corpus: float = 0.0
    """Opening the corpus (an in-memory backend reads and indexes the scope here)."""

    rank: float = 0.0
    """Scoring the query's terms."""

    windows: float = 0.0
    """Reading the messages around the hits shown (and their entry numbers)."""

    @property
    def total(self) -> float:
        """The three together."""
        return self.corpus + self.rank + self.windows


@dataclass(frozen=True)
class SearchResult:
    """Everything one search found.

    `matches` (how many messages matched in all) is counted when it is first read: when the
    searching run's own messages are left out, counting walks every hit.
    """

    query: str
    """The query as given."""

    terms: tuple[str, ...]
    """Its distinct terms, in query order."""

    outcome: SearchOutcome
    """How the search ended."""

    conversation_id: str | None
    """The conversation searched; `None` when the scope is every run."""

    run_id: str | None
    """The one run searched, when the search was given one."""

    documents: int = 0
    """How many messages the scope holds (each counted once)."""

    hits: tuple[SearchHit, ...] = ()
    """The hits shown, best first; matches already shown in an earlier hit's window are not repeated."""

    timings: SearchTimings = field(default_factory=SearchTimings)
    """Where the time went."""

    error: str | None = None
    """With `outcome='failed'`: the name of the exception."""

    mode: SearchMode = 'bm25'
    """How the hits were ranked (`score` is a BM25 score, a cosine similarity, or a hybrid's fused score)."""
    pending: int = 0
    """With `'semantic'` or `'hybrid'`: how many log entries the vector index had not applied yet
    (messages among them could not be found by meaning); 0 when it was current."""
    unindexed: tuple[int, ...] = ()
    """The entry numbers (`seq`) of messages in scope that pydantic-ai could not read, so that the
    index holds them without their text (`search.index_writer.readable_text`): no search finds
    them; every other message is searched as usual."""
    ranked: Sequence[Hit] = field(default=(), repr=False, compare=False)
    """Every matching message, best first (read lazily; most callers need only `hits`)."""

    @cached_property
    def matches(self) -> int:
        """How many messages matched in all, shown or not."""
        return len(self.ranked)
