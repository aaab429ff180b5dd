"""Tracked projections in the in-memory backend: each table a sorted `MemoryTables` table.

`InMemoryEventLog` serializes every transaction with its lock; a write transaction that
raises is undone here (records, clears and position alike).
"""

from __future__ import annotations

from collections.abc import Iterator

from eventlog._storage import MemoryTables, MemoryTxn

__all__ = ['MemoryProjectionTxn', 'MemoryProjections']

_ONLY = 0
"""Each projection table is the single table of its own `MemoryTables`."""


class _Projection:
    __slots__ = ('position', 'tables')

    def __init__(self) -> None:
        self.tables: dict[str, MemoryTables] = {}
        self.position: int | None = None


class MemoryProjections:
    """The projections of one in-memory store, by name."""

    def __init__(self) -> None:
        self._projections: dict[str, _Projection] = {}

    def begin(self, name: str) -> MemoryProjectionTxn:
        """A transaction over the projection `name` (created empty if absent)."""
        projection = self._projections.get(name)
        if projection is None:
            projection = self._projections[name] = _Projection()
        return MemoryProjectionTxn(projection)

    def has(self, name: str) -> bool:
        """Whether the projection was ever opened in this store."""
        return name in self._projections

    def names(self) -> set[str]:
        """The names of every projection ever opened in this store."""
        return set(self._projections)


class MemoryProjectionTxn:
    """`ProjectionWriter` over one in-memory projection, undone by `rollback`."""

    def __init__(self, projection: _Projection) -> None:
        self._projection = projection
        self._txns: dict[str, MemoryTxn] = {}
        self._replaced: list[MemoryTxn] = []
        """Transactions over tables a `clear` replaced: rolled back with the rest."""
        self._before_clear: dict[str, MemoryTables] | None = None
        self._position_before = projection.position

    def _txn(self, table: str) -> MemoryTxn:
        txn = self._txns.get(table)
        if txn is None:
            tables = self._projection.tables.get(table)
            if tables is None:
                tables = self._projection.tables[table] = MemoryTables((_ONLY,))
            txn = self._txns[table] = MemoryTxn(tables)
        return txn

    def position(self) -> int | None:
        return self._projection.position

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn(table).get(_ONLY, key)

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._txn(table).scan(_ONLY, prefix=prefix, start=start, reverse=reverse)

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return self._txn(table).last(_ONLY, prefix)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._txn(table).put(_ONLY, key, value)

    def delete(self, table: str, key: bytes) -> None:
        self._txn(table).delete(_ONLY, key)

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        txn = self._txn(table)
        keys = [key for key, _ in txn.scan(_ONLY, prefix=prefix)]
        for key in keys:
            txn.delete(_ONLY, key)
        return keys

    def set_position(self, seq: int) -> None:
        self._projection.position = seq

    def clear(self) -> None:
        # Fresh tables in place of the old ones (kept for `rollback`): no per-key undo to record.
        if self._before_clear is None:
            self._before_clear = self._projection.tables
        self._replaced.extend(self._txns.values())
        self._txns.clear()
        self._projection.tables = {}
        self._projection.position = None

    def rollback(self) -> None:
        """Undo every write of this transaction."""
        for txn in (*self._replaced, *self._txns.values()):
            txn.rollback()
        if self._before_clear is not None:
            self._projection.tables = self._before_clear
        self._projection.position = self._position_before
