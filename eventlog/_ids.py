"""Ids by prefix: key-range scans over the run and conversation tables.

Run records are keyed by the run id and conversation records by the conversation id (their
UTF-8 bytes), so the ids starting with a prefix are one contiguous range of keys, and the ids
sharing most of their start with a given id are its two neighbours in key order. Both look-ups
cost a cursor positioning or two, whatever the size of the store. A deleted conversation
keeps a record marked deleted (beside its tombstone entry); it is skipped, never found here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from eventlog._engine import decode_conversation, decode_id
from eventlog._storage import ReadTxn, Table, TableId
from eventlog.errors import InvalidArgumentError

__all__ = ['IdKind', 'ids_with_prefix', 'unique_prefix_lengths']

IdKind = Literal['run', 'conversation']
"""Which ids: run ids or conversation ids."""

_TABLES: dict[str, TableId] = {'run': Table.RUNS, 'conversation': Table.CONVS}


def table_of(kind: IdKind) -> TableId:
    """The table whose keys are the ids of `kind`; `InvalidArgumentError` for another kind."""
    table = _TABLES.get(kind)
    if table is None:
        raise InvalidArgumentError(f"kind must be 'run' or 'conversation', got {kind!r}")
    return table


def ids_with_prefix(txn: ReadTxn, kind: IdKind, prefix: str, limit: int) -> list[str]:
    """The first `limit` ids of `kind` that start with `prefix`, in key order."""
    found: list[str] = []
    if limit <= 0:
        return found
    for key, value in txn.scan(table_of(kind), prefix=prefix.encode()):
        if _live(kind, key, value):
            found.append(decode_id(key, f'the {kind} key'))
        if len(found) >= limit:
            break
    return found


def _common(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def _live(kind: IdKind, key: bytes, value: bytes) -> bool:
    """Whether a record names a run or a conversation that is not deleted."""
    return kind == 'run' or not decode_conversation(decode_id(key, 'the conversation key'), value).deleted


def _neighbour(txn: ReadTxn, kind: IdKind, key: bytes, *, reverse: bool) -> bytes | None:
    """The id just after (or, with `reverse`, just before) `key` in key order, `key` itself and
    deleted conversations excluded."""
    for found, value in txn.scan(table_of(kind), start=key, reverse=reverse):
        if found != key and _live(kind, found, value):
            return found
    return None


def unique_prefix_lengths(txn: ReadTxn, kind: IdKind, ids: Iterable[str]) -> dict[str, int]:
    """For each id, the length of its shortest prefix that no other stored id of `kind` starts
    with; the whole id's length when another stored id starts with all of it."""
    out: dict[str, int] = {}
    for identifier in ids:
        if identifier in out:
            continue
        key = identifier.encode()
        shared = 0
        for reverse in (False, True):
            other = _neighbour(txn, kind, key, reverse=reverse)
            if other is not None:
                shared = max(shared, _common(identifier, decode_id(other, f'the {kind} key')))
        out[identifier] = min(len(identifier), shared + 1)
    return out
