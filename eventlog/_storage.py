"""The ordered key-value surface both backends provide to the shared engine.

The engine (`_engine`) holds all of the log's logic and speaks only to these two
transaction protocols; a backend is a way to run a function inside a read or write
transaction. Keys are bytes compared bytewise, as LMDB compares them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from enum import IntEnum
from typing import Protocol

__all__ = ['MemoryTables', 'MemoryTxn', 'ReadTxn', 'Table', 'WriteTxn']


class Table(IntEnum):
    """The tables (LMDB named databases) of a store."""

    META = 0
    ENTRIES = 1
    BY_CONV = 2
    BY_RUN = 3
    RUNS = 4
    RUN_ORDER = 5
    CONV_RUNS = 6
    CONVS = 7
    IDEM = 8


TABLE_NAMES: dict[Table, bytes] = {table: table.name.lower().encode() for table in Table}


class ReadTxn(Protocol):
    """A consistent snapshot of the store."""

    def get(self, table: Table, key: bytes) -> bytes | None: ...

    def scan(
        self, table: Table, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with `prefix`, from `start` (inclusive) on, in key order or reversed.

        With `reverse`, `start` is the largest key to return.
        """
        ...

    def last(self, table: Table, prefix: bytes = b'') -> tuple[bytes, bytes] | None: ...


class WriteTxn(ReadTxn, Protocol):
    """A transaction that commits all its writes or none."""

    def put(self, table: Table, key: bytes, value: bytes) -> None: ...

    def delete(self, table: Table, key: bytes) -> None: ...


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
    """The in-memory store: one sorted table per `Table`."""

    def __init__(self) -> None:
        self.tables = {table: _MemTable() for table in Table}


class MemoryTxn:
    """A transaction over `MemoryTables`, rolled back from an undo log on failure.

    The in-memory backend serializes transactions with a lock, so a transaction sees
    a consistent state and readers never observe a half-applied write.
    """

    def __init__(self, tables: MemoryTables) -> None:
        self._tables = tables.tables
        self._undo: list[tuple[Table, bytes, bytes | None]] = []

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self._tables[table].data.get(key)

    def scan(
        self, table: Table, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
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

    def last(self, table: Table, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        t = self._tables[table]
        old = t.data.get(key)
        self._undo.append((table, key, old))
        if old is None:
            bisect.insort(t.keys, key)
        t.data[key] = value

    def delete(self, table: Table, key: bytes) -> None:
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
