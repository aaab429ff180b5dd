"""Tracked projections in the LMDB backend.

Table `t` of projection `p` is the named database `p.t`; every projection's position is
a big-endian `seq` under its name in the named database `projections`. A projection's
function runs inside the log's own LMDB transaction, so its records, its position and the
entries it read belong to one snapshot, and a write commits records and position at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, cast

import lmdb

from eventlog._keys import key_seq, seq_key
from eventlog._storage import prefix_end

__all__ = [
    'POSITIONS',
    'LmdbProjectionTxn',
    'ProjectionHandles',
    'StaleHandles',
    'database_name',
    'has_projection',
    'present_projections',
    'projection_tables',
]

POSITIONS: Final = b'projections'
"""The named database holding every projection's position."""


def database_name(projection: str, table: str) -> bytes:
    """The LMDB database holding one table of a projection."""
    return f'{projection}.{table}'.encode()


class StaleHandles(Exception):
    """The handles belong to an environment a compaction has since replaced: open them again."""


class ProjectionHandles:
    """A projection's database handles in one LMDB environment (`None` for a table a read-only
    store does not hold: it reads as empty)."""

    __slots__ = ('dbs', 'env', 'name', 'positions')

    def __init__(self, env: lmdb.Environment, name: str, tables: tuple[str, ...], open_db: OpenDb) -> None:
        self.env = env
        self.name = name.encode()
        self.positions = open_db(POSITIONS)
        self.dbs = {table: open_db(database_name(name, table)) for table in tables}


OpenDb = Callable[[bytes], 'lmdb._Database | None']


class LmdbProjectionTxn:
    """`ProjectionWriter` over one LMDB transaction (a read transaction refuses the writes)."""

    __slots__ = ('_dbs', '_handles', '_txn')

    def __init__(self, txn: lmdb.Transaction, handles: ProjectionHandles) -> None:
        self._txn = txn
        self._handles = handles
        self._dbs = handles.dbs

    def position(self) -> int | None:
        if self._handles.positions is None:
            return None
        raw = cast('bytes | None', self._txn.get(self._handles.name, db=self._handles.positions))
        return None if raw is None else key_seq(raw)

    def get(self, table: str, key: bytes) -> bytes | None:
        db = self._dbs[table]
        return None if db is None else cast('bytes | None', self._txn.get(key, db=db))

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        db = self._dbs[table]
        if db is None:
            return
        cursor = self._txn.cursor(db=db)
        if not reverse:
            if not cursor.set_range(prefix if start is None else max(prefix, start)):
                return
            for key, value in cast('Iterator[tuple[bytes, bytes]]', iter(cursor)):
                if not key.startswith(prefix):
                    return
                yield key, value
            return
        if start is not None:
            positioned = cursor.key() == start or cursor.prev() if cursor.set_range(start) else cursor.last()
        else:
            upper = prefix_end(prefix)
            positioned = cursor.prev() if upper is not None and cursor.set_range(upper) else cursor.last()
        if not positioned:
            return
        for key, value in cast('Iterator[tuple[bytes, bytes]]', cursor.iterprev()):
            if not key.startswith(prefix):
                if key < prefix:
                    return
                continue
            yield key, value

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        # Positional arguments (dupdata, overwrite, append, db): parsed faster than keywords.
        self._txn.put(key, value, True, True, False, self._dbs[table])

    def delete(self, table: str, key: bytes) -> None:
        self._txn.delete(key, db=self._dbs[table])

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        cursor = self._txn.cursor(db=self._dbs[table])
        removed: list[bytes] = []
        if cursor.set_range(prefix):
            while True:
                key = cast('bytes', cursor.key())
                if not key.startswith(prefix):
                    break
                removed.append(key)
                if not cursor.delete():
                    break
        return removed

    def set_position(self, seq: int) -> None:
        self._txn.put(self._handles.name, seq_key(seq), db=self._handles.positions)

    def clear(self) -> None:
        for db in self._dbs.values():
            if db is not None:  # `None` only in a read-only store, which writes nothing
                self._txn.drop(db, delete=False)
        self._txn.delete(self._handles.name, db=self._handles.positions)


def has_projection(txn: lmdb.Transaction, name: str) -> bool:
    """Whether the store holds the databases of the projection `name` (read in `txn` without
    opening, or creating, any database)."""
    prefix = f'{name}.'.encode()
    cursor = txn.cursor()
    return bool(cursor.set_range(prefix)) and cast('bytes', cursor.key()).startswith(prefix)


def present_projections(txn: lmdb.Transaction) -> set[str]:
    """The projections whose databases (`p.t`) the store holds, read in `txn` (a projection's
    databases are created with its first use, before it has a position)."""
    names: set[str] = set()
    for key in cast('Iterator[bytes]', txn.cursor().iternext(keys=True, values=False)):
        name, dot, _ = key.partition(b'.')
        if dot and name:
            names.add(name.decode(errors='replace'))
    return names


def projection_tables(txn: lmdb.Transaction, name: str) -> tuple[str, ...]:
    """The tables the store holds databases of for the projection `name`, read in `txn`."""
    prefix = f'{name}.'.encode()
    cursor = txn.cursor()
    tables: list[str] = []
    if cursor.set_range(prefix):
        for key in cast('Iterator[bytes]', cursor.iternext(keys=True, values=False)):
            if not key.startswith(prefix):
                break
            tables.append(key[len(prefix) :].decode(errors='replace'))
    return tuple(tables)
