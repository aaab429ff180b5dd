"""The seam between the search engine and an index.

The engine asks a `SearchBackend` for the `Corpus` of one search (the documents in scope),
then asks that corpus for ranked hits and for the messages around each hit. The in-memory
backend (`search.memory_index`) rebuilds the corpus from a `HistorySource` on every search;
a persistent index answers the same questions from storage.

A corpus has one document per stored message, each message counted once: when runs are
threaded (a run starts with a copy of its predecessor's history), the copy belongs to the
run that first held it. A run's kept messages are contiguous in its record, `[start, end)`
by position, and positions are those of the run's full record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, overload, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from search.analyzers import Analyzer

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = [
    'Corpus',
    'CorpusDocuments',
    'Hit',
    'ListedCorpus',
    'NumberedCorpus',
    'PayloadCorpus',
    'RankedHits',
    'RunSpan',
    'SearchBackend',
]


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching message."""

    run_id: str
    """The run whose record holds the message."""

    position: int
    """The message's position in that run's full record (0 is its first message)."""

    score: float
    """Its BM25 score, above zero."""


@dataclass(frozen=True, slots=True)
class RunSpan:
    """The part of one run's record that is in the corpus."""

    run_id: str
    """The run."""

    conversation_id: str | None
    """The conversation it belongs to, if any."""

    start: int
    """Position of the first message of the run in the corpus (messages before it belong to earlier runs)."""

    end: int
    """One past the position of the run's last message."""


@runtime_checkable
class Corpus(Protocol):
    """The documents one search ranks: one per in-scope message, each counted once."""

    @property
    def document_count(self) -> int:
        """How many messages are in scope (the `N` of BM25, and the size the answer reports).

        Final once `rank` returned; before, a corpus that checks it is current while it ranks
        may give the count it started with (never 0 unless final). Such a corpus has an `async
        settle()` that finishes the check without ranking.
        """
        ...

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        """Every document scoring above zero for `terms` (distinct, in query order), best first.

        Equal scores keep corpus order: runs in start order, then positions.
        """
        ...

    async def span(self, run_id: str) -> RunSpan:
        """Where the corpus's share of `run_id` lies; only asked about runs a hit named."""
        ...

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        """The run's corpus messages at positions in `[start, end)`, as `(position, message)` in order."""
        ...


@runtime_checkable
class NumberedCorpus(Protocol):
    """A corpus that can also tell which log entry stored each message (optional for a corpus).

    With it, a search result names every message it shows by its entry number (`seq`), the
    number `eventlog show`, `replay` and `fork --at` use.
    """

    async def entry_seqs(self, windows: Sequence[tuple[str, int, int]]) -> list[dict[int, int]]:
        """For each `(run_id, start, end)` window, the `seq` of the entry that stored the message
        at each position in `[start, end)`, by position; positions it cannot tell are left out."""
        ...


@runtime_checkable
class PayloadCorpus(Protocol):
    """A corpus that can hand out the stored JSON of the messages it shows, without decoding them
    (optional for a corpus; the persistent index is one). `SearchEngine.find(decode=False)` reads
    windows through it; from any other corpus it encodes the decoded messages."""

    async def payloads_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, bytes]]]:
        """For each `(run_id, start, end)` window, `(position, payload)` of its messages in order:
        pydantic-ai's JSON of each message, as stored."""
        ...


@dataclass(frozen=True, slots=True)
class CorpusDocuments:
    """Every document of a corpus, in corpus order: what a semantic ranking scores."""

    doc_ids: NDArray[np.int64]
    """The documents' ids, in corpus order (the ids `Corpus.rank`'s hits are built from)."""

    seqs: NDArray[np.int64]
    """The `seq` of the entry that stored each document's message; -1 where the corpus cannot tell."""

    locate: Callable[[int], tuple[str, int]]
    """A document id to its `(run_id, position)`."""

    texts: Callable[[], list[str]] | None = None
    """The documents' indexed texts, in the same order, when the corpus holds them (in memory)."""

    seq_list: list[int] = field(default_factory=list[int])
    """`seqs` as a list (filled on creation; one object per listing, so lookups by it can be remembered)."""

    def __post_init__(self) -> None:
        """Fill `seq_list`."""
        object.__setattr__(self, 'seq_list', self.seqs.tolist())


@runtime_checkable
class ListedCorpus(Protocol):
    """A corpus that can list its documents (needed for the `'semantic'` and `'hybrid'` modes)."""

    async def documents(self) -> CorpusDocuments:
        """Every document in scope, in corpus order."""
        ...


@runtime_checkable
class SearchBackend(Protocol):
    """Opens the corpus of one search."""

    async def open_corpus(self, *, conversation_id: str | None, run_id: str | None, analyzer: Analyzer) -> Corpus:
        """The corpus of the runs in scope.

        Args:
            conversation_id: Only runs of this conversation; `None` for every run.
            run_id: Only this run (after the conversation filter); `None` for every run in scope.
                With a run id, the run's whole record is its corpus.
            analyzer: How documents and queries become terms. A persistent index built with
                another analyzer must refuse (raise) rather than rank with mismatched terms.
        """
        ...


class RankedHits(Sequence[Hit]):
    """Ranked hits held as arrays and turned into `Hit`s only when read.

    A common term can match most of a large corpus, while an answer reads a handful of hits.
    Given unranked scores (`ranked=False`), only as much of the order as is read is computed:
    the best few are selected (a partition, linear) and sorted, and the selection widens when a
    reader goes past it. Equal scores keep document order either way.
    """

    __slots__ = ('_doc_ids', '_locate', '_pool_ids', '_pool_scores', '_scores', '_valid')

    def __init__(
        self,
        doc_ids: NDArray[np.int64],
        scores: NDArray[np.float64],
        locate: Callable[[int], tuple[str, int]],
        *,
        ranked: bool = True,
    ) -> None:
        """Wrap scored documents; `locate` maps a document id to `(run_id, position)`.

        With `ranked=True` the arrays are already best first (as `score_postings` returns them);
        with `ranked=False` they are in document order (as `score_unranked` returns them).
        """
        self._locate = locate
        self._pool_ids = doc_ids
        self._pool_scores = scores
        if ranked:
            self._doc_ids, self._scores, self._valid = doc_ids, scores, int(doc_ids.shape[0])
        else:
            self._doc_ids, self._scores, self._valid = doc_ids[:0], scores[:0], 0

    def __len__(self) -> int:
        """How many documents matched."""
        return int(self._pool_ids.shape[0])

    def _rank_through(self, index: int) -> None:
        """Make sure the order is known at least up to `index`."""
        if index < self._valid:
            return
        total = len(self)
        want = max(64, 2 * self._valid, index + 1)
        ids, scores = self._pool_ids, self._pool_scores
        if want < total:
            threshold = np.partition(scores, total - want)[total - want]
            keep = scores >= threshold  # every tie at the threshold, so document order decides among them
            ids, scores = ids[keep], scores[keep]
        order = np.argsort(-scores, kind='stable')
        self._doc_ids, self._scores, self._valid = ids[order], scores[order], int(order.shape[0])

    def scored(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Every matching document's id and score, unordered (as given)."""
        return self._pool_ids, self._pool_scores

    @property
    def locate(self) -> Callable[[int], tuple[str, int]]:
        """A document id to its `(run_id, position)`."""
        return self._locate

    def leading_ids(self, count: int) -> NDArray[np.int64]:
        """The document ids of the best `count` hits (fewer when fewer matched), best first."""
        count = min(count, len(self))
        if count == 0:
            return self._pool_ids[:0]
        self._rank_through(count - 1)
        return self._doc_ids[:count]

    @overload
    def __getitem__(self, index: int) -> Hit: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Hit]: ...

    def __getitem__(self, index: int | slice) -> Hit | Sequence[Hit]:
        """The hit(s) at `index`."""
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        self._rank_through(index)
        doc_id = int(self._doc_ids[index])
        run_id, position = self._locate(doc_id)
        return Hit(run_id=run_id, position=position, score=float(self._scores[index]))
