"""The conversation store inside the log: `saved` entries and the STORE index derived from them.

pydantic-ai's `ConversationStore` keeps a record per conversation (where its history ends, its
usage, its scope, the branches it left) and entries that each hold one message and name the entry
before it. Here a record is the conversation's latest `saved` entry, and a store entry is a link
(`StoreLink`) from the store's id to a `message` entry of the log: a message the log recorded
while the run went (`capability.EventLogPersistence`) is linked, not written again, and one it
lacks is appended in a run of its own, in the transaction that writes the record.

The STORE table is derived from the `saved` entries alone (`apply_saved`), the way the run and
conversation records are derived from the entries: the append path keeps it, `verify` rebuilds it
and compares (docs/invariants.md, invariant 6), and an export carries the `saved` entries, so an
import rebuilds it. The key layout is in `_keys` (STORE).

Every function here runs inside one transaction of the store; a save's revision check, the
messages it appends and its record commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypeVar

import msgspec

from eventlog._append import append_entries
from eventlog._checks import check_id, decode_info
from eventlog._keys import (
    STORE_LIST_PREFIX,
    StoredBody,
    StoreLinkValue,
    Table,
    ck,
    decode_store_link,
    key_seq,
    seq_key,
    store_depth_prefix,
    store_fork_prefix,
    store_scope_prefix,
)
from eventlog._read import get_bodies, get_body, get_conversation, get_run, run_bodies
from eventlog._storage import ReadTxn, WriteTxn
from eventlog._store_index import link_of, place_of, record_ref
from eventlog.entries import (
    ForkInfo,
    NewEntry,
    SavedInfo,
    StoreLink,
    encode_info,
    run_finished_entry,
    run_started_entry,
)
from eventlog.errors import CorruptStoreError, NotFoundError, RevisionConflict

__all__ = [
    'ERASE_REASON',
    'SAVED_BY_STORE',
    'HistoryEntry',
    'NewStoreEntry',
    'SavedRecord',
    'delete_record',
    'read_entry',
    'read_history',
    'read_record',
    'read_records',
    'save_record',
]

SAVED_BY_STORE: Final = 'conversation_store'
"""The `source` metadata of a run the store appended itself (messages the log did not have)."""

ERASE_REASON: Final = 'deleted from the conversation store'
"""The reason recorded in the `erasure` entry of a store's delete."""

T = TypeVar('T')

_SAVED: Final = msgspec.json.Decoder(SavedInfo)


@dataclass(frozen=True, slots=True)
class NewStoreEntry:
    """An entry a save adds: the store's id for it, the entry before it, and its message."""

    id: str
    parent: str | None
    payload: bytes
    """The message as pydantic-ai's JSON (`encode_message`)."""
    run_id: str | None
    """The run the message says produced it (`ModelRequest.run_id` / `ModelResponse.run_id`)."""
    stands_for: int | None = None
    """A `message` entry of this conversation the message is a client's copy of, to link when the
    run it names holds no byte-identical message: the request a run resumed from when a UI client
    sent it again (`EventLogPersistence` records the original only, docs/persistence.md)."""


@dataclass(frozen=True, slots=True)
class SavedRecord:
    """A conversation store's record as listed: the conversation and its latest `saved` payload."""

    conversation_id: str
    info: SavedInfo


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A store entry as read back: its id, the entry before it, and its message's bytes."""

    id: str
    parent: str | None
    seq: int
    payload: bytes
    """The message as stored (an erased entry's placeholder)."""


# --- reading ----------------------------------------------------------------------------------------


def read_record(txn: ReadTxn, conversation_id: str) -> tuple[int, SavedInfo] | None:
    """The conversation's record (its latest `saved` entry: `seq` and payload), or `None`."""
    ref = record_ref(txn, conversation_id)
    return None if ref is None else (ref.seq, _saved_at(txn, ref.seq))


def _saved_at(txn: ReadTxn, seq: int) -> SavedInfo:
    return _saved_in(seq, get_body(txn, seq))


def _saved_in(seq: int, body: StoredBody | None) -> SavedInfo:
    if body is None or body.kind != 'saved':
        raise CorruptStoreError(f'the conversation store names entry {seq} as a record, which it is not; run verify')
    return decode_info(_SAVED, body.payload, 'saved')


def read_records(txn: ReadTxn, *, scope: str | None = None, limit: int | None = None) -> list[tuple[str, SavedInfo]]:
    """Records newest first (by their latest `saved` entry), of one `scope` when given, at most `limit`."""
    prefix = STORE_LIST_PREFIX if scope is None else store_scope_prefix(scope)
    listed: list[tuple[str, int]] = []
    if limit == 0:
        return []
    for key, value in txn.scan(Table.STORE, prefix=prefix, reverse=True):
        listed.append((value.decode(), key_seq(key)))
        if limit is not None and len(listed) >= limit:
            break
    bodies = get_bodies(txn, [seq for _, seq in listed])
    return [
        (conversation_id, _saved_in(seq, body)) for (conversation_id, seq), body in zip(listed, bodies, strict=True)
    ]


def read_entry(txn: ReadTxn, entry_id: str) -> HistoryEntry:
    """One store entry with its message; `NotFoundError` when the store has no such entry."""
    found = link_of(txn, entry_id)
    if found is None:
        raise NotFoundError(f'no conversation store entry {entry_id!r}')
    _, link = found
    return HistoryEntry(entry_id, link.parent, link.seq, _payload(txn, link.seq))


def read_history(txn: ReadTxn, head: str | None, *, limit: int | None = None) -> list[HistoryEntry]:
    """The entries from the first one up to `head`, in order, or only the last `limit` of them.

    Reads the links a range at a time: the ones each conversation's saves added are kept by depth,
    so the tail of a history is one range of its conversation's (plus one per fork it crosses).
    A history whose older entries a deletion removed starts after them.
    """
    ids: list[tuple[str, StoreLinkValue]] = []
    current = head
    while current is not None and (limit is None or len(ids) < limit):
        place = place_of(txn, current)
        if place is None:
            if current == head:
                raise NotFoundError(f'no conversation store entry {current!r}')
            break  # removed with a deleted conversation: the history starts after it
        want = place.depth + 1 if limit is None else min(place.depth + 1, limit - len(ids))
        low = place.depth + 1 - want
        prefix = store_depth_prefix(place.conversation_id)
        links: dict[str, StoreLinkValue] = {}
        for key, value in txn.scan(Table.STORE, prefix=prefix, start=prefix + seq_key(low)):
            if key_seq(key[len(prefix) : len(prefix) + 8]) > place.depth:
                break
            links[key[len(prefix) + 8 :].decode()] = decode_store_link(value)
        while current is not None and current in links and (limit is None or len(ids) < limit):
            link = links[current]
            ids.append((current, link))
            current = link.parent
    ids.reverse()
    bodies = get_bodies(txn, [link.seq for _, link in ids])
    return [
        HistoryEntry(entry_id, link.parent, link.seq, _message_in(link.seq, body))
        for (entry_id, link), body in zip(ids, bodies, strict=True)
    ]


def _payload(txn: ReadTxn, seq: int) -> bytes:
    return _message_in(seq, get_body(txn, seq))


def _message_in(seq: int, body: StoredBody | None) -> bytes:
    if body is None or body.kind != 'message':
        raise CorruptStoreError(f'a conversation store entry names entry {seq}, which holds no message; run verify')
    return body.payload


# --- writing ----------------------------------------------------------------------------------------


def save_record(
    txn: WriteTxn,
    conversation_id: str,
    info: SavedInfo,
    new_entries: Sequence[NewStoreEntry],
) -> list[int]:
    """Write a conversation's record and the entries its history adds, if its stored revision is
    still `info.expected`; return the `seq`s of the message entries linked, in order.

    A message the log already holds in the run it names, in this conversation, is linked (the
    entries `capability.EventLogPersistence` appended as the run went); the others are appended in
    a run of the store's own, branching from the entry before them. Raises `RevisionConflict`
    (nothing written) when the record changed, or the head names an entry the store lacks.
    """
    ref = record_ref(txn, conversation_id)
    current = None if ref is None else _saved_at(txn, ref.seq).revision
    if current != info.expected:
        raise RevisionConflict(
            conversation_id,
            'the record was saved or deleted since it was loaded'
            if ref is not None or info.expected is not None
            else 'the record already exists',
        )
    new_ids = {entry.id for entry in new_entries}
    if info.head is not None and info.head not in new_ids and place_of(txn, info.head) is None:
        raise RevisionConflict(conversation_id, f'the entry {info.head!r} the history continues from is gone')
    if ref is None and info.forked_from is not None and info.forked_at is not None:
        _fork_entry(txn, conversation_id, info.forked_from, info.forked_at)
    seqs = _link_messages(txn, conversation_id, info.revision, new_entries)
    links = [StoreLink(entry.id, entry.parent, seq) for entry, seq in zip(new_entries, seqs, strict=True)]
    saved = SavedInfo(
        revision=info.revision,
        expected=info.expected,
        head=info.head,
        scope=info.scope,
        forked_from=info.forked_from,
        forked_at=info.forked_at,
        branches=info.branches,
        usage=info.usage,
        deferred=info.deferred,
        updated_at=info.updated_at,
        links=links,
    )
    append_entries(
        txn,
        [
            NewEntry(
                conversation_id=conversation_id, kind='saved', payload=encode_info(saved), timestamp=info.updated_at
            )
        ],
        allow_internal=True,
    )
    return seqs


def _fork_entry(txn: WriteTxn, conversation_id: str, source: str, forked_at: str) -> None:
    """Start a fork's conversation in the log with a `forked_from` entry at the message it was
    forked at, unless the log has the conversation already."""
    found = link_of(txn, forked_at)
    conv = get_conversation(txn, conversation_id)
    if found is None or (conv is not None and not conv.deleted):
        return
    seq = found[1].seq
    body = get_body(txn, seq)
    if body is None:
        return
    del source  # the fork point's own conversation is the one the log records
    fork = NewEntry(
        conversation_id=conversation_id,
        kind='forked_from',
        payload=encode_info(ForkInfo(body.conversation_id, seq)),
        parent=seq,
    )
    append_entries(txn, [fork], allow_internal=True)


def _link_messages(
    txn: WriteTxn,
    conversation_id: str,
    revision: str,
    new_entries: Sequence[NewStoreEntry],
) -> list[int]:
    """The `message` entry of each new store entry: found in the run it names, or appended."""
    seqs: list[int | None] = [None] * len(new_entries)
    recorded = _recorded_messages(txn, conversation_id, new_entries)
    for index, entry in enumerate(new_entries):
        candidates = recorded.get(entry.run_id or '')
        if candidates:
            for position, (seq, payload) in enumerate(candidates):
                if payload == entry.payload:
                    seqs[index] = seq
                    del candidates[: position + 1]
                    break
        if seqs[index] is None and entry.stands_for is not None:
            body = get_body(txn, entry.stands_for)
            if body is not None and body.kind == 'message' and body.conversation_id == conversation_id:
                seqs[index] = entry.stands_for
    known: dict[str, int] = {}
    index = 0
    runs = 0
    while index < len(new_entries):
        if seqs[index] is not None:
            known[new_entries[index].id] = seqs[index] or 0
            index += 1
            continue
        end = index
        run_of = new_entries[index].run_id
        while end < len(new_entries) and seqs[end] is None and new_entries[end].run_id == run_of:
            end += 1
        runs += 1
        run_id = run_of if run_of is not None and get_run(txn, run_of) is None else f'saved-{revision}-{runs}'
        check_id(run_id, 'run_id')
        parent_id = new_entries[index].parent
        branch = None
        if parent_id is not None:
            branch = known.get(parent_id)
            if branch is None:
                link = link_of(txn, parent_id)
                branch = None if link is None else link[1].seq
        batch = [
            run_started_entry(
                conversation_id=conversation_id,
                run_id=run_id,
                metadata={'source': SAVED_BY_STORE},
                parent=_branch_point(txn, conversation_id, branch),
            ),
            *(
                NewEntry(
                    conversation_id=conversation_id,
                    run_id=run_id,
                    kind='message',
                    payload=entry.payload,
                    prevalidated=True,
                )
                for entry in new_entries[index:end]
            ),
            run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'),
        ]
        written = append_entries(txn, batch, allow_internal=True)
        for offset, seq in enumerate(written[1:-1]):
            seqs[index + offset] = seq
            known[new_entries[index + offset].id] = seq
        index = end
    return [seq or 0 for seq in seqs]


def _branch_point(txn: WriteTxn, conversation_id: str, seq: int | None) -> int | None:
    """The parent of a run the store appends: the entry before its first message, or, when that
    one is in the conversation a fork came from, the fork's `forked_from` entry."""
    if seq is None:
        return None
    body = get_body(txn, seq)
    if body is None or body.conversation_id == conversation_id:
        return seq
    conv = get_conversation(txn, conversation_id)
    if conv is not None and conv.forked_from is not None and conv.forked_from.seq == seq:
        return conv.first_seq
    return seq


def _recorded_messages(
    txn: ReadTxn, conversation_id: str, new_entries: Sequence[NewStoreEntry]
) -> dict[str, list[tuple[int, bytes]]]:
    """The message entries of each run the new entries name, in this conversation, in order."""
    found: dict[str, list[tuple[int, bytes]]] = {}
    for run_id in dict.fromkeys(entry.run_id for entry in new_entries if entry.run_id is not None):
        run = get_run(txn, run_id)
        if run is None or run.conversation_id != conversation_id:
            continue
        messages = [
            (body.seq, body.payload)
            for body in run_bodies(txn, run)
            if body.kind == 'message' and body.run_id == run_id
        ]
        found[run_id] = messages
    return found


def delete_record(
    txn: WriteTxn,
    conversation_id: str,
    *,
    expected: str,
    revision: str,
    updated_at: datetime,
    erase: Callable[[WriteTxn, str, set[int]], T],
) -> list[T]:
    """Delete a conversation's record if its revision is still `expected`, release the store
    entries no remaining record reaches, and erase (with `erase`, given the `seq`s to keep) the
    content of the conversation's entries that nothing reached keeps; return what each `erase`
    returned.

    A conversation forked from this one keeps the history it shares: those entries stay. The
    conversations this one was forked from that were deleted before (their shared entries kept
    for it) are released in the same way, now that it no longer reaches them.
    """
    ref = record_ref(txn, conversation_id)
    if ref is None or _saved_at(txn, ref.seq).revision != expected:
        raise RevisionConflict(conversation_id, 'the record was saved, replaced or deleted since it was read')
    done = [_release(txn, conversation_id, expected, revision, updated_at, ref.forked_from, erase)]
    source, seen = ref.forked_from, {conversation_id}
    while source is not None and source not in seen and record_ref(txn, source) is None:
        seen.add(source)
        tombstone = _last_saved(txn, source)
        if tombstone is None:
            break
        done.append(_release(txn, source, None, f'{revision}/{source}', updated_at, tombstone.forked_from, erase))
        source = tombstone.forked_from
    return done


def _release(
    txn: WriteTxn,
    conversation_id: str,
    expected: str | None,
    revision: str,
    updated_at: datetime,
    forked_from: str | None,
    erase: Callable[[WriteTxn, str, set[int]], T],
) -> T:
    """Append the tombstone `saved` entry that drops a conversation's record and the links no
    live record reaches, and erase what those links held."""
    reached = _reached_by_others(txn, conversation_id)
    prefix = store_depth_prefix(conversation_id)
    released: list[str] = []
    kept: set[int] = set()
    for key, value in txn.scan(Table.STORE, prefix=prefix):
        entry_id = key[len(prefix) + 8 :].decode()
        if entry_id in reached:
            kept.add(decode_store_link(value).seq)
        else:
            released.append(entry_id)
    tombstone = SavedInfo(
        revision=revision,
        expected=expected,
        updated_at=updated_at,
        forked_from=forked_from,
        deleted=True,
        released=released,
    )
    append_entries(
        txn,
        [NewEntry(conversation_id=conversation_id, kind='saved', payload=encode_info(tombstone))],
        allow_internal=True,
    )
    return erase(txn, conversation_id, kept)


def _last_saved(txn: ReadTxn, conversation_id: str) -> SavedInfo | None:
    """The latest `saved` entry of a conversation (its tombstone, once deleted), or `None`."""
    for key, _ in txn.scan(Table.BY_CONV, prefix=ck(conversation_id), reverse=True):
        body = get_body(txn, key_seq(key))
        if body is not None and body.kind == 'saved':
            return decode_info(_SAVED, body.payload, 'saved')
    return None


def _reached_by_others(txn: ReadTxn, conversation_id: str) -> set[str]:
    """The store entries of `conversation_id`'s saves that another live record's history (its head
    or a branch it left) still reaches: only forks of it, directly or through other forks, can."""
    reached: set[str] = set()
    todo = [conversation_id]
    seen = {conversation_id}
    while todo:
        source = todo.pop()
        prefix = store_fork_prefix(source)
        for key, _ in txn.scan(Table.STORE, prefix=prefix):
            fork = key[len(prefix) :].decode()
            if fork in seen:
                continue
            seen.add(fork)
            todo.append(fork)
            found = read_record(txn, fork)
            if found is None:
                continue
            _, info = found
            for tip in [info.head, *info.branches]:
                reached.update(_walk(txn, tip, conversation_id))
    return reached


def _walk(txn: ReadTxn, tip: str | None, conversation_id: str) -> Iterator[str]:
    """The ids on the history ending at `tip` that `conversation_id`'s saves added."""
    current = tip
    while current is not None:
        found = link_of(txn, current)
        if found is None:
            return
        place, link = found
        if place.conversation_id == conversation_id:
            yield current
        current = link.parent
