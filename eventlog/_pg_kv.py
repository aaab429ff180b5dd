"""The storage protocol (`ReadTxn`, `WriteTxn`, the projection records) over PostgreSQL tables.

Every logical table of the log is a PostgreSQL table `(k bytea primary key, v bytea)`; a
projection's records share one table keyed by `(projection, tbl, k)`. `bytea` compares
bytewise, as LMDB compares keys, so ranges and order are the same on both backends.

A write transaction buffers its puts and deletes and sends them all in one statement (one
round trip) when it reads a range or commits; a point read of a key it wrote answers from the
buffer, and a key read ahead with `fetch_sql` (in the round trip that begins the transaction)
answers from what was fetched. Range scans fetch pages by key (keyset paging), so an early
`break` reads little.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, Final

import psycopg

from eventlog._keys import META_LAST_SEQ, Table, key_seq, seq_key
from eventlog._storage import TableId, prefix_end

__all__ = [
    'CacheMiss',
    'CachedWriteTxn',
    'Known',
    'Pending',
    'PgProjectionTxn',
    'PgReadTxn',
    'PgRelation',
    'PgWriteTxn',
    'guard_sql',
    'variant_writes_sql',
]

_FIRST_PAGE: Final = 64
_MAX_PAGE: Final = 2048

Pending = dict[tuple['PgRelation', bytes], bytes | None]
"""Buffered writes of one transaction: (relation, key) -> new value, or `None` for a delete."""


class PgRelation:
    """One keyed relation: a table, or a projection table's slice of the shared records table.

    Holds its SQL, built once; `fixed` are the leading key columns' values (none for a log table).
    """

    __slots__ = (
        '_where',
        'fixed',
        'sql_delete',
        'sql_delete_many',
        'sql_get',
        'sql_get_many',
        'sql_put',
        'sql_put_many',
        'table',
    )

    def __init__(self, table: str, fixed_columns: tuple[str, ...] = (), fixed: tuple[str, ...] = ()) -> None:
        self.table = table
        self.fixed = fixed
        self._where = ''.join(f'{column} = %s AND ' for column in fixed_columns)
        columns = ''.join(f'{column}, ' for column in fixed_columns)
        marks = '%s, ' * len(fixed_columns)
        conflict = ', '.join((*fixed_columns, 'k'))
        self.sql_get = f'SELECT v FROM {table} WHERE {self._where}k = %s'.encode()
        self.sql_get_many = f'SELECT k, v FROM {table} WHERE {self._where}k = ANY(%s::bytea[])'.encode()
        self.sql_put = (
            f'INSERT INTO {table} ({columns}k, v) VALUES ({marks}%s, %s) '
            f'ON CONFLICT ({conflict}) DO UPDATE SET v = EXCLUDED.v'
        ).encode()
        self.sql_delete = f'DELETE FROM {table} WHERE {self._where}k = %s'.encode()
        casts = '%s::text, ' * len(fixed_columns)
        self.sql_put_many = (
            f'INSERT INTO {table} ({columns}k, v) SELECT {casts}u.k, u.v FROM unnest(%s::bytea[], %s::bytea[]) '
            f'AS u(k, v) ON CONFLICT ({conflict}) DO UPDATE SET v = EXCLUDED.v'
        )
        self.sql_delete_many = f'DELETE FROM {table} WHERE {self._where}k = ANY(%s::bytea[])'

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


def settled_sql(entries: str) -> tuple[bytes, bytes]:
    """The log's settled position and a page of its settled entries (docs/postgres.md, "Followers").

    An entry is settled when the transaction that wrote it (`tx`) is older than every transaction
    still running (`pg_snapshot_xmin` of the statement's snapshot). Seqs are handed out in the
    order of the writers' transaction ids (`claim_seqs`), so the settled entries are always every
    entry up to some `seq`: one that commits later can only have a larger `seq` than all of them.
    Returns (the largest settled `seq` as seq8, a page `k >= %s ... LIMIT %s` of settled entries).
    """
    horizon = '(SELECT pg_snapshot_xmin(pg_current_snapshot()))'
    last = f'SELECT k FROM {entries} WHERE tx < {horizon} ORDER BY k DESC LIMIT 1'
    page = f'SELECT k, v FROM {entries} WHERE k >= %s AND tx < {horizon} ORDER BY k LIMIT %s'
    return last.encode(), page.encode()


class PgReadTxn:
    """A `ReadTxn` in one PostgreSQL transaction (a repeatable-read snapshot for readers).

    The log's last `seq` (META `last_seq`, which PostgreSQL stores do not keep as a record) reads
    as the largest settled `seq` (`settled_sql`), and `scan_settled` reads the entries up to it:
    what a follower may take without ever skipping an entry committed later.
    """

    def __init__(self, cur: psycopg.Cursor[Any], relations: dict[TableId, PgRelation]) -> None:
        self._cur = cur
        self._relations = relations

    def settled_last(self) -> bytes | None:
        """The largest settled `seq` as seq8 (`None`: no entry is settled)."""
        self._cur.execute(settled_sql(self._relations[Table.ENTRIES].table)[0])
        row = self._cur.fetchone()
        return None if row is None else bytes(row[0])

    def assigned_last(self) -> bytes:
        """The last `seq` handed out (the store's counter, `claim_seqs`) as seq8: at least the
        last entry's, more when an append that claimed seqs never committed."""
        schema = self._relations[Table.ENTRIES].table.rsplit('.', 1)[0]
        counter = f"'{schema}.seq_counter'"
        # A role that may only read the tables (an auditor) cannot read the sequence: it is
        # answered with the last settled entry instead.
        self._cur.execute(
            f"SELECT CASE WHEN has_sequence_privilege({counter}, 'SELECT') "
            f'THEN int8send(coalesce(pg_sequence_last_value({counter}), 0)) END'.encode()
        )
        row = self._cur.fetchone()
        if row is None or row[0] is None:
            return self.settled_last() or seq_key(0)
        return bytes(row[0])

    def scan_settled(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The settled entries from the key `start` on, in `seq` order, by pages."""
        sql = settled_sql(self._relations[Table.ENTRIES].table)[1]
        page = _FIRST_PAGE
        low = start
        while True:
            self._cur.execute(sql, (low, page))
            rows: list[tuple[bytes, bytes]] = self._cur.fetchall()
            yield from rows
            if len(rows) < page:
                return
            low = seq_key(key_seq(rows[-1][0]) + 1)
            page = min(page * 4, _MAX_PAGE)

    def get(self, table: TableId, key: bytes) -> bytes | None:
        if table == Table.META and key == META_LAST_SEQ:
            return self.settled_last()
        rel = self._relations[table]
        self._cur.execute(rel.sql_get, (*rel.fixed, key))
        row = self._cur.fetchone()
        return None if row is None else row[0]

    def get_many(self, table: TableId, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of `keys` (`None` for one absent), in one statement."""
        if not keys:
            return []
        if table == Table.META and META_LAST_SEQ in keys:
            return [self.get(table, key) for key in keys]
        rel = self._relations[table]
        self._cur.execute(rel.sql_get_many, (*rel.fixed, list(keys)))
        found: dict[bytes, bytes] = dict(self._cur.fetchall())
        return [found.get(key) for key in keys]

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return scan_relation(self._cur, self._relations[table], prefix=prefix, start=start, reverse=reverse)

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)


class PgWriteTxn(PgReadTxn):
    """A `WriteTxn`: writes are buffered in `pending` (shared with the projection writer of the
    same transaction) and flushed before any range read and at commit.

    With `seq_base`, the transaction appends: the log's last `seq` reads as `seq_base` (the seqs
    it may use follow it: claimed from the store's counter, or the counter itself under the
    store-wide lock), and the last `seq` it writes is kept in `seq_end` instead of a record (the
    caller moves the counter). Without it (a projection catching up), the last `seq` reads as
    the settled one, as for readers.
    """

    def __init__(
        self,
        cur: psycopg.Cursor[Any],
        relations: dict[TableId, PgRelation],
        pending: Pending,
        fetched: Pending | None = None,
        *,
        track: bool = False,
        seq_base: int | None = None,
    ) -> None:
        super().__init__(cur, relations)
        self._pending = pending
        self._fetched: Pending = {} if fetched is None else fetched
        self.seq_base = seq_base
        self.seq_end = seq_base
        """The last `seq` this transaction wrote as the log's last (`seq_base` until it writes one)."""
        self.reads: Pending | None = {} if track else None
        """With `track`: the value each key had when this transaction first read it (before its own writes)."""
        self.written: Pending | None = {} if track else None
        """With `track`: every key this transaction wrote, with its last value (`None`: deleted)."""
        self.scanned = False
        """Whether a range was read (a read `CachedWriteTxn` cannot answer)."""

    def get(self, table: TableId, key: bytes) -> bytes | None:
        rel = self._relations[table]
        if self.seq_end is not None and table == Table.META and key == META_LAST_SEQ:
            value = seq_key(self.seq_end)
            if self.reads is not None and (self.written is None or (rel, key) not in self.written):
                self.reads.setdefault((rel, key), seq_key(self.seq_base or 0))
            return value
        hit = self._pending.get((rel, key), _MISSING)
        if hit is _MISSING and self.written is not None:
            hit = self.written.get((rel, key), _MISSING)  # written, and flushed by a range read since
        if hit is _MISSING:
            hit = self._fetched.get((rel, key), _MISSING)
        if hit is not _MISSING:
            value: bytes | None = hit  # pyright: ignore[reportAssignmentType]
        else:
            value = super().get(table, key)
        if self.reads is not None and (self.written is None or (rel, key) not in self.written):
            self.reads.setdefault((rel, key), value)
        return value

    def get_many(self, table: TableId, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(table, key) for key in keys]

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        flush(self._cur, self._pending)
        self.scanned = True
        return super().scan(table, prefix=prefix, start=start, reverse=reverse)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        self._set((self._relations[table], key), value)

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        self._set((self._relations[table], key), value)

    def delete(self, table: TableId, key: bytes) -> None:
        self._set((self._relations[table], key), None)

    def _set(self, slot: tuple[PgRelation, bytes], value: bytes | None) -> None:
        if slot[1] == META_LAST_SEQ and slot[0] is self._relations[Table.META]:
            if self.seq_end is None or value is None:
                raise ValueError('the last seq is written only by a transaction that appends')
            self.seq_end = key_seq(value)
            if self.written is not None:
                self.written[slot] = value
            return
        self._pending[slot] = value
        if self.written is not None:
            self.written[slot] = value
        if self._fetched:
            self._fetched.pop(slot, None)  # once flushed, the table holds the new value


_MISSING: Final = object()


def flush(cur: psycopg.Cursor[Any], pending: Pending, *, prepare: bool | None = None, tag: str = '') -> None:
    """Send the buffered writes in one statement (one round trip) and empty the buffer.

    Each relation's deletes and upserts are a data-modifying CTE of that statement; a key is in
    `pending` once, so no two of them touch the same row. `prepare` is psycopg's; `tag` starts
    the statement (a comment that keeps its text apart from other callers' in psycopg's cache).
    """
    if not pending:
        return
    groups: dict[PgRelation, tuple[list[bytes], list[bytes], list[bytes]]] = {}
    for (rel, key), value in pending.items():
        group = groups.get(rel)
        if group is None:
            group = groups[rel] = ([], [], [])
        if value is None:
            group[0].append(key)
        else:
            group[1].append(key)
            group[2].append(value)
    pending.clear()
    parts: list[str] = []
    params: list[object] = []
    for number, (rel, (deletes, keys, values)) in enumerate(groups.items()):
        if deletes:
            parts.append(f'd{number} AS ({rel.sql_delete_many})')
            params += [*rel.fixed, deletes]
        if keys:
            parts.append(f'p{number} AS ({rel.sql_put_many})')
            params += [*rel.fixed, keys, values]
    cur.execute((tag + 'WITH ' + ', '.join(parts) + ' SELECT 1').encode(), params, prepare=prepare)


def fetch_sql(reads: Sequence[tuple[PgRelation, bytes]]) -> bytes:
    """One query without parameters (so it can share a round trip with BEGIN) reading the keys of
    `reads` (log tables only): rows `(index in reads, value)` for the keys present. See `take_fetched`."""
    parts: list[str] = []
    for number, (rel, key) in enumerate(reads):
        if rel.fixed:
            raise ValueError('fetch_sql reads log tables only')
        # decode(..., 'hex') reads the same whatever the server's standard_conforming_strings is.
        parts.append(f"SELECT {number}, v FROM {rel.table} WHERE k = decode('{key.hex()}', 'hex')")
    return ' UNION ALL '.join(parts).encode()


def take_fetched(cur: psycopg.Cursor[Any], reads: Sequence[tuple[PgRelation, bytes]]) -> Pending:
    """The values `fetch_sql(reads)` returned (the last result of the statements `cur` ran),
    `None` for a key absent."""
    while cur.nextset():
        pass
    fetched: Pending = dict.fromkeys(reads, None)
    for number, value in cur.fetchall():
        fetched[reads[number]] = value
    return fetched


VARIANT_SETTING: Final = 'eventlog.variant'
"""The transaction-local setting in which the claim of a speculative append names the variant
whose writes apply (`variant_writes_sql`)."""


def variant_writes_sql(variants: Sequence[Pending], *, tag: str = '') -> tuple[bytes, list[object]]:
    """One statement applying the writes of the variant the transaction's claim chose, and none of
    the others': `variants[i]` are the writes of variant `i`, and the statement reads `i` from the
    transaction-local setting `VARIANT_SETTING` (set by the claim in the same transaction; unset,
    the statement fails and writes nothing). Log tables only. `tag` starts the statement.
    """
    groups: dict[PgRelation, tuple[list[int], list[bytes], list[bytes | None]]] = {}
    for number, pending in enumerate(variants):
        for (rel, key), value in pending.items():
            if rel.fixed:
                raise ValueError('variant_writes_sql writes log tables only')
            group = groups.get(rel)
            if group is None:
                group = groups[rel] = ([], [], [])
            group[0].append(number)
            group[1].append(key)
            group[2].append(value)
    chosen = f"current_setting('{VARIANT_SETTING}')::int"
    parts: list[str] = []
    params: list[object] = []
    for number, (rel, (indexes, keys, values)) in enumerate(groups.items()):
        parts.append(
            f'u{number} AS (SELECT u.k, u.v FROM unnest(%b::int4[], %b::bytea[], %b::bytea[]) AS u(i, k, v) '
            f'WHERE u.i = {chosen})'
        )
        params += [indexes, keys, values]
        if any(value is None for value in values):
            parts.append(f'd{number} AS (DELETE FROM {rel.table} WHERE k IN (SELECT k FROM u{number} WHERE v IS NULL))')
        parts.append(
            f'p{number} AS (INSERT INTO {rel.table} (k, v) SELECT k, v FROM u{number} WHERE v IS NOT NULL '
            'ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v)'
        )
    if not parts:
        return (tag + 'SELECT 1').encode(), []
    return (tag + 'WITH ' + ', '.join(parts) + ' SELECT 1').encode(), params


class CacheMiss(Exception):
    """A `CachedWriteTxn` was asked for something its cache does not hold (nothing was sent)."""


Known = dict[tuple['PgRelation', bytes], bytes | None]
"""Records a handle believes current: (relation, key) -> value, or `None` for a key absent."""


class CachedWriteTxn:
    """A `WriteTxn` answered from a handle's cache of records, without reaching the server.

    A key the cache holds answers its cached value; a key of a relation in `presumed_absent`
    that the cache does not hold answers absent; anything else (another key, a range) raises
    `CacheMiss`. Every answer given is recorded in `reads`, so that a guard (`guard_sql`) can
    check them all on the server under the writers' lock; writes are buffered in `pending`.
    """

    def __init__(
        self,
        relations: dict[TableId, PgRelation],
        known: Known,
        presumed_absent: frozenset[PgRelation],
        *,
        last_seq: bytes | None = None,
    ) -> None:
        self._relations = relations
        self._known = known
        self._absent = presumed_absent
        self.pending: Pending = {}
        """The writes, to send with the guard and the COMMIT."""
        self.reads: Pending = {}
        """Each record read (before this transaction wrote it) with the value it was answered."""
        if last_seq is not None:
            # A speculative variant: the log's last `seq` reads as this instead of the cached one.
            self.reads[(relations[Table.META], META_LAST_SEQ)] = last_seq

    def get(self, table: TableId, key: bytes) -> bytes | None:
        slot = (self._relations[table], key)
        hit = self.pending.get(slot, _MISSING)
        if hit is not _MISSING:
            return hit  # pyright: ignore[reportReturnType]
        hit = self.reads.get(slot, _MISSING)
        if hit is not _MISSING:
            return hit  # pyright: ignore[reportReturnType]
        hit = self._known.get(slot, _MISSING)
        if hit is _MISSING:
            if slot[0] not in self._absent:
                raise CacheMiss(f'{slot[0].table} {key.hex()}')
            hit = None
        self.reads[slot] = hit  # pyright: ignore[reportArgumentType]
        return hit  # pyright: ignore[reportReturnType]

    def get_many(self, table: TableId, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of `keys`, each as `get` answers it."""
        return [self.get(table, key) for key in keys]

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        raise CacheMiss('a range read')

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        raise CacheMiss('a range read')

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        self.pending[(self._relations[table], key)] = value

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        self.pending[(self._relations[table], key)] = value

    def delete(self, table: TableId, key: bytes) -> None:
        self.pending[(self._relations[table], key)] = None


_DIGEST_OVER: Final = 256
"""Values longer than this are compared by their SHA-256 (computed by the server) in a guard."""


def guard_sql(reads: Pending) -> tuple[bytes, list[object]]:
    """A statement that fails with `division_by_zero` unless every key of `reads` (log tables
    only) holds exactly its value there, or is absent where the value is `None`.

    The divisor depends on the tables' rows, so the planner cannot fold it into a constant: the
    error comes from the check, at execution, never from planning.
    """
    parts: list[str] = []
    params: list[object] = []
    for (rel, key), value in reads.items():
        if rel.fixed:
            raise ValueError('guard_sql checks log tables only')
        if value is None:
            parts.append(f'NOT EXISTS (SELECT FROM {rel.table} WHERE k = %s)')
            params.append(key)
        elif len(value) > _DIGEST_OVER:
            parts.append(f'EXISTS (SELECT FROM {rel.table} WHERE k = %s AND sha256(v) = %s)')
            params += [key, hashlib.sha256(value).digest()]
        else:
            parts.append(f'EXISTS (SELECT FROM {rel.table} WHERE k = %s AND v = %s)')
            params += [key, value]
    condition = ' AND '.join(parts) or 'TRUE'
    return f'SELECT 1 / (CASE WHEN {condition} THEN 1 ELSE 0 END)'.encode(), params


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
