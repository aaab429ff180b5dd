"""`PostgresEventLog`: the event log in a PostgreSQL schema, shared by processes on many machines.

The engine is the one every backend shares (`_engine`); this module only says how to run it
inside PostgreSQL transactions (`_pg_kv` maps the storage protocol onto tables).

Order and concurrency (docs/postgres.md):

- A write transaction first takes the schema's writer lock (`LOCK TABLE ... IN EXCLUSIVE
  MODE` on the `entries` table, which readers never wait for) and holds it until it commits;
  its snapshot starts after the lock is granted, so it sees every earlier commit.
  Writers on every machine therefore commit one after another, and `seq` is assigned under
  the lock as one more than the last committed `seq`. Entry `n + 1` cannot become visible
  before entry `n`, so a follower that reads by `seq` (projections, `tail --follow`) never
  skips an entry, and each conversation's hash chain is extended by one writer at a time.
- Readers run in a repeatable-read, read-only transaction: one consistent snapshot, as an
  LMDB read transaction gives.
- A transaction that fails because the connection broke before its commit was sent is
  retried on a new connection (nothing of it was committed), as is one the server rolled
  back for a conflict with another (two processes registering one projection at once). When the connection breaks
  while the commit is in flight, the outcome is unknown and `StorageError` says so; appends
  with idempotency keys can then be repeated safely.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import zlib
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from eventlog import _engine as engine
from eventlog._keys import META_LAST_SEQ, conv_key, run_key
from eventlog._pg_kv import Pending, PgProjectionTxn, PgReadTxn, PgRelation, PgWriteTxn, fetch_sql, flush, take_fetched
from eventlog._storage import TABLE_NAMES, ReadTxn, Table, TableId, WriteTxn
from eventlog.entries import NewEntry
from eventlog.errors import (
    InvalidArgumentError,
    LogClosedError,
    StorageError,
    StoreConnectionError,
    StoreLocationError,
    StoreVersionError,
)
from eventlog.log import EventLogBase
from eventlog.projection import LogReader, ProjectionRecords, ProjectionSpec, ProjectionWriter
from eventlog.retention import RetentionPolicy

if TYPE_CHECKING:
    from eventlog.local_projections import LocalProjections

__all__ = ['SCHEMA_VERSION', 'PostgresEventLog', 'redact_dsn']

T = TypeVar('T')

SCHEMA_VERSION: Final = 1
"""The layout of the PostgreSQL tables this version creates and reads (recorded in `schema_version`)."""

_SCHEMA_NAME = re.compile(r'[a-z_][a-z0-9_]{0,62}')
_RETRIES: Final = 3
"""Attempts for a transaction whose connection broke before its commit was sent."""
_CONNECT_TIMEOUT: Final = 10


class _CommitUnknown(Exception):
    pass


class PostgresEventLog(EventLogBase):
    """An `EventLog` in a PostgreSQL schema: the same contract as `LmdbEventLog`, for many
    processes on many machines.

    Args:
        dsn: A libpq connection string or URL (`postgresql://user:pass@host/db`).
        schema: The schema holding the log's tables; created with them on first use.
        create: Create the schema and tables when absent (the default); with `False`, a
            missing schema raises `StoreLocationError`.
        pool_size: Most connections this handle keeps open at once.
        projections_dir: Keep projections (the search index) in this local LMDB directory,
            following the log by position, instead of in the database's tables: searches then
            read the index from local memory and ask the database only for the log's last
            `seq` and the messages they show (`LocalProjections`, docs/postgres.md).
        retention: A `RetentionPolicy` applied as the log opens (erasing or deleting what is
            older than it allows); what it did is in `retention_report`.
    """

    persistent: ClassVar[bool] = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = 'eventlog',
        create: bool = True,
        pool_size: int = 4,
        projections_dir: str | os.PathLike[str] | None = None,
        retention: RetentionPolicy | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError('PostgresEventLog needs a connection string, e.g. postgresql://user@host/db')
        if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(
                f'{schema!r} is not a schema name this log uses (lowercase letters, digits and _, up to 63)'
            )
        if pool_size < 1:
            raise InvalidArgumentError(f'pool_size must be at least 1, got {pool_size}')
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise InvalidArgumentError(f'not a PostgreSQL connection string: {_first_line(exc)}') from None
        for port in str(params.get('port') or '').split(','):
            if port and not (port.isdigit() and 0 < int(port) < 65536):
                raise InvalidArgumentError(f'not a PostgreSQL connection string: the port {port!r} is not a number')
        self.dsn = dsn
        self.schema = schema
        self.location = f'{redact_dsn(dsn)} (schema {schema})'
        """Where the log lives, with any password left out (for messages and listings)."""
        q = f'"{schema}"'
        self._q = q
        self._relations: dict[TableId, PgRelation] = {
            table: PgRelation(f'{q}."{name.decode()}"') for table, name in TABLE_NAMES.items()
        }
        self._projection_tables = (f'{q}.projection_records', f'{q}.projection_positions')
        self._projection_relations: dict[ProjectionSpec, dict[str, PgRelation]] = {}
        self._known_projections: set[str] = set()
        self._lock_sql = f'LOCK TABLE {q}.entries IN EXCLUSIVE MODE'.encode()
        self._projection_lock_sql = f'LOCK TABLE {q}.projection_positions IN EXCLUSIVE MODE'.encode()
        self._prepare(create)
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={'autocommit': True, 'connect_timeout': _CONNECT_TIMEOUT},
            open=False,
            name=f'eventlog-{schema}',
        )
        self._pool.open(wait=False)
        self._pool_lock = threading.Lock()
        self._closed = False
        self._local: LocalProjections | None = None
        if projections_dir is not None:
            from eventlog.local_projections import LocalProjections

            try:
                self._local = LocalProjections(self, projections_dir)
            except BaseException:
                self._pool.close()
                raise
        self._retain_on_open(retention)

    # -- opening --------------------------------------------------------------------------------

    def _prepare(self, create: bool) -> None:
        """Connect once (so that a wrong DSN or password fails here, typed), check the schema
        version, and create or migrate the tables under an advisory lock."""
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT)
        except psycopg.Error as exc:
            where = redact_dsn(self.dsn)
            raise StoreConnectionError(f'cannot connect to PostgreSQL at {where}: {_first_line(exc)}') from None
        try:
            with conn.cursor() as cur:
                version = self._read_version(cur)
                if version is None:
                    if not create:
                        raise StoreLocationError(f'{self.location} holds no event log (opened with create=False)')
                    with conn.transaction():
                        cur.execute('SELECT pg_advisory_xact_lock(%s, %s)', (_LOCK_CLASS, _schema_lock_id(self.schema)))
                        if self._read_version(cur) is None:
                            self._create(cur)
                    version = SCHEMA_VERSION
                if version > SCHEMA_VERSION:
                    raise StoreVersionError(
                        f'{self.location} has schema version {version}; this version of pydantic-ai-eventlog '
                        f'reads up to {SCHEMA_VERSION} (upgrade pydantic-ai-eventlog)'
                    )
                # Most opens find the format current and need no writers' lock: opening never waits
                # for a writer in the middle of its transaction.
                if engine.check_format(PgReadTxn(cur, self._relations)) != engine.FORMAT_VERSION:
                    with conn.transaction():
                        cur.execute(self._lock_sql)
                        engine.init_format(_OneShotWrite(cur, self._relations))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreLocationError(f'{self.location} cannot be created or used: {_first_line(exc)}') from None
        except psycopg.OperationalError as exc:
            raise StoreConnectionError(f'PostgreSQL at {redact_dsn(self.dsn)} failed: {_first_line(exc)}') from None
        finally:
            conn.close()

    def _read_version(self, cur: psycopg.Cursor[Any]) -> int | None:
        cur.execute(
            'SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s',
            (self.schema, 'schema_version'),
        )
        if cur.fetchone() is None:
            return None
        cur.execute(f'SELECT version FROM {self._q}.schema_version'.encode())
        row = cur.fetchone()
        return None if row is None else int(row[0])

    def _create(self, cur: psycopg.Cursor[Any]) -> None:
        q = self._q
        statements = [
            f'CREATE SCHEMA IF NOT EXISTS {q}',
            *(
                f'CREATE TABLE IF NOT EXISTS {q}."{name.decode()}" (k bytea PRIMARY KEY, v bytea NOT NULL)'
                for name in TABLE_NAMES.values()
            ),
            f'CREATE TABLE IF NOT EXISTS {q}.projection_records (projection text NOT NULL, tbl text NOT NULL, '
            'k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (projection, tbl, k))',
            f'CREATE TABLE IF NOT EXISTS {q}.projection_positions (projection text PRIMARY KEY, position bigint)',
            f'CREATE TABLE IF NOT EXISTS {q}.schema_version '
            '(one boolean PRIMARY KEY DEFAULT TRUE CHECK (one), version integer NOT NULL)',
        ]
        for statement in statements:
            cur.execute(statement.encode())
        cur.execute(f'INSERT INTO {q}.schema_version (version) VALUES (%s)'.encode(), (SCHEMA_VERSION,))

    # -- transactions ---------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Generator[psycopg.Connection[Any]]:
        if self._closed:
            raise LogClosedError('PostgresEventLog is closed')
        try:
            with self._pool.connection(timeout=_CONNECT_TIMEOUT * 3) as conn:
                yield conn
        except PoolTimeout:
            raise StoreConnectionError(
                f'no connection to PostgreSQL at {redact_dsn(self.dsn)} became available'
            ) from None

    def _run(self, fn: Callable[[psycopg.Cursor[Any]], T], *, begin: bytes, lock: bytes | None) -> T:
        """Run `fn` in one transaction; retried when the connection broke before the commit."""
        for attempt in range(_RETRIES):
            try:
                return self._attempt(fn, begin=begin, lock=lock)
            except _CommitUnknown as exc:
                raise StorageError(
                    f'the connection to PostgreSQL broke while committing; the transaction may or may not '
                    f'have been applied ({exc}). Appends with idempotency keys can be repeated safely.'
                ) from None
            except psycopg.OperationalError as exc:
                if attempt == _RETRIES - 1 or not _retryable(exc):
                    raise StorageError(f'PostgreSQL failed: {_first_line(exc)}') from None
                if not isinstance(exc, psycopg.errors.TransactionRollback):
                    # Whatever broke this connection (a restart, an administrator) most likely broke
                    # the idle ones too: drop those, so that the next attempt runs on a new connection.
                    self._pool.check()
        raise AssertionError('unreachable')

    def _attempt(self, fn: Callable[[psycopg.Cursor[Any]], T], *, begin: bytes, lock: bytes | None) -> T:
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            try:
                # BEGIN and what follows it (the lock, first reads) in one round trip: several
                # statements without parameters go as one simple query.
                cur.execute(begin if lock is None else begin + b'; ' + lock, binary=False)
                result = fn(cur)
            except BaseException:
                if not conn.broken:
                    with suppress(psycopg.Error):
                        cur.execute('ROLLBACK')
                raise
            try:
                cur.execute('COMMIT')
            except psycopg.OperationalError as exc:
                if conn.broken:
                    raise _CommitUnknown(_first_line(exc)) from None
                raise
            return result

    def _read_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        return self._run(lambda cur: fn(PgReadTxn(cur, self._relations)), begin=_BEGIN_READ, lock=None)

    @contextmanager
    def snapshot(self, *, consistent: bool = True) -> Generator[ReadTxn]:
        """A read transaction held open for the `with` block: one consistent snapshot of the log
        (for a projection kept elsewhere that reads the log as it goes; see `LocalProjections`).

        With `consistent=False` each read is a statement of its own (no BEGIN, one round trip
        less per use): for readers of entries, which never change once written, and of the last `seq`.
        """
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            if consistent:
                cur.execute(_BEGIN_READ)
            try:
                yield PgReadTxn(cur, self._relations)
            finally:
                if consistent and not conn.broken:
                    with suppress(psycopg.Error):
                        cur.execute(b'ROLLBACK')

    def _write_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        # The records an append reads first (the last seq, its runs and conversations) are read
        # in the round trip that begins the transaction and takes the lock.
        reads = [(self._relations[table], key) for table, key in {(Table.META, META_LAST_SEQ), *_PREFETCH.get()}]

        def run(cur: psycopg.Cursor[Any]) -> T:
            pending: Pending = {}
            result = fn(PgWriteTxn(cur, self._relations, pending, take_fetched(cur, reads)))
            flush(cur, pending)
            return result

        return self._run(run, begin=_BEGIN_WRITE, lock=self._lock_sql + b'; ' + fetch_sql(reads))

    async def append(self, entry: NewEntry) -> int:
        """Append one entry in its own transaction; return its `seq`."""
        token = _PREFETCH.set(_records_read(entry))
        try:
            return await super().append(entry)
        finally:
            _PREFETCH.reset(token)

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        """Append entries in order in one transaction (all or none); return their `seq`s (see `EventLog`)."""
        batch = list(entries)
        token = _PREFETCH.set(tuple({read for entry in batch[:_PREFETCH_ENTRIES] for read in _records_read(entry)}))
        try:
            return await super().append_many(batch)
        finally:
            _PREFETCH.reset(token)

    async def _read(self, fn: Callable[[ReadTxn], T], *, bulk: bool = False) -> T:
        self._check_open()
        return await asyncio.to_thread(self._read_sync, fn)

    async def _write(self, fn: Callable[[WriteTxn], T], *, bulk: bool = False) -> T:
        self._check_open()
        return await asyncio.to_thread(self._write_sync, fn)

    # -- projections ----------------------------------------------------------------------------

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the projection's records and the log in one snapshot (see `eventlog.projection`)."""
        if self._local is not None:
            return self._local.read_projection(spec, fn)
        self._register(spec)
        relations = self._projection_relation(spec)

        def run(cur: psycopg.Cursor[Any]) -> T:
            records = PgProjectionTxn(cur, spec.name, relations, self._projection_tables, None)
            return fn(records, LogReader(PgReadTxn(cur, self._relations)))

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one transaction holding the projections' writer lock: its writes and
        position commit together, and two processes catching a projection up take turns."""
        if self._local is not None:
            return self._local.write_projection(spec, fn)
        self._register(spec)
        relations = self._projection_relation(spec)

        def run(cur: psycopg.Cursor[Any]) -> T:
            pending: Pending = {}
            records = PgProjectionTxn(cur, spec.name, relations, self._projection_tables, pending)
            result = fn(records, LogReader(PgWriteTxn(cur, self._relations, pending)))
            flush(cur, pending)
            return result

        return self._run(run, begin=_BEGIN_WRITE, lock=self._projection_lock_sql)

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store; asking creates nothing."""
        if self._local is not None:
            return self._local.has_projection(name)

        def run(cur: psycopg.Cursor[Any]) -> bool:
            cur.execute(f'SELECT 1 FROM {self._projection_tables[1]} WHERE projection = %s'.encode(), (name,))
            return cur.fetchone() is not None

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def _register(self, spec: ProjectionSpec) -> None:
        if spec.name in self._known_projections:
            return

        positions = self._projection_tables[1]

        def run(cur: psycopg.Cursor[Any]) -> None:
            # Read committed, and only when absent: a projection another process is catching up
            # (updating its position row) neither makes this wait nor fails it for a conflict.
            cur.execute(f'SELECT 1 FROM {positions} WHERE projection = %s'.encode(), (spec.name,))
            if cur.fetchone() is None:
                cur.execute(
                    f'INSERT INTO {positions} (projection) VALUES (%s) ON CONFLICT DO NOTHING'.encode(), (spec.name,)
                )

        self._run(run, begin=_BEGIN_REGISTER, lock=None)
        self._known_projections.add(spec.name)

    def _projection_relation(self, spec: ProjectionSpec) -> dict[str, PgRelation]:
        relations = self._projection_relations.get(spec)
        if relations is None:
            relations = {
                table: PgRelation(self._projection_tables[0], ('projection', 'tbl'), (spec.name, table))
                for table in spec.tables
            }
            self._projection_relations[spec] = relations
        return relations

    # -- housekeeping ---------------------------------------------------------------------------

    def disk_size(self) -> int:
        """Bytes the log's tables and their indexes take in the database."""

        def run(cur: psycopg.Cursor[Any]) -> int:
            cur.execute(
                'SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_catalog.pg_class c '
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (self.schema,),
            )
            row = cur.fetchone()
            return 0 if row is None else int(row[0])

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def _rewrite_sync(self) -> str | None:
        """`VACUUM FULL` every table of the log, so that no dead row version (the content before
        an erasure, a deleted conversation's rows) is left in the table files. Each table is
        locked exclusively while it is rewritten (readers and writers wait). Write-ahead log
        segments and old file blocks the filesystem freed are beyond its reach (docs/erasure.md)."""
        names = [f'{self._q}."{name.decode()}"' for name in TABLE_NAMES.values()]
        names.extend(self._projection_tables)
        try:
            with self._connection() as conn, conn.cursor() as cur:
                for name in names:
                    cur.execute(f'VACUUM FULL {name}'.encode())
        except psycopg.Error as exc:
            return f'VACUUM FULL failed: {_first_line(exc)}'
        return None

    def close(self) -> None:
        """Close this handle's connection pool; later calls raise `LogClosedError`."""
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            self._local.close()
        self._pool.close()

    def __repr__(self) -> str:
        return f'PostgresEventLog({self.location})'


class _OneShotWrite(PgWriteTxn):
    """A write transaction whose buffered writes are sent as they are made (used once, at open)."""

    def __init__(self, cur: psycopg.Cursor[Any], relations: dict[TableId, PgRelation]) -> None:
        super().__init__(cur, relations, {})

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        super().put(table, key, value)
        flush(self._cur, self._pending)


_PREFETCH: ContextVar[tuple[tuple[TableId, bytes], ...]] = ContextVar('eventlog_pg_prefetch', default=())
"""Records the append being made will read (set around `append`; `asyncio.to_thread` carries it)."""
_PREFETCH_ENTRIES: Final = 16
"""Entries of a batch whose records are read ahead (a long batch reads the rest as it goes)."""


def _records_read(entry: NewEntry) -> tuple[tuple[TableId, bytes], ...]:
    if not isinstance(entry, NewEntry) or not isinstance(entry.conversation_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        return ()  # the engine reports it
    conv = (Table.CONVS, conv_key(entry.conversation_id))
    if isinstance(entry.run_id, str):
        return (conv, (Table.RUNS, run_key(entry.run_id)))
    return (conv,)


_BEGIN_READ: Final = b'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
_BEGIN_WRITE: Final = b'BEGIN ISOLATION LEVEL REPEATABLE READ'
"""Writers take their table lock first: a repeatable-read snapshot starts at the first query, after
the lock, so it holds every commit made before the lock was granted."""
_BEGIN_REGISTER: Final = b'BEGIN ISOLATION LEVEL READ COMMITTED'
_LOCK_CLASS: Final = 0x6576  # 'ev': the advisory lock class of schema creation


def _schema_lock_id(schema: str) -> int:
    value = zlib.crc32(schema.encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def _retryable(exc: psycopg.OperationalError) -> bool:
    """Whether `exc` means the connection or server went away, or the server rolled the transaction
    back for a conflict with another (a serialization failure, a deadlock): nothing was committed."""
    return (
        isinstance(
            exc,
            psycopg.errors.AdminShutdown
            | psycopg.errors.CrashShutdown
            | psycopg.errors.CannotConnectNow
            | psycopg.errors.ConnectionFailure
            | psycopg.errors.TransactionRollback,
        )
        or exc.sqlstate is None
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def redact_dsn(dsn: str) -> str:
    """`dsn` as a URL without its password (for messages)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return '<unparsable connection string>'
    user = params.get('user')
    host = params.get('host') or 'localhost'
    port = params.get('port')
    dbname = params.get('dbname')
    where = f'{user}@' if user else ''
    where += str(host) + (f':{port}' if port else '')
    return f'postgresql://{where}/{dbname or ""}'
