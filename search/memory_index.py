"""The in-memory corpus, rebuilt from a `HistorySource` for every search.

Runs are read in start order, filtered by scope, and each message is counted once:
a run started with earlier history repeats it at the head of its own record, so the
leading messages an earlier in-scope run already holds are left out. Comparison ignores
what pydantic-ai stamps onto a message when a run takes it over (timestamps, run and
conversation ids, rendered instructions, instruction bookkeeping parts), except that a
request to which the later run added an instruction change counts as new. Once a run
brings a new message, the rest of its record is kept, repeats included.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import TypeAdapter
from pydantic_ai import messages as _messages
from pydantic_ai.messages import ModelMessage, ModelRequest

from search.analyzers import Analyzer, term_counts
from search.backend import Corpus, CorpusDocuments, Hit, RankedHits, RunSpan
from search.bm25 import TextPostings
from search.render import index_text
from search.source import HistorySource, NumberedHistorySource

__all__ = ['HistorySourceBackend', 'MemoryCorpus', 'message_identity']


class _Absent:
    """Stands in for a part class this pydantic-ai version does not have."""


if TYPE_CHECKING:
    from pydantic_ai.messages import InstructionBaselinePart, InstructionDeltaPart
else:
    InstructionDeltaPart = getattr(_messages, 'InstructionDeltaPart', _Absent)
    InstructionBaselinePart = getattr(_messages, 'InstructionBaselinePart', _Absent)

_MESSAGE_ADAPTER: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_STAMPED_FIELDS = ('timestamp', 'run_id', 'conversation_id')
_BOOKKEEPING_PARTS: tuple[type, ...] = (InstructionDeltaPart, InstructionBaselinePart)


def message_identity(message: ModelMessage) -> bytes:
    """A digest that is equal for two copies of one message, whichever run holds them.

    It covers the message as pydantic-ai serializes it, less the fields stamped per run
    (`timestamp`, `run_id`, `conversation_id`, and a request's `instructions` and
    instruction bookkeeping parts). A message that cannot be serialized gets a digest
    of its own, equal to no other.
    """
    leave_out: dict[str, Any] = dict.fromkeys(_STAMPED_FIELDS, True)
    if isinstance(message, ModelRequest):
        leave_out['instructions'] = True
        bookkeeping = [index for index, part in enumerate(message.parts) if isinstance(part, _BOOKKEEPING_PARTS)]
        if bookkeeping:
            leave_out['parts'] = dict.fromkeys(bookkeeping, True)
    try:
        encoded = _MESSAGE_ADAPTER.dump_json(message, exclude=leave_out)
    except Exception:
        return b'unserializable:%d' % id(message)
    return hashlib.blake2b(encoded, digest_size=20).digest()


def _adds_instruction_change(message: ModelMessage, earlier: ModelMessage) -> bool:
    """Whether `message` carries an instruction change its earlier copy lacks."""
    if not isinstance(message, ModelRequest):
        return False
    earlier_parts = list(earlier.parts)
    return any(isinstance(part, InstructionDeltaPart) and part not in earlier_parts for part in message.parts)


@dataclass(slots=True)
class _Section:
    """One run's share of the corpus: its messages from `start` on."""

    run_id: str
    conversation_id: str | None
    start: int
    messages: list[ModelMessage]
    first_doc: int


class MemoryCorpus:
    """A corpus held in memory: an inverted index over the rendered messages in scope."""

    def __init__(self, sections: Sequence[_Section], analyzer: Analyzer, source: HistorySource | None = None) -> None:
        """Index `sections` (built by `MemoryCorpus.build` from `source`)."""
        self._source = source
        self._seqs: dict[str, list[int]] = {}
        self._sections = list(sections)
        self._by_run = {section.run_id: section for section in self._sections}
        self._doc_section: list[int] = []
        self._terms = TextPostings()
        self.unindexed: tuple[int, ...] = ()
        """The messages in scope that could not be read to be indexed (`SearchResult.unindexed`): set by
        whoever built the corpus from a source that can have them (`PersistentIndex`'s read of the log)."""
        for section_index, section in enumerate(self._sections):
            for message in section.messages:
                self._terms.add(term_counts(analyzer, index_text(message)))
                self._doc_section.append(section_index)

    @classmethod
    async def build(
        cls,
        source: HistorySource,
        *,
        conversation_id: str | None,
        run_id: str | None,
        analyzer: Analyzer,
    ) -> MemoryCorpus:
        """Read the in-scope runs from `source` and index them (see `SearchBackend.open_corpus`)."""
        runs = list(await source.list_runs())
        if conversation_id is not None:
            runs = [run for run in runs if run.conversation_id == conversation_id]
        if run_id is not None:
            runs = [run for run in runs if run.run_id == run_id]
        sections: list[_Section] = []
        latest_copy: dict[bytes, ModelMessage] = {}
        listed: set[str] = set()
        doc_count = 0
        for index, run in enumerate(runs):
            if run.run_id in listed:
                continue
            listed.add(run.run_id)
            record = await source.run_history(run_id=run.run_id)
            # Identities are computed only where needed: the leading messages to look up, and
            # the rest of the record when a later run may inherit it.
            identities: list[bytes] = []
            start = 0
            while start < len(record) and latest_copy:
                identities.append(message_identity(record[start]))
                earlier = latest_copy.get(identities[start])
                if earlier is None or _adds_instruction_change(record[start], earlier):
                    break
                start += 1
            if index < len(runs) - 1:
                identities.extend(message_identity(message) for message in record[len(identities) :])
                latest_copy.update(zip(identities, record, strict=True))
            if start == len(record):
                continue
            sections.append(_Section(run.run_id, run.conversation_id, start, record[start:], doc_count))
            doc_count += len(record) - start
        return cls(sections, analyzer, source)

    @property
    def document_count(self) -> int:
        """How many messages are in scope."""
        return self._terms.document_count

    def _locate(self, doc_id: int) -> tuple[str, int]:
        section = self._sections[self._doc_section[doc_id]]
        return section.run_id, section.start + doc_id - section.first_doc

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        """Every message scoring above zero for `terms`, best first."""
        doc_ids, scores = self._terms.score(terms, k1=k1, b=b)
        return RankedHits(doc_ids, scores, self._locate, ranked=False)

    async def span(self, run_id: str) -> RunSpan:
        """Where `run_id`'s messages lie; raises `KeyError` for a run outside the corpus."""
        section = self._by_run[run_id]
        return RunSpan(run_id, section.conversation_id, section.start, section.start + len(section.messages))

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        """`run_id`'s corpus messages at positions in `[start, end)`."""
        section = self._by_run.get(run_id)
        if section is None:
            return []
        first = max(start, section.start)
        last = min(end, section.start + len(section.messages))
        return [(position, section.messages[position - section.start]) for position in range(first, last)]

    async def documents(self) -> CorpusDocuments:
        """Every message in scope, in corpus order, with its entry number when the source can tell."""
        count = self.document_count
        windows = [(s.run_id, s.start, s.start + len(s.messages)) for s in self._sections]
        numbered = await self.entry_seqs(windows)
        seqs = np.full(count, -1, dtype=np.int64)
        for section, found in zip(self._sections, numbered, strict=True):
            for position, seq in found.items():
                seqs[section.first_doc + position - section.start] = seq

        def texts() -> list[str]:
            return [index_text(message) for section in self._sections for message in section.messages]

        return CorpusDocuments(np.arange(count, dtype=np.int64), seqs, self._locate, texts)

    async def entry_seqs(self, windows: Sequence[tuple[str, int, int]]) -> list[dict[int, int]]:
        """The entry numbers of the windows' messages, when the source can number them (else none)."""
        source = self._source
        out: list[dict[int, int]] = []
        for run_id, start, end in windows:
            if not isinstance(source, NumberedHistorySource):
                out.append({})
                continue
            seqs = self._seqs.get(run_id)
            if seqs is None:
                seqs = self._seqs[run_id] = await source.run_entry_seqs(run_id=run_id)
            out.append({position: seqs[position] for position in range(max(start, 0), min(end, len(seqs)))})
        return out


class HistorySourceBackend:
    """A `SearchBackend` that rebuilds an in-memory corpus from a `HistorySource` for every search."""

    def __init__(self, source: HistorySource) -> None:
        """Search `source`."""
        self.source = source

    async def open_corpus(self, *, conversation_id: str | None, run_id: str | None, analyzer: Analyzer) -> Corpus:
        """Read and index the in-scope runs."""
        return await MemoryCorpus.build(self.source, conversation_id=conversation_id, run_id=run_id, analyzer=analyzer)

    def __repr__(self) -> str:
        return f'HistorySourceBackend({self.source!r})'
