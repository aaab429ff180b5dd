"""Tasks on a whole store or conversation: the format record and migration, forks and deletions.

Each runs inside one write transaction, so it happens entirely or not at all; forks and
deletions append their entry (`forked_from`, `deleted`) through the write path.
"""

from __future__ import annotations

import uuid

import msgspec

from eventlog._append import append_entries
from eventlog._checks import check_id, check_seq
from eventlog._keys import (
    FORMAT_VERSION,
    META_CHAIN_FROM,
    META_FORMAT,
    META_LAST_SEQ,
    META_SCRUB_PENDING,
    SEQ_SIZE,
    Table,
    by_conv_key,
    ck,
    conv_idem_prefix,
    conv_key,
    decode_id,
    decode_run,
    encode_run,
    entry_key_of,
    format_value,
    key_seq,
    run_idem_prefix,
    run_key,
    seq_key,
    v1_run_idem_prefix,
)
from eventlog._read import branch_bodies, context_tip, conv_or_raise, derives_last_seq, get_run, last_seq
from eventlog._storage import ReadTxn, WriteTxn
from eventlog._store_index import forget_conversation
from eventlog.entries import ForkInfo, NewEntry
from eventlog.errors import InvalidArgumentError, StoreVersionError

_json_encoder = msgspec.json.Encoder()


# --- the format -------------------------------------------------------------------------------


def check_format(txn: ReadTxn) -> int | None:
    """The store's format version, refusing one newer than this code."""
    raw = txn.get(Table.META, META_FORMAT)
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


def readable_as_is(version: int | None) -> bool:
    """Whether a store of format `version` reads correctly without its migration (what a read-only
    handle needs): format 2 differs from 3 only in its format record and in keeping META
    `last_seq` current, which reads do not need; 3 from 4 only in recording no `chain_from`, so every
    entry of it is checked by chain rule 1 (`_keys.rule_of`). Format 1 names runs differently in its
    indexes."""
    return version in (2, 3, FORMAT_VERSION)


def init_format(txn: WriteTxn) -> None:
    """Record the format of a new store; bring an older store up to date (`migrate`)."""
    version = check_format(txn)
    if version is None:
        txn.put(Table.META, META_FORMAT, format_value(FORMAT_VERSION))
        txn.put(Table.META, META_CHAIN_FROM, seq_key(last_seq(txn) + 1))  # 1, unless entries predate the record
    elif version < FORMAT_VERSION:
        migrate(txn, version)


def migrate(txn: WriteTxn, version: int) -> None:
    """Rewrite a store of an older format in the current one, inside `txn` (all or nothing).

    Entries, their hashes and every record keep their content; only how the indexes name runs
    changes (from format 1), so a migrated store exports, verifies and replays exactly as before.
    From format 2 only the format record changes. Format 4 records `chain_from`, the next `seq`:
    entries from there on are chained by rule 2 (`_keys.link`), those before keep their rule-1
    hashes, so checkpoints already signed still verify.
    """
    if version not in (1, 2, 3):
        raise StoreVersionError(f'the store records format {version}, which no version of pydantic-ai-eventlog wrote')
    if version == 1:
        _migrate_from_1(txn)
    # Format 2 -> 3: META `last_seq` stays as it is (the last seq then, a lower bound from now on);
    # appends stop updating it where the store derives it from its last entry (`_read.last_seq`).
    # Format 3 -> 4: the entries appended from now on are chained by rule 2.
    if txn.get(Table.META, META_CHAIN_FROM) is None:
        txn.put(Table.META, META_CHAIN_FROM, seq_key(last_seq(txn) + 1))
    txn.put(Table.META, META_FORMAT, format_value(FORMAT_VERSION))


def _migrate_from_1(txn: WriteTxn) -> None:
    """Format 1 -> 2: runs named by their start `seq` in the idempotency keys, no BY_RUN table,
    run records as arrays."""
    for key, raw in list(txn.scan(Table.RUNS)):
        run_id = decode_id(key, 'the run record key')
        run = decode_run(run_id, raw)
        old_prefix = v1_run_idem_prefix(run_id)
        new_prefix = run_idem_prefix(run.start_seq)
        for idem_key, value in list(txn.scan(Table.IDEM, prefix=old_prefix)):
            txn.delete(Table.IDEM, idem_key)
            txn.put(Table.IDEM, new_prefix + idem_key[len(old_prefix) :], value)
        txn.put(Table.RUNS, key, encode_run(run))
    for key in [k for k, _ in txn.scan(Table.BY_RUN)]:
        txn.delete(Table.BY_RUN, key)


# --- conversations ----------------------------------------------------------------------------


def fork(txn: WriteTxn, conversation_id: str, at_seq: int | None, new_id: str | None) -> str:
    """Start a new conversation whose history is `conversation_id`'s up to `at_seq` (its latest
    message when None); return the new conversation's id."""
    conv_or_raise(txn, conversation_id)
    if at_seq is None:
        # The latest message itself, not the bookkeeping entry after it: a fork then stays
        # anchored to its history even if the conversations in between are deleted.
        messages = [b.seq for b in branch_bodies(txn, context_tip(txn, conversation_id)) if b.kind == 'message']
        if not messages:
            raise InvalidArgumentError(f'conversation {conversation_id!r} has no messages to fork')
        point = messages[-1]
    else:
        point = check_seq(at_seq, 'at_seq')
        if txn.get(Table.BY_CONV, by_conv_key(conversation_id, point)) is None:
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


def scrub_pending(txn: ReadTxn) -> int | None:
    """The `seq` of the latest erasure or deletion whose removed bytes may still be in the store's
    files (a scrub has not finished since); `None` when there is none."""
    raw = txn.get(Table.META, META_SCRUB_PENDING)
    return key_seq(raw) if raw is not None and len(raw) == SEQ_SIZE else None


def mark_scrub_pending(txn: WriteTxn, seq: int) -> None:
    """Record, with the erasure or deletion `seq` that needs it, that the files need a scrub."""
    txn.put(Table.META, META_SCRUB_PENDING, seq_key(seq))


def clear_scrub_pending(txn: WriteTxn, upto: int) -> bool:
    """Forget the pending scrub if it names `upto` or an earlier removal (one recorded after a
    scrub began stays); whether nothing is pending now."""
    pending = scrub_pending(txn)
    if pending is None:
        return True
    if pending > upto:
        return False
    txn.delete(Table.META, META_SCRUB_PENDING)
    return True


def delete_conversation(txn: WriteTxn, conversation_id: str) -> int:
    """Remove the conversation's entries and derived data; leave a content-free tombstone."""
    conv_or_raise(txn, conversation_id)
    if derives_last_seq(txn):
        # Its entries may be the log's last: their seqs stay used (`_read.last_seq`).
        txn.put(Table.META, META_LAST_SEQ, seq_key(last_seq(txn)))
    forget_conversation(txn, conversation_id)
    prefix = ck(conversation_id)
    run_ids = [decode_id(run_id, 'the run id') for _, run_id in txn.scan(Table.CONV_RUNS, prefix=prefix)]
    for run_id in run_ids:
        run = get_run(txn, run_id)
        if run is not None:
            for key in [k for k, _ in txn.scan(Table.IDEM, prefix=run_idem_prefix(run.start_seq))]:
                txn.delete(Table.IDEM, key)
            txn.delete(Table.RUN_ORDER, seq_key(run.start_seq))
        txn.delete(Table.RUNS, run_key(run_id))
    for key in [k for k, _ in txn.scan(Table.CONV_RUNS, prefix=prefix)]:
        txn.delete(Table.CONV_RUNS, key)
    for key in [k for k, _ in txn.scan(Table.IDEM, prefix=conv_idem_prefix(conversation_id))]:
        txn.delete(Table.IDEM, key)
    removed = 0
    for key in [k for k, _ in txn.scan(Table.BY_CONV, prefix=prefix)]:
        txn.delete(Table.ENTRIES, entry_key_of(key))
        txn.delete(Table.BY_CONV, key)
        removed += 1
    txn.delete(Table.CONVS, conv_key(conversation_id))
    (seq,) = append_entries(txn, [NewEntry(conversation_id=conversation_id, kind='deleted')], allow_internal=True)
    mark_scrub_pending(txn, seq)
    return removed
