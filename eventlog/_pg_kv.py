"""The storage protocol (`ReadTxn`, `WriteTxn`, the projection records) over PostgreSQL tables.

Every logical table of the log is a PostgreSQL table `(k bytea primary key, v bytea)`; a
projection's records share one table keyed by `(projection, tbl, k)`. `bytea` compares
bytewise, as LMDB compares keys, so ranges and order are the same on both backends.

A write transaction buffers its puts and deletes and sends them in one pipelined batch when
it reads a range or commits; a point read of a key it wrote answers from the buffer. Range
scans fetch pages by key (keyset paging), so an early `break` reads little.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import psycopg

from eventlog._storage import TableId, prefix_end

__all__ = ['Pending', 'PgProjectionTxn', 'PgReadTxn', 'PgRelation', 'PgWriteTxn']

_FIRST_PAGE: Final = 64
_MAX_PAGE: Final = 2048

Pending = dict[tuple['PgRelation', bytes], bytes | None]
"""Buffered writes of one transaction: (relation, key) -> new value, or `None` for a delete."""


class PgRelation:
    """One keyed relation: a table, or a projection table's slice of the shared records table.

    Holds its SQL, built once; `fixed` are the leading key columns' values (none for a log table).
    """

    __slots__ = ('_where', 'fixed', 'sql_delete', 'sql_get', 'sql_put', 'table')

    def __init__(self, table: str, fixed_columns: tuple[str, ...] = (), fixed: tuple[str, ...] = ()) -> None:
        self.table = table
        self.fixed = fixed
        self._where = ''.join(f'{column} = %s AND ' for column in fixed_columns)
        columns = ''.join(f'{column}, ' for column in fixed_columns)
        marks = '%s, ' * len(fixed_columns)
        conflict = ', '.join((*fixed_columns, 'k'))
        self.sql_get = f'SELECT v FROM {table} WHERE {self._where}k = %s'.encode()
        self.sql_put = (
            f'INSERT INTO {table} ({columns}k, v) VALUES ({marks}%s, %s) '
            f'ON CONFLICT ({conflict}) DO UPDATE SET v = EXCLUDED.v'
        ).encode()
        self.sql_delete = f'DELETE FROM {table} WHERE {self._where}k = %s'.encode()

    def range_sql(self, *, lower: str | None, upper: str | None, reverse: bool, limit: int) -> bytes:
        """A page of a range: `lower`/`upper` are the comparison operators bounding `k` (or None)."""
        where = self._where + ' AND '.join(
            part for part in (f'k {lower} %s' if lower else '', f'k {upper} %s' if upper else '') if part
        )
        where = where.removesuffix(' AND ') or 'TRUE'
        order = 'DESC' if reverse else 'ASC'
        return f'SELECT k, v FROM {self.table} WHERE {where} ORDER BY k {order} LIMIT {limit}'.encode()

    def delete_range_sql(self) -> bytes:
        """Delete every key in [low, high) (high may be open: see `delete_prefix`), returning the keys."""
        return (
            f'DELETE FROM {self.table} WHERE {self._where}k >= %s AND (%s::bytea IS NULL OR k < %s) RETURNING k'
        ).encode()


def scan_relation(
    cur: psycopg.Cursor[Any],
    rel: PgRelation,
    *,
    prefix: bytes = b'',
    start: bytes | None = None,
    reverse: bool = False,
) -> Iterator[tuple[bytes, bytes]]:
    """Items of `rel` whose key starts with `prefix`, from `start` on, by pages (see `ReadTxn.scan`)."""
    end = prefix_end(prefix)
    if not reverse:
        low: bytes | None = max(prefix, start) if start is not None else prefix
        low_op = '>='
        high, high_op = end, '<'
    else:
        low, low_op = (prefix or None), '>='
        if start is not None and (end is None or start < end):
            high, high_op = start, '<='
        else:
            high, high_op = end, '<'
    if low == b'':
        low = None
    page = _FIRST_PAGE
    while True:
        params: list[object] = [*rel.fixed]
        if low is not None:
            params.append(low)
        if high is not None:
            params.append(high)
        sql = rel.range_sql(
            lower=low_op if low is not None else None,
            upper=high_op if high is not None else None,
            reverse=reverse,
            limit=page,
        )
        cur.execute(sql, params)
        rows: list[tuple[bytes, bytes]] = cur.fetchall()
        yield from rows
        if len(rows) < page:
            return
        if reverse:
            high, high_op = rows[-1][0], '<'
        else:
            low, low_op = rows[-1][0], '>'
        page = min(page * 4, _MAX_PAGE)


class PgReadTxn:
    """A `ReadTxn` in one PostgreSQL transaction (a repeatable-read snapshot for readers)."""

    def __init__(self, cur: psycopg.Cursor[Any], relations: dict[TableId, PgRelation]) -> None:
        self._cur = cur
        self._relations = relations

    def get(self, table: TableId, key: bytes) -> bytes | None:
        rel = self._relations[table]
        self._cur.execute(rel.sql_get, (*rel.fixed, key))
        row = self._cur.fetchone()
        return None if row is None else row[0]

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return scan_relation(self._cur, self._relations[table], prefix=prefix, start=start, reverse=reverse)

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)


class PgWriteTxn(PgReadTxn):
    """A `WriteTxn`: writes are buffered in `pending` (shared with the projection writer of the
    same transaction) and flushed before any range read and at commit."""

    def __init__(self, cur: psycopg.Cursor[Any], relations: dict[TableId, PgRelation], pending: Pending) -> None:
        super().__init__(cur, relations)
        self._pending = pending

    def get(self, table: TableId, key: bytes) -> bytes | None:
        rel = self._relations[table]
        hit = self._pending.get((rel, key), _MISSING)
        if hit is not _MISSING:
            return hit  # pyright: ignore[reportReturnType]
        return super().get(table, key)

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        flush(self._cur, self._pending)
        return super().scan(table, prefix=prefix, start=start, reverse=reverse)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        self._pending[(self._relations[table], key)] = value

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        self._pending[(self._relations[table], key)] = value

    def delete(self, table: TableId, key: bytes) -> None:
        self._pending[(self._relations[table], key)] = None


_MISSING: Final = object()


def flush(cur: psycopg.Cursor[Any], pending: Pending) -> None:
    """Send the buffered writes (one pipelined batch per kind of statement) and empty the buffer."""
    if not pending:
        return
    puts: dict[bytes, list[tuple[object, ...]]] = {}
    deletes: dict[bytes, list[tuple[object, ...]]] = {}
    for (rel, key), value in pending.items():
        if value is None:
            deletes.setdefault(rel.sql_delete, []).append((*rel.fixed, key))
        else:
            puts.setdefault(rel.sql_put, []).append((*rel.fixed, key, value))
    pending.clear()
    for sql, rows in deletes.items():
        cur.executemany(sql, rows)
    for sql, rows in puts.items():
        cur.executemany(sql, rows)


class PgProjectionTxn:
    """A projection's records and position (`ProjectionWriter`) inside one PostgreSQL transaction."""

    def __init__(
        self,
        cur: psycopg.Cursor[Any],
        name: str,
        relations: dict[str, PgRelation],
        tables: tuple[str, str],
        pending: Pending | None,
    ) -> None:
        self._cur = cur
        self._name = name
        self._relations = relations
        self._records, self._positions = tables
        self._pending = pending

    def _rel(self, table: str) -> PgRelation:
        try:
            return self._relations[table]
        except KeyError:
            raise KeyError(f'projection {self._name!r} has no table {table!r}') from None

    def _writable(self) -> Pending:
        if self._pending is None:
            raise TypeError('this projection transaction is read-only')
        return self._pending

    def position(self) -> int | None:
        if self._pending:
            flush(self._cur, self._pending)
        self._cur.execute(f'SELECT position FROM {self._positions} WHERE projection = %s'.encode(), (self._name,))
        row = self._cur.fetchone()
        return None if row is None else row[0]

    def get(self, table: str, key: bytes) -> bytes | None:
        rel = self._rel(table)
        if self._pending:
            hit = self._pending.get((rel, key), _MISSING)
            if hit is not _MISSING:
                return hit  # pyright: ignore[reportReturnType]
        self._cur.execute(rel.sql_get, (*rel.fixed, key))
        row = self._cur.fetchone()
        return None if row is None else row[0]

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        if self._pending:
            flush(self._cur, self._pending)
        return scan_relation(self._cur, self._rel(table), prefix=prefix, start=start, reverse=reverse)

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._writable()[(self._rel(table), key)] = value

    def delete(self, table: str, key: bytes) -> None:
        self._writable()[(self._rel(table), key)] = None

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        flush(self._cur, self._writable())
        rel = self._rel(table)
        end = prefix_end(prefix)
        self._cur.execute(rel.delete_range_sql(), (*rel.fixed, prefix, end, end))
        return sorted(row[0] for row in self._cur.fetchall())

    def set_position(self, seq: int) -> None:
        self._writable()
        self._cur.execute(
            f'UPDATE {self._positions} SET position = %s WHERE projection = %s'.encode(), (seq, self._name)
        )

    def clear(self) -> None:
        pending = self._writable()
        for key in [key for key in pending if key[0].fixed[:1] == (self._name,)]:
            del pending[key]
        self._cur.execute(f'DELETE FROM {self._records} WHERE projection = %s'.encode(), (self._name,))
        self._cur.execute(f'UPDATE {self._positions} SET position = NULL WHERE projection = %s'.encode(), (self._name,))
