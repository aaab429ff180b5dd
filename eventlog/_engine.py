"""The log's logic, written once over the `_storage` transaction protocols.

Every backend runs these functions inside its own transactions, so appends,
records, replay, management and verification behave identically everywhere and
one conformance suite covers them all.

Layout (all keys bytewise ordered; `ck(x)` is an id's UTF-8 bytes plus a NUL, which
ids may not contain, so prefixes never collide):

- ENTRIES    seq8 -> msgpack body + 32-byte chain hash
- BY_CONV    ck(conversation) + seq8 -> ''
- RUNS       run id -> run record (msgpack array, `_StoredRun`)
- RUN_ORDER  start seq8 -> run id
- CONV_RUNS  ck(conversation) + start seq8 -> run id
- CONVS      conversation id -> ConversationRecord (msgpack)
- IDEM       b'r' + run start seq8 + key -> seq8 (keys of a run), or
             b'\x00' + ck(conversation) + key -> seq8 (keys of conversation entries)
- META       b'format' -> format version, b'last_seq' -> seq8

A run's entries belong to its conversation and lie between the run's first and last
`seq`, so they are read straight from ENTRIES over that stretch when they make up most of
it, else through BY_CONV; a run is named inside keys by the `seq` of its `run_started`
entry rather than by its id, which keeps the index small.

Format 1 (before 0.1) also kept BY_RUN (ck(run) + seq8 -> ''), keyed run idempotency by
ck(run) and stored run records as maps; `migrate` rewrites such a store in place.
"""

from __future__ import annotations

import hashlib
import re
import struct
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

from eventlog._storage import ReadTxn, Table, WriteTxn
from eventlog.entries import (
    CONVERSATION_KINDS,
    KINDS,
    MAX_SEQ,
    RUN_KINDS,
    CompactionInfo,
    ConversationRecord,
    Entry,
    ForkInfo,
    NewEntry,
    RunFinishedInfo,
    RunRecord,
    RunStartedInfo,
    RunStatus,
    TitleInfo,
    ToolEffectInfo,
    decode_messages,
)
from eventlog.errors import (
    ConversationNotFound,
    CorruptEntryError,
    CorruptStoreError,
    InvalidArgumentError,
    InvalidPayloadError,
    LogFullError,
    RunNotFound,
    StoreVersionError,
)

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

FORMAT_VERSION: Final = 2
"""The on-disk format this code writes; a store with a larger number is refused, an older
one is migrated when opened (`migrate`)."""

MAX_ID_BYTES: Final = 200
"""Longest id or idempotency key, in UTF-8 bytes (LMDB keys are at most 511 bytes)."""

HASH_SIZE: Final = 32
_DENSE_SLACK: Final = 64
"""Foreign entries a run's stretch of the log may hold beyond its own before its entries are
looked up through the conversation index instead of read in order (see `_run_items`)."""
_SEQ = struct.Struct('>Q')
_SEQ_LIMIT: Final = 1 << 64


class _Body(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The hashed part of a stored entry."""

    seq: int
    conversation_id: str
    run_id: str | None
    kind: str
    timestamp: datetime
    parent: int | None
    idempotency_key: str | None
    inherited: bool
    payload: bytes


class _StoredRun(msgspec.Struct, array_like=True, gc=False):
    """A `RunRecord` as stored: positional fields, the run id being the key.

    Stores of format 1 hold runs as maps with field names; both layouts are read.
    """

    conversation_id: str
    parent_run_id: str | None
    agent_name: str | None
    metadata: dict[str, str]
    started_at: datetime
    finished_at: datetime | None
    status: RunStatus
    error: str | None
    usage: dict[str, int]
    start_seq: int
    branch_parent: int | None
    last_seq: int
    message_count: int
    entry_count: int


def _encode_run(record: RunRecord) -> bytes:
    return _run_encoder.encode(_StoredRun(*[getattr(record, name) for name in _StoredRun.__struct_fields__]))


def decode_run(run_id: str, raw: bytes) -> RunRecord:
    """A stored run record; `CorruptStoreError` when it cannot be decoded or cannot be right."""
    try:
        if raw[0] & 0xF0 == 0x80 or raw[0] in (0xDE, 0xDF):  # a msgpack map: format 1
            run = _run_decoder.decode(raw)
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


def decode_id(raw: bytes, what: str) -> str:
    """An id stored as an index key or value; `CorruptStoreError` when it is not UTF-8."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptStoreError(f'{what} {raw[:40]!r} is not a valid id; run verify') from None


_body_encoder = msgspec.msgpack.Encoder()
_body_decoder = msgspec.msgpack.Decoder(_Body)
_run_encoder = msgspec.msgpack.Encoder()
_run_decoder = msgspec.msgpack.Decoder(RunRecord)
_stored_run_decoder = msgspec.msgpack.Decoder(_StoredRun)
_conv_decoder = msgspec.msgpack.Decoder(ConversationRecord)
_json_encoder = msgspec.json.Encoder()
_started_decoder = msgspec.json.Decoder(RunStartedInfo)
_finished_decoder = msgspec.json.Decoder(RunFinishedInfo)
_compaction_decoder = msgspec.json.Decoder(CompactionInfo)
_tool_decoder = msgspec.json.Decoder(ToolEffectInfo)
_title_decoder = msgspec.json.Decoder(TitleInfo)
_fork_decoder = msgspec.json.Decoder(ForkInfo)


def seq_key(seq: int) -> bytes:
    """The 8-byte big-endian key of a `seq`."""
    return _SEQ.pack(seq)


def key_seq(key: bytes) -> int:
    """The `seq` at the end of an index key."""
    return _SEQ.unpack_from(key, len(key) - 8)[0]


def ck(identifier: str) -> bytes:
    """An id as a key prefix: UTF-8 plus a NUL terminator."""
    return identifier.encode() + b'\x00'


def utcnow() -> datetime:
    return datetime.now(UTC)


# --- validation -------------------------------------------------------------------------------


_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]')


def check_id(value: object, what: str) -> str:
    """Return `value` if it is a usable id, else raise `InvalidArgumentError`."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f'{what} must be a string, got {type(value).__name__}')
    if not value:
        raise InvalidArgumentError(f'{what} must not be empty')
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise InvalidArgumentError(f'{what} must be valid Unicode (no lone surrogates): {value!r}') from None
    if size > MAX_ID_BYTES:
        raise InvalidArgumentError(f'{what} is longer than {MAX_ID_BYTES} bytes of UTF-8: {value[:40]!r}...')
    if _CONTROL.search(value):
        raise InvalidArgumentError(f'{what} must not contain control characters: {value!r}')
    return value


def check_seq(value: object, what: str) -> int:
    """Return `value` if it is a `seq` the log can hold (1 to `MAX_SEQ`), else raise `InvalidArgumentError`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SEQ:
        raise InvalidArgumentError(f'{what} must be an integer seq from 1 to {MAX_SEQ}, got {value!r}')
    return value


def check_count(value: object, what: str) -> int:
    """Return `value` if it is an integer from 0 to `MAX_SEQ` (a count, or a `seq` where 0 means
    "before the first"), else raise `InvalidArgumentError`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEQ:
        raise InvalidArgumentError(f'{what} must be an integer from 0 to {MAX_SEQ}, got {value!r}')
    return value


def validate_messages(payloads: Sequence[bytes]) -> None:
    """Raise `InvalidPayloadError` unless every payload is one message pydantic-ai can read."""
    if not payloads:
        return
    import pydantic  # imported on first use (with pydantic-ai): keeps start-up fast
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    try:
        decoded = ModelMessagesTypeAdapter.validate_json(b'[' + b','.join(payloads) + b']')
    except (pydantic.ValidationError, ValueError):
        decoded = None
    if decoded is not None and len(decoded) == len(payloads):
        return
    for payload in payloads:
        try:
            one = ModelMessagesTypeAdapter.validate_json(b'[' + payload + b']')
        except (pydantic.ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidPayloadError(
                f'message payload is not a pydantic-ai message ({first}): {payload[:80]!r}'
            ) from None
        if len(one) != 1:
            raise InvalidPayloadError(f'message payload must hold exactly one message: {payload[:80]!r}')
    raise InvalidPayloadError('message payloads do not form a list of messages')  # pragma: no cover


def _decode_info(decoder: msgspec.json.Decoder[Any], payload: bytes, kind: str) -> Any:
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise InvalidPayloadError(f'{kind} payload is not valid: {exc}') from None


# --- decoding ---------------------------------------------------------------------------------


def check_format(txn: ReadTxn) -> int | None:
    """The store's format version, refusing one newer than this code."""
    raw = txn.get(Table.META, b'format')
    if raw is None:
        return None
    try:
        version = int(raw.decode())
    except ValueError:
        raise StoreVersionError(f'the store records an unreadable format version {raw[:20]!r}') from None
    if version > FORMAT_VERSION:
        raise StoreVersionError(
            f'the store was written in format {version}, and this version of pydantic-ai-eventlog '
            f'reads format {FORMAT_VERSION} at most; upgrade pydantic-ai-eventlog to open it'
        )
    return version


def init_format(txn: WriteTxn) -> None:
    """Record the format of a new store; bring an older store up to date (`migrate`)."""
    version = check_format(txn)
    if version is None:
        txn.put(Table.META, b'format', str(FORMAT_VERSION).encode())
    elif version < FORMAT_VERSION:
        migrate(txn, version)


def migrate(txn: WriteTxn, version: int) -> None:
    """Rewrite a store of an older format in the current one, inside `txn` (all or nothing).

    Entries, their hashes and every record keep their content; only how the indexes name
    runs changes, so a migrated store exports, verifies and replays exactly as before.
    """
    if version != 1:
        raise StoreVersionError(f'the store records format {version}, which no version of pydantic-ai-eventlog wrote')
    for key, raw in list(txn.scan(Table.RUNS)):
        run_id = decode_id(key, 'the run record key')
        run = decode_run(run_id, raw)
        old_prefix = ck(run_id)
        new_prefix = run_idem_prefix(run.start_seq)
        for idem_key, value in list(txn.scan(Table.IDEM, prefix=old_prefix)):
            txn.delete(Table.IDEM, idem_key)
            txn.put(Table.IDEM, new_prefix + idem_key[len(old_prefix) :], value)
        txn.put(Table.RUNS, key, _encode_run(run))
    for key in [k for k, _ in txn.scan(Table.BY_RUN)]:
        txn.delete(Table.BY_RUN, key)
    txn.put(Table.META, b'format', str(FORMAT_VERSION).encode())


def decode_body(seq: int, value: bytes) -> _Body:
    try:
        body = _body_decoder.decode(memoryview(value)[: len(value) - HASH_SIZE])
    except msgspec.DecodeError as exc:
        raise CorruptEntryError(f'entry {seq} cannot be decoded: {exc}') from None
    if body.seq != seq:
        raise CorruptEntryError(f'entry stored at seq {seq} says it is seq {body.seq}')
    if body.parent is not None and not 0 < body.parent < seq:
        raise CorruptEntryError(f'entry {seq} names an impossible parent {body.parent}')
    return body


def to_entry(body: _Body, value: bytes) -> Entry:
    return Entry(
        seq=body.seq,
        conversation_id=body.conversation_id,
        run_id=body.run_id,
        kind=body.kind,
        timestamp=body.timestamp,
        parent=body.parent,
        idempotency_key=body.idempotency_key,
        inherited=body.inherited,
        payload=body.payload,
        hash=bytes(value[-HASH_SIZE:]),
    )


def get_entry(txn: ReadTxn, seq: int) -> Entry | None:
    value = txn.get(Table.ENTRIES, seq_key(seq))
    if value is None:
        return None
    return to_entry(decode_body(seq, value), value)


def _get_body(txn: ReadTxn, seq: int) -> _Body | None:
    value = txn.get(Table.ENTRIES, seq_key(seq))
    return None if value is None else decode_body(seq, value)


def get_run(txn: ReadTxn, run_id: str) -> RunRecord | None:
    raw = txn.get(Table.RUNS, run_id.encode())
    return None if raw is None else decode_run(run_id, raw)


def get_conversation(txn: ReadTxn, conversation_id: str) -> ConversationRecord | None:
    raw = txn.get(Table.CONVS, conversation_id.encode())
    return None if raw is None else decode_conversation(conversation_id, raw)


def last_seq(txn: ReadTxn) -> int:
    """The largest `seq` ever assigned (entries removed by a delete keep their numbers used).

    Every write transaction records it in META, so reading it is one lookup.
    """
    raw = txn.get(Table.META, b'last_seq')
    return 0 if raw is None else key_seq(raw)


def chain_hash(prev: bytes, body_bytes: bytes) -> bytes:
    """SHA-256 of the previous entry's hash and this entry's bytes (hardware-accelerated on most CPUs)."""
    digest = hashlib.sha256(prev)
    digest.update(body_bytes)
    return digest.digest()


# --- appending --------------------------------------------------------------------------------


class _Batch:
    """Records touched by one write transaction, written back once at its end."""

    def __init__(self, txn: WriteTxn) -> None:
        self.txn = txn
        self.runs: dict[str, RunRecord] = {}
        self.convs: dict[str, ConversationRecord] = {}
        self.idem: dict[bytes, int] = {}
        self.prefixes: dict[str, bytes] = {}
        self.next_seq = last_seq(txn) + 1

    def run(self, run_id: str) -> RunRecord | None:
        record = self.runs.get(run_id)
        if record is None:
            record = get_run(self.txn, run_id)
            if record is not None:
                self.runs[run_id] = record
        return record

    def conv(self, conversation_id: str) -> ConversationRecord | None:
        record = self.convs.get(conversation_id)
        if record is None:
            record = get_conversation(self.txn, conversation_id)
            if record is not None:
                self.convs[conversation_id] = record
        return record

    def key_prefix(self, identifier: str) -> bytes:
        """`ck(identifier)`, computed once per transaction."""
        prefix = self.prefixes.get(identifier)
        if prefix is None:
            prefix = self.prefixes[identifier] = ck(identifier)
        return prefix

    def entry_conversation(self, seq: int) -> str | None:
        body = _get_body(self.txn, seq)
        return None if body is None else body.conversation_id

    def flush(self) -> None:
        self.txn.put(Table.META, b'last_seq', seq_key(self.next_seq - 1))
        for run_id, record in self.runs.items():
            self.txn.put(Table.RUNS, run_id.encode(), _encode_run(record))
        for conversation_id, conv in self.convs.items():
            self.txn.put(Table.CONVS, conversation_id.encode(), _run_encoder.encode(conv))


def run_idem_prefix(start_seq: int) -> bytes:
    """The IDEM key prefix of the run whose `run_started` entry has `start_seq`."""
    return b'r' + seq_key(start_seq)


def _idem_key(batch: _Batch, entry: NewEntry, key: str, seq: int) -> bytes:
    """Where `entry`'s idempotency key is recorded; `seq` is the entry's own, used when the
    entry starts its run."""
    if entry.run_id is None:
        return b'\x00' + ck(entry.conversation_id) + key.encode()
    run = batch.run(entry.run_id)
    return run_idem_prefix(seq if run is None else run.start_seq) + key.encode()


def _check_new_entry(entry: object, seen: set[object]) -> NewEntry:
    if not isinstance(entry, NewEntry):
        raise InvalidArgumentError(f'append takes NewEntry objects, got {type(entry).__name__}')
    ids = (entry.conversation_id, entry.run_id)
    if ids not in seen:
        check_id(entry.conversation_id, 'conversation_id')
        if entry.run_id is not None:
            check_id(entry.run_id, 'run_id')
        seen.add(ids)
    if not isinstance(entry.kind, str) or entry.kind not in KINDS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(f'unknown entry kind {entry.kind!r}; expected one of {sorted(KINDS)}')
    if entry.kind in RUN_KINDS:
        if entry.run_id is None:
            raise InvalidArgumentError(f'a {entry.kind} entry needs a run_id')
    elif entry.run_id is not None:
        raise InvalidArgumentError(f'a {entry.kind} entry describes a conversation and takes no run_id')
    if not isinstance(entry.payload, bytes):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidPayloadError(f'payload must be bytes, got {type(entry.payload).__name__}')
    if entry.idempotency_key is not None:
        check_id(entry.idempotency_key, 'idempotency_key')
    if entry.parent is not None:
        check_seq(entry.parent, 'parent')
    if entry.timestamp is not None and (
        not isinstance(entry.timestamp, datetime)  # pyright: ignore[reportUnnecessaryIsInstance]
        or entry.timestamp.tzinfo is None
    ):
        raise InvalidArgumentError('timestamp must be a timezone-aware datetime')
    if not isinstance(entry.inherited, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError('inherited must be a bool')
    if entry.inherited and entry.kind != 'message':
        raise InvalidArgumentError('only message entries can be marked inherited')
    return entry


def _new_conversation(conversation_id: str, seq: int, ts: datetime) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=conversation_id, created_at=ts, updated_at=ts, first_seq=seq, last_seq=seq
    )


def _reopen(
    batch: _Batch, old: ConversationRecord | None, conversation_id: str, seq: int, ts: datetime
) -> ConversationRecord:
    """A fresh record for a new conversation, or one reusing a deleted conversation's id.

    The chain goes on from the tombstone, so `verify` still covers the whole id.
    """
    conv = _new_conversation(conversation_id, seq, ts)
    if old is not None:
        conv.head_hash = old.head_hash
    batch.convs[conversation_id] = conv
    return conv


def _write_entry(batch: _Batch, body: _Body, conv: ConversationRecord, idem_key: bytes | None) -> bytes:
    txn = batch.txn
    body_bytes = _body_encoder.encode(body)
    digest = chain_hash(conv.head_hash, body_bytes)
    skey = seq_key(body.seq)
    txn.put_last(Table.ENTRIES, skey, body_bytes + digest)
    txn.put(Table.BY_CONV, batch.key_prefix(body.conversation_id) + skey, b'')
    if idem_key is not None:
        txn.put(Table.IDEM, idem_key, skey)
        batch.idem[idem_key] = body.seq
    conv.head_hash = digest
    conv.last_seq = body.seq
    conv.updated_at = body.timestamp
    conv.entry_count += 1
    conv.payload_bytes += len(body.payload)
    batch.next_seq = body.seq + 1
    return digest


def append_entries(
    txn: WriteTxn,
    entries: Sequence[NewEntry],
    *,
    allow_internal: bool = False,
    seq_hints: Sequence[int] | None = None,
    recorded: dict[int, bytes] | None = None,
) -> list[int]:
    """Append `entries` in order inside `txn`; return each entry's `seq`.

    Validation happens before anything is written, so a bad entry anywhere in the batch
    leaves the store unchanged (the caller's transaction is aborted on error as well).
    With `recorded`, each entry whose idempotency key was appended before adds its index in
    `entries` and the payload the log holds for it.
    """
    seen: set[object] = set()
    checked = [_check_new_entry(entry, seen) for entry in entries]
    unvalidated = [e.payload for e in checked if e.kind == 'message' and not e.prevalidated]
    validate_messages(unvalidated)
    batch = _Batch(txn)
    now = utcnow()
    seqs: list[int] = []
    for index, entry in enumerate(checked):
        idem_key = None
        seq = batch.next_seq
        if seq_hints is not None and seq_hints[index] > seq:
            seq = seq_hints[index]
        if seq > MAX_SEQ:
            raise LogFullError(f'the log has used every seq up to {MAX_SEQ}; nothing more can be appended')
        if entry.idempotency_key is not None:
            idem_key = _idem_key(batch, entry, entry.idempotency_key, seq)
            existing = batch.idem.get(idem_key)
            if existing is None:
                raw = txn.get(Table.IDEM, idem_key)
                existing = None if raw is None else key_seq(raw)
            if existing is not None:
                seqs.append(existing)
                if recorded is not None:
                    held = _get_body(txn, existing)
                    recorded[index] = b'' if held is None else held.payload
                continue
        ts = entry.timestamp or now
        parent = _apply(batch, entry, seq, ts, allow_internal=allow_internal)
        conv = batch.conv(entry.conversation_id)
        assert conv is not None
        body = _Body(
            seq,
            entry.conversation_id,
            entry.run_id,
            entry.kind,
            ts,
            parent,
            entry.idempotency_key,
            entry.inherited,
            entry.payload,
        )
        _write_entry(batch, body, conv, idem_key)
        seqs.append(seq)
    batch.flush()
    return seqs


def _apply(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, *, allow_internal: bool) -> int | None:
    """Check `entry` against the records, update them, and return the entry's parent."""
    kind = entry.kind
    conv_id = entry.conversation_id
    conv = batch.conv(conv_id)
    if kind in CONVERSATION_KINDS:
        return _apply_conversation_kind(batch, entry, conv, seq, ts, allow_internal=allow_internal)
    run_id = entry.run_id
    assert run_id is not None
    run = batch.run(run_id)
    if kind == 'run_started':
        if run is not None:
            raise InvalidArgumentError(f'run {run_id!r} has already started (in conversation {run.conversation_id!r})')
        info: RunStartedInfo = _decode_info(_started_decoder, entry.payload or b'{}', kind)
        if entry.parent is not None:
            _check_parent(batch, entry.parent, seq)
        if conv is None or conv.deleted:
            conv = _reopen(batch, conv, conv_id, seq, ts)
        run = RunRecord(
            run_id=run_id,
            conversation_id=conv_id,
            parent_run_id=info.parent_run_id,
            agent_name=info.agent_name,
            metadata=dict(info.metadata),
            started_at=ts,
            start_seq=seq,
            branch_parent=entry.parent,
            last_seq=seq,
            entry_count=1,
        )
        batch.runs[run_id] = run
        conv.run_count += 1
        batch.txn.put(Table.RUN_ORDER, seq_key(seq), run_id.encode())
        batch.txn.put(Table.CONV_RUNS, ck(conv_id) + seq_key(seq), run_id.encode())
        return entry.parent
    if run is None:
        raise RunNotFound(f'run {run_id!r} has not started: append a run_started entry first')
    if run.conversation_id != conv_id:
        raise InvalidArgumentError(f'run {run_id!r} belongs to conversation {run.conversation_id!r}, not {conv_id!r}')
    if run.status != 'running':
        raise InvalidArgumentError(f'run {run_id!r} has finished ({run.status}); nothing more can be appended to it')
    if entry.parent is not None and entry.parent != run.last_seq:
        raise InvalidArgumentError("only a run's first entry takes a parent; later entries follow the run")
    assert conv is not None
    if kind == 'message':
        run.message_count += 1
        conv.message_count += 1
    elif kind == 'run_finished':
        finished: RunFinishedInfo = _decode_info(_finished_decoder, entry.payload, kind)
        for name, value in finished.usage.items():
            check_count(value, f'usage value {name!r}')
        run.status = finished.status
        run.error = finished.error
        run.usage = dict(finished.usage)
        run.finished_at = ts
    elif kind == 'compaction':
        compaction: CompactionInfo = _decode_info(_compaction_decoder, entry.payload, kind)
        for replaced in compaction.replaced:
            check_seq(replaced, 'a seq in compaction.replaced')
        validate_messages([bytes(raw) for raw in compaction.summary])
        conv.compaction_count += 1
    elif kind == 'tool_effect':
        _decode_info(_tool_decoder, entry.payload, kind)
    parent = run.last_seq
    run.last_seq = seq
    run.entry_count += 1
    return parent


def _check_parent(batch: _Batch, parent: int, seq: int) -> None:
    if parent >= seq or batch.entry_conversation(parent) is None:
        raise InvalidArgumentError(f'parent {parent} is not an entry of this log')


def _apply_conversation_kind(
    batch: _Batch, entry: NewEntry, conv: ConversationRecord | None, seq: int, ts: datetime, *, allow_internal: bool
) -> int | None:
    kind = entry.kind
    conv_id = entry.conversation_id
    if kind == 'forked_from':
        if not allow_internal:
            raise InvalidArgumentError('use fork() to fork a conversation')
        info: ForkInfo = _decode_info(_fork_decoder, entry.payload, kind)
        check_seq(info.seq, 'the fork point')
        if conv is not None and not conv.deleted:
            raise InvalidArgumentError(f'conversation {conv_id!r} already exists; a fork needs a new id')
        if entry.parent is None:
            # Imported: the fork point was deleted before the export. The conversation starts
            # here with no history, which is what its source replayed for it.
            _reopen(batch, conv, conv_id, seq, ts)
            return None
        if entry.parent != info.seq:
            raise InvalidArgumentError('a forked_from entry must have the fork point as its parent')
        if info.seq >= seq or batch.entry_conversation(info.seq) is None:
            raise InvalidArgumentError(f'entry {info.seq} is not an entry of this log')
        source = batch.conv(info.conversation_id)
        if source is None or source.deleted:
            raise ConversationNotFound(f'no conversation {info.conversation_id!r} in this log')
        conv = _reopen(batch, conv, conv_id, seq, ts)
        conv.forked_from = info
        return entry.parent
    if entry.parent is not None:
        raise InvalidArgumentError(f'a {kind} entry takes no parent')
    if kind == 'deleted':
        if not allow_internal:
            raise InvalidArgumentError('use delete_conversation() to delete a conversation')
        conv = _new_conversation(conv_id, seq, ts)
        conv.deleted = True
        batch.convs[conv_id] = conv
        return None
    if conv is None or conv.deleted:
        raise ConversationNotFound(f'no conversation {conv_id!r} in this log')
    if kind == 'title':
        info_title: TitleInfo = _decode_info(_title_decoder, entry.payload, kind)
        conv.title = info_title.title
    elif kind == 'archived':
        conv.archived = True
    else:
        conv.archived = False
    return None


# --- reading ----------------------------------------------------------------------------------


def iter_entries(
    txn: ReadTxn,
    *,
    conversation_id: str | None = None,
    run_id: str | None = None,
    kinds: frozenset[str] | None = None,
    after_seq: int = 0,
) -> Iterator[Entry]:
    """Entries in `seq` order, filtered; the narrowest index is used."""
    start = seq_key(after_seq + 1)
    if run_id is not None:
        run = get_run(txn, run_id)
        if run is None or (conversation_id is not None and run.conversation_id != conversation_id):
            return
        for body, value in _run_items(txn, run, first=after_seq + 1, last=run.last_seq):
            if kinds is None or body.kind in kinds:
                yield to_entry(body, value)
        return
    if conversation_id is None:
        for key, value in txn.scan(Table.ENTRIES, start=start):
            body = decode_body(key_seq(key), value)
            if kinds is None or body.kind in kinds:
                yield to_entry(body, value)
        return
    prefix = ck(conversation_id)
    for key, _ in txn.scan(Table.BY_CONV, prefix=prefix, start=prefix + start):
        seq = key_seq(key)
        value = txn.get(Table.ENTRIES, seq_key(seq))
        if value is None:
            continue
        body = decode_body(seq, value)
        if kinds is None or body.kind in kinds:
            yield to_entry(body, value)


def _run_items(txn: ReadTxn, run: RunRecord, *, first: int, last: int) -> Iterator[tuple[_Body, bytes]]:
    """The run's entries with a `seq` from `first` to `last`, in order, with their stored values.

    A run's entries lie in its conversation between its `run_started` entry and its latest.
    When they make up most of that stretch of the log (the usual case: few runs interleave
    with it), the stretch is read in order; otherwise each entry is looked up through the
    conversation's index.
    """
    first = max(first, run.start_seq)
    last = min(last, run.last_seq)
    if run.last_seq - run.start_seq < 2 * run.entry_count + _DENSE_SLACK:
        items = txn.scan(Table.ENTRIES, start=seq_key(first))
    else:
        prefix = ck(run.conversation_id)
        keys = (key_seq(k) for k, _ in txn.scan(Table.BY_CONV, prefix=prefix, start=prefix + seq_key(first)))
        items = ((seq_key(seq), value) for seq in keys if (value := txn.get(Table.ENTRIES, seq_key(seq))) is not None)
    for key, value in items:
        seq = key_seq(key)
        if seq > last:
            return
        body = decode_body(seq, value)
        if body.run_id == run.run_id:
            yield body, value


def _run_bodies(txn: ReadTxn, run: RunRecord, upto: int) -> list[_Body]:
    """The run's entries up to `seq` `upto`, in order."""
    return [body for body, _ in _run_items(txn, run, first=run.start_seq, last=upto)]


def branch_bodies(txn: ReadTxn, tip: int | None) -> list[_Body]:
    """Every entry on the branch that ends at `tip`, oldest first.

    A branch is followed run by run: the entries of the tip's run up to the tip, then
    the branch the run continued from (its `run_started` parent), and so on.
    """
    segments: list[list[_Body]] = []
    point = tip
    while point is not None:
        body = _get_body(txn, point)
        if body is None:
            break  # the rest of the branch was deleted with its conversation
        if body.run_id is not None:
            run = get_run(txn, body.run_id)
            if run is None:
                break
            segments.append(_run_bodies(txn, run, point))
            nxt = run.branch_parent
        else:
            segments.append([body])
            nxt = body.parent
        if nxt is not None and nxt >= point:
            raise CorruptEntryError(f'entry {point} points forward to {nxt}')
        point = nxt
    out: list[_Body] = []
    for segment in reversed(segments):
        out.extend(segment)
    return out


def run_message_payloads(txn: ReadTxn, run_id: str) -> list[bytes]:
    """The run's full record: what it inherited, then what it added."""
    run = get_run(txn, run_id)
    if run is None:
        raise RunNotFound(f'no run {run_id!r} in this log')
    return [b.payload for b in branch_bodies(txn, run.last_seq) if b.kind == 'message']


def _conv_or_raise(txn: ReadTxn, conversation_id: str) -> ConversationRecord:
    conv = get_conversation(txn, conversation_id)
    if conv is None or conv.deleted:
        raise ConversationNotFound(f'no conversation {conversation_id!r} in this log')
    return conv


def _inherited_prefix(txn: ReadTxn, conversation_id: str) -> list[_Body]:
    """Entries the conversation's history starts from that live in another conversation:
    the fork point's branch for a fork, else the branch its first run continued from."""
    conv = get_conversation(txn, conversation_id)
    if conv is not None and conv.forked_from is not None:
        return branch_bodies(txn, conv.forked_from.seq)
    first = next(txn.scan(Table.CONV_RUNS, prefix=ck(conversation_id)), None)
    if first is not None:
        run = get_run(txn, decode_id(first[1], 'the run id'))
        if run is not None and run.branch_parent is not None:
            parent = _get_body(txn, run.branch_parent)
            if parent is not None and parent.conversation_id != conversation_id:
                return branch_bodies(txn, run.branch_parent)
    return []


def transcript_payloads(txn: ReadTxn, conversation_id: str) -> list[bytes]:
    """Every original message of the conversation once, in order (inherited history first)."""
    _conv_or_raise(txn, conversation_id)
    out = [b.payload for b in _inherited_prefix(txn, conversation_id) if b.kind == 'message']
    out.extend(e.payload for e in iter_entries(txn, conversation_id=conversation_id, kinds=frozenset({'message'})))
    return out


def _context_tip(txn: ReadTxn, conversation_id: str) -> int | None:
    conv = _conv_or_raise(txn, conversation_id)
    item = txn.last(Table.CONV_RUNS, ck(conversation_id))
    if item is not None:
        run = get_run(txn, decode_id(item[1], 'the run id'))
        if run is not None:
            return run.last_seq
    if conv.forked_from is not None:
        return conv.forked_from.seq
    return None


def fold_context(bodies: Sequence[_Body]) -> list[bytes]:
    """Message payloads of a branch with each compaction's summary in place of what it replaced."""
    live: list[tuple[int, list[bytes]]] = []
    for body in bodies:
        if body.kind == 'message':
            live.append((body.seq, [body.payload]))
        elif body.kind == 'compaction':
            info: CompactionInfo = _compaction_decoder.decode(body.payload)
            replaced = set(info.replaced)
            position = next((i for i, (seq, _) in enumerate(live) if seq in replaced), len(live))
            kept_before = [item for item in live[:position] if item[0] not in replaced]
            kept_after = [item for item in live[position:] if item[0] not in replaced]
            summary = [bytes(raw) for raw in info.summary]
            live = [*kept_before, (body.seq, summary), *kept_after]
    return [payload for _, payloads in live for payload in payloads]


def context_payloads(txn: ReadTxn, conversation_id: str) -> list[bytes]:
    """What an agent continuing the conversation would start from."""
    return fold_context(branch_bodies(txn, _context_tip(txn, conversation_id)))


def list_runs(txn: ReadTxn, *, conversation_id: str | None = None, parent_run_id: str | None = None) -> list[RunRecord]:
    if conversation_id is not None:
        items = txn.scan(Table.CONV_RUNS, prefix=ck(conversation_id))
    else:
        items = txn.scan(Table.RUN_ORDER)
    out: list[RunRecord] = []
    for _, run_id in items:
        run = get_run(txn, decode_id(run_id, 'the run id'))
        if run is None:
            continue
        if parent_run_id is not None and run.parent_run_id != parent_run_id:
            continue
        out.append(run)
    return out


def list_conversations(txn: ReadTxn, *, include_archived: bool = False) -> list[ConversationRecord]:
    out = [decode_conversation(decode_id(key, 'the conversation key'), raw) for key, raw in txn.scan(Table.CONVS)]
    out = [c for c in out if not c.deleted and (include_archived or not c.archived)]
    out.sort(key=lambda c: c.first_seq)
    return out


def decode_payloads(payloads: Sequence[bytes]) -> list[ModelMessage]:
    """Decode message payloads in one pydantic-ai call."""
    return decode_messages(payloads)


def join_payloads(payloads: Sequence[bytes]) -> bytes:
    """Message payloads as the JSON `ModelMessagesTypeAdapter.dump_json` gives for the list."""
    return b'[' + b','.join(payloads) + b']'


# --- management -------------------------------------------------------------------------------


def fork(txn: WriteTxn, conversation_id: str, at_seq: int | None, new_id: str | None) -> str:
    _conv_or_raise(txn, conversation_id)
    if at_seq is None:
        # The latest message itself, not the bookkeeping entry after it: a fork then stays
        # anchored to its history even if the conversations in between are deleted.
        messages = [b.seq for b in branch_bodies(txn, _context_tip(txn, conversation_id)) if b.kind == 'message']
        if not messages:
            raise InvalidArgumentError(f'conversation {conversation_id!r} has no messages to fork')
        point = messages[-1]
    else:
        point = check_seq(at_seq, 'at_seq')
        if txn.get(Table.BY_CONV, ck(conversation_id) + seq_key(point)) is None:
            raise InvalidArgumentError(f'entry {point} is not an entry of conversation {conversation_id!r}')
    target = check_id(new_id, 'new conversation id') if new_id is not None else str(uuid.uuid4())
    entry = NewEntry(
        conversation_id=target,
        kind='forked_from',
        payload=_json_encoder.encode(ForkInfo(conversation_id=conversation_id, seq=point)),
        parent=point,
    )
    append_entries(txn, [entry], allow_internal=True)
    return target


def delete_conversation(txn: WriteTxn, conversation_id: str) -> int:
    """Remove the conversation's entries and derived data; leave a content-free tombstone."""
    _conv_or_raise(txn, conversation_id)
    prefix = ck(conversation_id)
    run_ids = [decode_id(run_id, 'the run id') for _, run_id in txn.scan(Table.CONV_RUNS, prefix=prefix)]
    for run_id in run_ids:
        run = get_run(txn, run_id)
        if run is not None:
            for key in [k for k, _ in txn.scan(Table.IDEM, prefix=run_idem_prefix(run.start_seq))]:
                txn.delete(Table.IDEM, key)
            txn.delete(Table.RUN_ORDER, seq_key(run.start_seq))
        txn.delete(Table.RUNS, run_id.encode())
    for key in [k for k, _ in txn.scan(Table.CONV_RUNS, prefix=prefix)]:
        txn.delete(Table.CONV_RUNS, key)
    for key in [k for k, _ in txn.scan(Table.IDEM, prefix=b'\x00' + prefix)]:
        txn.delete(Table.IDEM, key)
    removed = 0
    for key in [k for k, _ in txn.scan(Table.BY_CONV, prefix=prefix)]:
        txn.delete(Table.ENTRIES, key[-8:])
        txn.delete(Table.BY_CONV, key)
        removed += 1
    txn.delete(Table.CONVS, conversation_id.encode())
    append_entries(txn, [NewEntry(conversation_id=conversation_id, kind='deleted')], allow_internal=True)
    return removed


def encode_body_of(entry: Any, payload: bytes) -> bytes:
    """The hashed bytes of an entry described by any object with the entry's other fields."""
    return _body_encoder.encode(
        _Body(
            seq=entry.seq,
            conversation_id=entry.conversation_id,
            run_id=entry.run_id,
            kind=entry.kind,
            timestamp=entry.timestamp,
            parent=entry.parent,
            idempotency_key=entry.idempotency_key,
            inherited=entry.inherited,
            payload=payload,
        )
    )
