"""`LmdbIndex`: a persistent BM25 index kept in the log's store, as a tracked projection.

The index is a projection of the log (`eventlog.projection`): it stands on the storage
protocol's projection API, so it runs on every backend that offers it (an `LmdbEventLog`,
where it is persistent and shared by processes, and an `InMemoryEventLog`). It follows the
log by position: the backend stores the last `seq` it applied together with its records,
and before answering a search the index applies whatever was appended since, from any
process, in one write transaction per batch. Clearing its records and rebuilding gives the
same index.

Documents are the reference's: one per message, each counted once per conversation. A
run's own messages are its documents; history a run continues from another conversation
(a fork, or a run started elsewhere) is indexed again as that run's, because it is part
of the conversation's record. Positions are positions in the run's full record.

Tables of the projection `ix` (in LMDB the named databases `ix.<table>`); its position, the
last `seq` applied, is kept by the backend beside them:

- `ix.meta`     analyzer name, format
- `ix.post`     ck(conv) + flag + term + NUL + block -> packed (doc id, tf, length) triples;
                flag `o` for a run's own messages, `c` for copies of history from elsewhere
- `ix.stats`    ck(conv) -> (documents, total length, own documents, own total length)
- `ix.runs`     run id -> (conversation, start seq, prefix length, own count, first position)
- `ix.convruns` ck(conv) + run id -> ''
- `ix.pos`      ck(run) + position -> seq of the message shown at that position (followed by the
                message's payload in an index kept apart from its log)
- `ix.held`     ck(conv) + seq -> '' (messages the conversation's corpus already holds)
- `ix.copies`   ck(source conv) + ck(conv) -> '' (conversations holding copies of another's messages)
- `ix.starts`   seq of a run's `run_started` entry -> run id (only in an index kept apart from its log)

An index kept apart from its log (`eventlog.local_projections.LocalProjections`, where every read
of the log is a round trip to PostgreSQL) keeps what a search shows: the payloads in `ix.pos` and
the run names in `ix.starts`, so that a search reads nothing of the log but its last `seq`. They
follow erasure and deletion as the rest of the index does: an `erasure` or `deleted` entry drops
the conversation's records, and an erased conversation is indexed again from its placeholders.

A document id is `start seq of its run << 32 | position`, so ids sort in corpus order
(runs in start order, then positions), which is how BM25 ties are ordered.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, cast

import msgspec

from eventlog import Entry, EventLogBase, ReplayHistorySource, RunRecord, decode_messages
from eventlog._threads import to_thread
from eventlog.errors import CorruptStoreError, EventLogError, InvalidArgumentError
from eventlog.projection import LogReader, ProjectionRecords, ProjectionSpec, ProjectionStore, ProjectionWriter, seq_key
from eventlog.projection import id_prefix as ck  # the body still calls it `ck`, its name in eventlog._keys
from search.analyzers import Analyzer, resolve_analyzer, term_counts
from search.wire_text import wire_lines

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from pydantic_ai.messages import ModelMessage

    from eventlog.local_projections import PendingPosition
    from search.backend import Corpus, CorpusDocuments, Hit, RankedHits, RunSpan
    from search.bm25 import TermPostings

# numpy and pydantic-ai (with the search modules that need them) are imported where the index
# is searched or messages are read, so that `eventlog stats` and `verify`, which open the
# index, start without them.

__all__ = [
    'INDEX_PROJECTION',
    'LOCAL_INDEX_PROJECTION',
    'IndexAnalyzerMismatch',
    'IndexFinding',
    'IndexState',
    'IndexedLog',
    'LmdbIndex',
    'maintain_index',
]

T = TypeVar('T')

_DAMAGED_INDEX: Final = 'the search index is damaged: {}; rebuild it with `eventlog reindex` (the log is not affected)'

INDEX_FORMAT: Final = 3
"""What the index holds, by version: 2 leaves the search tool's own calls and returns out of
the documents; 3 keeps the position with the projection API rather than in `ix.meta`. An
index of another version is rebuilt from the entries when first opened."""
LOCAL_INDEX_FORMAT: Final = 4
"""The format of an index kept apart from its log: 3, and it keeps the payloads and run names a
search shows (`ix.pos` values, `ix.starts`)."""
_BLOCK: Final = 64
"""Postings per block: small enough that rewriting the last block on append stays cheap."""
_MAX_TERM_BYTES: Final = 200
_CATCH_UP_BATCH: Final = 5000
"""Entries applied per write transaction while catching up."""
_THREAD_BACKLOG: Final = 500
"""A backlog larger than this is applied in a worker thread."""
_LISTED_SCOPES: Final = 64
"""Scopes whose document lists an index remembers (for semantic and hybrid searches)."""
_PREFETCH_HITS: Final = 24
"""Leading hits whose runs are resolved in the ranking transaction itself."""

_POS = struct.Struct('>I')
_TRIPLE = struct.Struct('<qqq')
_SEQ = struct.Struct('>Q')
_BLOCK_NO = struct.Struct('>I')
_TABLES = ('meta', 'post', 'stats', 'runs', 'convruns', 'pos', 'held', 'copies', 'starts')

INDEX_PROJECTION: Final = ProjectionSpec(
    'ix', _TABLES, format=str(INDEX_FORMAT), maintainer='search.lmdb_index:maintain_index'
)
"""The index as a projection of the store: its name, tables, format and maintainer (the log runs
`maintain_index` before every scrub and compaction, whatever the calling process imported)."""
LOCAL_INDEX_PROJECTION: Final = ProjectionSpec(
    'ix', _TABLES, format=str(LOCAL_INDEX_FORMAT), maintainer='search.lmdb_index:maintain_index'
)
"""`INDEX_PROJECTION` for an index kept apart from its log (format `LOCAL_INDEX_FORMAT`)."""


class IndexedLog(ProjectionStore, Protocol):
    """What the index needs of a log: the projection API, and a run's record and messages."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def run_messages(self, run_id: str) -> list[ModelMessage]: ...


class IndexAnalyzerMismatch(EventLogError):
    """The index was built with another analyzer; rebuild it (`LmdbIndex.rebuild`) to switch."""


class IndexState(msgspec.Struct, frozen=True):
    """Where an index stands."""

    analyzer: str | None
    position: int
    """The last `seq` applied."""
    log_position: int
    """The log's last `seq`; the index is current when both are equal."""
    documents: int


class IndexFinding(msgspec.Struct, frozen=True):
    """A difference between the search index and what the log's entries give it."""

    conversation_id: str
    """The conversation concerned; empty when the difference is not one conversation's."""
    table: str
    """The index table (`ix.` + this name) where the difference lies."""
    reason: str


class _Verified(Exception):
    """Raised to abort `LmdbIndex.verify`'s transaction, carrying its findings."""

    def __init__(self, findings: list[IndexFinding]) -> None:
        super().__init__()
        self.findings = findings


_MAX_INDEX_FINDINGS: Final = 20
"""Differences listed per index table; the rest are counted."""


_SCRATCH: Final = b'\xff\xff\xffverify\x00'
"""Key prefix under which `LmdbIndex.verify` rebuilds the index beside the stored one, in its always
aborted transaction. No key the index writes starts with `0xff` (ids and terms are UTF-8, `seq`s
are big-endian below 2**63), so the rebuilt records sort after every stored one."""
_AFTER_SCRATCH: Final = _SCRATCH[:-1] + b'\x01'
"""The smallest key after every key starting with `_SCRATCH`."""


class _ScratchRecords:
    """`ProjectionWriter` over the keys of another starting with `_SCRATCH`: an empty projection
    of its own (with its position kept here) for `LmdbIndex.verify` to rebuild the index into."""

    __slots__ = ('_position', '_records')

    def __init__(self, records: ProjectionWriter) -> None:
        self._records = records
        self._position: int | None = None

    def position(self) -> int | None:
        return self._position

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._records.get(table, _SCRATCH + key)

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        cut = len(_SCRATCH)
        found = self._records.scan(
            table, prefix=_SCRATCH + prefix, start=None if start is None else _SCRATCH + start, reverse=reverse
        )
        return ((key[cut:], value) for key, value in found)

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._records.put(table, _SCRATCH + key, value)

    def delete(self, table: str, key: bytes) -> None:
        self._records.delete(table, _SCRATCH + key)

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        cut = len(_SCRATCH)
        return [key[cut:] for key in self._records.delete_prefix(table, _SCRATCH + prefix)]

    def set_position(self, seq: int) -> None:
        self._position = seq

    def clear(self) -> None:
        for table in _TABLES:
            self._records.delete_prefix(table, _SCRATCH)
        self._position = None


def _stored_items(records: ProjectionRecords, table: str) -> Iterator[tuple[bytes, bytes]]:
    """The stored records of `table` in key order, without the rebuilt ones (`_SCRATCH`) nor
    the `_DROPPED` mark (for caches, absent from indexes built before it: not derived content)."""
    for key, value in records.scan(table):
        if key.startswith(_SCRATCH):
            break
        if table != 'meta' or key != _DROPPED:
            yield key, value
    for key, value in records.scan(table, start=_AFTER_SCRATCH):  # damaged keys sorting after the rebuilt ones
        if table != 'meta' or key != _DROPPED:
            yield key, value


def _rebuilt_items(records: ProjectionRecords, table: str) -> Iterator[tuple[bytes, bytes]]:
    cut = len(_SCRATCH)
    for key, value in records.scan(table, prefix=_SCRATCH):
        if table != 'meta' or key[cut:] != _DROPPED:
            yield key[cut:], value


def _index_conversation(table: str, key: bytes) -> str:
    if table in ('meta', 'runs', 'starts') or key == _ALL:
        return ''
    cut = key.find(b'\x00')
    return key[: max(cut, 0)].decode(errors='replace')


def _table_differences(
    table: str, have: Iterator[tuple[bytes, bytes]], want: Iterator[tuple[bytes, bytes]]
) -> list[IndexFinding]:
    """The differences between two tables given in key order, walked side by side: the first
    `_MAX_INDEX_FINDINGS`, then how many more (neither table is held in memory)."""
    findings: list[IndexFinding] = []
    more = 0
    stored, rebuilt = next(have, None), next(want, None)
    while True:
        if stored is not None and (rebuilt is None or stored[0] < rebuilt[0]):
            key, what = stored[0], 'holds a key the entries do not give: {!r}'
            stored = next(have, None)
        elif rebuilt is not None and (stored is None or rebuilt[0] < stored[0]):
            key, what = rebuilt[0], 'lacks the key {!r}'
            rebuilt = next(want, None)
        elif stored is not None and rebuilt is not None:
            key, same = stored[0], stored[1] == rebuilt[1]
            stored, rebuilt = next(have, None), next(want, None)
            if same:
                continue
            what = 'holds another value under {!r}'
        else:
            break
        if len(findings) < _MAX_INDEX_FINDINGS:
            shown = key[:60].decode('utf-8', errors='backslashreplace')
            findings.append(IndexFinding(_index_conversation(table, key), table, f'ix.{table} {what.format(shown)}'))
        else:
            more += 1
    if more:
        findings.append(IndexFinding('', table, f'ix.{table}: {more} more differences'))
    return findings


class _Run(msgspec.Struct, array_like=True):
    conversation_id: str
    start_seq: int
    prefix: int
    own: int
    first: int


class _Stats(msgspec.Struct, array_like=True):
    docs: int = 0
    length: int = 0
    own_docs: int = 0
    own_length: int = 0


_run_dec = msgspec.msgpack.Decoder(_Run)
_stats_dec = msgspec.msgpack.Decoder(_Stats)
_enc = msgspec.msgpack.Encoder()
_ALL = b'\x00all'
_DROPPED = b'dropped'
"""`ix.meta` key: the `seq` of the last `erasure` or `deleted` entry applied. Processes sharing the
index compare it to what their caches of shown messages were filled under (`_DecodedCache.follow`)."""


def _term_key(term: str) -> bytes:
    raw = term.encode()
    if len(raw) > _MAX_TERM_BYTES:
        return b'#' + hashlib.blake2b(raw, digest_size=16).hexdigest().encode()
    return raw


def _doc_id(start_seq: int, position: int) -> int:
    return (start_seq << 32) | position


class _Writer:
    """Applies entries to the index inside one write transaction."""

    def __init__(self, index: LmdbIndex, records: ProjectionWriter, reader: LogReader) -> None:
        self.ix = index
        self.records = records
        self.reader = reader
        self.runs: dict[str, _Run] = {}
        self.stats: dict[bytes, _Stats] = {}
        self.pending: dict[bytes, list[bytes]] = {}
        """Postings gathered in this transaction, written per term by `write_postings`."""

    # -- small helpers --------------------------------------------------------------------------

    def run(self, run_id: str) -> _Run | None:
        cached = self.runs.get(run_id)
        if cached is None:
            raw = self.records.get('runs', run_id.encode())
            if raw is not None:
                cached = _run_dec.decode(raw)
                self.runs[run_id] = cached
        return cached

    def stat(self, key: bytes) -> _Stats:
        cached = self.stats.get(key)
        if cached is None:
            raw = self.records.get('stats', key)
            cached = _Stats() if raw is None else _stats_dec.decode(raw)
            self.stats[key] = cached
        return cached

    def write_postings(self) -> None:
        """Append the postings gathered so far to their terms' last blocks (one write per term)."""
        records = self.records
        for prefix, triples in self.pending.items():
            block_no = 0
            block = b''
            found = records.last('post', prefix)
            if found is not None and len(found[0]) == len(prefix) + 4:
                block_no = _BLOCK_NO.unpack_from(found[0], len(prefix))[0]
                block = found[1]
            data = block + b''.join(triples)
            size = _BLOCK * _TRIPLE.size
            for offset in range(0, len(data), size):
                records.put('post', prefix + _BLOCK_NO.pack(block_no), data[offset : offset + size])
                block_no += 1
        self.pending.clear()

    def flush(self, position: int) -> None:
        self.write_postings()
        for run_id, run in self.runs.items():
            self.records.put('runs', run_id.encode(), _enc.encode(run))
        for key, stats in self.stats.items():
            self.records.put('stats', key, _enc.encode(stats))
        self.records.set_position(position)

    def add_doc(
        self, conversation_id: str, flag: bytes, doc_id: int, payload: bytes, run_id: str, position: int, seq: int
    ) -> None:
        counts = term_counts(self.ix.analyzer, _index_text(payload, seq))
        length = counts.total()
        conv_key = ck(conversation_id)
        pending = self.pending
        for term, tf in counts.items():
            prefix = conv_key + flag + _term_key(term) + b'\x00'
            triple = _TRIPLE.pack(doc_id, tf, length)
            chunk = pending.get(prefix)
            if chunk is None:
                pending[prefix] = [triple]
            else:
                chunk.append(triple)
        self.records.put('held', conv_key + seq_key(seq), b'')
        shown = seq_key(seq) + payload if self.ix.apart else seq_key(seq)
        self.records.put('pos', ck(run_id) + _POS.pack(position), shown)
        stats = self.stat(conv_key)
        stats.docs += 1
        stats.length += length
        if flag == b'o':
            stats.own_docs += 1
            stats.own_length += length
            every = self.stat(_ALL)
            every.docs += 1
            every.length += length

    def held(self, conversation_id: str, seq: int) -> bool:
        return self.records.get('held', ck(conversation_id) + seq_key(seq)) is not None

    # -- applying entries ---------------------------------------------------------------------

    def apply(self, entry: Entry) -> None:
        if entry.kind == 'run_started':
            self.start_run(entry)
        elif entry.kind == 'message':
            self.add_message(entry)
        elif entry.kind == 'deleted':
            self.drop_conversation(entry.conversation_id, reindex_before=entry.seq)
            self.records.put('meta', _DROPPED, seq_key(entry.seq))
        elif entry.kind == 'erasure':
            self.reindex_conversation(entry.conversation_id, before=entry.seq)
            self.records.put('meta', _DROPPED, seq_key(entry.seq))

    def reindex_conversation(self, conversation_id: str, *, before: int) -> None:
        """Index a conversation again from its entries before `before` (and the conversations that
        hold copies of its messages): after an erasure, its erased messages' terms are dropped and
        only their placeholders are indexed."""
        self.drop_conversation(conversation_id, reindex_before=before)
        for entry in self.reader.conversation_entries(conversation_id, before=before):
            if entry.kind != 'erasure':  # an earlier erasure's entries are erased already
                self.apply(entry)

    def start_run(self, entry: Entry) -> None:
        assert entry.run_id is not None
        conv = entry.conversation_id
        if self.ix.apart:
            self.records.put('starts', seq_key(entry.seq), entry.run_id.encode())
        threaded = self.threaded_prefix(conv, entry.parent)
        if threaded is not None:
            # The usual case: the run continues a run of its own conversation, whose history the
            # conversation's corpus already holds in full; nothing to copy, no branch to walk.
            self.runs[entry.run_id] = _Run(conv, entry.seq, threaded, 0, threaded)
            self.records.put('convruns', ck(conv) + entry.run_id.encode(), b'')
            return
        prefix = self.reader.branch_messages(entry.parent)
        first = len(prefix)
        for position, (seq, _, _) in enumerate(prefix):
            if not self.held(conv, seq):
                first = position
                break
        run = _Run(conversation_id=conv, start_seq=entry.seq, prefix=len(prefix), own=0, first=first)
        self.runs[entry.run_id] = run
        self.records.put('convruns', ck(conv) + entry.run_id.encode(), b'')
        for position in range(first, len(prefix)):
            seq, source_conv, payload = prefix[position]
            self.add_doc(conv, b'c', _doc_id(entry.seq, position), payload, entry.run_id, position, seq)
            if source_conv != conv:
                self.records.put('copies', ck(source_conv) + ck(conv), b'')

    def threaded_prefix(self, conversation_id: str, parent: int | None) -> int | None:
        """The length of the history a run continues when it continues an indexed run of the same
        conversation (or nothing); `None` when the branch has to be walked."""
        if parent is None:
            return 0
        parent_entry = self.reader.entry(parent)
        if parent_entry is None or parent_entry.run_id is None:
            return None
        earlier = self.run(parent_entry.run_id)
        if earlier is None or earlier.conversation_id != conversation_id:
            return None
        prefix = ck(parent_entry.run_id)
        count = 0
        for _, value in self.records.scan('pos', prefix=prefix, start=prefix + _POS.pack(earlier.prefix)):
            if _pos_seq(value) > parent:
                break
            count += 1
        return earlier.prefix + count

    def add_message(self, entry: Entry) -> None:
        assert entry.run_id is not None
        run = self.run(entry.run_id)
        if run is None:  # pragma: no cover - every run starts with an indexed run_started entry
            return
        position = run.prefix + run.own
        run.own += 1
        self.add_doc(
            entry.conversation_id,
            b'o',
            _doc_id(run.start_seq, position),
            entry.payload,
            entry.run_id,
            position,
            entry.seq,
        )

    def drop_conversation(self, conversation_id: str, *, reindex_before: int | None) -> None:
        """Remove a conversation from the index; re-index those that held copies of its messages."""
        self.write_postings()
        self.ix.decoded.clear()
        conv_key = ck(conversation_id)
        records = self.records
        for key in records.delete_prefix('convruns', conv_key):
            run_id = key[len(conv_key) :].decode()
            if self.ix.apart and (run := self.run(run_id)) is not None:
                records.delete('starts', seq_key(run.start_seq))
            records.delete_prefix('pos', ck(run_id))
            records.delete('runs', run_id.encode())
            self.runs.pop(run_id, None)
        records.delete_prefix('post', conv_key)
        records.delete_prefix('held', conv_key)
        stats = self.stat(conv_key)
        every = self.stat(_ALL)
        every.docs -= stats.own_docs
        every.length -= stats.own_length
        self.stats.pop(conv_key, None)
        records.delete('stats', conv_key)
        # The conversation no longer holds copies of anyone's messages (a re-indexed dependent
        # records again those it still holds).
        for key, _ in list(records.scan('copies')):
            if key[key.index(b'\x00') + 1 :] == conv_key:
                records.delete('copies', key)
        if reindex_before is None:
            return
        dependents = [
            key[len(conv_key) :].rstrip(b'\x00').decode() for key in records.delete_prefix('copies', conv_key)
        ]
        for dependent in dependents:
            if dependent == conversation_id:
                continue
            self.drop_conversation(dependent, reindex_before=None)
            for entry in self.reader.conversation_entries(dependent, before=reindex_before):
                self.apply(entry)


class LmdbIndex:
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
        self.decoded = _DecodedCache()
        self.listed: OrderedDict[str | None, tuple[int, CorpusDocuments]] = OrderedDict()
        """The documents of recent scopes (`_LmdbCorpus.documents`), by scope, with the index position they
        were read at (a scope's documents change only when the position does)."""
        stored, stored_format = self._read(lambda records, _: (_meta(records, b'analyzer'), _meta(records, b'format')))
        if stored is not None and stored != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'the search index of this store was built with the {stored!r} analyzer, not {self.analyzer.name!r}; '
                f'rebuild it with that analyzer first (`eventlog reindex --analyzer {self.analyzer.name}`)'
            )
        if stored is not None and stored_format != self._format:
            self.rebuild()

    def _read(self, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        return self.log.read_projection(INDEX_PROJECTION, fn)

    @classmethod
    def for_log(cls, log: IndexedLog, analyzer: str | Analyzer = 'default') -> LmdbIndex:
        """The index of `log` for `analyzer`, shared by every caller in this process (with its
        cache of decoded messages)."""
        resolved = resolve_analyzer(analyzer)
        per_log = _shared.setdefault(log, {})
        index = per_log.get(resolved.name)
        if index is None:
            index = per_log[resolved.name] = cls(log, resolved)
        return index

    @classmethod
    def open_existing(cls, log: IndexedLog) -> LmdbIndex:
        """The store's index with the analyzer it was built with (`default` when none is built yet)."""
        stored = log.read_projection(INDEX_PROJECTION, lambda records, _: _meta(records, b'analyzer'))
        return cls(log, 'default' if stored is None else stored)

    # -- keeping current ----------------------------------------------------------------------

    def state(self) -> IndexState:
        """The index's analyzer, position, document count, and the log's position."""

        def read(records: ProjectionRecords, reader: LogReader) -> IndexState:
            stats = records.get('stats', _ALL)
            return IndexState(
                analyzer=_meta(records, b'analyzer'),
                position=records.position() or 0,
                log_position=reader.last_seq(),
                documents=0 if stats is None else _stats_dec.decode(stats).docs,
            )

        return self._read(read)

    def seq_at(self, run_id: str, position: int) -> int | None:
        """The `seq` of the message shown at `position` of the run's record (`ix.pos`), or `None`
        when the index holds none there (as of its position: catch up first for the latest)."""

        def read(records: ProjectionRecords, _: LogReader) -> int | None:
            raw = records.get('pos', ck(run_id) + _POS.pack(position))
            return None if raw is None else _pos_seq(raw)

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

    def _apply_batch(self, records: ProjectionWriter, reader: LogReader) -> tuple[int, int]:
        stored = _meta(records, b'analyzer')
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
        writer = _Writer(self, records, reader)
        applied = 0
        new_position = position
        for entry in reader.entries_after(position, limit=_CATCH_UP_BATCH):
            writer.apply(entry)
            applied += 1
            new_position = entry.seq
        if applied < _CATCH_UP_BATCH:
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

    def verify(self) -> list[IndexFinding]:
        """Check that the index holds exactly what the log's entries give it.

        In one write transaction that is always aborted (the store is left as it was): the
        index is brought up to the log's last `seq` as a search would, rebuilt from the entries
        beside itself (in its own tables, under the `_SCRATCH` key prefix), and the two are
        walked side by side in key order, table by table, so that neither is held in memory. A
        finding names the table and the conversation concerned; `LmdbIndex.rebuild`
        (`eventlog reindex`) repairs any of them. No index built yet gives no findings.
        Appends wait while it runs, as they do during a reindex.
        """

        def check(records: ProjectionWriter, reader: LogReader) -> list[IndexFinding]:
            if records.get('meta', b'analyzer') is None:
                raise _Verified([])
            try:
                while self._apply_batch(records, reader)[1]:
                    pass
            except (msgspec.DecodeError, struct.error, UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
                raise _Verified([IndexFinding('', 'meta', f'the index cannot be brought up to date ({exc})')]) from None
            scratch = _ScratchRecords(records)
            self.decoded.clear()
            while self._apply_batch(scratch, reader)[1]:
                pass
            self.decoded.clear()
            findings: list[IndexFinding] = []
            for table in _TABLES:
                findings += _table_differences(table, _stored_items(records, table), _rebuilt_items(records, table))
            raise _Verified(findings)

        with self._lock:
            try:
                self.log.write_projection(self.spec, check)
            except _Verified as done:
                return done.findings
        return []  # pragma: no cover - `check` always raises

    def _read_scope(self, key: bytes) -> tuple[_Stats, int]:
        """The scope's statistics and how many log positions the index is behind, in one read."""

        def read(records: ProjectionRecords, reader: LogReader) -> tuple[_Stats, int]:
            behind = reader.last_seq() - (records.position() or 0)
            return self._scope_stats(records, key), behind

        return self._read(read)

    def _scope_stats(self, records: ProjectionRecords, key: bytes) -> _Stats:
        """The scope's statistics; the cache of shown messages is emptied first if an erasure or a
        deletion was applied since it was filled (by this process or another sharing the index)."""
        self.decoded.follow(records.get('meta', _DROPPED))
        return _stats_of(records.get('stats', key))

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
        key = _ALL if conversation_id is None else ck(conversation_id)
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
            corpus = _LmdbCorpus(self, conversation_id, stats.docs, stats.length, (pending, position or 0, key))
            if stats.docs == 0:
                await corpus.settle()  # an empty corpus is not ranked: its count must be final now
            return corpus
        # The usual case, an index already current, takes one read; otherwise catch up first.
        stats, behind = self._read_scope(key)
        if behind > 0:
            await self._catch_up_behind(behind)
            stats, _ = self._read_scope(key)
        return _LmdbCorpus(self, conversation_id, stats.docs, stats.length)

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
        """A single run's whole record, indexed in memory as the reference does for `run_id`."""
        from search.memory_index import MemoryCorpus

        try:
            record = await self.log.get_run(run_id)
        except InvalidArgumentError:  # not a possible run id: answered like an unknown one
            record = None
        if record is None or (conversation_id is not None and record.conversation_id != conversation_id):
            return await MemoryCorpus.build(_NoRuns(), conversation_id=None, run_id=None, analyzer=analyzer)
        return await MemoryCorpus.build(_OneRun(self.log, record), conversation_id=None, run_id=None, analyzer=analyzer)


def _index_text(payload: bytes, seq: int) -> str:
    """The indexed text of the message stored as `payload` (entry `seq`): read straight from its
    JSON where `search.wire_text` can, so that indexing the common messages needs no pydantic-ai
    (`eventlog verify` derives the index again); decoded in full otherwise."""
    wire = wire_lines(payload)
    if wire is not None:
        return '\n'.join(label + text for label, text in wire[1])
    from search.render import index_text

    return index_text(decode_messages([payload], where=f'entry {seq}')[0])


_shared: weakref.WeakKeyDictionary[IndexedLog, dict[str, LmdbIndex]] = weakref.WeakKeyDictionary()
"""The index objects `LmdbIndex.for_log` hands out, per log and analyzer (only objects: the
records live in the store, whose backend also owns every handle on them)."""


def maintain_index(store: IndexedLog) -> None:
    """The index's maintainer (`INDEX_PROJECTION.maintainer`): bring the store's index up to date,
    so that erased messages and deleted conversations leave its records before the log rewrites
    its files. The log runs it before every scrub and compaction and clears the index if it raises."""
    index = LmdbIndex.open_existing(store)
    if index.state().analyzer is not None:  # tables opened (by `eventlog stats`, say) but never built
        index.catch_up()


def _pos_seq(value: bytes) -> int:
    """The `seq` an `ix.pos` value starts with (a payload may follow it)."""
    return _SEQ.unpack_from(value)[0]


def _stats_of(raw: bytes | None) -> _Stats:
    return _Stats() if raw is None else _stats_dec.decode(raw)


def _meta(records: ProjectionRecords, key: bytes) -> str | None:
    raw = records.get('meta', key)
    return None if raw is None else raw.decode(errors='replace')


class _NoRuns:
    async def list_runs(self) -> list[_RunInfo]:
        return []

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return []


class _RunInfo(msgspec.Struct, frozen=True):
    run_id: str
    conversation_id: str | None


class _OneRun:
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


class _LmdbCorpus:
    """One search's view of the persistent index."""

    def __init__(
        self,
        index: LmdbIndex,
        conversation_id: str | None,
        count: int,
        length: int,
        pending: tuple[PendingPosition, int, bytes] | None = None,
    ) -> None:
        self._ix = index
        self._conversation_id = conversation_id
        self._count = count
        self._length = length
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
        stats = self._ix.log.read_projection(INDEX_PROJECTION, lambda records, _: self._ix._scope_stats(records, key))  # pyright: ignore[reportPrivateUsage]
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
            tkey = _term_key(term) + b'\x00'
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
        return [key for key, _ in records.scan('stats') if key != _ALL]

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
                run = _run_dec.decode(raw)
                starts[run.start_seq] = name
                first = run.first if self._conversation_id is not None else run.prefix
                end = run.prefix + run.own
                if end <= first:
                    continue
                key_prefix = ck(name)
                for key, value in records.scan('pos', prefix=key_prefix, start=key_prefix + _POS.pack(first)):
                    position = _POS.unpack_from(key, len(key_prefix))[0]
                    if position >= end:
                        break
                    doc_ids.append(_doc_id(run.start_seq, position))
                    seqs.append(_pos_seq(value))
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
            run = _run_dec.decode(raw)
        except msgspec.DecodeError:
            raise CorruptStoreError(_DAMAGED_INDEX.format(f'its record of run {run_id!r} cannot be read')) from None
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
            raise CorruptStoreError(_DAMAGED_INDEX.format(f'a match names run {run_id!r}, which it has no record of'))
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
                for key, value in records.scan('pos', prefix=prefix, start=prefix + _POS.pack(start)):
                    position = _POS.unpack_from(key, len(prefix))[0]
                    if position >= end:
                        break
                    found[position] = _pos_seq(value)
            return out

        return self._ix.log.read_projection(INDEX_PROJECTION, read)

    async def messages_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, ModelMessage]]]:
        """The corpus messages of several `(run_id, start, end)` windows, read and decoded together."""
        spans = {run_id: await self.span(run_id) for run_id, _, _ in windows}

        cache = self._ix.decoded
        generation = cache.generation  # before reading: a message read before an erasure is not kept after it

        def read(records: ProjectionRecords, reader: LogReader) -> list[list[tuple[int, int, bytes | None]]]:
            out: list[list[tuple[int, int, bytes | None]]] = []
            for run_id, start, end in windows:
                found: list[tuple[int, int, bytes | None]] = []
                out.append(found)
                start = max(start, spans[run_id].start)
                if end <= start:
                    continue
                prefix = ck(run_id)
                for key, value in records.scan('pos', prefix=prefix, start=prefix + _POS.pack(start)):
                    position = _POS.unpack_from(key, len(prefix))[0]
                    if position >= end:
                        break
                    seq = _pos_seq(value)
                    # An index kept apart from its log keeps the payload after the seq.
                    kept = value[_SEQ.size :] if len(value) > _SEQ.size and seq not in cache else None
                    found.append((position, seq, kept))
            # The payloads neither kept nor in the cache, read together (one round trip to a remote log).
            missing = list(
                dict.fromkeys(seq for window in out for _, seq, kept in window if kept is None and seq not in cache)
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

        found = self._ix.log.read_projection(INDEX_PROJECTION, read)
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
            decoded = decode_messages(list(present.values()))
            for seq, message in zip(present, decoded, strict=True):
                cache.put(seq, message, generation)
                messages[seq] = message
        return [[(position, messages[seq]) for position, seq, _ in window if seq in messages] for window in found]


class _DecodedCache:
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
