"""The search index's writer: `IndexWriter` applies log entries to the index's records.

It runs inside one write transaction of the projection (`PersistentIndex.catch_up`, `verify`), and
`indexed_text` gives the text a message is indexed by.
"""

from __future__ import annotations

from typing import Protocol

from eventlog import Entry, decode_messages
from eventlog.errors import CorruptEntryError
from eventlog.projection import LogReader, ProjectionWriter, seq_key
from eventlog.projection import id_prefix as ck  # the body still calls it `ck`, its name in eventlog._keys
from search.analyzers import Analyzer, term_counts
from search.index_format import (
    ALL_KEY,
    BLOCK,
    BLOCK_NO,
    DROPPED,
    POS,
    TRIPLE,
    UNINDEXED,
    IndexedRun,
    ScopeStats,
    doc_id_of,
    encoder,
    pos_seq,
    run_decoder,
    stats_decoder,
    term_key,
)
from search.wire_text import wire_index_text

__all__ = ['IndexWriter', 'WrittenIndex', 'indexed_text', 'readable_text']


class _Clearable(Protocol):
    def clear(self) -> None: ...


class WrittenIndex(Protocol):
    """What the writer needs of the index it writes (`PersistentIndex`)."""

    @property
    def analyzer(self) -> Analyzer: ...

    @property
    def apart(self) -> bool:
        """Whether the index is kept apart from its log (and keeps payloads and run names)."""
        ...

    @property
    def decoded(self) -> _Clearable:
        """The cache of shown messages, emptied when a conversation is dropped."""
        ...


class IndexWriter:
    """Applies entries to the index inside one write transaction."""

    def __init__(self, index: WrittenIndex, records: ProjectionWriter, reader: LogReader) -> None:
        self.ix = index
        self.records = records
        self.reader = reader
        self.runs: dict[str, IndexedRun] = {}
        self.stats: dict[bytes, ScopeStats] = {}
        self.pending: dict[bytes, list[bytes]] = {}
        """Postings gathered in this transaction, written per term by `write_postings`."""

    # -- small helpers --------------------------------------------------------------------------

    def run(self, run_id: str) -> IndexedRun | None:
        cached = self.runs.get(run_id)
        if cached is None:
            raw = self.records.get('runs', run_id.encode())
            if raw is not None:
                cached = run_decoder.decode(raw)
                self.runs[run_id] = cached
        return cached

    def stat(self, key: bytes) -> ScopeStats:
        cached = self.stats.get(key)
        if cached is None:
            raw = self.records.get('stats', key)
            cached = ScopeStats() if raw is None else stats_decoder.decode(raw)
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
                block_no = BLOCK_NO.unpack_from(found[0], len(prefix))[0]
                block = found[1]
            data = block + b''.join(triples)
            size = BLOCK * TRIPLE.size
            for offset in range(0, len(data), size):
                records.put('post', prefix + BLOCK_NO.pack(block_no), data[offset : offset + size])
                block_no += 1
        self.pending.clear()

    def flush(self, position: int) -> None:
        self.write_postings()
        for run_id, run in self.runs.items():
            self.records.put('runs', run_id.encode(), encoder.encode(run))
        for key, stats in self.stats.items():
            self.records.put('stats', key, encoder.encode(stats))
        self.records.set_position(position)

    def add_doc(
        self, conversation_id: str, flag: bytes, doc_id: int, payload: bytes, run_id: str, position: int, seq: int
    ) -> None:
        conv_key = ck(conversation_id)
        text = readable_text(payload, seq)
        if text is None:  # a document without terms, counted
            self.records.put('meta', UNINDEXED + conv_key + seq_key(seq), flag)
        counts = term_counts(self.ix.analyzer, text or '')
        length = counts.total()
        pending = self.pending
        for term, tf in counts.items():
            prefix = conv_key + flag + term_key(term) + b'\x00'
            triple = TRIPLE.pack(doc_id, tf, length)
            chunk = pending.get(prefix)
            if chunk is None:
                pending[prefix] = [triple]
            else:
                chunk.append(triple)
        self.records.put('held', conv_key + seq_key(seq), b'')
        shown = seq_key(seq) + payload if self.ix.apart else seq_key(seq)
        self.records.put('pos', ck(run_id) + POS.pack(position), shown)
        stats = self.stat(conv_key)
        stats.docs += 1
        stats.length += length
        if flag == b'o':
            stats.own_docs += 1
            stats.own_length += length
            every = self.stat(ALL_KEY)
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
            self.records.put('meta', DROPPED, seq_key(entry.seq))
        elif entry.kind in ('erasure', 'shred'):  # a shred: the conversation reads as placeholders now
            self.reindex_conversation(entry.conversation_id, before=entry.seq)
            self.records.put('meta', DROPPED, seq_key(entry.seq))

    def reindex_conversation(self, conversation_id: str, *, before: int) -> None:
        """Index a conversation again from its entries before `before` (and the conversations that
        hold copies of its messages): after an erasure, its erased messages' terms are dropped and
        only their placeholders are indexed."""
        self.drop_conversation(conversation_id, reindex_before=before)
        for entry in self.reader.conversation_entries(conversation_id, before=before):
            if entry.kind not in ('erasure', 'shred'):  # an earlier erasure's entries are erased already
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
            self.runs[entry.run_id] = IndexedRun(conv, entry.seq, threaded, 0, threaded)
            self.records.put('convruns', ck(conv) + entry.run_id.encode(), b'')
            return
        prefix = self.reader.branch_messages(entry.parent)
        first = len(prefix)
        for position, (seq, _, _) in enumerate(prefix):
            if not self.held(conv, seq):
                first = position
                break
        run = IndexedRun(conversation_id=conv, start_seq=entry.seq, prefix=len(prefix), own=0, first=first)
        self.runs[entry.run_id] = run
        self.records.put('convruns', ck(conv) + entry.run_id.encode(), b'')
        for position in range(first, len(prefix)):
            seq, source_conv, payload = prefix[position]
            self.add_doc(conv, b'c', doc_id_of(entry.seq, position), payload, entry.run_id, position, seq)
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
        for _, value in self.records.scan('pos', prefix=prefix, start=prefix + POS.pack(earlier.prefix)):
            if pos_seq(value) > parent:
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
            doc_id_of(run.start_seq, position),
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
        records.delete_prefix('meta', UNINDEXED + conv_key)
        stats = self.stat(conv_key)
        every = self.stat(ALL_KEY)
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


def indexed_text(payload: bytes, seq: int) -> str:
    """The indexed text of the message stored as `payload` (entry `seq`): read straight from its
    JSON where `search.wire_text` can, so that indexing the common messages needs no pydantic-ai
    (`eventlog verify` derives the index again); decoded in full otherwise."""
    text = wire_index_text(payload)
    if text is not None:
        return text
    from search.render import index_text

    return index_text(decode_messages([payload], where=f'entry {seq}')[0])


def readable_text(payload: bytes, seq: int) -> str | None:
    """`indexed_text`, or `None` for a message pydantic-ai cannot read (damaged, or stored by an
    earlier version nested deeper than pydantic-ai reads): every index holds it as a document
    without terms and reports it (`search.index_format.unindexed_seqs`, `SearchResult.unindexed`),
    and searches go on over everything else."""
    try:
        return indexed_text(payload, seq)
    except CorruptEntryError:
        return None
