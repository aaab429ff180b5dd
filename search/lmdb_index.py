"""`LmdbIndex`: a persistent BM25 index kept inside an `LmdbEventLog`'s store.

The index is a projection of the log (DESIGN invariant 6). It follows the log by
position: it remembers the last `seq` it applied and, before answering a search, applies
whatever was appended since, from any process, in one write transaction. Dropping its
tables and rebuilding gives the same index.

Documents are the reference's: one per message, each counted once per conversation. A
run's own messages are its documents; history a run continues from another conversation
(a fork, or a run started elsewhere) is indexed again as that run's, because it is part
of the conversation's record. Positions are positions in the run's full record.

Tables (LMDB named databases, all prefixed `ix.`):

- `ix.meta`     analyzer name, position, format
- `ix.post`     ck(conv) + flag + term + NUL + block -> packed (doc id, tf, length) triples;
                flag `o` for a run's own messages, `c` for copies of history from elsewhere
- `ix.stats`    ck(conv) -> (documents, total length, own documents, own total length)
- `ix.runs`     run id -> (conversation, start seq, prefix length, own count, first position)
- `ix.convruns` ck(conv) + run id -> ''
- `ix.pos`      ck(run) + position -> seq of the message shown at that position
- `ix.held`     ck(conv) + seq -> '' (messages the conversation's corpus already holds)
- `ix.copies`   ck(source conv) + ck(conv) -> '' (conversations holding copies of another's messages)

A document id is `start seq of its run << 32 | position`, so ids sort in corpus order
(runs in start order, then positions), which is how BM25 ties are ordered.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

import lmdb
import msgspec

from eventlog import Entry, LmdbEventLog, RunRecord, decode_messages
from eventlog.errors import CorruptStoreError, EventLogError, InvalidArgumentError
from eventlog.lmdb_log import register_compaction_hook
from eventlog.projection import LogReader, run_projection
from search.analyzers import Analyzer, resolve_analyzer

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from pydantic_ai.messages import ModelMessage

    from search.backend import Corpus, Hit, RankedHits, RunSpan
    from search.bm25 import TermPostings

# numpy and pydantic-ai (with the search modules that need them) are imported where the index
# is searched or messages are read, so that `eventlog stats` and `verify`, which open the
# index, start without them.

__all__ = ['IndexAnalyzerMismatch', 'IndexFinding', 'IndexState', 'LmdbIndex']

_DAMAGED_INDEX: Final = 'the search index is damaged: {}; rebuild it with `eventlog reindex` (the log is not affected)'

INDEX_FORMAT: Final = 2
"""What the index holds, by version: 2 leaves the search tool's own calls and returns out of
the documents. An index of another version is rebuilt from the entries when first opened."""
_BLOCK: Final = 64
"""Postings per block: small enough that rewriting the last block on append stays cheap."""
_MAX_TERM_BYTES: Final = 200
_CATCH_UP_BATCH: Final = 5000
"""Entries applied per write transaction while catching up."""
_THREAD_BACKLOG: Final = 500
"""A backlog larger than this is applied in a worker thread."""
_PREFETCH_HITS: Final = 24
"""Leading hits whose runs are resolved in the ranking transaction itself."""

_SEQ = struct.Struct('>Q')
_POS = struct.Struct('>I')
_TRIPLE = struct.Struct('<qqq')
_BLOCK_NO = struct.Struct('>I')
_TABLES = ('meta', 'post', 'stats', 'runs', 'convruns', 'pos', 'held', 'copies')


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


def _table_items(txn: lmdb.Transaction, db: lmdb._Database) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v) for k, v in txn.cursor(db=db)}


def _index_conversation(table: str, key: bytes) -> str:
    if table in ('meta', 'runs') or key == _ALL:
        return ''
    cut = key.find(b'\x00')
    return key[: max(cut, 0)].decode(errors='replace')


def _index_differences(
    stored: dict[str, dict[bytes, bytes]], rebuilt: dict[str, dict[bytes, bytes]]
) -> list[IndexFinding]:
    findings: list[IndexFinding] = []
    for table in _TABLES:
        have, want = stored[table], rebuilt[table]
        keys = sorted(set(have) | set(want))
        differing = [key for key in keys if have.get(key) != want.get(key)]
        for key in differing[:_MAX_INDEX_FINDINGS]:
            shown = key[:60].decode('utf-8', errors='backslashreplace')
            if key not in want:
                what = f'holds a key the entries do not give: {shown!r}'
            elif key not in have:
                what = f'lacks the key {shown!r}'
            else:
                what = f'holds another value under {shown!r}'
            findings.append(IndexFinding(_index_conversation(table, key), table, f'ix.{table} {what}'))
        if len(differing) > _MAX_INDEX_FINDINGS:
            findings.append(
                IndexFinding('', table, f'ix.{table}: {len(differing) - _MAX_INDEX_FINDINGS} more differences')
            )
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


def _ck(identifier: str) -> bytes:
    return identifier.encode() + b'\x00'


def _term_key(term: str) -> bytes:
    raw = term.encode()
    if len(raw) > _MAX_TERM_BYTES:
        return b'#' + hashlib.blake2b(raw, digest_size=16).hexdigest().encode()
    return raw


def _doc_id(start_seq: int, position: int) -> int:
    return (start_seq << 32) | position


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


class _Writer:
    """Applies entries to the index inside one write transaction."""

    def __init__(self, index: LmdbIndex, txn: lmdb.Transaction, reader: LogReader) -> None:
        self.ix = index
        self.txn = txn
        self.reader = reader
        self.runs: dict[str, _Run] = {}
        self.stats: dict[bytes, _Stats] = {}
        self.pending: dict[bytes, list[bytes]] = {}
        """Postings gathered in this transaction, written per term by `write_postings`."""

    # -- small helpers --------------------------------------------------------------------------

    def run(self, run_id: str) -> _Run | None:
        cached = self.runs.get(run_id)
        if cached is None:
            raw = self.txn.get(run_id.encode(), db=self.ix.db['runs'])
            if raw is not None:
                cached = _run_dec.decode(raw)
                self.runs[run_id] = cached
        return cached

    def stat(self, key: bytes) -> _Stats:
        cached = self.stats.get(key)
        if cached is None:
            raw = self.txn.get(key, db=self.ix.db['stats'])
            cached = _Stats() if raw is None else _stats_dec.decode(raw)
            self.stats[key] = cached
        return cached

    def write_postings(self) -> None:
        """Append the postings gathered so far to their terms' last blocks (one write per term)."""
        post = self.ix.db['post']
        cursor = self.txn.cursor(db=post)
        for prefix, triples in self.pending.items():
            block_no = 0
            block = b''
            found = cursor.prev() if cursor.set_range(_prefix_end(prefix)) else cursor.last()
            if found:
                key = bytes(cursor.key())
                if key.startswith(prefix) and len(key) == len(prefix) + 4:
                    block_no = _BLOCK_NO.unpack_from(key, len(prefix))[0]
                    block = bytes(cursor.value())
            data = block + b''.join(triples)
            size = _BLOCK * _TRIPLE.size
            for offset in range(0, len(data), size):
                self.txn.put(prefix + _BLOCK_NO.pack(block_no), data[offset : offset + size], db=post)
                block_no += 1
        self.pending.clear()

    def flush(self, position: int) -> None:
        self.write_postings()
        for run_id, run in self.runs.items():
            self.txn.put(run_id.encode(), _enc.encode(run), db=self.ix.db['runs'])
        for key, stats in self.stats.items():
            self.txn.put(key, _enc.encode(stats), db=self.ix.db['stats'])
        self.txn.put(b'position', _SEQ.pack(position), db=self.ix.db['meta'])

    def add_doc(
        self, conversation_id: str, flag: bytes, doc_id: int, payload: bytes, run_id: str, position: int, seq: int
    ) -> None:
        from search.render import index_text

        message = decode_messages([payload], where=f'entry {seq}')[0]
        counts = Counter(self.ix.analyzer.tokens(index_text(message)))
        length = counts.total()
        conv_key = _ck(conversation_id)
        pending = self.pending
        for term, tf in counts.items():
            prefix = conv_key + flag + _term_key(term) + b'\x00'
            triple = _TRIPLE.pack(doc_id, tf, length)
            chunk = pending.get(prefix)
            if chunk is None:
                pending[prefix] = [triple]
            else:
                chunk.append(triple)
        self.txn.put(conv_key + _SEQ.pack(seq), b'', db=self.ix.db['held'])
        self.txn.put(_ck(run_id) + _POS.pack(position), _SEQ.pack(seq), db=self.ix.db['pos'])
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
        return self.txn.get(_ck(conversation_id) + _SEQ.pack(seq), db=self.ix.db['held']) is not None

    # -- applying entries ---------------------------------------------------------------------

    def apply(self, entry: Entry) -> None:
        if entry.kind == 'run_started':
            self.start_run(entry)
        elif entry.kind == 'message':
            self.add_message(entry)
        elif entry.kind == 'deleted':
            self.drop_conversation(entry.conversation_id, reindex_before=entry.seq)

    def start_run(self, entry: Entry) -> None:
        assert entry.run_id is not None
        conv = entry.conversation_id
        threaded = self.threaded_prefix(conv, entry.parent)
        if threaded is not None:
            # The usual case: the run continues a run of its own conversation, whose history the
            # conversation's corpus already holds in full; nothing to copy, no branch to walk.
            self.runs[entry.run_id] = _Run(conv, entry.seq, threaded, 0, threaded)
            self.txn.put(_ck(conv) + entry.run_id.encode(), b'', db=self.ix.db['convruns'])
            return
        prefix = self.reader.branch_messages(entry.parent)
        first = len(prefix)
        for position, (seq, _, _) in enumerate(prefix):
            if not self.held(conv, seq):
                first = position
                break
        run = _Run(conversation_id=conv, start_seq=entry.seq, prefix=len(prefix), own=0, first=first)
        self.runs[entry.run_id] = run
        self.txn.put(_ck(conv) + entry.run_id.encode(), b'', db=self.ix.db['convruns'])
        for position in range(first, len(prefix)):
            seq, source_conv, payload = prefix[position]
            self.add_doc(conv, b'c', _doc_id(entry.seq, position), payload, entry.run_id, position, seq)
            if source_conv != conv:
                self.txn.put(_ck(source_conv) + _ck(conv), b'', db=self.ix.db['copies'])

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
        prefix = _ck(parent_entry.run_id)
        cursor = self.txn.cursor(db=self.ix.db['pos'])
        count = 0
        if cursor.set_range(prefix + _POS.pack(earlier.prefix)):
            for _, value in _iter_prefix(cursor, prefix):
                if _SEQ.unpack(value)[0] > parent:
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

    def _delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        db = self.ix.db[table]
        cursor = self.txn.cursor(db=db)
        removed: list[bytes] = []
        if cursor.set_range(prefix):
            while True:
                key = bytes(cursor.key())
                if not key.startswith(prefix):
                    break
                removed.append(key)
                if not cursor.delete():
                    break
        return removed

    def drop_conversation(self, conversation_id: str, *, reindex_before: int | None) -> None:
        """Remove a conversation from the index; re-index those that held copies of its messages."""
        self.write_postings()
        self.ix.decoded.clear()
        conv_key = _ck(conversation_id)
        for key in self._delete_prefix('convruns', conv_key):
            run_id = key[len(conv_key) :].decode()
            self._delete_prefix('pos', _ck(run_id))
            self.txn.delete(run_id.encode(), db=self.ix.db['runs'])
            self.runs.pop(run_id, None)
        self._delete_prefix('post', conv_key)
        self._delete_prefix('held', conv_key)
        stats = self.stat(conv_key)
        every = self.stat(_ALL)
        every.docs -= stats.own_docs
        every.length -= stats.own_length
        self.stats.pop(conv_key, None)
        self.txn.delete(conv_key, db=self.ix.db['stats'])
        if reindex_before is None:
            return
        dependents = [key[len(conv_key) :].rstrip(b'\x00').decode() for key in self._delete_prefix('copies', conv_key)]
        for dependent in dependents:
            if dependent == conversation_id:
                continue
            self.drop_conversation(dependent, reindex_before=None)
            for entry in self.reader.conversation_entries(dependent, before=reindex_before):
                self.apply(entry)


class LmdbIndex:
    """A persistent search index over an `LmdbEventLog`, usable as a `SearchBackend`.

    Args:
        log: The log to index; the index lives in the same store.
        analyzer: How messages and queries become terms. The first index built in a store
            records its analyzer; a different one is refused until `rebuild(analyzer)`.
    """

    def __init__(self, log: LmdbEventLog, analyzer: str | Analyzer = 'default') -> None:
        self.log = log
        self.analyzer: Analyzer = resolve_analyzer(analyzer)
        self.db = {name: log.open_table(f'ix.{name}'.encode()) for name in _TABLES}
        self._lock = threading.Lock()
        self.decoded = _DecodedCache()
        stored = self._stored_analyzer()
        if stored is not None and stored != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'the search index of this store was built with the {stored!r} analyzer, not {self.analyzer.name!r}; '
                f'rebuild it with that analyzer first (`eventlog reindex --analyzer {self.analyzer.name}`)'
            )
        if stored is not None and self._stored_format() != INDEX_FORMAT:
            self.rebuild()

    def _stored_format(self) -> int | None:
        raw = run_projection(self.log, lambda txn, _: txn.get(b'format', db=self.db['meta']), write=False)
        try:
            return None if raw is None else int(bytes(raw))
        except ValueError:
            return None

    def _stored_analyzer(self) -> str | None:
        raw = run_projection(self.log, lambda txn, _: txn.get(b'analyzer', db=self.db['meta']), write=False)
        return None if raw is None else bytes(raw).decode()

    @classmethod
    def for_log(cls, log: LmdbEventLog, analyzer: str | Analyzer = 'default') -> LmdbIndex:
        """The index of `log` for `analyzer`, shared by every caller in this process."""
        resolved = resolve_analyzer(analyzer)
        per_log = _shared.setdefault(log, {})
        index = per_log.get(resolved.name)
        if index is None:
            index = per_log[resolved.name] = cls(log, resolved)
        return index

    @classmethod
    def open_existing(cls, log: LmdbEventLog) -> LmdbIndex:
        """The store's index with the analyzer it was built with (`default` when none is built yet)."""
        meta = log.open_table(b'ix.meta')
        raw = run_projection(log, lambda txn, _: txn.get(b'analyzer', db=meta), write=False)
        return cls(log, 'default' if raw is None else bytes(raw).decode())

    # -- keeping current ----------------------------------------------------------------------

    def state(self) -> IndexState:
        """The index's analyzer, position, document count, and the log's position."""

        def read(txn: lmdb.Transaction, reader: LogReader) -> IndexState:
            analyzer = txn.get(b'analyzer', db=self.db['meta'])
            position = txn.get(b'position', db=self.db['meta'])
            stats = txn.get(_ALL, db=self.db['stats'])
            return IndexState(
                analyzer=None if analyzer is None else bytes(analyzer).decode(),
                position=0 if position is None else _SEQ.unpack(bytes(position))[0],
                log_position=reader.last_seq(),
                documents=0 if stats is None else _stats_dec.decode(bytes(stats)).docs,
            )

        return run_projection(self.log, read, write=False)

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Apply every entry appended since the index's position; return how many were read.

        `progress(done, total)` is called after each batch.
        """
        with self._lock:
            done = 0
            while True:
                applied, remaining = run_projection(self.log, self._apply_batch, write=True)
                done += applied
                if progress is not None:
                    progress(done, done + remaining)
                if applied == 0 or remaining == 0:
                    return done

    def _apply_batch(self, txn: lmdb.Transaction, reader: LogReader) -> tuple[int, int]:
        meta = self.db['meta']
        stored = txn.get(b'analyzer', db=meta)
        if stored is None:
            txn.put(b'analyzer', self.analyzer.name.encode(), db=meta)
            txn.put(b'format', str(INDEX_FORMAT).encode(), db=meta)
        elif bytes(stored).decode() != self.analyzer.name:
            raise IndexAnalyzerMismatch(
                f'the search index of this store was built with the {bytes(stored).decode()!r} analyzer, '
                f'not {self.analyzer.name!r}; rebuild it first'
            )
        raw = txn.get(b'position', db=meta)
        position = 0 if raw is None else _SEQ.unpack(bytes(raw))[0]
        last = reader.last_seq()
        if position >= last:
            return 0, 0
        writer = _Writer(self, txn, reader)
        applied = 0
        new_position = position
        for entry in reader.entries_after(position):
            writer.apply(entry)
            applied += 1
            new_position = entry.seq
            if applied >= _CATCH_UP_BATCH:
                break
        if applied < _CATCH_UP_BATCH:
            new_position = last
        writer.flush(new_position)
        return applied, (0 if new_position >= last else last - new_position)

    def rebuild(
        self, analyzer: str | Analyzer | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Drop the index and build it again from the entries (optionally with another analyzer)."""
        if analyzer is not None:
            self.analyzer = resolve_analyzer(analyzer)
            # Shared indexes of this store built for another analyzer are now stale.
            _shared[self.log] = {self.analyzer.name: self}

        def drop(txn: lmdb.Transaction, _: LogReader) -> None:
            for db in self.db.values():
                txn.drop(db, delete=False)

        with self._lock:
            run_projection(self.log, drop, write=True)
        return self.catch_up(progress)

    def verify(self) -> list[IndexFinding]:
        """Check that the index holds exactly what the log's entries give it.

        In one write transaction that is always aborted (the store is left as it was): the
        index is brought up to the log's last `seq` as a search would, its tables are read,
        dropped and rebuilt from the entries, and the two are compared table by table. A
        finding names the table and the conversation concerned; `LmdbIndex.rebuild`
        (`eventlog reindex`) repairs any of them. No index built yet gives no findings.
        Appends wait while it runs, as they do during a reindex.
        """

        def check(txn: lmdb.Transaction, reader: LogReader) -> list[IndexFinding]:
            if txn.get(b'analyzer', db=self.db['meta']) is None:
                raise _Verified([])
            try:
                while self._apply_batch(txn, reader)[1]:
                    pass
            except (msgspec.DecodeError, struct.error, UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
                raise _Verified([IndexFinding('', 'meta', f'the index cannot be brought up to date ({exc})')]) from None
            stored = {name: _table_items(txn, self.db[name]) for name in _TABLES}
            for db in self.db.values():
                txn.drop(db, delete=False)
            self.decoded.clear()
            while self._apply_batch(txn, reader)[1]:
                pass
            rebuilt = {name: _table_items(txn, self.db[name]) for name in _TABLES}
            self.decoded.clear()
            raise _Verified(_index_differences(stored, rebuilt))

        with self._lock:
            try:
                run_projection(self.log, check, write=True)
            except _Verified as done:
                return done.findings
        return []  # pragma: no cover - `check` always raises

    def _read_scope(self, key: bytes) -> tuple[_Stats, int]:
        """The scope's statistics and how many log positions the index is behind, in one read."""

        def read(txn: lmdb.Transaction, reader: LogReader) -> tuple[_Stats, int]:
            raw = txn.get(b'position', db=self.db['meta'])
            position = 0 if raw is None else _SEQ.unpack(bytes(raw))[0]
            stats = txn.get(key, db=self.db['stats'])
            return (_Stats() if stats is None else _stats_dec.decode(bytes(stats))), reader.last_seq() - position

        return run_projection(self.log, read, write=False)

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
        key = _ALL if conversation_id is None else _ck(conversation_id)
        # The usual case, an index already current, takes one read; otherwise catch up first.
        stats, behind = self._read_scope(key)
        if behind > 0:
            if behind > _THREAD_BACKLOG:
                await asyncio.to_thread(self.catch_up)
            else:
                self.catch_up()
            stats, _ = self._read_scope(key)
        return _LmdbCorpus(self, conversation_id, stats.docs, stats.length)

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


_shared: weakref.WeakKeyDictionary[LmdbEventLog, dict[str, LmdbIndex]] = weakref.WeakKeyDictionary()


def _apply_before_compaction(log: LmdbEventLog) -> None:
    """Bring the store's index (if one was built) up to date before `LmdbEventLog.compact`, so
    that a deleted conversation's terms are dropped from its tables and not carried into the
    compacted copy; an index that cannot be opened here is dropped (it is rebuilt from the log)."""
    if not log.run_in_txn(lambda txn: txn.get(b'ix.meta') is not None, write=False):
        return
    try:
        index = LmdbIndex.open_existing(log)
        if index.state().analyzer is not None:  # tables opened (by `eventlog stats`, say) but never built
            index.catch_up()
    except (EventLogError, ImportError, ValueError):
        tables = [log.open_table(f'ix.{name}'.encode()) for name in _TABLES]

        def drop(txn: lmdb.Transaction) -> None:
            for db in tables:
                txn.drop(db, delete=False)

        log.run_in_txn(drop, write=True)


def _forget_after_compaction(log: LmdbEventLog) -> None:
    """Forget this process's indexes of `log`: their table handles belonged to the store before compaction."""
    _shared.pop(log, None)


register_compaction_hook(_apply_before_compaction, _forget_after_compaction)


class _NoRuns:
    async def list_runs(self) -> list[_RunInfo]:
        return []

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return []


class _RunInfo(msgspec.Struct, frozen=True):
    run_id: str
    conversation_id: str | None


class _OneRun:
    def __init__(self, log: LmdbEventLog, record: RunRecord) -> None:
        self._log = log
        self._info = _RunInfo(record.run_id, record.conversation_id)

    async def list_runs(self) -> list[_RunInfo]:
        return [self._info]

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return await self._log.run_messages(run_id)


class _LmdbCorpus:
    """One search's view of the persistent index."""

    def __init__(self, index: LmdbIndex, conversation_id: str | None, count: int, length: int) -> None:
        self._ix = index
        self._conversation_id = conversation_id
        self._count = count
        self._length = length
        self._spans: dict[str, RunSpan] = {}

    @property
    def document_count(self) -> int:
        """Messages in scope."""
        return self._count

    def _postings(self, txn: lmdb.Transaction, terms: Sequence[str]) -> dict[str, TermPostings]:
        import numpy as np

        from search.bm25 import TermPostings

        db = self._ix.db['post']
        if self._conversation_id is not None:
            prefixes = [_ck(self._conversation_id) + b'o', _ck(self._conversation_id) + b'c']
        else:
            prefixes = [key + b'o' for key in self._conversations(txn)]
        out: dict[str, TermPostings] = {}
        cursor = txn.cursor(db=db)
        for term in terms:
            chunks: list[bytes] = []
            tkey = _term_key(term) + b'\x00'
            for base in prefixes:
                prefix = base + tkey
                if not cursor.set_range(prefix):
                    continue
                for key, value in _iter_prefix(cursor, prefix):
                    del key
                    chunks.append(value)
            if chunks:
                raw = np.frombuffer(b''.join(chunks), dtype='<i8')
                triples: NDArray[np.int64] = raw.astype(np.int64, copy=False).reshape(-1, 3)
                out[term] = TermPostings(
                    np.ascontiguousarray(triples[:, 0]),
                    np.ascontiguousarray(triples[:, 1]),
                    np.ascontiguousarray(triples[:, 2]),
                )
        return out

    def _conversations(self, txn: lmdb.Transaction) -> list[bytes]:
        cursor = txn.cursor(db=self._ix.db['stats'])
        out: list[bytes] = []
        if cursor.first():
            for key, _ in _iter_prefix(cursor, b''):
                if key != _ALL:
                    out.append(key)
        return out

    async def rank(self, terms: Sequence[str], *, k1: float, b: float) -> Sequence[Hit]:
        """Every in-scope message scoring above zero for `terms`, best first."""
        from search.backend import RankedHits
        from search.bm25 import average_length, score_unranked

        names: dict[int, str] = {}

        def read(txn: lmdb.Transaction, reader: LogReader) -> RankedHits:
            postings = self._postings(txn, terms)
            doc_ids, scores = score_unranked(
                terms, postings, n_docs=self._count, avgdl=average_length(self._length, self._count), k1=k1, b=b
            )
            hits = RankedHits(doc_ids, scores, locate, ranked=False)
            # An answer shows a handful of the best hits: name their runs and read their spans in
            # this same snapshot rather than one transaction per run later.
            for doc_id in hits.leading_ids(_PREFETCH_HITS).tolist():
                start = doc_id >> 32
                if start not in names:
                    name = names[start] = reader.run_at(start) or '?'
                    self._read_span(txn, name)
            return hits

        def locate(doc_id: int) -> tuple[str, int]:
            start = doc_id >> 32
            name = names.get(start)
            if name is None:
                name = run_projection(self._ix.log, lambda _, reader: reader.run_at(start), write=False) or '?'
                names[start] = name
            return name, doc_id & 0xFFFFFFFF

        return run_projection(self._ix.log, read, write=False)

    def _read_span(self, txn: lmdb.Transaction, run_id: str) -> RunSpan | None:
        """The run's span, read in `txn` and remembered for this search (`None` for an unknown run)."""
        from search.backend import RunSpan

        cached = self._spans.get(run_id)
        if cached is not None:
            return cached
        raw = txn.get(run_id.encode(), db=self._ix.db['runs'])
        if raw is None:
            return None
        try:
            run = _run_dec.decode(bytes(raw))
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
            span = run_projection(self._ix.log, lambda txn, _: self._read_span(txn, run_id), write=False)
        if span is None:
            raise CorruptStoreError(_DAMAGED_INDEX.format(f'a match names run {run_id!r}, which it has no record of'))
        return span

    async def messages(self, run_id: str, start: int, end: int) -> list[tuple[int, ModelMessage]]:
        """The run's corpus messages at positions in `[start, end)`."""
        return (await self.messages_many([(run_id, start, end)]))[0]

    async def messages_many(self, windows: Sequence[tuple[str, int, int]]) -> list[list[tuple[int, ModelMessage]]]:
        """The corpus messages of several `(run_id, start, end)` windows, read and decoded together."""
        spans = {run_id: await self.span(run_id) for run_id, _, _ in windows}

        cache = self._ix.decoded

        def read(txn: lmdb.Transaction, reader: LogReader) -> list[list[tuple[int, int, bytes | None]]]:
            cursor = txn.cursor(db=self._ix.db['pos'])
            out: list[list[tuple[int, int, bytes | None]]] = []
            for run_id, start, end in windows:
                found: list[tuple[int, int, bytes | None]] = []
                out.append(found)
                start = max(start, spans[run_id].start)
                if end <= start:
                    continue
                prefix = _ck(run_id)
                if not cursor.set_range(prefix + _POS.pack(start)):
                    continue
                for key, value in _iter_prefix(cursor, prefix):
                    position = _POS.unpack_from(key, len(prefix))[0]
                    if position >= end:
                        break
                    seq = _SEQ.unpack(value)[0]
                    if seq in cache:
                        found.append((position, seq, None))
                        continue
                    payload = reader.payload(seq)
                    if payload is not None:
                        found.append((position, seq, payload))
            return out

        found = run_projection(self._ix.log, read, write=False)
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
            again = run_projection(
                self._ix.log, lambda _, reader: [reader.payload(seq) for seq in evicted], write=False
            )
            present.update((seq, payload) for seq, payload in zip(evicted, again, strict=True) if payload is not None)
        if present:
            decoded = decode_messages(list(present.values()))
            for seq, message in zip(present, decoded, strict=True):
                cache.put(seq, message)
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

    def __contains__(self, seq: int) -> bool:
        return seq in self._items

    def get(self, seq: int) -> ModelMessage | None:
        with self._lock:
            message = self._items.get(seq)
            if message is not None:
                self._items.move_to_end(seq)
            return message

    def put(self, seq: int, message: ModelMessage) -> None:
        with self._lock:
            self._items[seq] = message
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _iter_prefix(cursor: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Items from the cursor's position on while their key starts with `prefix`."""
    for key, value in cursor:
        key_bytes = bytes(key)
        if not key_bytes.startswith(prefix):
            return
        yield key_bytes, bytes(value)
