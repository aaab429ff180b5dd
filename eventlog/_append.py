"""The write path: check a batch of new entries, assign their `seq`s, chain and store them.

`append_entries` validates the whole batch first, then appends entry by entry: an entry
whose idempotency key was appended before is answered with its first `seq`; any other is
checked against the records it changes (its kind's rule in `_APPLY`), written with its
chain hash and index keys, and folded into its run and conversation records, which are
written back once at the end of the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from eventlog._checks import check_count, check_id, check_seq, decode_info, validate_messages
from eventlog._keys import (
    META_LAST_SEQ,
    StoredBody,
    Table,
    append_hash,
    ck,
    conv_idem_prefix,
    conv_key,
    conv_runs_key,
    encode_body,
    encode_conversation,
    encode_run,
    idem_key_of,
    key_seq,
    run_idem_prefix,
    run_key,
    seq_key,
)
from eventlog._lease import check_fence
from eventlog._read import derives_last_seq, get_body, get_conversation, get_run, last_seq
from eventlog._storage import WriteTxn
from eventlog._store_index import apply_saved
from eventlog.encryption import seal_body
from eventlog.entries import (
    KINDS,
    MAX_SEQ,
    PAYLOAD_TYPES,
    RUN_KINDS,
    CompactionInfo,
    ConversationRecord,
    DurableStepInfo,
    ErasureInfo,
    ForkInfo,
    Kind,
    NewEntry,
    RecallInfo,
    RunFinishedInfo,
    RunLease,
    RunRecord,
    RunStartedInfo,
    SavedInfo,
    TitleInfo,
)
from eventlog.errors import ConversationNotFound, InvalidArgumentError, InvalidPayloadError, LogFullError, RunNotFound

if TYPE_CHECKING:
    from eventlog.encryption import SealedTxn


def utcnow() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def append_entries(
    txn: WriteTxn,
    entries: Sequence[NewEntry],
    *,
    allow_internal: bool = False,
    seq_hints: Sequence[int] | None = None,
    recorded: dict[int, bytes] | None = None,
    fence: RunLease | None = None,
) -> list[int]:
    """Append `entries` in order inside `txn`; return each entry's `seq`.

    Validation happens before anything is written, so a bad entry anywhere in the batch
    leaves the store unchanged (the caller's transaction is aborted on error as well).
    With `recorded`, each entry whose idempotency key was appended before adds its index in
    `entries` and the payload the log holds for it. With `fence`, the batch is appended only
    while the store holds that lease (`RunLeaseError` otherwise), checked in this transaction.
    """
    seen: set[object] = set()
    checked = [_check_new_entry(entry, seen) for entry in entries]
    unvalidated = [e.payload for e in checked if e.kind == 'message' and not e.prevalidated]
    if unvalidated:
        validate_messages(unvalidated)
    if fence is not None:
        check_fence(txn, fence)
    batch = _Batch(txn)
    refuse_shredded = cast('SealedTxn', txn).refuse_shredded if batch.sealed else None
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
            # A run not started before this transaction keys its entries under the new `seq` of
            # its start, under which the store holds no key yet: only the keys of a run started
            # earlier (or of a conversation) are looked up.
            if existing is None and (entry.run_id is None or _started_before(batch, entry.run_id)):
                raw = txn.get(Table.IDEM, idem_key)
                existing = None if raw is None else key_seq(raw)
            if existing is not None:
                seqs.append(existing)
                if recorded is not None:
                    held = get_body(txn, existing)
                    recorded[index] = b'' if held is None else held.payload
                continue
        ts = entry.timestamp or now
        if refuse_shredded is not None and entry.kind != 'deleted':
            refuse_shredded(entry.conversation_id)
        parent = _APPLY[entry.kind](batch, entry, seq, ts, allow_internal)
        conv = batch.conv(entry.conversation_id)
        assert conv is not None
        body = StoredBody(
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


class _Batch:
    """Records touched by one write transaction, written back once at its end."""

    def __init__(self, txn: WriteTxn) -> None:
        self.txn = txn
        self.runs: dict[str, RunRecord] = {}
        self.convs: dict[str, ConversationRecord] = {}
        self.idem: dict[bytes, int] = {}
        self.prefixes: dict[str, bytes] = {}
        self.sealed = getattr(txn, 'sealer', None) is not None
        """Whether the store is encrypted (`txn` is an `encryption.SealedTxn`): bodies are sealed."""
        self.derived = derives_last_seq(txn)
        """Whether the store derives its last `seq` from its last entry (`_read.last_seq`): then no
        META write, so an append dirties no META page."""
        self.next_seq = last_seq(txn) + 1
        self.first_seq = self.next_seq
        """The first `seq` this transaction can assign: a run starting at or after it started here."""

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

    def by_conv_key(self, conversation_id: str, skey: bytes) -> bytes:
        """`by_conv_key` for the entry whose seq8 is `skey`, the id's prefix encoded once per transaction."""
        prefix = self.prefixes.get(conversation_id)
        if prefix is None:
            prefix = self.prefixes[conversation_id] = ck(conversation_id)
        return prefix + skey

    def entry_conversation(self, seq: int) -> str | None:
        body = get_body(self.txn, seq)
        return None if body is None else body.conversation_id

    def flush(self) -> None:
        if not self.derived:
            self.txn.put(Table.META, META_LAST_SEQ, seq_key(self.next_seq - 1))
        for run_id, record in self.runs.items():
            self.txn.put(Table.RUNS, run_key(run_id), encode_run(record))
        for conversation_id, conv in self.convs.items():
            self.txn.put(Table.CONVS, conv_key(conversation_id), encode_conversation(conv))


def _started_before(batch: _Batch, run_id: str) -> bool:
    run = batch.run(run_id)
    return run is not None and run.start_seq < batch.first_seq


def _idem_key(batch: _Batch, entry: NewEntry, key: str, seq: int) -> bytes:
    """Where `entry`'s idempotency key is recorded; `seq` is the entry's own, used when the
    entry starts its run."""
    if entry.run_id is None:
        return idem_key_of(conv_idem_prefix(entry.conversation_id), key)
    run = batch.run(entry.run_id)
    return idem_key_of(run_idem_prefix(seq if run is None else run.start_seq), key)


def _write_entry(batch: _Batch, body: StoredBody, conv: ConversationRecord, idem_key: bytes | None) -> bytes:
    txn = batch.txn
    if batch.sealed:
        body = seal_body(txn, body)
    body_bytes = encode_body(body)
    digest = append_hash(conv.head_hash, body_bytes)
    skey = seq_key(body.seq)
    txn.put_last(Table.ENTRIES, skey, body_bytes + digest)
    txn.put(Table.BY_CONV, batch.by_conv_key(body.conversation_id, skey), b'')
    if idem_key is not None:
        txn.put(Table.IDEM, idem_key, skey)
        batch.idem[idem_key] = body.seq
    conv.head_hash = digest
    conv.last_seq = body.seq
    conv.updated_at = body.timestamp
    conv.entry_count += 1
    conv.payload_bytes += len(body.payload)
    batch.next_seq = body.seq + 1
    if batch.sealed:
        cast('SealedTxn', txn).note_appended(body.conversation_id, body.seq, body.kind)
    return digest


# --- each kind's rule -------------------------------------------------------------------------
# A rule checks the entry against the records, updates them, and returns the entry's parent.

_Rule = Callable[[_Batch, NewEntry, int, datetime, bool], 'int | None']

_DECODERS: Final = {kind: msgspec.json.Decoder(shape) for kind, shape in PAYLOAD_TYPES.items() if shape is not None}


def _payload(entry: NewEntry, empty: bytes = b'') -> Any:
    """The entry's payload as its kind's struct (`PAYLOAD_TYPES`); `InvalidPayloadError` when it is not one."""
    return decode_info(_DECODERS[entry.kind], entry.payload or empty, entry.kind)


def _run_started(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run_id = entry.run_id
    assert run_id is not None
    run = batch.run(run_id)
    if run is not None:
        raise InvalidArgumentError(f'run {run_id!r} has already started (in conversation {run.conversation_id!r})')
    info: RunStartedInfo = _payload(entry, b'{}')
    if entry.parent is not None:
        _check_parent(batch, entry.parent, seq)
    conv_id = entry.conversation_id
    conv = batch.conv(conv_id)
    if conv is None or conv.deleted:
        conv = _reopen(batch, conv, conv_id, seq, ts)
    batch.runs[run_id] = RunRecord(
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
    conv.run_count += 1
    batch.txn.put(Table.RUN_ORDER, seq_key(seq), run_key(run_id))
    batch.txn.put(Table.CONV_RUNS, conv_runs_key(conv_id, seq), run_key(run_id))
    return entry.parent


def _check_parent(batch: _Batch, parent: int, seq: int) -> None:
    if parent >= seq or batch.entry_conversation(parent) is None:
        raise InvalidArgumentError(f'parent {parent} is not an entry of this log')


def _running(batch: _Batch, entry: NewEntry) -> tuple[RunRecord, ConversationRecord]:
    """The run a later entry of a run continues, and its conversation, checked."""
    run_id = entry.run_id
    conv_id = entry.conversation_id
    assert run_id is not None
    run = batch.run(run_id)
    if run is None:
        raise RunNotFound(f'run {run_id!r} has not started: append a run_started entry first')
    if run.conversation_id != conv_id:
        raise InvalidArgumentError(f'run {run_id!r} belongs to conversation {run.conversation_id!r}, not {conv_id!r}')
    if run.status != 'running':
        raise InvalidArgumentError(f'run {run_id!r} has finished ({run.status}); nothing more can be appended to it')
    if entry.parent is not None and entry.parent != run.last_seq:
        raise InvalidArgumentError("only a run's first entry takes a parent; later entries follow the run")
    conv = batch.conv(conv_id)
    assert conv is not None
    return run, conv


def _follow(run: RunRecord, seq: int) -> int:
    """Make `seq` the run's latest entry; return the entry it follows."""
    parent = run.last_seq
    run.last_seq = seq
    run.entry_count += 1
    return parent


def _message(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, conv = _running(batch, entry)
    run.message_count += 1
    conv.message_count += 1
    return _follow(run, seq)


def _run_finished(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, _ = _running(batch, entry)
    finished: RunFinishedInfo = _payload(entry)
    for name, value in finished.usage.items():
        check_count(value, f'usage value {name!r}')
    run.status = finished.status
    run.error = finished.error
    run.usage = dict(finished.usage)
    run.finished_at = ts
    return _follow(run, seq)


def _compaction(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, conv = _running(batch, entry)
    compaction: CompactionInfo = _payload(entry)
    for replaced in compaction.replaced:
        check_seq(replaced, 'a seq in compaction.replaced')
    validate_messages([bytes(raw) for raw in compaction.summary])
    conv.compaction_count += 1
    return _follow(run, seq)


def _tool_effect(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, _ = _running(batch, entry)
    _payload(entry)
    return _follow(run, seq)


def _durable_step(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, _ = _running(batch, entry)
    info: DurableStepInfo = _payload(entry)
    check_count(info.step, 'durable_step.step')
    return _follow(run, seq)


def _recall(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    run, _ = _running(batch, entry)
    recall: RecallInfo = _payload(entry)
    for hit in recall.hits:
        if hit.seq is not None:
            check_seq(hit.seq, 'a seq in recall.hits')
    return _follow(run, seq)


def _forked_from(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    conv_id = entry.conversation_id
    conv = batch.conv(conv_id)
    if not allow_internal:
        raise InvalidArgumentError('use fork() to fork a conversation')
    info: ForkInfo = _payload(entry)
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


def _deleted(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    _no_parent(entry)
    if not allow_internal:
        raise InvalidArgumentError('use delete_conversation() to delete a conversation')
    conv = _new_conversation(entry.conversation_id, seq, ts)
    conv.deleted = True
    batch.convs[entry.conversation_id] = conv
    return None


def _erasure(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    if not allow_internal:
        raise InvalidArgumentError('use erase() to erase entries')
    _live_conversation(batch, entry)
    info: ErasureInfo = _payload(entry)
    for erased in info.seqs:
        check_seq(erased, 'a seq in erasure.seqs')
    return None


def _shred(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    if not allow_internal:
        raise InvalidArgumentError('use shred() to shred a conversation')
    _live_conversation(batch, entry)
    _payload(entry, b'{}')
    return None


def _title(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    conv = _live_conversation(batch, entry)
    info: TitleInfo = _payload(entry)
    conv.title = info.title
    return None


def _archived(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    _live_conversation(batch, entry).archived = True
    return None


def _unarchived(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    _live_conversation(batch, entry).archived = False
    return None


def _saved(batch: _Batch, entry: NewEntry, seq: int, ts: datetime, allow_internal: bool) -> int | None:
    if not allow_internal:
        raise InvalidArgumentError('saved entries are written by the conversation store (EventLogConversationStore)')
    _no_parent(entry)
    info: SavedInfo = _payload(entry)
    for link in info.links:
        check_seq(link.seq, "a store entry's message")
        body = get_body(batch.txn, link.seq) if link.seq < seq else None
        if body is None or body.kind != 'message':
            raise InvalidArgumentError(f'store entry {link.id!r} names entry {link.seq}, which holds no message')
    conv = batch.conv(entry.conversation_id)
    if conv is None or conv.deleted:
        _reopen(batch, conv, entry.conversation_id, seq, ts)
    apply_saved(batch.txn, entry.conversation_id, seq, info)
    return None


def _no_parent(entry: NewEntry) -> None:
    if entry.parent is not None:
        raise InvalidArgumentError(f'a {entry.kind} entry takes no parent')


def _live_conversation(batch: _Batch, entry: NewEntry) -> ConversationRecord:
    """The conversation an entry about it changes, which must exist and not be deleted."""
    _no_parent(entry)
    conv = batch.conv(entry.conversation_id)
    if conv is None or conv.deleted:
        raise ConversationNotFound(f'no conversation {entry.conversation_id!r} in this log')
    return conv


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


_APPLY: Final[dict[Kind, _Rule]] = {
    'run_started': _run_started,
    'message': _message,
    'run_finished': _run_finished,
    'compaction': _compaction,
    'tool_effect': _tool_effect,
    'durable_step': _durable_step,
    'recall': _recall,
    'forked_from': _forked_from,
    'deleted': _deleted,
    'title': _title,
    'archived': _archived,
    'unarchived': _unarchived,
    'erasure': _erasure,
    'shred': _shred,
    'saved': _saved,
}
"""Each kind's rule: the one place the write path tells kinds apart."""
