"""The ordered key-value surface both backends provide to the shared engine.

The engine (`_engine`) holds all of the log's logic and speaks only to these two
transaction protocols; a backend is a way to run a function inside a read or write
transaction. Keys are bytes compared bytewise, as LMDB compares them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Final, Protocol

__all__ = [
    'TABLE_NAMES',
    'MemoryTables',
    'MemoryTxn',
    'ProjectionRecords',
    'ProjectionWriter',
    'ReadTxn',
    'Table',
    'TableId',
    'WriteTxn',
]


class Table:
    """The tables (LMDB named databases) of a store, as small integers.

    Plain ints rather than an enum: the append path looks tables up several times per
    entry, and an enum member's hash is computed in Python.
    """

    META: Final = 0
    ENTRIES: Final = 1
    BY_CONV: Final = 2
    BY_RUN: Final = 3
    """Format 1 only: emptied when such a store is migrated."""
    RUNS: Final = 4
    RUN_ORDER: Final = 5
    CONV_RUNS: Final = 6
    CONVS: Final = 7
    IDEM: Final = 8
    STORE: Final = 9
    """The conversation store's index, derived from `saved` entries (`_convstore`)."""


TableId = int
"""One of the `Table` numbers."""

TABLE_NAMES: dict[TableId, bytes] = {
    Table.META: b'meta',
    Table.ENTRIES: b'entries',
    Table.BY_CONV: b'by_conv',
    Table.BY_RUN: b'by_run',
    Table.RUNS: b'runs',
    Table.RUN_ORDER: b'run_order',
    Table.CONV_RUNS: b'conv_runs',
    Table.CONVS: b'convs',
    Table.IDEM: b'idem',
    Table.STORE: b'store',
}


class ReadTxn(Protocol):
    """A consistent snapshot of the store."""

    def get(self, table: TableId, key: bytes) -> bytes | None: ...

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with `prefix`, from `start` (inclusive) on, in key order or reversed.

        With `reverse`, `start` is the largest key to return.
        """
        ...

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None: ...


class WriteTxn(ReadTxn, Protocol):
    """A transaction that commits all its writes or none."""

    def put(self, table: TableId, key: bytes, value: bytes) -> None: ...

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        """`put` for a key known to sort after every key of the table (LMDB then appends in place)."""
        ...

    def delete(self, table: TableId, key: bytes) -> None: ...


class ProjectionRecords(Protocol):
    """A tracked projection's own records and position, read inside one transaction of the store.

    A projection (the search index, say) is named and keeps its records in named tables of
    its own; keys are bytes compared bytewise. Its position is the last log `seq` it has
    applied, stored with its records so that both always change together. A backend keeps
    them as it likes: LMDB in named databases, a SQL store in tables keyed by
    (projection, table, key) and (projection) -> position.
    """

    def position(self) -> int | None:
        """The last `seq` the projection applied; `None` when it never recorded one (or was cleared)."""
        ...

    def get(self, table: str, key: bytes) -> bytes | None: ...

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Records whose key starts with `prefix`, from `start` (inclusive) on, in key order or reversed.

        With `reverse`, `start` is the largest key to return.
        """
        ...

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        """The record with the largest key starting with `prefix`."""
        ...


class ProjectionWriter(ProjectionRecords, Protocol):
    """A projection's records and position in a write transaction: all its writes and its new
    position commit together, or none of them."""

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> None: ...

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        """Delete every record whose key starts with `prefix`; return their keys in order."""
        ...

    def set_position(self, seq: int) -> None:
        """Record that the projection has applied the log up to `seq`."""
        ...

    def clear(self) -> None:
        """Delete every record of the projection and its position (before a rebuild)."""
        ...


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b'\xff')
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class _MemTable:
    __slots__ = ('data', 'keys')

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []


class MemoryTables:
    """The in-memory store: one sorted table per `Table` (or per id of `tables`)."""

    def __init__(self, tables: Iterable[TableId] = TABLE_NAMES) -> None:
        self.tables = {table: _MemTable() for table in tables}


class MemoryTxn:
    """A transaction over `MemoryTables`, rolled back from an undo log on failure.

    The in-memory backend serializes transactions with a lock, so a transaction sees
    a consistent state and readers never observe a half-applied write.
    """

    def __init__(self, tables: MemoryTables) -> None:
        self._tables = tables.tables
        self._undo: list[tuple[TableId, bytes, bytes | None]] = []

    def get(self, table: TableId, key: bytes) -> bytes | None:
        return self._tables[table].data.get(key)

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        t = self._tables[table]
        keys = t.keys
        end = prefix_end(prefix)
        if not reverse:
            lo = bisect.bisect_left(keys, max(prefix, start) if start is not None else prefix)
            hi = len(keys) if end is None else bisect.bisect_left(keys, end)
            snapshot = keys[lo:hi]
            for key in snapshot:
                value = t.data.get(key)
                if value is not None:
                    yield key, value
        else:
            hi = len(keys) if end is None else bisect.bisect_left(keys, end)
            if start is not None:
                hi = min(hi, bisect.bisect_right(keys, start))
            lo = bisect.bisect_left(keys, prefix)
            snapshot = keys[lo:hi]
            for key in reversed(snapshot):
                value = t.data.get(key)
                if value is not None:
                    yield key, value

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        t = self._tables[table]
        old = t.data.get(key)
        self._undo.append((table, key, old))
        if old is None:
            bisect.insort(t.keys, key)
        t.data[key] = value

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        self.put(table, key, value)

    def delete(self, table: TableId, key: bytes) -> None:
        t = self._tables[table]
        old = t.data.pop(key, None)
        if old is not None:
            self._undo.append((table, key, old))
            t.keys.pop(bisect.bisect_left(t.keys, key))

    def rollback(self) -> None:
        """Undo every write of this transaction, newest first."""
        for table, key, old in reversed(self._undo):
            t = self._tables[table]
            present = key in t.data
            if old is None:
                if present:
                    del t.data[key]
                    t.keys.pop(bisect.bisect_left(t.keys, key))
            else:
                if not present:
                    bisect.insort(t.keys, key)
                t.data[key] = old
        self._undo.clear()
