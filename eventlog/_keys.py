"""The keyspace: every table, key and stored value of a store, and the codecs that make them.

This module owns the on-disk layout. Nothing else builds or parses a key by hand: the engine
(`_append`, `_read`, `_admin`), `verify` and the LMDB backend call the functions here.

Logical tables (all keys bytewise ordered; `ck(x)` is an id's UTF-8 bytes plus a NUL, which
ids may not contain, so prefixes never collide):

- ENTRIES    seq8 -> msgpack body (`StoredBody`) + 32-byte chain hash; an erased entry's body
             array has one more element, its erasure mark: the SHA-256 of the original body
             (chain rule 2) or `True` (rule 1) (`encode_erased_body`)
- BY_CONV    ck(conversation) + seq8 -> ''
- RUNS       run id -> run record (msgpack array, `StoredRun`)
- RUN_ORDER  start seq8 -> run id
- CONV_RUNS  ck(conversation) + start seq8 -> run id
- CONVS      conversation id -> ConversationRecord (msgpack)
- IDEM       b'r' + run start seq8 + key -> seq8 (keys of a run), or
             b'\\x00' + ck(conversation) + key -> seq8 (keys of conversation entries)
- STORE      the conversation store's index, derived from `saved` entries (`_convstore`):
             b'r' + conversation id -> msgpack [seq of its latest `saved` entry, scope or nil]
             (a record, absent once deleted); b'l' + seq8 -> conversation id and
             b's' + ck(scope) + seq8 -> conversation id (records newest first, by the `seq` of
             their latest `saved` entry); b'e' + entry id -> msgpack [conversation, depth] and
             b'd' + ck(conversation) + depth8 + entry id -> msgpack [seq, parent id or nil]
             (the store's entries: each under the conversation whose save added it, at its
             distance from the first entry of its history, so a history's tail is one range);
             b'f' + ck(conversation) + fork's id -> '' (the conversations forked from it)
- META       b'format' -> format version, b'last_seq' -> seq8 (the largest seq ever assigned;
             an LMDB store derives that from its last ENTRIES key and writes this key only
             before a deletion removes entries, so it is a lower bound there (`_read.last_seq`);
             a PostgreSQL store of layout 2 keeps it in a counter instead and reads it as
             the last settled seq: docs/postgres.md, "Order"),
             b'chain_from' -> seq8 (the first entry chained by rule 2, format 4; see below),
             b'scrub_pending' -> seq8 (the latest erasure or deletion whose removed bytes the
             store's files may still hold),
             b'checkpoint/' + seq8 -> a checkpoint (`checkpoint`),
             b'lease/' + run id -> the run's lease (`_lease`: msgpack [owner, epoch, expires]),
             b'projection/' + name -> the catalogue's entry of a projection (`projection`: JSON)

seq8 is a `seq` as 8 bytes big-endian, so keys sort in `seq` order. A run is named inside
keys by the `seq` of its `run_started` entry rather than by its id, which keeps the indexes
small. A run's entries belong to its conversation and lie between the run's first and last
`seq`, so they are read straight from ENTRIES over that stretch when they make up most of it,
else through BY_CONV.

An entry's chain hash follows from the previous entry's hash in its conversation (`prev`: empty
for its first entry and for a `deleted` tombstone) and the entry's body bytes by one of two rules
(`link`): rule 1, SHA-256(prev + body), for entries before META `chain_from`; rule 2,
SHA-256(0x02 + prev + SHA-256(body)), for entries from it on. Rule 2 needs only the body's digest,
which an erased entry keeps (`encode_erased_body`), so its link is recomputed through erased
entries; under rule 1 an erased entry's hash can only be taken as given.

The table numbers and names (`Table`, `TABLE_NAMES`) are defined with the storage protocol
(`_storage`), whose transactions take them, and re-exported here.

In an LMDB store (`LMDB_TABLES`) ENTRIES is a database of its own (large values, appended in
key order); every other table shares one `index` database under a one-byte prefix (the
table's number), so an append dirties few pages.

Format 2 wrote META `last_seq` with every append in every store; format 3 (an LMDB store's
appends leave it alone) changes nothing else, so `_admin.migrate` only records the new number.
Format 4 adds META `chain_from` (seq8: the first entry chained by rule 2; 1 in a store created in
format 4, the next seq in a migrated one, whose entries keep their rule-1 hashes so that checkpoints
already signed still verify) and the digest in erased bodies; migrating records both numbers.
Format 1 (before 0.1) also kept BY_RUN (ck(run) + seq8 -> ''), keyed run idempotency by
ck(run) and stored run records as maps; `_admin.migrate` rewrites such a store in place.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from typing import Any, Final, cast

import msgspec
from msgspec.structs import fields as struct_fields

from eventlog._storage import TABLE_NAMES, ReadTxn, Table, TableId, prefix_end
from eventlog.entries import ConversationRecord, EntryBody, RunRecord
from eventlog.errors import CorruptEntryError, CorruptStoreError

__all__ = [
    'FORMAT_VERSION',
    'HASH_SIZE',
    'LMDB_TABLES',
    'MAX_ID_BYTES',
    'META_CHAIN_FROM',
    'META_FORMAT',
    'META_LAST_SEQ',
    'META_LEASE_PREFIX',
    'META_PROJECTION_PREFIX',
    'META_SCRUB_PENDING',
    'SEQ_SIZE',
    'TABLE_NAMES',
    'StoredBody',
    'StoredRun',
    'Table',
    'TableId',
    'append_hash',
    'body_digest',
    'by_conv_conversation',
    'by_conv_key',
    'by_conv_keys',
    'chain_from',
    'chain_hash',
    'ck',
    'conv_idem_prefix',
    'conv_key',
    'conv_runs_key',
    'decode_body',
    'decode_body_clipped',
    'decode_conversation',
    'decode_id',
    'decode_run',
    'encode_body',
    'encode_body_of',
    'encode_conversation',
    'encode_erased_body',
    'encode_run',
    'entry_hash',
    'entry_key_of',
    'erased_digest',
    'format_value',
    'hashed_view',
    'idem_conversation',
    'idem_key_of',
    'idem_run_start',
    'is_erased_value',
    'key_conversation',
    'key_seq',
    'lease_key',
    'link',
    'lmdb_key',
    'prefix_end',
    'rule_2_hash',
    'rule_of',
    'run_idem_prefix',
    'run_key',
    'seq_key',
    'split_value',
    'v1_run_idem_prefix',
]

FORMAT_VERSION: Final = 4
"""The on-disk format this code writes; a store with a larger number is refused, an older
one is migrated when opened (`_admin.migrate`)."""

MAX_ID_BYTES: Final = 200
"""Longest id or idempotency key, in UTF-8 bytes (LMDB keys are at most 511 bytes)."""

HASH_SIZE: Final = 32
"""Bytes of the chain hash at the end of every ENTRIES value."""

SEQ_SIZE: Final = 8
"""Bytes of a `seq` inside a key."""

META_FORMAT: Final = b'format'
"""The META key of the format version (ASCII digits)."""
META_LAST_SEQ: Final = b'last_seq'
"""The META key of the largest `seq` ever assigned (seq8); in an LMDB store a lower bound, written
before deletions (`_read.last_seq`)."""
META_CHAIN_FROM: Final = b'chain_from'
"""The META key of the first `seq` chained by rule 2 (seq8; `link`); absent in a store of format 3 or
older, chained by rule 1 throughout."""
META_SCRUB_PENDING: Final = b'scrub_pending'
"""The META key of the `seq` (seq8) of the latest erasure or deletion not yet scrubbed from the
store's files; absent when every removal has been."""

META_LEASE_PREFIX: Final = b'lease/'
"""The META keys of run leases: the prefix, then the run id (`lease_key`)."""
META_PROJECTION_PREFIX: Final = b'projection/'
"""The META keys of the catalogue of projections: the prefix, then the projection's name."""

_SEQ = struct.Struct('>Q')
_SEQ_LIMIT: Final = 1 << 64

LMDB_TABLES: Final[dict[TableId, tuple[bytes, bytes]]] = {
    table: (b'entries', b'') if table == Table.ENTRIES else (b'index', bytes([table])) for table in TABLE_NAMES
}
"""Where each table lives in an LMDB store: the named database and the key prefix within it."""


def format_value(version: int) -> bytes:
    """The META value recording a format version."""
    return str(version).encode()


def lmdb_key(table: TableId, key: bytes) -> bytes:
    """The key a table's `key` has in its LMDB database."""
    return LMDB_TABLES[table][1] + key


# --- keys -------------------------------------------------------------------------------------


def seq_key(seq: int) -> bytes:
    """The 8-byte big-endian key of a `seq` (ENTRIES and RUN_ORDER keys, and META's last seq)."""
    return _SEQ.pack(seq)


def key_seq(key: bytes) -> int:
    """The `seq` at the end of a key (an ENTRIES, BY_CONV, RUN_ORDER or CONV_RUNS key);
    `CorruptStoreError` for a key too short to hold one (damaged storage)."""
    try:
        return _SEQ.unpack_from(key, len(key) - SEQ_SIZE)[0]
    except struct.error:
        raise CorruptStoreError(
            f'the store holds a key of {len(key)} bytes where an entry number was expected; run verify'
        ) from None


def ck(identifier: str) -> bytes:
    """An id as a key prefix: UTF-8 plus a NUL terminator (a conversation's BY_CONV and
    CONV_RUNS prefix)."""
    return identifier.encode() + b'\x00'


def key_conversation(key: bytes) -> str:
    """The conversation id a BY_CONV or CONV_RUNS key starts with (damaged bytes replaced)."""
    cut = key.find(b'\x00')
    return key[: max(cut, 0)].decode(errors='replace')


def by_conv_conversation(key: bytes) -> str:
    """The conversation id of a BY_CONV key: all before its NUL and seq8 (damaged bytes replaced)."""
    return key[: len(key) - SEQ_SIZE - 1].decode(errors='replace')


def by_conv_key(conversation_id: str, seq: int) -> bytes:
    """The BY_CONV key of an entry."""
    return ck(conversation_id) + _SEQ.pack(seq)


def by_conv_keys(conversation_id: str, seqs: Iterable[int]) -> Iterator[bytes]:
    """The BY_CONV keys of a conversation's entries at `seqs`, in their order."""
    prefix = ck(conversation_id)
    pack = _SEQ.pack
    for seq in seqs:
        yield prefix + pack(seq)


def conv_runs_key(conversation_id: str, start_seq: int) -> bytes:
    """The CONV_RUNS key of the run whose `run_started` entry has `start_seq`."""
    return ck(conversation_id) + _SEQ.pack(start_seq)


def run_key(run_id: str) -> bytes:
    """The RUNS key of a run."""
    return run_id.encode()


def lease_key(run_id: str) -> bytes:
    """The META key of a run's lease."""
    return META_LEASE_PREFIX + run_id.encode()


def conv_key(conversation_id: str) -> bytes:
    """The CONVS key of a conversation."""
    return conversation_id.encode()


def run_idem_prefix(start_seq: int) -> bytes:
    """The IDEM key prefix of the run whose `run_started` entry has `start_seq`."""
    return b'r' + _SEQ.pack(start_seq)


def conv_idem_prefix(conversation_id: str) -> bytes:
    """The IDEM key prefix of a conversation's own entries (those of no run)."""
    return b'\x00' + ck(conversation_id)


def idem_key_of(prefix: bytes, key: str) -> bytes:
    """The IDEM key of an idempotency key under its owner's prefix (`run_idem_prefix`,
    `conv_idem_prefix`)."""
    return prefix + key.encode()


def v1_run_idem_prefix(run_id: str) -> bytes:
    """The IDEM key prefix of a run in a format-1 store (its id), rewritten by migration."""
    return ck(run_id)


def entry_key_of(index_key: bytes) -> bytes:
    """The ENTRIES key of the entry a BY_CONV key names (its last 8 bytes)."""
    return index_key[-SEQ_SIZE:]


def idem_run_start(key: bytes) -> bytes | None:
    """The seq8 of the run an IDEM key belongs to, or None for a conversation's key."""
    return key[1 : 1 + SEQ_SIZE] if key[:1] == b'r' else None


def idem_conversation(key: bytes) -> str:
    """The conversation id of a conversation's IDEM key (damaged bytes replaced)."""
    return key_conversation(key[1:])


def decode_id(raw: bytes, what: str) -> str:
    """An id stored as an index key or value; `CorruptStoreError` when it is not UTF-8."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptStoreError(f'{what} {raw[:40]!r} is not a valid id; run verify') from None


# --- entries ----------------------------------------------------------------------------------


class StoredBody(EntryBody, frozen=True, array_like=True, gc=False):
    """The hashed part of a stored entry: an `EntryBody` as a msgpack array."""


_HEADER_FIELDS: Final = StoredBody.__struct_fields__[:-1]
"""The body's fields before `payload`, its last."""
_body_encoder = msgspec.msgpack.Encoder()
_body_decoder = msgspec.msgpack.Decoder(StoredBody)


def encode_body(body: StoredBody) -> bytes:
    """The bytes of a body as stored (and hashed)."""
    return _body_encoder.encode(body)


_BODY_ARRAY: Final = 0x90 | len(StoredBody.__struct_fields__)
"""The msgpack header byte of a stored body (a fixarray of its fields)."""
_ERASED_ARRAY: Final = _BODY_ARRAY + 1
"""The header byte of an erased entry's body: the same array with one more element (`True`)."""


def encode_erased_body(body: StoredBody, digest: bytes | None = None) -> bytes:
    """The stored bytes of an erased entry: `body` (holding the placeholder payload) as an array
    with one more element, the erasure mark: the SHA-256 `digest` of the original body bytes (an
    entry chained by rule 2, whose link is recomputed from it), or `True` (rule 1: none kept).
    Readers decode the body as usual (msgpack arrays with extra trailing elements decode to the
    struct); `is_erased_value` sees the mark, `erased_digest` reads the digest."""
    raw = encode_body(body)
    mark = b'\xc3' if digest is None else b'\xc4' + bytes([len(digest)]) + digest
    return bytes([_ERASED_ARRAY]) + raw[1:] + mark


def is_erased_value(value: bytes) -> bool:
    """Whether an ENTRIES value holds an erased entry (its content replaced by `erase`)."""
    return len(value) > 0 and value[0] == _ERASED_ARRAY


_DIGEST_MARK: Final = b'\xc4' + bytes([HASH_SIZE])
"""How the digest kept by an erased body begins (a msgpack bin 8 of 32 bytes)."""


def erased_digest(value: bytes) -> bytes | None:
    """The digest of the original body an erased ENTRIES value keeps, or `None` (not erased, or
    erased under rule 1, marked `True`). Read by position: only rule 2's erasures keep one, and a
    rule-2 link is checked with whatever is read here."""
    end = len(value) - HASH_SIZE
    start = end - HASH_SIZE
    if not is_erased_value(value) or start - len(_DIGEST_MARK) < 1:
        return None
    if value[start - len(_DIGEST_MARK) : start] != _DIGEST_MARK:
        return None  # marked `True`
    return bytes(value[start:end])


def encode_body_of(entry: Any, payload: bytes) -> bytes:
    """The hashed bytes of an entry described by any object with the entry's other fields
    (an export line, whose payload is carried differently)."""
    return _body_encoder.encode(StoredBody(*[getattr(entry, name) for name in _HEADER_FIELDS], payload=payload))


_HeadBody = msgspec.defstruct(
    '_HeadBody',
    [(f.name, f.type) for f in struct_fields(StoredBody)[:-1]] + [('payload', msgspec.Raw)],
    array_like=True,
    frozen=True,
)
"""A stored body whose payload is left undecoded: a view of the stored bytes (no copy)."""
_head_decoder = msgspec.msgpack.Decoder(_HeadBody)
_BIN_WIDTHS: Final = {0xC4: 1, 0xC5: 2, 0xC6: 4}
"""msgpack's `bin 8/16/32` type bytes, each with the size of the length after it."""


def decode_body_clipped(seq: int, value: bytes | memoryview, limit: int) -> tuple[StoredBody, int]:
    """`decode_body` with the payload cut to its first `limit` bytes, and the payload's full size.
    Only those bytes are copied out of `value` (which may be a view of the store's map)."""
    try:
        head = _head_decoder.decode(memoryview(value)[: len(value) - HASH_SIZE])
    except msgspec.DecodeError as exc:
        raise CorruptEntryError(f'entry {seq} cannot be decoded: {exc}') from None
    raw = memoryview(cast('msgspec.Raw', getattr(head, 'payload')))  # noqa: B009  (a field of a made struct)
    width = _BIN_WIDTHS.get(raw[0]) if len(raw) else None
    if width is None:
        raise CorruptEntryError(f'entry {seq} cannot be decoded: its payload is not bytes')
    size = int.from_bytes(raw[1 : 1 + width], 'big')
    payload = bytes(raw[1 + width : 1 + width + min(size, limit)])
    body = StoredBody(*[getattr(head, name) for name in _HEADER_FIELDS], payload=payload)
    return _checked(seq, body), size


def decode_body(seq: int, value: bytes) -> StoredBody:
    """The body of the ENTRIES value stored at `seq`; `CorruptEntryError` when it cannot be right."""
    try:
        body = _body_decoder.decode(memoryview(value)[: len(value) - HASH_SIZE])
    except msgspec.DecodeError as exc:
        raise CorruptEntryError(f'entry {seq} cannot be decoded: {exc}') from None
    return _checked(seq, body)


def _checked(seq: int, body: StoredBody) -> StoredBody:
    """`body` if it can be the one stored at `seq`; `CorruptEntryError` otherwise."""
    if body.seq != seq:
        raise CorruptEntryError(f'entry stored at seq {seq} says it is seq {body.seq}')
    if body.parent is not None and not 0 < body.parent < seq:
        raise CorruptEntryError(f'entry {seq} names an impossible parent {body.parent}')
    return body


def split_value(value: bytes) -> tuple[bytes, bytes]:
    """An ENTRIES value's hashed body bytes and its chain hash."""
    cut = len(value) - HASH_SIZE
    return value[:cut], value[cut:]


def hashed_view(value: bytes) -> memoryview:
    """An ENTRIES value's hashed body bytes, as a view of `value` (no copy; `split_value` copies)."""
    return memoryview(value)[: len(value) - HASH_SIZE]


def entry_hash(value: bytes) -> bytes:
    """The chain hash at the end of an ENTRIES value."""
    return bytes(value[-HASH_SIZE:])


def chain_hash(prev: bytes, body_bytes: bytes | memoryview) -> bytes:
    """Rule 1: SHA-256 of the previous entry's hash and this entry's bytes (hardware-accelerated on most CPUs)."""
    digest = hashlib.sha256(prev)
    digest.update(body_bytes)
    return digest.digest()


_RULE_2: Final = b'\x02'


def link(prev: bytes, value: bytes, *, rule: int) -> bytes | None:
    """The chain hash an ENTRIES `value` (body bytes, then its hash) must hold after `prev`.

    Rule 2 hashes the body's SHA-256, which an erased entry keeps; rule 1 hashes the body itself,
    so an erased entry's stored hash is returned as given. `None` when `value` cannot hold the
    hash it should: an erased entry of rule 2 that kept no digest.
    """
    hashed, stored = hashed_view(value), entry_hash(value)  # the body not copied (it may be large)
    erased = is_erased_value(value)
    if rule == 1:
        return stored if erased else chain_hash(prev, hashed)
    digest = erased_digest(value) if erased else hashlib.sha256(hashed).digest()
    return None if digest is None else rule_2_hash(prev, digest)


def body_digest(body_bytes: bytes) -> bytes:
    """SHA-256 of an entry's body bytes: what rule 2 chains, and what an erased entry keeps."""
    return hashlib.sha256(body_bytes).digest()


def append_hash(prev: bytes, body_bytes: bytes) -> bytes:
    """The chain hash of a new entry (rule 2, which every entry appended in format 4 follows)."""
    return rule_2_hash(prev, body_digest(body_bytes))


def rule_2_hash(prev: bytes, digest: bytes) -> bytes:
    """Rule 2: SHA-256 of 0x02, the previous entry's hash and the SHA-256 `digest` of this entry's body."""
    return hashlib.sha256(_RULE_2 + prev + digest).digest()


def rule_of(seq: int, first: int | None) -> int:
    """The chain rule of the entry at `seq` in a store whose rule 2 starts at `first` (`chain_from`)."""
    return 2 if first is not None and seq >= first else 1


def chain_from(txn: ReadTxn) -> int | None:
    """The first `seq` chained by rule 2 (META `chain_from`); `None` in a store of format 3 or older.

    `CorruptStoreError` when the record is malformed."""
    raw = txn.get(Table.META, META_CHAIN_FROM)
    if raw is None:
        return None
    if len(raw) != SEQ_SIZE:
        raise CorruptStoreError(f'the recorded chain_from {raw[:20]!r} is malformed; run verify')
    return _SEQ.unpack(raw)[0]


# --- records ----------------------------------------------------------------------------------


StoredRun: type[msgspec.Struct] = msgspec.defstruct(
    'StoredRun',
    [(f.name, f.type) for f in msgspec.structs.fields(RunRecord) if f.name != 'run_id'],
    array_like=True,
    gc=False,
    module=__name__,
)
"""A `RunRecord` as stored: its fields but the run id (the key), positional, in `RunRecord`'s order.

Stores of format 1 hold runs as maps with field names; both layouts are read."""

_RUN_FIELDS: Final = StoredRun.__struct_fields__
_record_encoder = msgspec.msgpack.Encoder()
_run_map_decoder = msgspec.msgpack.Decoder(RunRecord)
_stored_run_decoder = msgspec.msgpack.Decoder(StoredRun)
_conv_decoder = msgspec.msgpack.Decoder(ConversationRecord)


def encode_run(record: RunRecord) -> bytes:
    """The RUNS value of a run record."""
    # `StoredRun` is `RunRecord` without its first field (the run id), encoded as an array: the
    # record's other values as a tuple encode to the same bytes, without building the struct.
    return _record_encoder.encode(msgspec.structs.astuple(record)[1:])


def decode_run(run_id: str, raw: bytes) -> RunRecord:
    """A stored run record; `CorruptStoreError` when it cannot be decoded or cannot be right."""
    try:
        if raw[0] & 0xF0 == 0x80 or raw[0] in (0xDE, 0xDF):  # a msgpack map: format 1
            run = _run_map_decoder.decode(raw)
        else:
            run = RunRecord(run_id=run_id, **msgspec.structs.asdict(_stored_run_decoder.decode(raw)))
    except (msgspec.DecodeError, IndexError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f'the record of run {run_id!r} cannot be decoded ({exc}); run verify') from None
    if not (
        0 < run.start_seq <= run.last_seq < _SEQ_LIMIT
        and (run.branch_parent is None or 0 < run.branch_parent < run.start_seq)
        and 0 <= run.message_count <= run.entry_count
    ):
        raise CorruptStoreError(f'the record of run {run_id!r} holds impossible positions; run verify')
    return run


def encode_conversation(record: ConversationRecord) -> bytes:
    """The CONVS value of a conversation record (a msgpack map)."""
    return _record_encoder.encode(record)


def decode_conversation(conversation_id: str, raw: bytes) -> ConversationRecord:
    """A stored conversation record; `CorruptStoreError` when it cannot be decoded or cannot be right."""
    try:
        conv = _conv_decoder.decode(raw)
    except (msgspec.DecodeError, ValueError) as exc:
        raise CorruptStoreError(
            f'the record of conversation {conversation_id!r} cannot be decoded ({exc}); run verify'
        ) from None
    if not (
        0 < conv.first_seq <= conv.last_seq < _SEQ_LIMIT
        and (conv.forked_from is None or 0 < conv.forked_from.seq < conv.first_seq)
    ):
        raise CorruptStoreError(
            f'the record of conversation {conversation_id!r} holds impossible positions; run verify'
        )
    return conv


# --- the conversation store's index (STORE) -----------------------------------------------------


class StoreRecordRef(msgspec.Struct, array_like=True, frozen=True):
    """STORE `r` value: where a conversation's record is, and what its listing keys are under."""

    seq: int
    """The conversation's latest `saved` entry."""
    scope: str | None
    forked_from: str | None


class StorePlace(msgspec.Struct, array_like=True, frozen=True):
    """STORE `e` value: under which conversation, and at which depth, a store entry's link is kept."""

    conversation_id: str
    depth: int


class StoreLinkValue(msgspec.Struct, array_like=True, frozen=True):
    """STORE `d` value: the `message` entry holding a store entry's message, and the entry before it."""

    seq: int
    parent: str | None


_ref_decoder = msgspec.msgpack.Decoder(StoreRecordRef)
_place_decoder = msgspec.msgpack.Decoder(StorePlace)
_link_decoder = msgspec.msgpack.Decoder(StoreLinkValue)


def store_record_key(conversation_id: str) -> bytes:
    """STORE key of a conversation's record."""
    return b'r' + conversation_id.encode()


def store_list_key(seq: int) -> bytes:
    """STORE key listing the record whose latest `saved` entry is `seq` (newest = largest)."""
    return b'l' + seq_key(seq)


STORE_LIST_PREFIX: Final = b'l'


def store_scope_prefix(scope: str) -> bytes:
    """STORE prefix of the listing keys of one scope's records."""
    return b's' + ck(scope)


def store_entry_key(entry_id: str) -> bytes:
    """STORE key locating a store entry's link."""
    return b'e' + entry_id.encode()


def store_depth_prefix(conversation_id: str) -> bytes:
    """STORE prefix of the links a conversation's saves added, ordered by depth."""
    return b'd' + ck(conversation_id)


def store_depth_key(conversation_id: str, depth: int, entry_id: str) -> bytes:
    """STORE key of one store entry's link."""
    return store_depth_prefix(conversation_id) + seq_key(depth) + entry_id.encode()


def store_fork_prefix(conversation_id: str) -> bytes:
    """STORE prefix of the conversations forked from `conversation_id`."""
    return b'f' + ck(conversation_id)


def encode_store_value(value: StoreRecordRef | StorePlace | StoreLinkValue) -> bytes:
    """A STORE value as msgpack."""
    return _record_encoder.encode(value)


def decode_store_ref(raw: bytes) -> StoreRecordRef:
    """A STORE `r` value; `CorruptStoreError` when damaged."""
    return _decode_store(_ref_decoder, raw)


def decode_store_place(raw: bytes) -> StorePlace:
    """A STORE `e` value; `CorruptStoreError` when damaged."""
    return _decode_store(_place_decoder, raw)


def decode_store_link(raw: bytes) -> StoreLinkValue:
    """A STORE `d` value; `CorruptStoreError` when damaged."""
    return _decode_store(_link_decoder, raw)


def _decode_store(decoder: msgspec.msgpack.Decoder[Any], raw: bytes) -> Any:
    try:
        return decoder.decode(raw)
    except (msgspec.DecodeError, ValueError):
        raise CorruptStoreError('a conversation store record is damaged; run verify') from None
