"""The search index's format: what its tables hold and how keys and values are encoded.

Shared by the writer (`search.index_writer`), the check (`search.index_check`), the index
(`search.persistent_index`) and its corpus (`search.index_corpus`); it imports none of them.

Tables of the projection `ix` (in LMDB the named databases `ix.<table>`); its position, the
last `seq` applied, is kept by the backend beside them:

- `ix.meta`     analyzer name, format; `UNINDEXED` + ck(conv) + seq -> flag: a message of the
                conversation's corpus that could not be read to be indexed (a document without terms)
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

A document id is `start seq of its run << 32 | position`, so ids sort in corpus order
(runs in start order, then positions), which is how BM25 ties are ordered.
"""

from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from eventlog import RunRecord
from eventlog.projection import ProjectionRecords, ProjectionSpec, ProjectionStore, key_seq

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = [
    'ALL_KEY',
    'BLOCK',
    'BLOCK_NO',
    'DAMAGED_INDEX',
    'DROPPED',
    'INDEX_FORMAT',
    'INDEX_PROJECTION',
    'LOCAL_INDEX_FORMAT',
    'LOCAL_INDEX_PROJECTION',
    'POS',
    'SEQ',
    'TABLES',
    'TRIPLE',
    'UNINDEXED',
    'IndexedLog',
    'IndexedRun',
    'ScopeStats',
    'doc_id_of',
    'encoder',
    'pos_seq',
    'read_meta',
    'run_decoder',
    'stats_decoder',
    'stats_of',
    'term_key',
    'unindexed_seqs',
]

DAMAGED_INDEX: Final = 'the search index is damaged: {}; rebuild it with `eventlog reindex` (the log is not affected)'

INDEX_FORMAT: Final = 3
"""What the index holds, by version: 2 leaves the search tool's own calls and returns out of
the documents; 3 keeps the position with the projection API rather than in `ix.meta`. An
index of another version is rebuilt from the entries when first opened."""
LOCAL_INDEX_FORMAT: Final = 4
"""The format of an index kept apart from its log: 3, and it keeps the payloads and run names a
search shows (`ix.pos` values, `ix.starts`)."""
BLOCK: Final = 64
"""Postings per block: small enough that rewriting the last block on append stays cheap."""
_MAX_TERM_BYTES: Final = 200

POS = struct.Struct('>I')
TRIPLE = struct.Struct('<qqq')
SEQ = struct.Struct('>Q')
BLOCK_NO = struct.Struct('>I')
TABLES = ('meta', 'post', 'stats', 'runs', 'convruns', 'pos', 'held', 'copies', 'starts')

INDEX_PROJECTION: Final = ProjectionSpec('ix', TABLES, format=str(INDEX_FORMAT))
"""The index as a projection of the store: its name (the kind `ix`, whose maintainer the log runs
before every scrub and compaction, `maintain_index`, whatever the calling process imported), its
tables and its format."""
LOCAL_INDEX_PROJECTION: Final = ProjectionSpec('ix', TABLES, format=str(LOCAL_INDEX_FORMAT))
"""`INDEX_PROJECTION` for an index kept apart from its log (format `LOCAL_INDEX_FORMAT`)."""


class IndexedLog(ProjectionStore, Protocol):
    """What the index needs of a log: the projection API, and a run's record and messages."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def run_messages(self, run_id: str) -> list[ModelMessage]: ...


class IndexedRun(msgspec.Struct, array_like=True):
    conversation_id: str
    start_seq: int
    prefix: int
    own: int
    first: int


class ScopeStats(msgspec.Struct, array_like=True):
    docs: int = 0
    length: int = 0
    own_docs: int = 0
    own_length: int = 0


run_decoder = msgspec.msgpack.Decoder(IndexedRun)
stats_decoder = msgspec.msgpack.Decoder(ScopeStats)
encoder = msgspec.msgpack.Encoder()
ALL_KEY = b'\x00all'
DROPPED = b'dropped'
UNINDEXED: Final = b'unindexed\x00'
"""`ix.meta` key prefix of the messages that could not be read to be indexed (`unindexed_seqs`);
the value is the document's flag (`o` own, `c` a copy of history)."""
"""`ix.meta` key: the `seq` of the last `erasure` or `deleted` entry applied. Processes sharing the
index compare it to what their caches of shown messages were filled under (`DecodedCache.follow`)."""


def term_key(term: str) -> bytes:
    raw = term.encode()
    if len(raw) > _MAX_TERM_BYTES:
        return b'#' + hashlib.blake2b(raw, digest_size=16).hexdigest().encode()
    return raw


def doc_id_of(start_seq: int, position: int) -> int:
    return (start_seq << 32) | position


def pos_seq(value: bytes) -> int:
    """The `seq` an `ix.pos` value starts with (a payload may follow it)."""
    return SEQ.unpack_from(value)[0]


def stats_of(raw: bytes | None) -> ScopeStats:
    return ScopeStats() if raw is None else stats_decoder.decode(raw)


def unindexed_seqs(records: ProjectionRecords, scope: bytes) -> tuple[int, ...]:
    """The `seq`s of the messages in scope (`ALL_KEY`: every conversation's own messages, or a
    conversation's corpus by its `id_prefix`) that could not be read to be indexed, in order."""
    every = scope == ALL_KEY
    prefix = UNINDEXED if every else UNINDEXED + scope
    found = {key_seq(key) for key, flag in records.scan('meta', prefix=prefix) if not every or flag == b'o'}
    return tuple(sorted(found))


def read_meta(records: ProjectionRecords, key: bytes) -> str | None:
    raw = records.get('meta', key)
    return None if raw is None else raw.decode(errors='replace')
