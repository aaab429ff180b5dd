"""The query side of the search index: `IndexCorpus`, one search's view of a `PersistentIndex`.

It ranks from the index's postings and statistics, lists a scope's documents, and reads the
messages a search shows (from `ix.pos`, or from the log through the projection's `LogReader`):
decoded and kept in the index's `DecodedCache`, or as their stored payloads, never decoded. A
search of a single run (`run_id`) is indexed in memory instead, from the run's stored payloads
(`RunPayloadCorpus`), or from its decoded messages (`OneRun`) where the index's log is not an
`EventLogBase`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec

from eventlog import EventLogBase, ReplayHistorySource, RunRecord, decode_messages
from eventlog.errors import CorruptEntryError, CorruptStoreError
from eventlog.projection import LogReader, ProjectionRecords, seq_key
from eventlog.projection import id_prefix as ck  # the body still calls it `ck`, its name in eventlog._keys
from search.index_format import (
    ALL_KEY,
    DAMAGED_INDEX,
    INDEX_PROJECTION,
    POS,
    SEQ,
    IndexedLog,
    doc_id_of,
    pos_seq,
    run_decoder,
    term_key,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from pydantic_ai.messages import ModelMessage

    from eventlog.local_projections import PendingPosition
    from search.analyzers import Analyzer
    from search.backend import CorpusDocuments, Hit, RankedHits, RunSpan
    from search.bm25 import TermPostings
    from search.persistent_index import PersistentIndex, Scope

# numpy and pydantic-ai (with the search modules that need them) are imported where the index
# is searched or messages are read, so that `eventlog stats` and `verify`, which open the
# index, start without them.

__all__ = ['DecodedCache', 'IndexCorpus', 'OneRun', 'RunPayloadCorpus']

_K = TypeVar('_K')


def _decode_readable(payloads: dict[_K, bytes]) -> dict[_K, ModelMessage]:
    """The stored messages decoded, in one call when all can be; a message pydantic-ai cannot
    read (`search.index_writer.readable_text`) is left out, so the messages around it still show."""
    if not payloads:
        return {}
    try:
        return dict(zip(payloads, decode_messages(list(payloads.values())), strict=True))
    except CorruptEntryError:
        decoded: dict[_K, ModelMessage] = {}
        for key, payload in payloads.items():
            with suppress(CorruptEntryError):
                decoded[key] = decode_messages([payload])[0]
        return decoded


_LISTED_SCOPES: Final = 64
"""Scopes whose document lists an index remembers (for semantic and hybrid searches)."""
_PREFETCH_HITS: Final = 24
"""Leading hits whose runs are resolved in the ranking transaction itself."""


class _RunInfo(msgspec.Struct, frozen=True):
    run_id: str
    conversation_id: str | None


class OneRun:
    def __init__(self, log: IndexedLog, record: RunRecord) -> None:
        self._log = log
        self._info = _RunInfo(record.run_id, record.conversation_id)

    async def list_runs(self) -> list[_RunInfo]:
        return [self._info]

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return await self._log.run_messages(run_id)

    # Entry numbers of a single-run search (`search.source.NumberedHistorySource`), from the log itself.
    async def run_entry_seqs(self, *, run_id: str) -> list[int]:
        if not isinstance(self._log, EventLogBase):
            return []
        return await ReplayHistorySource(self._log).run_entry_seqs(run_id=run_id)


class RunPayloadCorpus:
    """A single run's whole record indexed in memory from its stored payloads (what a search of
    one run, `run_id`, ranks): the texts are read from the JSON where `search.wire_text` can, and a
    message is decoded only when it is shown decoded, so such a search needs no pydantic-ai.
    It ranks as `search.memory_index.MemoryCorpus` does over the same run."""

    def __init__(
        self, run_id: str, conversation_id: str | None, entries: Sequence[tuple[int, bytes]], analyzer: Analyzer
    ) -> None:
        """Index the run's messages, `(seq, payload)` in record order."""
        from search.analyzers import term_counts
        from search.bm25 import TextPostings
        from search.index_writer import readable_text

        self._run_id = run_id
        self._conversation_id = conversation_id
        self._seqs = [seq for seq, _ in entries]
        self._payloads = [payload for _, payload in entries]
        texts = [readable_text(payload, seq) for seq, payload in entries]
        self.unindexed = tuple(seq for (seq, _), text in zip(entries, texts, strict=True) if text is None)
        """The run's messages that could not be read to be indexed (`search.index_writer.readable_text`)."""
        self._texts = [text or '' for text in texts]
        self._terms = TextPostings()
        for text in self._texts:
            self._terms.add(term_counts(analyzer, text))

    @property
    def document_count(self) -> int:
        """The run's messages."""
        return self._terms.document_count

    def _locate(self, doc_id: int) -> tuple[str, int]:
        return self._run_id, doc_id

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        """Every message scoring above zero for `terms`, best first."""
        from search.backend import RankedHits

        doc_ids, scores = self._terms.score(terms, k1=k1, b=b)
        return RankedHits(doc_ids, scores, self._locate, ranked=False)

    async def span(self, run_id: str) -> RunSpan:
        """The whole run; raises `KeyError` for another run."""
        from search.backend import RunSpan

        if run_id != self._run_id or not self._payloads:
            raise KeyError(run_id)
        return RunSpan(run_id, self._conversation_id, 0, len(self._payloads))

    def _positions(self, run_id: str, start: int, end: int) -> range:
        if run_id != self._run_id:
            return range(0)
        return range(max(start, 0), min(end, len(self._payloads)))

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        """The run's messages at positions in `[start, end)`, decoded."""
        positions = self._positions(run_id, start, end)
        decoded = _decode_readable({position: self._payloads[position] for position in positions})
        return [(position, decoded[position]) for position in positions if position in decoded]

    async def payloads_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, bytes]]]:
        """Each window's messages as stored (`search.backend.PayloadCorpus`)."""
        return [
            [(position, self._payloads[position]) for position in self._positions(run_id, start, end)]
            for run_id, start, end in windows
        ]

    async def entry_seqs(self, windows: Sequence[tuple[str, int, int]]) -> list[dict[int, int]]:
        """Each window's entry numbers, by position."""
        return [
            {position: self._seqs[position] for position in self._positions(run_id, start, end)}
            for run_id, start, end in windows
        ]

    async def documents(self) -> CorpusDocuments:
        """Every message of the run, in record order, with its entry number and indexed text."""
        import numpy as np

        from search.backend import CorpusDocuments

        count = self.document_count
        texts = self._texts
        return CorpusDocuments(
            np.arange(count, dtype=np.int64), np.asarray(self._seqs, dtype=np.int64), self._locate, lambda: list(texts)
        )


class IndexCorpus:
    """One search's view of the persistent index."""

    def __init__(
        self,
        index: PersistentIndex,
        conversation_id: str | None,
        scope: Scope,
        pending: tuple[PendingPosition, int, bytes] | None = None,
    ) -> None:
        self._ix = index
        self._conversation_id = conversation_id
        self._count, self._length = scope[0].docs, scope[0].length
        self.unindexed = scope[1]
        """The messages in scope that could not be read to be indexed (`search.index_writer.readable_text`)."""
        self._spans: dict[str, RunSpan] = {}
        self._pending = pending
        """The log's position on its way, the index position the counts were read at, the scope's key."""

    async def settle(self) -> bool:
        """Finish checking that the index was current when the search began: wait for the log's
        position and, if the log moved past the index, catch up and read the counts again.
        Whether it had to (the corpus's earlier answers are then stale)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        probe, position, key = pending
        behind = probe.result() - position
        if behind <= 0:
            return False
        await self._ix._catch_up_behind(behind)  # pyright: ignore[reportPrivateUsage]
        scope_stats = self._ix._scope_stats  # pyright: ignore[reportPrivateUsage]
        stats, self.unindexed = self._ix.log.read_projection(
            INDEX_PROJECTION, lambda records, _: scope_stats(records, key)
        )
        self._count, self._length = stats.docs, stats.length
        self._spans.clear()
        return True

    @property
    def document_count(self) -> int:
        """Messages in scope."""
        return self._count

    def _postings(self, records: ProjectionRecords, terms: Sequence[str]) -> dict[str, TermPostings]:
        import numpy as np

        from search.bm25 import TermPostings

        if self._conversation_id is not None:
            prefixes = [ck(self._conversation_id) + b'o', ck(self._conversation_id) + b'c']
        else:
            prefixes = [key + b'o' for key in self._conversations(records)]
        out: dict[str, TermPostings] = {}
        for term in terms:
            chunks: list[bytes] = []
            tkey = term_key(term) + b'\x00'
            for base in prefixes:
                chunks.extend(value for _, value in records.scan('post', prefix=base + tkey))
            if chunks:
                raw = np.frombuffer(b''.join(chunks), dtype='<i8')
                triples: NDArray[np.int64] = raw.astype(np.int64, copy=False).reshape(-1, 3)
                out[term] = TermPostings(
                    np.ascontiguousarray(triples[:, 0]),
                    np.ascontiguousarray(triples[:, 1]),
                    np.ascontiguousarray(triples[:, 2]),
                )
        return out

    def _conversations(self, records: ProjectionRecords) -> list[bytes]:
        return [key for key, _ in records.scan('stats') if key != ALL_KEY]

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        """Every in-scope message scoring above zero for `terms`, best first (after `settle`:
        ranked again when the index had to catch up)."""
        if self._pending is None:
            return self._rank(terms, k1=k1, b=b)
        try:
            hits = self._rank(terms, k1=k1, b=b)
        except BaseException:
            pending, self._pending = self._pending, None
            with suppress(Exception):
                pending[0].result()
            raise
        if await self.settle():
            hits = self._rank(terms, k1=k1, b=b)
        return hits

    def _rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        from search.backend import RankedHits
        from search.bm25 import average_length, score_unranked

        names: dict[int, str] = {}
        cache = self._ix.decoded
        apart = self._ix.apart

        def kept_name(records: ProjectionRecords, start: int) -> str | None:
            """The run's name from the cache, or from `ix.starts` in an index kept apart from its log."""
            name = cache.run_name(start)
            if name is None and apart:
                raw = records.get('starts', seq_key(start))
                if raw is not None:
                    name = raw.decode()
                    cache.put_run_name(start, name)
            return name

        def run_at(records: ProjectionRecords, reader: LogReader, start: int) -> str:
            name = kept_name(records, start)
            if name is None:
                name = reader.run_at(start)
                if name is None:
                    return '?'
                cache.put_run_name(start, name)
            return name

        def read(records: ProjectionRecords, reader: LogReader) -> RankedHits:
            postings = self._postings(records, terms)
            doc_ids, scores = score_unranked(
                terms, postings, n_docs=self._count, avgdl=average_length(self._length, self._count), k1=k1, b=b
            )
            hits = RankedHits(doc_ids, scores, locate, ranked=False)
            # An answer shows a handful of the best hits: name their runs and read their spans in
            # this same snapshot rather than one transaction per run later.
            starts = list(dict.fromkeys(doc_id >> 32 for doc_id in hits.leading_ids(_PREFETCH_HITS).tolist()))
            unknown = [start for start in starts if kept_name(records, start) is None]
            if len(unknown) > 1:  # named together (one round trip to a remote log)
                for start, name in zip(unknown, reader.runs_at(unknown), strict=True):
                    if name is not None:
                        cache.put_run_name(start, name)
            for start in starts:
                if start not in names:
                    name = names[start] = run_at(records, reader, start)
                    self._read_span(records, name)
            return hits

        def locate(doc_id: int) -> tuple[str, int]:
            start = doc_id >> 32
            name = names.get(start)
            if name is None:
                name = self._ix.log.read_projection(
                    INDEX_PROJECTION, lambda records, reader: run_at(records, reader, start)
                )
                names[start] = name
            return name, doc_id & 0xFFFFFFFF

        return self._ix.log.read_projection(INDEX_PROJECTION, read)

    async def documents(self) -> CorpusDocuments:
        """Every message in scope, in corpus order, with the `seq` of the entry that stored it."""
        import numpy as np

        from search.backend import CorpusDocuments

        listed = self._ix.listed
        scope = self._conversation_id

        def read(
            records: ProjectionRecords, _: LogReader, fresh: bool = False
        ) -> tuple[int, list[int], list[int], dict[int, str]] | None:
            at = records.position() or 0
            cached = listed.get(scope)
            if not fresh and cached is not None and cached[0] == at:
                return None
            if self._conversation_id is not None:
                prefix = ck(self._conversation_id)
                names = [key[len(prefix) :].decode() for key, _ in records.scan('convruns', prefix=prefix)]
                pairs = [(name, records.get('runs', name.encode())) for name in names]
            else:
                pairs = [(key.decode(), value) for key, value in records.scan('runs')]
            doc_ids: list[int] = []
            seqs: list[int] = []
            starts: dict[int, str] = {}
            for name, raw in pairs:
                if raw is None:
                    continue
                run = run_decoder.decode(raw)
                starts[run.start_seq] = name
                first = run.first if self._conversation_id is not None else run.prefix
                end = run.prefix + run.own
                if end <= first:
                    continue
                key_prefix = ck(name)
                for key, value in records.scan('pos', prefix=key_prefix, start=key_prefix + POS.pack(first)):
                    position = POS.unpack_from(key, len(key_prefix))[0]
                    if position >= end:
                        break
                    doc_ids.append(doc_id_of(run.start_seq, position))
                    seqs.append(pos_seq(value))
            return at, doc_ids, seqs, starts

        found = self._ix.log.read_projection(INDEX_PROJECTION, read)
        if found is None:
            cached = listed.get(scope)
            if cached is not None:
                return cached[1]
            found = self._ix.log.read_projection(INDEX_PROJECTION, lambda records, reader: read(records, reader, True))
            assert found is not None
        position, doc_ids, seqs, starts = found
        ids = np.asarray(doc_ids, dtype=np.int64)
        order = np.argsort(ids, kind='stable')

        def locate(doc_id: int) -> tuple[str, int]:
            return starts.get(doc_id >> 32, '?'), doc_id & 0xFFFFFFFF

        documents = CorpusDocuments(ids[order], np.asarray(seqs, dtype=np.int64)[order], locate)
        listed[scope] = (position, documents)
        listed.move_to_end(scope)
        while len(listed) > _LISTED_SCOPES:
            listed.popitem(last=False)
        return documents

    def _read_span(self, records: ProjectionRecords, run_id: str) -> RunSpan | None:
        """The run's span, read from `records` and remembered for this search (`None` for an unknown run)."""
        from search.backend import RunSpan

        cached = self._spans.get(run_id)
        if cached is not None:
            return cached
        raw = records.get('runs', run_id.encode())
        if raw is None:
            return None
        try:
            run = run_decoder.decode(raw)
        except msgspec.DecodeError:
            raise CorruptStoreError(DAMAGED_INDEX.format(f'its record of run {run_id!r} cannot be read')) from None
        # Across the whole store, history a run continued is held by the runs that wrote it;
        # only within one conversation can it be this run's (a fork, or a run started elsewhere).
        first = run.first if self._conversation_id is not None else run.prefix
        span = self._spans[run_id] = RunSpan(run_id, run.conversation_id, first, run.prefix + run.own)
        return span

    async def span(self, run_id: str) -> RunSpan:
        """Where the run's share of the corpus lies."""
        span = self._spans.get(run_id)
        if span is None:
            span = self._ix.log.read_projection(INDEX_PROJECTION, lambda records, _: self._read_span(records, run_id))
        if span is None:
            raise CorruptStoreError(DAMAGED_INDEX.format(f'a match names run {run_id!r}, which it has no record of'))
        return span

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        """The run's corpus messages at positions in `[start, end)`."""
        return (await self.messages_many([(run_id, start, end)]))[0]

    # --- entry numbers (`search.backend.NumberedCorpus`): read from `ix.pos` alone -----------------
    async def entry_seqs(self, windows: Sequence[tuple[str, int, int]]) -> list[dict[int, int]]:
        """For each `(run_id, start, end)` window, `position -> seq` of its messages, from `ix.pos`."""

        def read(records: ProjectionRecords, _: LogReader) -> list[dict[int, int]]:
            out: list[dict[int, int]] = []
            for run_id, start, end in windows:
                found: dict[int, int] = {}
                out.append(found)
                start = max(start, 0)
                if end <= start:
                    continue
                prefix = ck(run_id)
                for key, value in records.scan('pos', prefix=prefix, start=prefix + POS.pack(start)):
                    position = POS.unpack_from(key, len(prefix))[0]
                    if position >= end:
                        break
                    found[position] = pos_seq(value)
            return out

        return self._ix.log.read_projection(INDEX_PROJECTION, read)

    async def messages_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, ModelMessage]]]:
        """The corpus messages of several `(run_id, start, end)` windows, read and decoded together."""
        cache = self._ix.decoded
        generation = cache.generation  # before reading: a message read before an erasure is not kept after it
        found = await self._window_payloads(windows, cached=cache.__contains__)
        messages: dict[int, ModelMessage] = {}
        present: dict[int, bytes] = {}
        evicted: list[int] = []
        for window in found:
            for _, seq, payload in window:
                if payload is not None:
                    present[seq] = payload
                elif (hit := cache.get(seq)) is not None:
                    messages[seq] = hit
                else:
                    evicted.append(seq)  # dropped from the cache since the read: read it again
        if evicted:
            again = self._ix.log.read_projection(INDEX_PROJECTION, lambda _, reader: reader.payloads(evicted))

            present.update((seq, payload) for seq, payload in zip(evicted, again, strict=True) if payload is not None)
        if present:
            for seq, message in _decode_readable(present).items():
                cache.put(seq, message, generation)
                messages[seq] = message
        return [[(position, messages[seq]) for position, seq, _ in window if seq in messages] for window in found]

    async def payloads_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, bytes]]]:
        """The stored payloads (pydantic-ai's JSON) of the corpus messages of several `(run_id, start, end)`
        windows, read together and never decoded: what `SearchEngine.find(decode=False)` shows."""
        found = await self._window_payloads(windows, cached=lambda _: False)
        return [[(position, payload) for position, _, payload in window if payload is not None] for window in found]

    async def _window_payloads(
        self, windows: Sequence[tuple[str, int, int]], *, cached: Callable[[int], bool]
    ) -> list[list[tuple[int, int, bytes | None]]]:
        """Each window's messages as `(position, seq, payload)`, in one read of the index and the log.

        The payload is read unless `cached(seq)` says the caller holds the message already (it is
        then `None`); a message whose entry the log no longer holds is left out.
        """
        spans = {run_id: await self.span(run_id) for run_id, _, _ in windows}

        def read(records: ProjectionRecords, reader: LogReader) -> list[list[tuple[int, int, bytes | None]]]:
            out: list[list[tuple[int, int, bytes | None]]] = []
            for run_id, start, end in windows:
                found: list[tuple[int, int, bytes | None]] = []
                out.append(found)
                start = max(start, spans[run_id].start)
                if end <= start:
                    continue
                prefix = ck(run_id)
                for key, value in records.scan('pos', prefix=prefix, start=prefix + POS.pack(start)):
                    position = POS.unpack_from(key, len(prefix))[0]
                    if position >= end:
                        break
                    seq = pos_seq(value)
                    # An index kept apart from its log keeps the payload after the seq.
                    kept = value[SEQ.size :] if len(value) > SEQ.size and not cached(seq) else None
                    found.append((position, seq, kept))
            # The payloads neither kept nor held by the caller, read together (one round trip to a remote log).
            missing = list(
                dict.fromkeys(seq for window in out for _, seq, kept in window if kept is None and not cached(seq))
            )
            if not missing:
                return out
            payloads = dict(zip(missing, reader.payloads(missing), strict=True))
            return [
                [
                    (position, seq, kept if kept is not None else payloads.get(seq))
                    for position, seq, kept in window
                    if kept is not None or payloads.get(seq, b'') is not None
                ]
                for window in out
            ]

        return self._ix.log.read_projection(INDEX_PROJECTION, read)


class DecodedCache:
    """Recently shown messages, decoded, by `seq` (entries never change, and a deleted entry's
    `seq` is never reused; the cache is still cleared whenever a deletion is applied, so a
    deleted message's text does not linger in memory)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[int, ModelMessage] = OrderedDict()
        self._lock = threading.Lock()
        self._run_names: dict[int, str] = {}
        self._dropped: bytes | None = None
        self.generation = 0
        """How many times the cache was emptied (`put` takes the generation its message was read at)."""

    def follow(self, dropped: bytes | None) -> None:
        """Empty the cache unless `dropped` (the index's `ix.meta` mark of the last erasure or
        deletion applied) is the mark it was filled under: another process sharing the index may
        have applied one, and an erased message must not be shown from here."""
        if dropped != self._dropped:
            with self._lock:
                self._items.clear()
                self._dropped = dropped
                self.generation += 1

    def run_name(self, start: int) -> str | None:
        """The id of the run whose first entry is `start`, if remembered (a run's start never changes)."""
        return self._run_names.get(start)

    def put_run_name(self, start: int, name: str) -> None:
        """Remember the run starting at `start` (saves a read of the log per hit on a remote store)."""
        with self._lock:
            if len(self._run_names) >= self._size:
                self._run_names.clear()
            self._run_names[start] = name

    def __contains__(self, seq: int) -> bool:
        return seq in self._items

    def get(self, seq: int) -> ModelMessage | None:
        with self._lock:
            message = self._items.get(seq)
            if message is not None:
                self._items.move_to_end(seq)
            return message

    def put(self, seq: int, message: ModelMessage, generation: int) -> None:
        """Remember `message`, read while the cache was at `generation`: not if it was emptied since
        (the message may have been read before the erasure that emptied it)."""
        with self._lock:
            if generation != self.generation:
                return
            self._items[seq] = message
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._run_names.clear()
            self.generation += 1
