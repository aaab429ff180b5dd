"""The conversation store's index (STORE), derived from `saved` entries alone.

The append path (`_append`), an import and `verify`'s rebuild all apply `saved` entries with
`apply_saved`, and a deletion drops a conversation's part with `forget_conversation`, so the
index is a function of the entries (docs/invariants.md, invariant 6). The layout is in `_keys`.
"""

from __future__ import annotations

from eventlog._checks import check_id
from eventlog._keys import (
    StoreLinkValue,
    StorePlace,
    StoreRecordRef,
    Table,
    decode_store_link,
    decode_store_place,
    decode_store_ref,
    encode_store_value,
    seq_key,
    store_depth_key,
    store_depth_prefix,
    store_entry_key,
    store_fork_prefix,
    store_list_key,
    store_record_key,
    store_scope_prefix,
)
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.entries import SavedInfo
from eventlog.errors import CorruptStoreError, InvalidArgumentError

__all__ = ['apply_saved', 'forget_conversation', 'link_of', 'place_of', 'record_ref']


def apply_saved(txn: WriteTxn, conversation_id: str, seq: int, info: SavedInfo) -> None:
    """Bring STORE up to date with the `saved` entry `seq` of `conversation_id`.

    The append path, an import and `verify`'s rebuild all call this, so the index is a function of
    the entries. Raises `InvalidArgumentError` when a link cannot follow the entries before it.
    """
    depths: dict[str, int] = {}
    for link in info.links:
        check_id(link.id, 'a store entry id')
        if link.seq >= seq:
            raise InvalidArgumentError(f'store entry {link.id!r} names entry {link.seq}, which is not before it')
        if txn.get(Table.STORE, store_entry_key(link.id)) is not None or link.id in depths:
            raise InvalidArgumentError(f'store entry {link.id!r} was saved before')
        if link.parent is None:
            depth = 0
        elif link.parent in depths:
            depth = depths[link.parent] + 1
        else:
            place = place_of(txn, link.parent)
            if place is None:
                raise InvalidArgumentError(f'store entry {link.id!r} follows {link.parent!r}, which the store lacks')
            depth = place.depth + 1
        depths[link.id] = depth
        txn.put(Table.STORE, store_entry_key(link.id), encode_store_value(StorePlace(conversation_id, depth)))
        txn.put(
            Table.STORE,
            store_depth_key(conversation_id, depth, link.id),
            encode_store_value(StoreLinkValue(link.seq, link.parent)),
        )
    old = record_ref(txn, conversation_id)
    if old is not None:
        _unlist(txn, old)
    if info.deleted:
        txn.delete(Table.STORE, store_record_key(conversation_id))
        for entry_id in info.released:
            _drop_link(txn, entry_id)
        return
    forked_from = info.forked_from if old is None else old.forked_from
    ref = StoreRecordRef(seq, info.scope, forked_from)
    txn.put(Table.STORE, store_record_key(conversation_id), encode_store_value(ref))
    txn.put(Table.STORE, store_list_key(seq), conversation_id.encode())
    if info.scope is not None:
        txn.put(Table.STORE, store_scope_prefix(info.scope) + seq_key(seq), conversation_id.encode())
    if forked_from is not None:
        txn.put(Table.STORE, store_fork_prefix(forked_from) + conversation_id.encode(), b'')


def forget_conversation(txn: WriteTxn, conversation_id: str) -> None:
    """Drop everything STORE holds for a conversation whose entries a deletion removes."""
    ref = record_ref(txn, conversation_id)
    if ref is not None:
        _unlist(txn, ref)
        txn.delete(Table.STORE, store_record_key(conversation_id))
        if ref.forked_from is not None:
            txn.delete(Table.STORE, store_fork_prefix(ref.forked_from) + conversation_id.encode())
    prefix = store_depth_prefix(conversation_id)
    for key, _ in list(txn.scan(Table.STORE, prefix=prefix)):
        txn.delete(Table.STORE, key)
        txn.delete(Table.STORE, store_entry_key(key[len(prefix) + 8 :].decode()))


def _unlist(txn: WriteTxn, ref: StoreRecordRef) -> None:
    txn.delete(Table.STORE, store_list_key(ref.seq))
    if ref.scope is not None:
        txn.delete(Table.STORE, store_scope_prefix(ref.scope) + seq_key(ref.seq))


def _drop_link(txn: WriteTxn, entry_id: str) -> None:
    place = place_of(txn, entry_id)
    if place is None:
        return
    txn.delete(Table.STORE, store_entry_key(entry_id))
    txn.delete(Table.STORE, store_depth_key(place.conversation_id, place.depth, entry_id))


def record_ref(txn: ReadTxn, conversation_id: str) -> StoreRecordRef | None:
    raw = txn.get(Table.STORE, store_record_key(conversation_id))
    return None if raw is None else decode_store_ref(raw)


def place_of(txn: ReadTxn, entry_id: str) -> StorePlace | None:
    raw = txn.get(Table.STORE, store_entry_key(entry_id))
    return None if raw is None else decode_store_place(raw)


def link_of(txn: ReadTxn, entry_id: str) -> tuple[StorePlace, StoreLinkValue] | None:
    place = place_of(txn, entry_id)
    if place is None:
        return None
    raw = txn.get(Table.STORE, store_depth_key(place.conversation_id, place.depth, entry_id))
    if raw is None:
        raise CorruptStoreError(f'the conversation store lost the link of entry {entry_id!r}; run verify')
    return place, decode_store_link(raw)
