"""`PersistentIndex`: a BM25 index kept in the log's store, as a tracked projection.

The index is a projection of the log (`eventlog.projection`): it stands on the storage
protocol's projection API, so it runs on every backend that offers it (an `LmdbEventLog`,
where it is persistent and shared by processes, a `PostgresEventLog`, and an `InMemoryEventLog`).
It follows the log by position: the backend stores the last `seq` it applied together with its
records, and before answering a search the index applies whatever was appended since, from any
process, in one write transaction per batch. Clearing its records and rebuilding gives the
same index.

Documents are the reference's: one per message, each counted once per conversation. A
run's own messages are its documents; history a run continues from another conversation
(a fork, or a run started elsewhere) is indexed again as that run's, because it is part
of the conversation's record. Positions are positions in the run's full record.

An index kept apart from its log (`eventlog.local_projections.LocalProjections`, where every read
of the log is a round trip to PostgreSQL) keeps what a search shows: the payloads in `ix.pos` and
the run names in `ix.starts`, so that a search reads nothing of the log but its last `seq`. They
follow erasure and deletion as the rest of the index does: an `erasure` or `deleted` entry drops
the conversation's records, and an erased conversation is indexed again from its placeholders.

The index is split by job: its tables and codecs (`search.index_format`), the writer applying
entries (`search.index_writer`), the check `verify` runs (`search.index_check`), and the query
side a search reads (`search.index_corpus`). This module holds the index itself, what keeps it
current, and its maintainer.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Final, TypeVar, cast

import msgspec

from eventlog._threads import to_thread
from eventlog.entries import decode_messages
from eventlog.errors import CorruptEntryError, EventLogError, InvalidArgumentError
from eventlog.lmdb_log import LmdbEventLog
from eventlog.projection import LogReader, ProjectionRecords, ProjectionSpec, ProjectionWriter
from eventlog.projection import id_prefix as ck  # the body still calls it `ck`, its name in eventlog._keys
from eventlog.replay import ReplayHistorySource
from search.analyzers import Analyzer, resolve_analyzer
from search.index_check import IndexFinding, index_differences
from search.index_corpus import DecodedCache, IndexCorpus, OneRun, RunPayloadCorpus
from search.index_format import (
    ALL_KEY,
    DROPPED,
    INDEX_PROJECTION,
    LOCAL_INDEX_PROJECTION,
    POS,
    IndexedLog,
    ScopeStats,
    pos_seq,
    read_meta,
    stats_decoder,
    stats_of,
    unindexed_seqs,
)
from search.index_writer import IndexWriter

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from eventlog.local_projections import PendingPosition
    from eventlog.log import EventLogBase
    from search.backend import Corpus, CorpusDocuments, SearchBackend
    from search.source import HistorySource

__all__ = [
    'INDEX_PROJECTION',
    'LOCAL_INDEX_PROJECTION',
    'IndexAnalyzerMismatch',
    'IndexFinding',
    'IndexState',
    'IndexedLog',
    'PersistentIndex',
    'backend_for',
    'maintain_index',
]

T = TypeVar('T')

_CATCH_UP_BATCH: Final = 5000
"""Entries applied per write transaction while catching up."""
_VERIFY_ATTEMPTS: Final = 3
"""Catch-ups `verify` tries before comparing, while appends keep landing after each one."""
_VERIFY_BATCH: Final = 1000
"""Entries `verify` applies per transaction of its scratch copy: LMDB keeps the pages one
transaction dirtied for reuse until the store is closed, and a batch dirties more of them as the
index grows, so smaller batches keep that memory small (the copy's commits are not synced)."""
_THREAD_BACKLOG: Final = 500
"""A backlog larger than this is applied in a worker thread."""


class IndexAnalyzerMismatch(EventLogError):
    """The index was built with another analyzer; rebuild it (`PersistentIndex.rebuild`) to switch."""


class IndexState(msgspec.Struct, frozen=True):
    """Where an index stands."""

    analyzer: str | None
    position: int
    """The last `seq` applied."""
    log_position: int
    """The log's last `seq`; the index is current when both are equal."""
    documents: int
    unindexed: tuple[int, ...] = ()
    """The `seq`s of the messages that could not be read to be indexed (`search.index_writer.readable_text`)."""


Scope = tuple[ScopeStats, tuple[int, ...]]
"""A search scope's statistics, and the `seq`s of its messages the index could not read."""


class PersistentIndex:
    """A search index kept in a log's store as a tracked projection, usable as a `SearchBackend`.

    On an `LmdbEventLog` it is persistent and shared by every process using the store; on an
    `InMemoryEventLog` it lives as long as the log (the same code, for tests and short-lived
    stores).

    Args:
        log: The log to index; the index lives in the same store.
        analyzer: How messages and queries become terms. The first index built in a store
            records its analyzer; a different one is refused until `rebuild(analyzer)`.
    """

    def __init__(self, log: IndexedLog, analyzer: str | Analyzer = 'default') -> None:
        self.log = log
        self.analyzer: Analyzer = resolve_analyzer(analyzer)
        self.apart: bool = getattr(log, 'projections_apart', False) is True
        """Whether the index is kept apart from its log (`LocalProjections`): it then keeps the
        payloads and run names a search shows, and reads nothing of the log but its position."""
        self.spec: ProjectionSpec = LOCAL_INDEX_PROJECTION if self.apart else INDEX_PROJECTION
        """The projection the index writes as (its format depends on `apart`)."""
        self._format = self.spec.format
        self._lock = threading.Lock()
        self.decoded = DecodedCache()
        self.listed: OrderedDict[str | None, tuple[int, CorpusDocuments]] = OrderedDict()
        """The documents of recent scopes (`IndexCorpus.documents`), by scope, with the index position they
        were read at (a scope's documents change only when the position does)."""
        stored, stored_format = self._read(
            lambda records, _: (read_meta(records, b'analyzer'), read_meta(records, b'format'))
        )
        if stored is not None and stored != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'the search index of this store was built with the {stored!r} analyzer, not {self.analyzer.name!r}; '
                f'rebuild it with that analyzer first (`eventlog reindex --analyzer {self.analyzer.name}`)'
            )
        self._unusable = False
        """The store is read-only and its index is in an older format: searches read the log instead."""
        if stored is not None and stored_format != self._format:
            if self._frozen():
                self._unusable = True
            else:
                self.rebuild()

    def _frozen(self) -> bool:
        """Whether the index cannot be written: its log is open read-only (`EventLogBase.read_only`)
        and keeps it in its own store. Searches then use the index only while it is current with
        the log, and otherwise index the log in memory per search; nothing is written."""
        return not self.apart and getattr(self.log, 'read_only', False) is True

    def _read(self, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        return self.log.read_projection(INDEX_PROJECTION, fn)

    @classmethod
    def for_log(cls, log: IndexedLog, analyzer: str | Analyzer = 'default') -> PersistentIndex:
        """The index of `log` for `analyzer`, shared by every caller in this process (with its
        cache of decoded messages)."""
        resolved = resolve_analyzer(analyzer)
        per_log = _shared.setdefault(log, {})
        index = per_log.get(resolved.name)
        if index is None:
            index = per_log[resolved.name] = cls(log, resolved)
        return index

    @classmethod
    def open_existing(cls, log: IndexedLog) -> PersistentIndex:
        """The store's index with the analyzer it was built with (`default` when none is built yet)."""
        stored = log.read_projection(INDEX_PROJECTION, lambda records, _: read_meta(records, b'analyzer'))
        return cls(log, 'default' if stored is None else stored)

    # -- keeping current ----------------------------------------------------------------------

    def state(self) -> IndexState:
        """The index's analyzer, position, document count, and the log's position."""

        def read(records: ProjectionRecords, reader: LogReader) -> IndexState:
            stats = records.get('stats', ALL_KEY)
            return IndexState(
                analyzer=read_meta(records, b'analyzer'),
                position=records.position() or 0,
                log_position=reader.last_seq(),
                documents=0 if stats is None else stats_decoder.decode(stats).docs,
                unindexed=unindexed_seqs(records, ALL_KEY),
            )

        return self._read(read)

    def seq_at(self, run_id: str, position: int) -> int | None:
        """The `seq` of the message shown at `position` of the run's record (`ix.pos`), or `None`
        when the index holds none there (as of its position: catch up first for the latest)."""

        def read(records: ProjectionRecords, _: LogReader) -> int | None:
            raw = records.get('pos', ck(run_id) + POS.pack(position))
            return None if raw is None else pos_seq(raw)

        if not 0 <= position <= 0xFFFFFFFF:
            return None
        return self._read(read)

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Apply every entry appended since the index's position; return how many were read.

        Each batch of entries is one write transaction, committing the index's records and
        its new position together. `progress(done, total)` is called after each batch.
        """
        with self._lock:
            done = 0
            while True:
                applied, remaining = self.log.write_projection(self.spec, self._apply_batch)
                done += applied
                if progress is not None:
                    progress(done, done + remaining)
                if applied == 0 or remaining == 0:
                    return done

    def _apply_batch(self, records: ProjectionWriter, reader: LogReader, limit: int | None = None) -> tuple[int, int]:
        """Apply the next batch of at most `limit` entries (`_CATCH_UP_BATCH` by default); return
        how many were read and how many remain."""
        limit = _CATCH_UP_BATCH if limit is None else limit
        stored = read_meta(records, b'analyzer')
        if stored is None:
            records.put('meta', b'analyzer', self.analyzer.name.encode())
            records.put('meta', b'format', self._format.encode())
        elif stored != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'the search index of this store was built with the {stored!r} analyzer, '
                f'not {self.analyzer.name!r}; rebuild it first'
            )
        position = records.position() or 0
        last = reader.last_seq()
        if position >= last:
            return 0, 0
        writer = IndexWriter(self, records, reader)
        applied = 0
        new_position = position
        for entry in reader.entries_after(position, limit=limit):
            writer.apply(entry)
            applied += 1
            new_position = entry.seq
        if applied < limit:
            new_position = last
        writer.flush(new_position)
        return applied, (0 if new_position >= last else last - new_position)

    def rebuild(
        self, analyzer: str | Analyzer | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Clear the index and build it again from the entries (optionally with another analyzer)."""
        if analyzer is not None:
            self.analyzer = resolve_analyzer(analyzer)
            # Shared indexes of this store built for another analyzer are now stale.
            _shared[self.log] = {self.analyzer.name: self}

        with self._lock:
            self.log.write_projection(self.spec, lambda records, _: records.clear())
        return self.catch_up(progress)

    def verify(self, *, scratch_dir: str | os.PathLike[str] | None = None) -> list[IndexFinding]:
        """Check that the index holds exactly what the log's entries give it.

        The index is first brought up to the log's last `seq`, as a search would. Then, in one
        read snapshot of the store, it is rebuilt from the entries up to its position into a
        scratch LMDB directory (in `scratch_dir`, the system's temporary directory by default:
        it needs room for about the index's size), one committed batch at a time so that memory
        stays bounded whatever the store's size, and the stored and rebuilt tables are walked
        side by side in key order, so that neither is held in memory. The scratch directory is
        removed afterwards. Appends and searches go on meanwhile. A finding names the table and
        the conversation concerned; `PersistentIndex.rebuild` (`eventlog reindex`) repairs any
        of them. No index built yet gives no findings. On a read-only store the index is not
        brought up to date first: it is checked as of its own position, writing nothing to the store.
        """
        with self._lock:
            if self._read(lambda records, _: records.get('meta', b'analyzer')) is None:
                return []
            for _ in range(0 if self._frozen() else _VERIFY_ATTEMPTS):
                try:
                    while self.log.write_projection(self.spec, self._apply_batch)[1]:
                        pass
                except (msgspec.DecodeError, struct.error, UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
                    return [IndexFinding('', 'meta', f'the index cannot be brought up to date ({exc})')]
                current = self._read(lambda records, reader: (records.position() or 0) >= reader.last_seq())
                if current:
                    break
            # Compared as of the index's position: entries appended since then are not its yet.
            return self.log.read_projection(
                self.spec, lambda records, reader: self._compare(records, reader, scratch_dir)
            )

    def _compare(
        self, stored: ProjectionRecords, reader: LogReader, scratch_dir: str | os.PathLike[str] | None
    ) -> list[IndexFinding]:
        """The differences between `stored` and the index rebuilt from `reader`'s entries up to
        `stored`'s position, in a scratch store of its own (`verify`)."""
        log = reader.as_of(stored.position() or 0)
        with tempfile.TemporaryDirectory(prefix='eventlog-verify-', dir=scratch_dir) as place:
            try:
                scratch = LmdbEventLog(place, sync=False)
            except EventLogError as exc:
                raise EventLogError(
                    f'verify could not make its scratch copy of the search index in {place}: {exc}'
                ) from None
            try:
                self.decoded.clear()
                try:
                    while scratch.write_projection(
                        self.spec, lambda records, _: self._apply_batch(records, log, _VERIFY_BATCH)
                    )[1]:
                        pass
                except EventLogError as exc:
                    raise EventLogError(
                        f'verify could not rebuild the search index beside itself in {place} '
                        f"(it needs about the index's size there; set TMPDIR to another place): {exc}"
                    ) from None
                finally:
                    self.decoded.clear()
                return scratch.read_projection(self.spec, lambda rebuilt, _: index_differences(stored, rebuilt))
            finally:
                scratch.close()

    def _read_scope(self, key: bytes) -> tuple[Scope, int]:
        """The scope's statistics (`_scope_stats`) and how many log positions the index is behind, in one read."""

        def read(records: ProjectionRecords, reader: LogReader) -> tuple[Scope, int]:
            behind = reader.last_seq() - (records.position() or 0)
            return self._scope_stats(records, key), behind

        return self._read(read)

    def _scope_stats(self, records: ProjectionRecords, key: bytes) -> Scope:
        """The scope's statistics, with the messages it could not index (`unindexed_seqs`); the
        cache of shown messages is emptied first if an erasure or a deletion was applied since it
        was filled (by this process or another sharing the index)."""
        self.decoded.follow(records.get('meta', DROPPED))
        return stats_of(records.get('stats', key)), unindexed_seqs(records, key)

    # -- searching ----------------------------------------------------------------------------

    async def open_corpus(self, *, conversation_id: str | None, run_id: str | None, analyzer: Analyzer) -> Corpus:
        """The corpus of one search, after applying everything appended so far."""
        if analyzer.name != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'this search uses the {analyzer.name!r} analyzer but the index was built with '
                f'{self.analyzer.name!r}; rebuild the index with {analyzer.name!r} first'
            )
        if run_id is not None:
            return await self._run_corpus(conversation_id, run_id, analyzer)
        key = ALL_KEY if conversation_id is None else ck(conversation_id)
        pending = self._start_log_position()
        if pending is not None:
            # A local index of a remote log: the log's position travels while the corpus ranks
            # from the local records; it catches up and ranks again only if the log moved on.
            try:
                stats, position = self._read(lambda records, _: (self._scope_stats(records, key), records.position()))
            except BaseException:
                with suppress(Exception):
                    pending.result()
                raise
            corpus = IndexCorpus(self, conversation_id, stats, (pending, position or 0, key))
            if stats[0].docs == 0:
                await corpus.settle()  # an empty corpus is not ranked: its count must be final now
            return corpus
        if self._unusable:
            return await self._log_corpus(conversation_id, analyzer)
        # The usual case, an index already current, takes one read; otherwise catch up first.
        stats, behind = self._read_scope(key)
        if behind > 0:
            if self._frozen():  # a read-only store whose index lags (or was never built): read the log
                return await self._log_corpus(conversation_id, analyzer)
            await self._catch_up_behind(behind)
            stats, _ = self._read_scope(key)
        return IndexCorpus(self, conversation_id, stats)

    async def _log_corpus(self, conversation_id: str | None, analyzer: Analyzer) -> Corpus:
        """The scope indexed in memory from the log itself, as an in-memory search does (the
        same ranking); for a read-only store whose index cannot be brought up to date."""
        from eventlog.log import EventLogBase
        from search.memory_index import MemoryCorpus

        assert isinstance(self.log, EventLogBase)  # `_frozen`: a log keeping the index in its store
        source = _ReadableReplay(self.log)
        corpus = await MemoryCorpus.build(source, conversation_id=conversation_id, run_id=None, analyzer=analyzer)
        corpus.unindexed = tuple(sorted(source.unindexed))
        return corpus

    async def _catch_up_behind(self, behind: int) -> None:
        if behind > _THREAD_BACKLOG:
            await to_thread(self.catch_up)
        else:
            self.catch_up()

    def _start_log_position(self) -> PendingPosition | None:
        """The log's position on its way, for an index kept apart from its log
        (`LocalProjections.start_log_position`); `None` when the index reads it with its records."""
        start = getattr(self.log, 'start_log_position', None)
        if start is None:
            return None
        return cast('Callable[[], PendingPosition | None]', start)()

    async def _run_corpus(self, conversation_id: str | None, run_id: str, analyzer: Analyzer) -> Corpus:
        """A single run's whole record, indexed in memory as the reference does for `run_id`: from
        its stored payloads when the index's log holds them (nothing decoded, no pydantic-ai)."""
        from eventlog.log import EventLogBase

        try:
            record = await self.log.get_run(run_id)
        except InvalidArgumentError:  # not a possible run id: answered like an unknown one
            record = None
        if record is None or (conversation_id is not None and record.conversation_id != conversation_id):
            return RunPayloadCorpus(run_id, None, [], analyzer)
        if isinstance(self.log, EventLogBase):
            branch = await self.log.branch(record.last_seq)
            entries = [(entry.seq, entry.payload) for entry in branch if entry.kind == 'message']
            return RunPayloadCorpus(run_id, record.conversation_id, entries, analyzer)
        from search.memory_index import MemoryCorpus

        return await MemoryCorpus.build(OneRun(self.log, record), conversation_id=None, run_id=None, analyzer=analyzer)


class _ReadableReplay(ReplayHistorySource):
    """The log's runs for an in-memory corpus, where a message pydantic-ai cannot read (damaged, or
    stored by an earlier version nested deeper than pydantic-ai reads) stands as an empty request: a
    document without text, as the index holds it, named in `unindexed`. The others read as usual."""

    def __init__(self, log: EventLogBase) -> None:
        super().__init__(log)
        self.unindexed: set[int] = set()
        """The `seq`s of the messages that could not be read, over every run read so far."""

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        """The run's messages, each one that cannot be read replaced by an empty request."""
        try:
            return await super().run_history(run_id=run_id)
        except CorruptEntryError:  # one message or more cannot be read: read them one by one
            pass
        from pydantic_ai.messages import ModelRequest

        payloads = await self.log.run_message_payloads(run_id)
        seqs = await self.run_entry_seqs(run_id=run_id)
        messages: list[ModelMessage] = []
        for seq, payload in zip(seqs, payloads, strict=True):
            try:
                messages.extend(decode_messages([payload]))
            except CorruptEntryError:
                messages.append(ModelRequest(parts=[]))
                self.unindexed.add(seq)
        return messages


_shared: weakref.WeakKeyDictionary[IndexedLog, dict[str, PersistentIndex]] = weakref.WeakKeyDictionary()
"""The index objects `PersistentIndex.for_log` hands out, per log and analyzer (only objects: the
records live in the store, whose backend also owns every handle on them)."""


def backend_for(
    source: HistorySource | SearchBackend | EventLogBase, analyzer: Analyzer, *, fallback: bool = False
) -> HistorySource | SearchBackend:
    """Where searches with `analyzer` read `source`: the one policy of the capability and the CLI.

    The persistent index when `source` replays a log whose store outlives the process (LMDB,
    PostgreSQL; searches then read only the postings of the query's terms; an encrypted store keeps
    it in memory only: docs/encryption.md); otherwise `source` itself, indexed in memory per search.
    When the store's index was built with another analyzer, it raises `IndexAnalyzerMismatch`,
    or with `fallback` returns `source` read through an in-memory corpus rebuilt per search
    (slower, same ranking; `eventlog reindex --analyzer NAME` rebuilds the index).
    """
    from eventlog.log import EventLogBase

    if isinstance(source, EventLogBase):
        source = ReplayHistorySource(source)
    if isinstance(source, ReplayHistorySource) and source.log.persistent:
        try:
            return PersistentIndex.for_log(source.log, analyzer)
        except IndexAnalyzerMismatch:
            if not fallback:
                raise
    return source


def maintain_index(store: IndexedLog) -> None:
    """The maintainer of the kind `ix` (`eventlog.projection.maintainer_for`): bring the store's index up to date,
    so that erased messages and deleted conversations leave its records before the log rewrites
    its files. The log runs it before every scrub and compaction and clears the index if it raises."""
    index = PersistentIndex.open_existing(store)
    if index.state().analyzer is not None:  # tables opened (by `eventlog stats`, say) but never built
        index.catch_up()
