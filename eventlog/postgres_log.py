"""`PostgresEventLog`: the event log in a PostgreSQL schema, shared by processes on many machines.

The engine is the one every backend shares (`_engine`); this module only says how to run it
inside PostgreSQL transactions (`_pg_kv` maps the storage protocol onto tables).

Order and concurrency (docs/postgres.md, "Order"):

- An append takes `ROW EXCLUSIVE` on the `entries` table (which appends share) and a
  transaction advisory lock per conversation and run its batch names, so appends to different
  conversations commit side by side and each conversation's hash chain is extended by one
  writer at a time. It claims its seqs from the schema's counter (`claim_seqs`), which hands
  out seqs and transaction ids in one order; each entry records its writer's id (`tx`).
- Followers (`entries(after_seq=...)`, `last_seq`, projections) read only the settled entries,
  those of transactions older than every one still running: always every entry up to some
  `seq`, so an entry committed late is never skipped (`_pg_kv.settled_sql`).
- A run's lease is taken, renewed and released under that run's lock (the one its fenced
  appends hold), never the store-wide one.
- Store-wide writes (fork, deletion, erasure, import, checkpoints) take the schema's
  writer lock (`LOCK TABLE ... IN EXCLUSIVE MODE` on `entries`, which readers never wait for),
  which waits for every append in flight, and move the counter themselves.
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
import select
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, cast

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from eventlog import _engine as engine
from eventlog._dsn import hide_secrets
from eventlog._keys import (
    META_LAST_SEQ,
    conv_idem_prefix,
    conv_key,
    idem_key_of,
    key_seq,
    lease_key,
    run_idem_prefix,
    run_key,
    seq_key,
)
from eventlog._pg_kv import (
    VARIANT_SETTING,
    CachedWriteTxn,
    Known,
    Pending,
    PgProjectionTxn,
    PgReadTxn,
    PgRelation,
    PgWriteTxn,
    fetch_sql,
    flush,
    guard_sql,
    settled_sql,
    variant_writes_sql,
)
from eventlog._storage import TABLE_NAMES, ReadTxn, Table, TableId, WriteTxn
from eventlog.encryption import KeyProvider
from eventlog.entries import MAX_SEQ, Entry, NewEntry, RunLease, RunRecord
from eventlog.errors import (
    CorruptStoreError,
    EventLogError,
    InvalidArgumentError,
    LogClosedError,
    ReadOnlyStoreError,
    StorageError,
    StoreConnectionError,
    StoreLocationError,
    StoreVersionError,
)
from eventlog.log import EventLogBase
from eventlog.projection import (
    CatalogueEntry,
    LogReader,
    ProjectionRecords,
    ProjectionSpec,
    ProjectionWriter,
    read_catalogue,
    record_in_catalogue,
)
from eventlog.retention import RetentionPolicy

if TYPE_CHECKING:
    from eventlog.local_projections import LocalProjections, PendingPosition

__all__ = ['SCHEMA_VERSION', 'PendingLastSeq', 'PostgresEventLog', 'redact_dsn']

T = TypeVar('T')

SCHEMA_VERSION: Final = 3
"""The layout of the PostgreSQL tables this version creates and reads (recorded in `schema_version`).

Layout 2 records each entry's writing transaction (`entries.tx`, xid8) and hands out seqs from a
counter (`seq_counter`, `claim_seqs`) instead of the META `last_seq` record, so that appends to
different conversations commit concurrently. Layout 3 (this one) adds the `store` table (the
conversation store's index, `_convstore`). Older layouts are migrated in place on open
(`_migrate_layout`); a layout-2 schema opened read-only is read as it is, its `store` table
read as empty (it can hold no `saved` entries)."""

_EMPTY_TABLE: Final = '(SELECT NULL::bytea AS k, NULL::bytea AS v WHERE FALSE) AS absent'
"""Stands for a table a schema of an older layout lacks, when it is only read."""

_SCHEMA_NAME = re.compile(r'[a-z_][a-z0-9_]{0,62}')
_RETRIES: Final = 3
"""Attempts for a transaction whose connection broke before its commit was sent."""
_CONNECT_TIMEOUT: Final = 10


class _CommitUnknown(Exception):
    pass


class _BrokenBefore(Exception):
    pass


def _check_idle(conn: psycopg.Connection[Any]) -> None:
    """Before the COMMIT goes out: a connection idle in its transaction receives nothing unless
    the server ended it (its last message and the end of the stream are waiting). Then nothing
    was committed and the transaction is retried; anything else waiting to be read is taken
    for the same (a retry of an uncommitted transaction is always safe)."""
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        conn.close()
        raise _BrokenBefore('the connection to PostgreSQL broke before the commit was sent')


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
        read_only: Open the log for reading only (`True`), for writing (`False`, the default), or
            read-only only when it cannot be written (`None`: the role lacks INSERT or UPDATE on
            the log's tables, the server is a standby, or the session is read-only). A read-only
            handle needs only USAGE on the schema and SELECT on its tables: it creates, migrates,
            registers and locks nothing, every read works (searches of an existing index
            included), and every call that would write raises `ReadOnlyStoreError`. With
            `projections_dir`, the projections there are still kept (that directory is local).
        keys: A `KeyProvider` (e.g. `FileKeyProvider`): the store's content payloads are sealed
            under a data key per conversation that the provider holds (docs/encryption.md). An empty
            store opened with keys becomes encrypted for good; an encrypted store opened for
            writing needs them (`EncryptionSetupError`); read-only, it reads records and verifies
            without them.
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
        read_only: bool | None = False,
        keys: KeyProvider | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError('PostgresEventLog needs a connection string, e.g. postgresql://user@host/db')
        if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError(
                f'{schema!r} is not a schema name this log uses (lowercase letters, digits and _, up to 63)'
            )
        if schema.startswith('pg_') or schema == 'information_schema':
            raise InvalidArgumentError(
                f'{schema!r} is reserved by PostgreSQL (names starting with pg_, and information_schema)'
            )
        if pool_size < 1:
            raise InvalidArgumentError(f'pool_size must be at least 1, got {pool_size}')
        if read_only not in (True, False, None):
            raise InvalidArgumentError(f'read_only must be True, False or None, got {read_only!r}')
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise InvalidArgumentError(f'not a PostgreSQL connection string: {_said(exc, dsn)}') from None
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
        self._catalogued: set[ProjectionSpec] = set()
        self._lock_sql = f'LOCK TABLE {q}.entries IN EXCLUSIVE MODE'.encode()
        self._append_lock_sql = f'LOCK TABLE {q}.entries IN ROW EXCLUSIVE MODE'.encode()
        self._lock_class = _schema_lock_id(schema)
        self._projection_lock_sql = f'LOCK TABLE {q}.projection_positions IN EXCLUSIVE MODE'.encode()
        self.read_only_reason = 'opened read-only as asked' if read_only else None
        self._variants = True
        """Whether one-trip appends may send speculative variants (`claim_seqs_in` exists)."""
        self._prepare(create and not read_only, detect=read_only is None)
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
        self._pool_size = pool_size
        self._run_starts: dict[str, int] = {}
        self._seq_conns: list[pq.abc.PGconn] = []
        self._seq_lock = threading.Lock()
        self._last_seq_sql = settled_sql(self._relations[Table.ENTRIES].table)[0]
        # One round trip per append (see `_try_one_trip`): the records the last write transaction
        # read and wrote, as they were when it committed.
        self._cache_lock = threading.Lock()
        self._known: Known = {}
        self._generation = 0
        self._one_trip = True
        """Internal switch: `False` makes every append take the two-round-trip path (bench, tests)."""
        self._optimistic = True
        self._streak = 0
        self._needed = 1
        self._presumed_absent = frozenset((self._relations[Table.RUNS], self._relations[Table.IDEM]))
        self._unread = frozenset(
            self._relations[table] for table in (Table.BY_CONV, Table.BY_RUN, Table.RUN_ORDER, Table.CONV_RUNS)
        )
        """Tables an append writes but never reads: not cached."""
        self._trips = {
            'one': 0,
            'guard failed': 0,
            'miss': 0,
            'two': 0,
            'window missed': 0,
            'variants': 0,
            'speculative': 0,
            'too wide': 0,
        }
        """How appends went: in one round trip, a guard that failed, a cache miss, the two-trip path,
        a counter outside the window of speculative variants, the variants sent in all, and the
        one-trip appends that found the counter moved past the last `seq` this handle saw (which
        only a variant for another candidate could commit), and the appends not tried in one
        round trip because the window was wider than `_max_variants`."""
        self._max_variants = _MAX_VARIANTS
        """Internal: the widest window of speculative variants tried (bench, tests)."""
        self._variant_ms = _VARIANT_MS
        """Internal: `_VARIANT_MS` (tests on a loopback server, whose round trips are short, lower it)."""
        self._trip_times: deque[float] = deque(maxlen=_DISTANCES)
        """How long this handle's recent one-trip appends took (ms). The shortest is about what a
        round trip saved is worth (longer ones waited for CPU, which variants only make scarcer);
        a window wider than it over `_variant_ms` is not tried."""
        self._tries: deque[bool] = deque(maxlen=_TRIES)
        """Whether each recent one-trip try with a claim found the counter in its window."""
        self._distances: deque[int] = deque(maxlen=_DISTANCES)
        """How far the counter had moved past this handle's last seq at its latest appends' claims."""
        self._local: LocalProjections | None = None
        if projections_dir is not None:
            from eventlog.local_projections import LocalProjections

            try:
                self._local = LocalProjections(self, projections_dir)
            except BaseException:
                self._pool.close()
                raise
        try:
            self._setup_encryption(keys)
        except BaseException:
            self.close()
            raise
        self._retain_on_open(retention)

    # -- opening --------------------------------------------------------------------------------

    def _store_name(self) -> str:
        return self.location

    def _prepare(self, create: bool, *, detect: bool = False) -> None:
        """Connect once (so that a wrong DSN or password fails here, typed), check the schema
        version, and create or migrate the tables under an advisory lock; with `detect`, open the
        log read-only when it cannot be written (`_write_blocker`). Read-only, nothing is created
        or migrated."""
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT)
        except (psycopg.Error, UnicodeError) as exc:  # UnicodeError: a host name the resolver cannot encode
            where = redact_dsn(self.dsn)
            raise StoreConnectionError(f'cannot connect to PostgreSQL at {where}: {_said(exc, self.dsn)}') from None
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
                if detect and self.read_only_reason is None:
                    self.read_only_reason = self._write_blocker(cur)
                if version == 2 and self.read_only_reason is not None:
                    self._relations[Table.STORE] = PgRelation(_EMPTY_TABLE)
                elif version < SCHEMA_VERSION:
                    if self.read_only_reason is not None:
                        raise ReadOnlyStoreError(
                            f'{self.location} has schema version {version}, which opening it for writing once '
                            f'brings to {SCHEMA_VERSION}; opened read-only, nothing may be written'
                        )
                    with conn.transaction():
                        cur.execute('SELECT pg_advisory_xact_lock(%s, %s)', (_LOCK_CLASS, _schema_lock_id(self.schema)))
                        found_version = self._read_version(cur) or 0
                        if found_version < SCHEMA_VERSION:
                            self._migrate_layout(cur, found_version)
                if self.read_only_reason is None:
                    self._install_window(conn)
                # Most opens find the format current and need no writers' lock: opening never waits
                # for a writer in the middle of its transaction.
                found = engine.check_format(PgReadTxn(cur, self._relations))
                if not engine.readable_as_is(found) and self.read_only_reason is not None:
                    raise ReadOnlyStoreError(
                        f'{self.location} is in format {found or "(none recorded)"}, which opening it for writing '
                        f'once brings to format {engine.FORMAT_VERSION}; opened read-only, nothing may be written'
                    )
                if found != engine.FORMAT_VERSION and self.read_only_reason is None:
                    with conn.transaction():
                        cur.execute(self._lock_sql)
                        cur.execute(f'SELECT last_value FROM {self._q}.seq_counter'.encode())
                        row = cur.fetchone()
                        assert row is not None
                        txn = _OneShotWrite(cur, self._relations, int(row[0]))
                        engine.init_format(txn)
                        if txn.seq_end != txn.seq_base:
                            cur.execute(b'SELECT setval(%s, %s)', (f'{self._q}.seq_counter', txn.seq_end))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreLocationError(f'{self.location} cannot be created or used: {_said(exc, self.dsn)}') from None
        except psycopg.OperationalError as exc:
            raise StoreConnectionError(f'PostgreSQL at {redact_dsn(self.dsn)} failed: {_said(exc, self.dsn)}') from None
        finally:
            conn.close()

    def _write_blocker(self, cur: psycopg.Cursor[Any]) -> str | None:
        """Why this session cannot write the log (a standby, a read-only session, a role without
        INSERT or UPDATE on its tables), or `None`: one query of the server's own answers."""
        tables = [self._relations[Table.ENTRIES].table, self._relations[Table.META].table, *self._projection_tables]
        checks = ', '.join(
            f"has_table_privilege(%s, '{privilege}')" for _ in tables for privilege in ('INSERT', 'UPDATE')
        )
        cur.execute(
            f"SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on', current_user, {checks}",
            [table for table in tables for _ in ('INSERT', 'UPDATE')],
        )
        row = cur.fetchone()
        assert row is not None
        if row[0]:
            return 'the server is a standby in recovery'
        if row[1]:
            return 'the session is read-only (default_transaction_read_only)'
        allowed = iter(row[3:])
        for table in tables:
            for privilege in ('INSERT', 'UPDATE'):
                if not next(allowed):
                    return f'the role {row[2]} has no {privilege} privilege on {table}'
        return None

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
                f'CREATE TABLE IF NOT EXISTS {q}."{name.decode()}" (k bytea PRIMARY KEY, v bytea NOT NULL'
                + (', tx xid8 NOT NULL DEFAULT pg_current_xact_id())' if name == b'entries' else ')')
                for name in TABLE_NAMES.values()
            ),
            *self._counter_sql(0),
            f'CREATE TABLE IF NOT EXISTS {q}.projection_records (projection text NOT NULL, tbl text NOT NULL, '
            'k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (projection, tbl, k))',
            f'CREATE TABLE IF NOT EXISTS {q}.projection_positions (projection text PRIMARY KEY, position bigint)',
            f'CREATE TABLE IF NOT EXISTS {q}.schema_version '
            '(one boolean PRIMARY KEY DEFAULT TRUE CHECK (one), version integer NOT NULL)',
        ]
        for statement in statements:
            cur.execute(statement.encode())
        cur.execute(f'INSERT INTO {q}.schema_version (version) VALUES (%s)'.encode(), (SCHEMA_VERSION,))

    def _counter_sql(self, start: int) -> list[str]:
        """The statements making the seq counter (at `start`), the functions that move it, and the
        META `last_seq` record that stops a writer of layout 1 (docs/postgres.md, "Concurrent appends").

        `claim_seqs(expected, n)` hands out the `n` seqs after the counter (returning the counter
        as it was) and gives the calling transaction its id in the same step, under a session
        advisory lock held for that step alone: transaction ids and seqs are then handed out in
        one order, which is what makes a follower's position safe (`_pg_kv.settled_sql`). With
        `expected` not null it claims only if the counter is `expected` (an append made in one
        round trip), else fails as a guard does (division_by_zero). `release_seqs(claimed, used)`
        gives back the seqs after `used` while nobody claimed after `claimed`.
        """
        q = self._q
        key = _counter_lock_key(self.schema)
        counter = f"'{q}.seq_counter'"
        return [
            f'CREATE SEQUENCE IF NOT EXISTS {q}.seq_counter AS bigint MINVALUE 0 START WITH {start}',
            f"""CREATE OR REPLACE FUNCTION {q}.claim_seqs(expected bigint, n bigint) RETURNS bigint
            LANGUAGE plpgsql AS $$
            DECLARE
                before bigint;
            BEGIN
                IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
                    RAISE EXCEPTION 'eventlog: seqs are claimed before the transaction writes';
                END IF;
                PERFORM pg_advisory_lock({key});
                BEGIN
                    SELECT last_value INTO before FROM {q}.seq_counter;
                    IF expected IS NULL OR before = expected THEN
                        PERFORM pg_current_xact_id();
                        PERFORM setval({counter}, before + n);
                    END IF;
                EXCEPTION WHEN OTHERS THEN
                    PERFORM pg_advisory_unlock({key});
                    RAISE;
                END;
                PERFORM pg_advisory_unlock({key});
                IF expected IS NOT NULL AND before <> expected THEN
                    RAISE EXCEPTION 'eventlog: another append took the seq' USING ERRCODE = 'division_by_zero';
                END IF;
                RETURN before;
            END $$""",
            *self._window_sql(),
            f"""CREATE OR REPLACE FUNCTION {q}.release_seqs(claimed bigint, used bigint) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_lock({key});
                IF (SELECT last_value FROM {q}.seq_counter) = claimed THEN
                    PERFORM setval({counter}, used);
                END IF;
                PERFORM pg_advisory_unlock({key});
            END $$""",
            # An append never rewrites an entry: one that would (a seq claimed twice) fails instead of
            # overwriting what was committed. Store-wide writes (an erasure) say they may.
            f"""CREATE OR REPLACE FUNCTION {q}.entries_kept() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF current_setting('eventlog.rewrite', true) IS DISTINCT FROM 'on' THEN
                    RAISE EXCEPTION 'eventlog: an append found entry % written already', OLD.k
                        USING ERRCODE = 'unique_violation';
                END IF;
                RETURN NEW;
            END $$""",
            f'CREATE OR REPLACE TRIGGER entries_kept BEFORE UPDATE ON {q}.entries '
            f'FOR EACH ROW EXECUTE FUNCTION {q}.entries_kept()',
            f"INSERT INTO {q}.meta (k, v) VALUES (decode('{META_LAST_SEQ.hex()}', 'hex'), "
            f"decode('{seq_key(_LAYOUT_1_STOP).hex()}', 'hex')) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        ]

    def _window_sql(self) -> list[str]:
        """The function claiming seqs for a speculative one-trip append (`_try_one_trip`).

        `claim_seqs_in(low, n, width)` claims the `n` seqs after the counter, as `claim_seqs`
        does (the transaction's id given in the same step, under the counter's lock), but only if
        the counter lies in `low` .. `low + width - 1`; it returns the counter's offset in that
        window (the variant whose writes apply) and records it in the transaction-local setting
        `eventlog.variant` (`_pg_kv.variant_writes_sql`). Outside the window it claims nothing and
        fails with SQLSTATE `EV001`, which the append takes as "try the two-trip path".
        """
        q = self._q
        key = _counter_lock_key(self.schema)
        counter = f"'{q}.seq_counter'"
        return [
            f"""CREATE OR REPLACE FUNCTION {q}.claim_seqs_in(low bigint, n bigint, width integer) RETURNS integer
            LANGUAGE plpgsql AS $$
            DECLARE
                before bigint;
                inside boolean;
            BEGIN
                IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
                    RAISE EXCEPTION 'eventlog: seqs are claimed before the transaction writes';
                END IF;
                PERFORM pg_advisory_lock({key});
                BEGIN
                    SELECT last_value INTO before FROM {q}.seq_counter;
                    inside := before >= low AND before < low + width;
                    IF inside THEN
                        PERFORM pg_current_xact_id();
                        PERFORM setval({counter}, before + n);
                    END IF;
                EXCEPTION WHEN OTHERS THEN
                    PERFORM pg_advisory_unlock({key});
                    RAISE;
                END;
                PERFORM pg_advisory_unlock({key});
                IF NOT inside THEN
                    RAISE EXCEPTION 'eventlog: the counter is outside the window of this append'
                        USING ERRCODE = '{_OUTSIDE_WINDOW}', DETAIL = before::text;
                END IF;
                PERFORM set_config('{VARIANT_SETTING}', (before - low)::text, true);
                RETURN before - low;
            END $$""",
        ]

    def _install_window(self, conn: psycopg.Connection[Any]) -> None:
        """Create `claim_seqs_in` in a schema of layout 2 made before it existed (once, under the
        schema's lock); a role that may not create functions appends with `claim_seqs` alone."""
        with conn.cursor() as cur:
            cur.execute(b'SELECT to_regprocedure(%s) IS NOT NULL', (f'{self._q}.claim_seqs_in(bigint,bigint,integer)',))
            row = cur.fetchone()
            if row is not None and row[0]:
                return
            try:
                with conn.transaction():
                    cur.execute('SELECT pg_advisory_xact_lock(%s, %s)', (_LOCK_CLASS, _schema_lock_id(self.schema)))
                    for statement in self._window_sql():
                        cur.execute(statement.encode())
            except psycopg.errors.InsufficientPrivilege:
                self._variants = False

    def _migrate_layout(self, cur: psycopg.Cursor[Any], version: int) -> None:
        """Bring a schema of layout `version` to this one in place, in the caller's transaction."""
        if version < 2:
            self._migrate_layout_1(cur)
        q = self._q
        cur.execute(f'CREATE TABLE IF NOT EXISTS {q}."store" (k bytea PRIMARY KEY, v bytea NOT NULL)'.encode())
        cur.execute(f'UPDATE {q}.schema_version SET version = %s'.encode(), (SCHEMA_VERSION,))

    def _migrate_layout_1(self, cur: psycopg.Cursor[Any]) -> None:
        """Bring a schema of layout 1 (one writer at a time, the last seq in META) to layout 2:
        entries written before are settled for every follower (their `tx` is older than any
        transaction), and the counter goes on from the last seq."""
        q = self._q
        cur.execute(f'LOCK TABLE {q}.entries IN ACCESS EXCLUSIVE MODE'.encode())
        cur.execute(f'SELECT v FROM {q}.meta WHERE k = %s'.encode(), (META_LAST_SEQ,))
        row = cur.fetchone()
        last = 0 if row is None else key_seq(bytes(row[0]))
        cur.execute(f'SELECT k FROM {q}.entries ORDER BY k DESC LIMIT 1'.encode())
        row = cur.fetchone()
        last = max(last, 0 if row is None else key_seq(bytes(row[0])))
        # A constant default adds the column without rewriting the table; new rows take their writer's id.
        cur.execute(f"ALTER TABLE {q}.entries ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL DEFAULT '1'".encode())
        cur.execute(f'ALTER TABLE {q}.entries ALTER COLUMN tx SET DEFAULT pg_current_xact_id()'.encode())
        for statement in self._counter_sql(last):
            cur.execute(statement.encode())
        cur.execute(b'SELECT setval(%s, %s)', (f'{q}.seq_counter', last))

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

    def _run(
        self,
        fn: Callable[[psycopg.Cursor[Any]], T],
        *,
        begin: bytes | None,
        lock: bytes | None,
        last_writes: Callable[[], Pending] | None = None,
        last_sql: Callable[[], bytes | None] | None = None,
        lost: Callable[[bool], None] | None = None,
    ) -> T:
        """Run `fn` in one transaction; retried when the connection broke before the commit.

        `lost(known)` is called when a try did not commit (`known`: it was never sent; not
        `known`: the connection broke while the COMMIT was in flight)."""
        for attempt in range(_RETRIES):
            try:
                return self._attempt(fn, begin=begin, lock=lock, last_writes=last_writes, last_sql=last_sql)
            except _CommitUnknown as exc:
                if lost is not None:
                    lost(False)
                raise _unknown_outcome(str(exc)) from None
            except psycopg.IntegrityError as exc:
                raise CorruptStoreError(
                    f'{_first_line(exc)}: the seq counter of {self.location} is behind its entries; '
                    'nothing was written (run verify)'
                ) from None
            except psycopg.OperationalError as exc:
                if lost is not None and _retryable(exc):
                    lost(True)
                if attempt == _RETRIES - 1 or not _retryable(exc):
                    raise StorageError(f'PostgreSQL failed: {_first_line(exc)}') from None
                if not isinstance(exc, psycopg.errors.TransactionRollback):
                    # Whatever broke this connection (a restart, an administrator) most likely broke
                    # the idle ones too: drop those, so that the next attempt runs on a new connection.
                    self._pool.check()
        raise AssertionError('unreachable')

    def _attempt(
        self,
        fn: Callable[[psycopg.Cursor[Any]], T],
        *,
        begin: bytes | None,
        lock: bytes | None,
        last_writes: Callable[[], Pending] | None = None,
        last_sql: Callable[[], bytes | None] | None = None,
    ) -> T:
        """One try of `_run`. The writes `fn` left buffered in `last_writes()`, and the statement
        `last_sql()` (moving the seq counter), are sent with the COMMIT in one round trip (a
        pipeline); a connection found broken before they are sent fails the try as retryable,
        one that breaks after is `_CommitUnknown`."""
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            if begin is None:  # one statement on its own: its own snapshot, no BEGIN or COMMIT
                return fn(cur)
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
            writes = last_writes() if last_writes is not None else None
            extra = last_sql() if last_sql is not None else None
            try:
                if writes or extra:
                    _check_idle(conn)
                    with conn.pipeline():
                        if writes:
                            flush(cur, writes)
                        if extra:
                            cur.execute(extra, prepare=False)
                        cur.execute('COMMIT')
                else:
                    cur.execute('COMMIT')
            except _BrokenBefore as exc:
                raise psycopg.OperationalError(str(exc)) from None
            except psycopg.OperationalError as exc:
                if conn.broken:
                    raise _CommitUnknown(_first_line(exc)) from None
                with suppress(psycopg.Error):
                    cur.execute('ROLLBACK')
                raise
            except BaseException:
                if not conn.broken:
                    with suppress(psycopg.Error):
                        cur.execute('ROLLBACK')
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

    def start_last_seq(self) -> PendingLastSeq:
        """Send the query for the log's last `seq` and return at once; `result()` on what this
        returns waits for the answer.

        The query runs on a connection kept for it alone (a prepared statement, no transaction),
        so a caller can do other work while it travels: a search through a local index searches
        its records meanwhile (`LocalProjections.start_log_position`). The answer is the last
        settled `seq` (docs/postgres.md, "Order"): it counts every append committed before this
        call once the appends that were in flight before it have ended.
        """
        self._check_open()
        with self._seq_lock:
            conn = self._seq_conns.pop() if self._seq_conns else None
        try:
            if conn is None:
                conn = self._connect_seq()
            conn.send_query_prepared(_LAST_SEQ_STATEMENT, [], result_format=1)
        except psycopg.Error:
            if conn is not None:
                conn.finish()
            return PendingLastSeq(self, None, self._read_sync(_last_seq))
        return PendingLastSeq(self, conn, None)

    def _connect_seq(self) -> pq.abc.PGconn:
        conn = pq.PGconn.connect(make_conninfo(self.dsn, connect_timeout=_CONNECT_TIMEOUT).encode())
        if conn.status != pq.ConnStatus.OK:
            conn.finish()
            raise psycopg.OperationalError('cannot connect')
        result = conn.prepare(_LAST_SEQ_STATEMENT, self._last_seq_sql)
        if result.status != pq.ExecStatus.COMMAND_OK:
            conn.finish()
            raise psycopg.OperationalError('cannot prepare the last seq query')
        return conn

    def _finish_last_seq(self, conn: pq.abc.PGconn) -> int:
        """The answer to the query `start_last_seq` sent on `conn`; the connection goes back to
        the idle ones. A connection that broke is dropped and the value read through the pool
        (which raises the typed errors)."""
        value: bytes | None = None
        ok = False
        try:
            result = conn.get_result()
            if result is not None and result.status == pq.ExecStatus.TUPLES_OK:
                ok = True
                value = result.get_value(0, 0) if result.ntuples else None
            while conn.get_result() is not None:
                pass
        except psycopg.Error:
            ok = False
        if not ok or conn.status != pq.ConnStatus.OK:
            conn.finish()
            return self._read_sync(_last_seq)
        with self._seq_lock:
            keep = not self._closed and len(self._seq_conns) < self._pool_size
            if keep:
                self._seq_conns.append(conn)
        if not keep:
            conn.finish()
        return 0 if value is None else key_seq(value)

    def start_log_position(self) -> PendingPosition | None:
        """With `projections_dir`, start reading the log's last `seq` for a projection kept
        locally (see `LocalProjections.start_log_position`); `None` when projections live in the
        database (they read the log's position in their own transaction)."""
        if self._local is None or self._memory_projections is not None:  # encrypted: projections in memory
            return None
        return self._local.start_log_position()

    def _write_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        self._refuse_write()
        plan = _APPENDING.get()
        scoped = _RUN_SCOPED.get()
        if plan is None and scoped is not None:
            # A run's lease: the run's lock, not the store-wide one (a fenced append of the run
            # checks the lease holding the same lock). The cache may hold the lease: dropped.
            self._forget()
            try:
                return self._write_two_trips(fn, track=False, plan=scoped)[0]
            finally:
                self._forget()
        if not self._one_trip:  # switched off: every write as before, no cache kept
            self._forget()
            return self._write_two_trips(fn, track=False, plan=plan)[0]
        if plan is None:
            # Any other write (erasure, deletion, import, retention...) may change what an append
            # reads: the cache is dropped before and after it.
            self._forget()
            try:
                return self._write_two_trips(fn, track=False, plan=None)[0]
            finally:
                self._forget()
        missed: list[int | None] = [None]
        done = self._try_one_trip(fn, plan, missed)
        late = missed[0] is not None
        if done is None and missed[0] is not None and missed[0] > 0:  # (never back: a fault)
            # The counter was outside the window, and the claim said where: one more try, its
            # window that far on (the counter moves as far again while this try travels).
            shift, missed[0] = missed[0], None
            done = self._try_one_trip(fn, plan, missed, shift=shift)
        if done is not None:
            return done[0]
        with self._cache_lock:
            known, generation = self._known, self._generation
        result, txn = self._write_two_trips(fn, track=True, plan=plan)
        if txn is not None:
            self._learn(txn, known, generation, timed=not late)
        return result

    def _locks_sql(self, plan: _Plan) -> bytes:
        """The statement taking an append's locks: the entries table in ROW EXCLUSIVE mode (which
        every append holds at once, and which the store-wide writes' EXCLUSIVE mode waits for),
        then the transaction advisory lock of each conversation and run the batch names, in one
        order (so two batches never wait for each other in a cycle)."""
        locks = ', '.join(f'pg_advisory_xact_lock({self._lock_class}, {key})' for key in plan.keys)
        return self._append_lock_sql + (f'; SELECT {locks}'.encode() if locks else b'')

    def _write_two_trips(
        self, fn: Callable[[WriteTxn], T], *, track: bool, plan: _Plan | None
    ) -> tuple[T, PgWriteTxn | None]:
        """`fn` in a write transaction of two round trips: BEGIN with its locks and the records it
        reads first, then its writes with the COMMIT. Returns its result and (with `track`) its
        transaction, which recorded what it read and wrote.

        An append (`plan`) takes its conversations' locks and claims as many seqs as its batch
        has entries in the first round trip (`claim_seqs`); those it did not use are given back
        with the COMMIT (or when it fails) while nobody has claimed after them. Any other write
        takes the store-wide lock (EXCLUSIVE on `entries`), under which no append is in flight,
        and moves the counter itself.
        """
        reads = [(self._relations[table], key) for table, key in set(_PREFETCH.get())]
        q = self._q
        if plan is not None:
            claimed = (
                f'{q}.claim_seqs(NULL, {plan.count})' if plan.count else f'(SELECT last_value FROM {q}.seq_counter)'
            )
            head = f'SELECT -1, int8send({claimed})'
            begin, lock = _BEGIN_APPEND, self._locks_sql(plan)
        else:
            head = f'SELECT -1, int8send(last_value) FROM {q}.seq_counter'
            begin, lock = _BEGIN_WRITE, self._lock_sql + _MAY_REWRITE
        fetch = head.encode() + (b' UNION ALL ' + fetch_sql(reads) if reads else b'')

        last: list[Pending] = [{}]
        used: list[PgWriteTxn | None] = [None]
        claim: list[tuple[int, int]] = [(0, 0)]

        backend = [0]

        def run(cur: psycopg.Cursor[Any]) -> T:
            backend[0] = cur.connection.info.backend_pid
            while cur.nextset():
                pass
            fetched: Pending = dict.fromkeys(reads, None)
            base = 0
            for number, value in cur.fetchall():
                if number < 0:
                    base = key_seq(bytes(value))
                else:
                    fetched[reads[number]] = value
            claim[0] = (base, base + (plan.count if plan is not None else 0))
            pending: Pending = {}
            last[0] = pending  # the last writes go with the COMMIT (see `_attempt`)
            txn = PgWriteTxn(cur, self._relations, pending, fetched, track=track, seq_base=base)
            used[0] = txn
            try:
                return fn(txn)
            except BaseException:
                if plan is not None and plan.count and not cur.connection.broken:
                    with suppress(psycopg.Error):
                        cur.execute(self._release_sql(claim[0][1], base))  # nothing of it commits
                        claim[0] = (base, base)
                raise

        def counter() -> bytes | None:
            txn = used[0]
            if txn is None or txn.seq_end is None:
                return None
            base, end = claim[0]
            if plan is not None:
                return self._release_sql(end, txn.seq_end) if txn.seq_end < end else None
            if txn.seq_end != base:
                return f"SELECT setval('{q}.seq_counter', {txn.seq_end})".encode()
            return None

        def lost(known: bool) -> None:
            # A try that did not commit gives its claim back (while nobody claimed after it), so
            # that the next try takes the same seqs, but only once its server process is gone and
            # its first entry is not in the log, whatever the error said (`known`): a server
            # shutting down can report an error after it applied the COMMIT, and seqs given back
            # from a committed append would be claimed again.
            del known
            base, end = claim[0]
            if plan is None or end == base:
                return
            claim[0] = (base, base)
            entries = self._relations[Table.ENTRIES].table
            check = (
                f'WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = {backend[0]}) '
                f'AND NOT EXISTS (SELECT 1 FROM {entries} WHERE k = int8send({base + 1}))'
            )
            sql = f'SELECT {self._q}.release_seqs({end}, {base}) {check}'.encode()
            with suppress(EventLogError):
                self._run(lambda cur: cur.execute(sql), begin=None, lock=None)

        result = self._run(
            run, begin=begin, lock=lock + b'; ' + fetch, last_writes=lambda: last[0], last_sql=counter, lost=lost
        )
        return result, used[0] if track else None

    def _release_sql(self, claimed: int, used: int) -> bytes:
        """Give back the seqs after `used` of a claim that ended at `claimed` (`release_seqs`)."""
        return f'SELECT {self._q}.release_seqs({claimed}, {used})'.encode()

    # -- one round trip per append --------------------------------------------------------------

    def _try_one_trip(
        self, fn: Callable[[WriteTxn], T], plan: _Plan, missed: list[int | None], *, shift: int = 0
    ) -> tuple[T] | None:
        """Append in one round trip when this handle's cache holds every record `fn` reads.

        `fn` runs against the cache (`CachedWriteTxn`), which never reaches the server. Then one
        pipeline sends BEGIN, the append's locks (`_locks_sql`), a guard that fails unless every
        record `fn` read still has the value it was given (read committed, after the locks: it
        sees every commit made before they were granted), the claim of the seqs `fn` used, the
        writes and the COMMIT.

        The seqs `fn` gives its entries (and so the entries' bytes, whose chain hash covers their
        `seq`) follow the log's last `seq` as `fn` is told it. While other handles append to
        other conversations, the counter moves between this handle's appends but nothing else it
        reads does; so `fn` is run once per candidate last `seq` of a window predicted from how
        far the counter moved at this handle's recent appends (`_window`: one candidate, the last
        `seq` this handle saw, when it appends alone), and the claim (`claim_seqs_in`) takes the
        seqs only if the counter is in that window, naming the variant whose writes then apply
        (`variant_writes_sql`); outside it, nothing is claimed or written. Returns `(result,)`, or
        `None` when nothing was committed and the append is to take the two-round-trip path: the
        cache could not answer, `fn` raised (the two-trip path decides on the server's records),
        the guard failed, the counter was outside the window, or the connection was found broken
        before anything was sent (when the counter was outside the window, `missed[0]` is set to
        how far it was past the last `seq` this handle saw, and a second try may shift its window
        by that much: `shift`; the two-trip append that follows a miss claims a round trip late). A
        connection that breaks once the pipeline is sent leaves the outcome unknown unless
        `_outcome` can tell it: `StorageError`, as for a COMMIT in flight.
        """
        with self._cache_lock:
            if not (self._one_trip and self._optimistic and self._known):
                return None
            known, generation = self._known, self._generation
            low, width = self._window()
        if shift:
            # From where the claim said the counter was (nobody may have claimed since) on.
            low, width = shift, low + width
        trip_ms = min(self._trip_times) if self._trip_times else _MAX_VARIANTS * self._variant_ms
        if width > min(self._max_variants, max(1, int(trip_ms / self._variant_ms))):
            # The variants would cost more CPU than the round trip they save is worth: so many
            # appends land between two of this handle's (the store is busy, its CPU rather than
            # the network bounds it), or its round trips are short (the shortest recent one-trip
            # append: the network's part of it). The two-trip path, which still learns the distances.
            self._trips['too wide'] += 1
            return None
        meta = self._relations[Table.META]
        slot = (meta, META_LAST_SEQ)
        seen = known.get(slot)
        last = None if seen is None or not self._variants else key_seq(seen)
        if last is None:
            low, width = 0, 1
        variants: list[_Variant[T]] = []
        for offset in range(low, low + width):
            txn = CachedWriteTxn(
                self._relations,
                known,
                self._presumed_absent,
                last_seq=None if last is None else seq_key(last + offset),
            )
            try:
                result = fn(txn)
            except Exception:
                if not variants:
                    self._trips['miss'] += 1
                    return None
                break
            expected = txn.reads.pop(slot, None)
            new_last = txn.pending.pop(slot, None)
            if new_last is not None and expected is None:
                if not variants:
                    self._trips['miss'] += 1
                    return None
                break
            variant = _Variant(result, txn.reads, txn.pending, expected, new_last)
            if variants:
                first = variants[0]
                if variant.count != first.count or variant.reads != first.reads:
                    break  # a variant reading something else: the window ends before it
            elif not variant.count:
                variants.append(variant)  # no seq used (an idempotent repeat): nothing to claim
                break
            variants.append(variant)
        first = variants[0]
        speculative = len(variants) > 1
        claim = b''
        if first.count and first.expected is not None:
            base = key_seq(first.expected)
            if speculative or self._variants:
                claim = f'SELECT {self._q}.claim_seqs_in({base}, {first.count}, {len(variants)})'.encode()
            else:
                claim = f'SELECT {self._q}.claim_seqs({base}, {first.count})'.encode()
        sql, params = guard_sql(first.reads)
        if speculative:
            writes, write_params = variant_writes_sql([v.pending for v in variants], tag=_ONE_TRIP_TAG)
            self._trips['variants'] += len(variants)
        else:
            writes, write_params = b'', []
            self._trips['variants'] += 1
        written = [dict(v.pending) for v in variants]
        locks = self._locks_sql(plan)
        with self._connection() as conn, conn.cursor(binary=True) as cur, conn.cursor() as claimed:
            try:
                _check_idle(conn)
            except _BrokenBefore:
                return None
            backend = conn.info.backend_pid
            try:
                # The guard and the writes are prepared statements from their first use, under a
                # text of their own: psycopg then checks each preparation's result, so one that a
                # failed guard skipped is not taken for done. (A statement it prepares after
                # counting uses is taken for prepared when sent, even if the server skipped it.)

                def send() -> None:
                    cur.execute(_BEGIN_APPEND, prepare=False)
                    for statement in locks.split(b'; '):
                        cur.execute(statement, prepare=False)
                    if first.reads:
                        cur.execute(sql, params, prepare=True)
                    if claim:
                        claimed.execute(claim, prepare=False)
                    if speculative:
                        cur.execute(writes, write_params, prepare=True)
                    else:
                        flush(cur, first.pending, prepare=True, tag=_ONE_TRIP_TAG)
                    cur.execute(b'COMMIT', prepare=False)

                began = time.perf_counter()
                _in_pipeline(conn, send)
                took = (time.perf_counter() - began) * 1000
                chosen = 0
                if speculative:
                    row = claimed.fetchone()
                    chosen = int(row[0]) if row is not None else -1
                    if not 0 <= chosen < len(variants):  # cannot be: the claim names a variant it was given
                        raise CorruptStoreError(f'{self.location}: a claim named variant {chosen} of {len(variants)}')
            except psycopg.Error as exc:
                if conn.broken:
                    exact = not speculative and low == 0  # the only candidate: the last seq seen
                    committed = self._outcome(
                        backend,
                        written,
                        first.expected,
                        first.new_last if claim and exact else None,
                        exact=exact,
                    )
                    if committed is None:
                        raise _unknown_outcome(_first_line(exc)) from None
                    self._forget()
                    if committed < 0:
                        return None  # it can no longer commit: the two-trip path does it again
                    self._trips['one'] += 1
                    self._trips['speculative'] += bool(claim) and low + committed > 0
                    return (variants[committed].result,)
                with suppress(psycopg.Error):
                    cur.execute(b'ROLLBACK')
                if exc.sqlstate == _OUTSIDE_WINDOW:
                    counter = exc.diag.message_detail or ''
                    if counter.isdigit() and last is not None:
                        missed[0] = int(counter) - last
                        self._window_missed(int(counter) - last - shift)
                    else:
                        self._window_missed(None)
                elif isinstance(exc, psycopg.errors.DivisionByZero):
                    self._guard_failed()
                return None
            except BaseException:
                if not conn.broken:
                    with suppress(psycopg.Error):
                        cur.execute(b'ROLLBACK')
                raise
        self._trips['one'] += 1
        self._trips['speculative'] += bool(claim) and low + chosen > 0
        with self._cache_lock:
            self._trip_times.append(took)
        variant = variants[chosen]
        reads = dict(variant.reads)
        done = written[chosen]  # (`flush` emptied the variant's own buffer)
        if variant.expected is not None:
            reads[slot] = variant.expected
            if last is not None and claim:
                with self._cache_lock:
                    self._distances.append(low + chosen - shift)
                    self._tries.append(True)
        if variant.new_last is not None:
            done[slot] = variant.new_last
        self._remember(known, {**reads, **done}, generation, optimistic=True)
        return (variant.result,)

    def _window(self) -> tuple[int, int]:
        """The candidate last seqs of the next one-trip append, as (first offset past the last
        `seq` this handle saw, how many): the narrowest range of how far the counter moved at
        this handle's recent appends that holds nine in ten of them (all while they are fewer
        than ten), one more above; one candidate, the last `seq` seen, for a handle appending
        alone. A window wider than `_max_variants` is not tried (`_try_one_trip`).

        A variant costs the client one run of the engine against the cache and the encoding of
        its writes (some 15-20 µs) and the server a few more rows; a miss costs a failed pipeline,
        a round trip and the two-trip append. Called under `_cache_lock`."""
        ordered = sorted(self._distances)
        if not ordered or ordered[-1] == 0:
            return 0, 1
        need = len(ordered) if len(ordered) < 10 else -(-len(ordered) * 9 // 10)
        low = min(range(len(ordered) - need + 1), key=lambda i: ordered[i + need - 1] - ordered[i])
        first, last = ordered[low], ordered[low + need - 1] + 1
        return first, last - first + 1

    def _outcome(
        self,
        backend: int,
        written: Sequence[Pending],
        expected: bytes | None,
        claimed: bytes | None,
        *,
        exact: bool = True,
    ) -> int | None:
        """Whether a one-trip append whose connection broke after its pipeline was sent committed,
        and which of its variants (`written`, each variant's writes): the variant's number if the
        first entry it wrote is in the log as it wrote it; -1 if the server process that ran it
        is gone and no variant's first entry is in the log (it never committed and never can);
        `None` when that cannot be told (the process still runs, the append wrote no entry, a
        variant's entry is there with other bytes, or the server cannot be asked), and the outcome
        stays unknown. With one variant for the last `seq` this handle saw (`exact`), the seqs it
        may have claimed (`expected`..`claimed`) are given back while nobody claimed after them;
        else, where others may well have claimed those very seqs, any it may have taken are left
        as a gap (a seq given back twice would be worse), and an entry of another writer at a
        variant's seq is no sign of anything.

        Everything the append did was in flight at once, so without this a connection lost while
        it waited for a lock would leave its outcome as unknown as one lost in COMMIT.
        """
        entries = self._relations[Table.ENTRIES]
        by_conv = self._relations[Table.BY_CONV]
        firsts: list[tuple[bytes, bytes, bytes | None]] = []
        for pending in written:
            ours = sorted((key, value) for (relation, key), value in pending.items() if relation is entries and value)
            if not ours:
                return None
            index = sorted(key for (relation, key), value in pending.items() if relation is by_conv and value == b'')
            firsts.append((*ours[0], index[0] if index and not exact else None))
        sql = (
            'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = %s), '
            f'(SELECT array_agg(v ORDER BY i) FROM unnest(%s::bytea[]) WITH ORDINALITY AS u(k, i) '
            f'LEFT JOIN {entries.table} e ON e.k = u.k), '
            f'(SELECT count(*) FROM {by_conv.table} WHERE k = ANY(%s::bytea[]))'
        ).encode()
        keys = [key for key, _, _ in firsts]
        indexes = [index for _, _, index in firsts if index is not None]

        def ask(cur: psycopg.Cursor[Any]) -> tuple[bool, list[bytes | None], int]:
            cur.execute(sql, (backend, keys, indexes))
            row = cur.fetchone()
            assert row is not None
            return bool(row[0]), [None if v is None else bytes(v) for v in row[1]], int(row[2])

        try:
            running, stored, indexed = self._run(ask, begin=None, lock=None)
        except EventLogError:
            return None
        for number, ((_, value, _), found) in enumerate(zip(firsts, stored, strict=True)):
            if found == value:
                return number
        if running:
            return None
        if exact:
            if stored[0] is not None:
                return None
            if expected is not None and claimed is not None:
                release = self._release_sql(key_seq(claimed), key_seq(expected))
                with suppress(EventLogError):
                    self._run(lambda cur: cur.execute(release), begin=None, lock=None)
            return -1
        # Speculative: its seqs may be others' entries now; one of ours would have left its BY_CONV
        # row (an erasure rewrites the entry, not the row).
        return None if indexed else -1

    def _guard_failed(self) -> None:
        """Another writer changed a record since this handle's last write: drop the cache and try
        one round trip again only once normal appends show the cache would have been right, for
        twice as many appends in a row as last time (up to `_MAX_STREAK`)."""
        with self._cache_lock:
            self._trips['guard failed'] += 1
            self._known = {}
            self._generation += 1
            self._optimistic = False
            self._streak = 0
            self._needed = min(self._needed * 2, _MAX_STREAK)

    def _window_missed(self, distance: int | None) -> None:
        """The counter was outside the window of a one-trip append's variants: the cache stays
        (its records were right). A miss costs one round trip more than the two-trip path; only
        when half of the recent tries missed (trying then costs more than it saves) is one round
        trip tried again once normal appends show the window would have held the counter, as
        after a failed guard."""
        with self._cache_lock:
            self._trips['window missed'] += 1
            if distance is not None and distance >= 0:
                self._distances.append(distance)  # where the counter was (the claim's answer)
            self._tries.append(False)
            if self._tries.count(False) * 2 >= _TRIES:
                self._tries.clear()
                self._optimistic = False
                self._streak = 0
                self._needed = min(self._needed * 2, _MAX_STREAK)

    def _learn(self, txn: PgWriteTxn, known: Known, generation: int, *, timed: bool = True) -> None:
        """After a two-trip append: cache what it read and wrote, note how far the counter had
        moved past the last `seq` this handle saw (unless `timed` is false: it followed a one-trip
        try, whose claim already told it), and while the one-trip path is off, count the
        appends in a row for which the cache held every record read, unchanged, and the window
        of variants (`_window`) would have held the counter."""
        reads = txn.reads or {}
        self._trips['two'] += 1
        right = bool(known) and not txn.scanned
        last = (self._relations[Table.META], META_LAST_SEQ)
        seen, claimed = known.get(last), reads.get(last)
        if seen is not None and claimed is not None and txn.seq_end != txn.seq_base:
            distance = key_seq(claimed) - key_seq(seen)
            with self._cache_lock:
                low, width = self._window() if self._variants else (0, 1)
                if distance >= 0 and timed:
                    self._distances.append(distance)
            if not low <= distance < low + width:
                right = False
        if right:
            absent = self._presumed_absent
            for slot, value in reads.items():
                if slot == last:
                    continue
                hit = known.get(slot, _MISSING)
                if hit is _MISSING:
                    hit = None if slot[0] in absent else _MISSING
                if hit != value:
                    right = False
                    break
        self._remember(known, {**reads, **(txn.written or {})}, generation, optimistic=right)

    def _remember(self, known: Known, records: Known, generation: int, *, optimistic: bool) -> None:
        """Cache `records` (what a committed append read and wrote) over `known` (the cache it
        started from). Keeping older records is safe: a guard checks every record an append
        reads, whatever the cache said; they only make a later one-trip append likelier."""
        unread = self._unread
        entries = self._relations[Table.ENTRIES]
        records = {
            slot: value
            for slot, value in records.items()
            if slot[0] not in unread and (slot[0] is not entries or value is None or len(value) <= _CACHE_VALUE)
        }
        with self._cache_lock:
            if generation != self._generation or len(records) > _CACHE_RECORDS:
                # Another write of this handle committed meanwhile (in an order this one cannot
                # know), or the transaction was a bulk one: cache nothing.
                self._known = {}
                self._generation += 1
                return
            # Only the latest entries are kept (a repeat of an append, or the next run that
            # continues a run, reads them); the other records are few (the last seq, each
            # conversation's and run's record, idempotency slots).
            merged = {**known, **records}
            kept = [slot for slot in merged if slot[0] is entries]
            for slot in kept[: len(kept) - _CACHE_ENTRIES]:
                del merged[slot]
            self._known = merged if len(merged) <= _CACHE_RECORDS else records
            self._generation += 1
            if self._optimistic:
                if optimistic:
                    self._needed = 1  # a one-trip append succeeded
                return
            if not optimistic:
                self._streak = 0
                return
            self._streak += 1
            if self._streak >= self._needed:
                self._optimistic = True
                self._streak = 0

    def _forget(self) -> None:
        with self._cache_lock:
            self._known = {}
            self._generation += 1

    async def append(self, entry: NewEntry) -> int:
        """Append one entry in its own transaction; return its `seq`."""
        token = _PREFETCH.set(self._records_read(entry) + self._fence_read())
        appending = _APPENDING.set(_Plan.of((entry,)))
        try:
            seq = await super().append(entry)
        finally:
            _APPENDING.reset(appending)
            _PREFETCH.reset(token)
        self._note_starts((entry,), (seq,))
        return seq

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        """Append entries in order in one transaction (all or none); return their `seq`s (see `EventLog`)."""
        batch = list(entries)
        token = _PREFETCH.set(
            tuple({read for entry in batch[:_PREFETCH_ENTRIES] for read in self._records_read(entry)})
            + self._fence_read()
        )
        appending = _APPENDING.set(_Plan.of(batch))
        try:
            seqs = await super().append_many(batch)
        finally:
            _APPENDING.reset(appending)
            _PREFETCH.reset(token)
        self._note_starts(batch, seqs)
        return seqs

    def _records_read(self, entry: NewEntry) -> tuple[tuple[TableId, bytes], ...]:
        """The records appending `entry` reads, to read them in the round trip that takes the lock:
        its conversation and run, the parent a run starts from, and where its idempotency key
        would be recorded (under the run's start, when this handle has seen the run start)."""
        if not isinstance(entry, NewEntry) or not isinstance(entry.conversation_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return ()  # the engine reports it
        reads: list[tuple[TableId, bytes]] = [(Table.CONVS, conv_key(entry.conversation_id))]
        run_id = entry.run_id
        if isinstance(run_id, str):
            reads.append((Table.RUNS, run_key(run_id)))
        parent = entry.parent
        if entry.kind == 'run_started' and isinstance(parent, int) and 0 < parent <= _MAX_KEY_SEQ:
            reads.append((Table.ENTRIES, seq_key(parent)))
        key = entry.idempotency_key
        if isinstance(key, str):
            if run_id is None:
                reads.append((Table.IDEM, idem_key_of(conv_idem_prefix(entry.conversation_id), key)))
            elif (start := self._run_starts.get(run_id)) is not None:
                reads.append((Table.IDEM, idem_key_of(run_idem_prefix(start), key)))
        return tuple(reads)

    def _fence_read(self) -> tuple[tuple[TableId, bytes], ...]:
        """The lease record a fenced append checks (`run_lease_fence`), to read it ahead. The
        one-trip path's guard covers it like every record an append reads: an append whose
        lease was taken over since this handle cached it fails its guard, and the two-trip path
        then finds the new holder's lease."""
        fence = self._fence()
        return () if fence is None else ((Table.META, lease_key(fence.run_id)),)

    def _note_starts(self, entries: Sequence[NewEntry], seqs: Sequence[int]) -> None:
        """Remember the `seq` each run started at (a run's start never changes while it exists;
        a wrong guess only makes a read ahead miss)."""
        starts = self._run_starts
        for entry, seq in zip(entries, seqs, strict=False):
            if entry.kind == 'run_started' and entry.run_id is not None:
                if len(starts) >= _RUN_STARTS:
                    starts.clear()
                starts[entry.run_id] = seq

    async def take_run_lease(self, run_id: str, owner: str, seconds: float, *, executor: str | None = None) -> RunLease:
        """Take run `run_id`'s lease (see `EventLogBase.take_run_lease`), under the run's lock."""
        if not isinstance(run_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return await super().take_run_lease(run_id, owner, seconds, executor=executor)  # the base names the error
        token = _RUN_SCOPED.set(_Plan.for_run(run_id))
        try:
            return await super().take_run_lease(run_id, owner, seconds, executor=executor)
        finally:
            _RUN_SCOPED.reset(token)

    async def renew_run_lease(self, lease: RunLease, seconds: float) -> RunLease:
        """Renew `lease` (see `EventLogBase.renew_run_lease`), under its run's lock."""
        if not isinstance(lease, RunLease) or not isinstance(lease.run_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return await super().renew_run_lease(lease, seconds)
        token = _RUN_SCOPED.set(_Plan.for_run(lease.run_id))
        try:
            return await super().renew_run_lease(lease, seconds)
        finally:
            _RUN_SCOPED.reset(token)

    async def release_run_lease(self, lease: RunLease) -> bool:
        """Release `lease` (see `EventLogBase.release_run_lease`), under its run's lock."""
        if not isinstance(lease, RunLease) or not isinstance(lease.run_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return await super().release_run_lease(lease)
        token = _RUN_SCOPED.set(_Plan.for_run(lease.run_id))
        try:
            return await super().release_run_lease(lease)
        finally:
            _RUN_SCOPED.reset(token)

    async def get_entry(self, seq: int) -> Entry | None:
        """One entry by `seq`, or `None` (one statement: one round trip)."""
        engine.check_seq(seq, 'seq')
        return await self._read_one(lambda txn: engine.get_entry(txn, seq))

    async def get_run(self, run_id: str) -> RunRecord | None:
        """A run's record, or `None` (one statement: one round trip)."""
        engine.check_id(run_id, 'run_id')
        return await self._read_one(lambda txn: engine.get_run(txn, run_id))

    async def _read_one(self, fn: Callable[[ReadTxn], T]) -> T:
        """`fn`, which reads one record, as a single statement outside a transaction."""
        self._check_open()
        fn = self._sealed(fn)
        return await asyncio.to_thread(
            self._run, lambda cur: fn(PgReadTxn(cur, self._relations)), begin=None, lock=None
        )

    async def _read(self, fn: Callable[[ReadTxn], T], *, bulk: bool = False, views: bool = False) -> T:
        self._check_open()  # values come over the wire: never views
        return await asyncio.to_thread(self._read_sync, self._sealed(fn))

    async def _write(self, fn: Callable[[WriteTxn], T], *, bulk: bool = False) -> T:
        self._check_open()
        return await asyncio.to_thread(self._write_sync, cast('Callable[[WriteTxn], T]', self._sealed(fn)))

    # -- projections ----------------------------------------------------------------------------

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the projection's records and the log in one snapshot (see `eventlog.projection`)."""
        if self._memory_projections is not None:  # an encrypted store's: in memory only
            return self._memory_projection(spec, fn, write=False)  # pyright: ignore[reportArgumentType]
        if self._local is not None:
            return self._local.read_projection(spec, fn)
        if self.read_only_reason is None:  # read-only: an unregistered projection reads as empty
            self._register(spec)
        relations = self._projection_relation(spec)

        def run(cur: psycopg.Cursor[Any]) -> T:
            records = PgProjectionTxn(cur, spec.name, relations, self._projection_tables, None)
            return fn(records, LogReader(PgReadTxn(cur, self._relations)))

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one transaction holding the projections' writer lock: its writes and
        position commit together, and two processes catching a projection up take turns. The
        first write of `spec` through this handle records it in the store's catalogue."""
        if self._memory_projections is not None:
            return self._memory_projection(spec, fn, write=True)
        if self._local is None:
            self._refuse_write()
        self._forget()
        if self._local is not None:
            return self._local.write_projection(spec, fn)
        self._register(spec)
        result = self._write_records(spec, fn, catalogue=spec not in self._catalogued)
        self._catalogued.add(spec)
        return result

    def _write_records(
        self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T], *, catalogue: bool = False
    ) -> T:
        """Run `fn` in a projection write transaction; with `catalogue`, record `spec` in the
        store's catalogue in the same transaction (which takes the projections' lock, never the
        writers': a projection catching up must not wait for an append in flight)."""
        relations = self._projection_relation(spec)

        def run(cur: psycopg.Cursor[Any]) -> T:
            pending: Pending = {}
            records = PgProjectionTxn(cur, spec.name, relations, self._projection_tables, pending)
            log_txn = PgWriteTxn(cur, self._relations, pending)
            if catalogue:
                record_in_catalogue(log_txn, spec)
            result = fn(records, LogReader(log_txn))
            flush(cur, pending)
            return result

        return self._run(run, begin=_BEGIN_WRITE, lock=self._projection_lock_sql)

    @property
    def projections_apart(self) -> bool:
        """Whether projections are kept in a local directory (`projections_dir`) rather than in the
        database: a projection then keeps there what its readers show (`LocalProjections`). An
        encrypted store keeps its projections in memory instead (docs/encryption.md)."""
        return self._local is not None and self._memory_projections is None

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store; asking creates nothing."""
        if self._memory_projections is not None:
            return self._memory_projections.has(name)
        if self._local is not None:
            return self._local.has_projection(name)

        def run(cur: psycopg.Cursor[Any]) -> bool:
            cur.execute(f'SELECT 1 FROM {self._projection_tables[1]} WHERE projection = %s'.encode(), (name,))
            return cur.fetchone() is not None

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def projection_catalogue(self) -> list[CatalogueEntry]:
        """The projections recorded in the catalogue (of `projections_dir`, when given)."""
        if self._local is not None:
            return self._local.projection_catalogue()
        return self._read_sync(read_catalogue)

    def present_projections(self) -> set[str]:
        """The names of the projections the store (or `projections_dir`) holds records or a position of."""
        if self._memory_projections is not None:
            return self._memory_projections.names()
        if self._local is not None:
            return self._local.present_projections()

        def run(cur: psycopg.Cursor[Any]) -> set[str]:
            records, positions = self._projection_tables
            cur.execute(
                f'SELECT projection FROM {positions} WHERE position IS NOT NULL '
                f'UNION SELECT DISTINCT projection FROM {records}'.encode()
            )
            return {str(row[0]) for row in cur.fetchall()}

        return self._run(run, begin=_BEGIN_READ, lock=None)

    def clear_projection(self, name: str) -> None:
        """Delete every record of the projection `name` and forget its position."""
        if self._memory_projections is not None:
            self._memory_projections.begin(name).clear()
            return
        if self._local is not None:
            self._local.clear_projection(name)
            return
        self._refuse_write()
        self._forget()
        spec = ProjectionSpec(name, ())
        self._register(spec)
        self._write_records(spec, lambda records, _: records.clear())

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
        segments and old file blocks the filesystem freed are beyond its reach (docs/erasure.md).
        With `projections_dir`, that LMDB directory is compacted too (`LocalProjections.compact`)."""
        names = [f'{self._q}."{name.decode()}"' for name in TABLE_NAMES.values()]
        names.extend(self._projection_tables)
        try:
            with self._connection() as conn, conn.cursor() as cur:
                for name in names:
                    cur.execute(f'VACUUM FULL {name}'.encode())
        except psycopg.Error as exc:
            return f'VACUUM FULL failed: {_first_line(exc)}'
        if self._local is not None:
            try:
                self._local.compact()
            except EventLogError as exc:  # open in another process, no room for the copy
                return f'the removed text stays in the free pages of {self._local.path}: {exc}'
        return None

    def close(self) -> None:
        """Close this handle's connection pool; later calls raise `LogClosedError`."""
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            self._local.close()
        with self._seq_lock:
            idle, self._seq_conns = self._seq_conns, []
        for conn in idle:
            conn.finish()
        self._pool.close()

    def __repr__(self) -> str:
        return f'PostgresEventLog({self.location})'


class PendingLastSeq:
    """The log's last `seq`, asked with `PostgresEventLog.start_last_seq`: `result()` waits for it."""

    __slots__ = ('_conn', '_log', '_value')

    def __init__(self, log: PostgresEventLog, conn: pq.abc.PGconn | None, value: int | None) -> None:
        self._log = log
        self._conn = conn
        self._value = value

    def result(self) -> int:
        """The last settled `seq` when the query ran (waits for the answer the first time)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._value = self._log._finish_last_seq(conn)  # pyright: ignore[reportPrivateUsage]
        if self._value is None:
            raise AssertionError('PendingLastSeq has no answer')
        return self._value


def _last_seq(txn: ReadTxn) -> int:
    return engine.last_seq(txn)


_LAST_SEQ_STATEMENT: Final = b'eventlog_last_seq'


class _OneShotWrite(PgWriteTxn):
    """A write transaction whose buffered writes are sent as they are made (used once, at open)."""

    def __init__(self, cur: psycopg.Cursor[Any], relations: dict[TableId, PgRelation], seq_base: int) -> None:
        super().__init__(cur, relations, {}, seq_base=seq_base)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        super().put(table, key, value)
        flush(self._cur, self._pending)


_PREFETCH: ContextVar[tuple[tuple[TableId, bytes], ...]] = ContextVar('eventlog_pg_prefetch', default=())
"""Records the append being made will read (set around `append`; `asyncio.to_thread` carries it)."""
_ONE_TRIP_TAG: Final = '/* one trip */ '


class _Variant(Generic[T]):
    """One speculative run of an append's engine against the cache, for one candidate last `seq`:
    its result, the records it read (but the last `seq`), its writes (but the last `seq`), the
    last `seq` it was told and the one it wrote."""

    __slots__ = ('count', 'expected', 'new_last', 'pending', 'reads', 'result')

    def __init__(self, result: T, reads: Pending, pending: Pending, expected: bytes | None, new_last: bytes | None):
        self.result = result
        self.reads = reads
        self.pending = pending
        self.expected = expected
        self.new_last = new_last
        self.count = key_seq(new_last) - key_seq(expected) if expected is not None and new_last is not None else 0
        """How many seqs it used (claimed as one block)."""


class _Plan:
    """What an append takes before it runs: the advisory lock keys of the conversations and runs
    its batch names (sorted), and how many seqs it may use (one per entry)."""

    __slots__ = ('count', 'keys')

    def __init__(self, count: int, keys: tuple[int, ...]) -> None:
        self.count = count
        self.keys = keys

    @classmethod
    def of(cls, batch: Sequence[NewEntry]) -> _Plan:
        names: set[bytes] = set()
        for entry in batch:
            if isinstance(entry, NewEntry):  # pyright: ignore[reportUnnecessaryIsInstance]
                if isinstance(entry.conversation_id, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                    names.add(b'c' + entry.conversation_id.encode(errors='replace'))
                if isinstance(entry.run_id, str):
                    names.add(b'r' + entry.run_id.encode(errors='replace'))
        return cls(len(batch), tuple(sorted({_signed32(zlib.crc32(name)) for name in names})))

    @classmethod
    def for_run(cls, run_id: str) -> _Plan:
        """The lock of one run, and no seq (a write of the run's lease)."""
        return cls(0, (_signed32(zlib.crc32(b'r' + run_id.encode(errors='replace'))),))


_APPENDING: ContextVar[_Plan | None] = ContextVar('eventlog_pg_appending', default=None)
"""Set around `append`/`append_many`: the write may take one round trip and keeps the cache."""
_RUN_SCOPED: ContextVar[_Plan | None] = ContextVar('eventlog_pg_run_scoped', default=None)
"""Set around the writes of a run's lease: they take the run's lock instead of the store-wide one."""
_CACHE_RECORDS: Final = 256
"""Most records the one-round-trip cache keeps (a larger transaction, a bulk one, leaves it empty)."""
_CACHE_ENTRIES: Final = 16
"""Entries the cache keeps (the latest written or read)."""
_CACHE_VALUE: Final = 64 * 1024
"""Longest entry the cache keeps (an append reading a longer one takes the two-round-trip path)."""
_VARIANT_MS: Final = 0.5
"""Milliseconds of the shortest recent one-trip append that pay for one speculative variant: a
variant costs some 15-40 µs of client and server CPU, a miss a failed pipeline and a round trip;
the bench (`bench_postgres.py --rtt-ms 1 4`) found 10 variants a loss at a 1 ms round trip on a
busy machine, and a gain at 4 ms."""
_MAX_VARIANTS: Final = 16
"""Most speculative variants a one-trip append sends (candidate last seqs: `_window`); a wider
window is not tried."""
_DISTANCES: Final = 32
"""Recent appends whose distance (how far the counter had moved) sets the window."""
_TRIES: Final = 8
"""Recent one-trip tries whose misses (half of them) pause the one-trip path."""
_OUTSIDE_WINDOW: Final = 'EV001'
"""The SQLSTATE `claim_seqs_in` fails with when the counter is outside the window."""
_MAX_STREAK: Final = 64
"""Most appends in a row the cache must have been right for before one round trip is tried again."""
_MISSING: Final = object()
_PREFETCH_ENTRIES: Final = 16
"""Entries of a batch whose records are read ahead (a long batch reads the rest as it goes)."""
_RUN_STARTS: Final = 4096
"""Runs whose start `seq` a handle remembers (to read their idempotency keys ahead)."""
_MAX_KEY_SEQ: Final = (1 << 64) - 1


_BEGIN_READ: Final = b'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
_BEGIN_WRITE: Final = b'BEGIN ISOLATION LEVEL REPEATABLE READ'
"""Writers take their table lock first: a repeatable-read snapshot starts at the first query, after
the lock, so it holds every commit made before the lock was granted."""
_BEGIN_REGISTER: Final = b'BEGIN ISOLATION LEVEL READ COMMITTED'
_BEGIN_APPEND: Final = b'BEGIN ISOLATION LEVEL READ COMMITTED'
_MAY_REWRITE: Final = b"; SET LOCAL eventlog.rewrite = 'on'"
"""Said by a store-wide write: it may rewrite entries (an erasure); an append never does (`entries_kept`)."""
"""Appends read committed: each statement sees every commit made before it, and what an append
reads of its conversation and runs cannot change under it while it holds their locks."""
_LAYOUT_1_STOP: Final = MAX_SEQ
"""The META `last_seq` a migrated schema keeps: a writer of layout 1 still running finds the log
full (`LogFullError`) and writes nothing."""
_LOCK_CLASS: Final = 0x6576  # 'ev': the advisory lock class of schema creation


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _schema_lock_id(schema: str) -> int:
    """The advisory lock class of a schema (its creation, and its appends' conversation locks)."""
    return _signed32(zlib.crc32(schema.encode()))


def _counter_lock_key(schema: str) -> int:
    """The session advisory lock (one bigint: never equal to a two-int key) of a schema's counter."""
    return (0x6576 << 32) | zlib.crc32(schema.encode())


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


def _in_pipeline(conn: psycopg.Connection[Any], send: Callable[[], None]) -> None:
    """Run `send` in a pipeline and raise the first error the pipeline met. A failed statement
    aborts the rest of the pipeline, and psycopg would log the pipeline's own ending error as a
    warning if the first one were still on its way out of the block: a failed guard is an
    expected event, not a warning for the application's log."""
    first: psycopg.Error | None = None
    try:
        with conn.pipeline():
            try:
                send()
            except psycopg.Error as exc:
                first = exc
    except psycopg.Error:
        if first is None:
            raise
    if first is not None:
        raise first


def _unknown_outcome(detail: str) -> StorageError:
    return StorageError(
        f'the connection to PostgreSQL broke while committing; the transaction may or may not '
        f'have been applied ({detail}). Appends with idempotency keys can be repeated safely.'
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _said(exc: BaseException, dsn: str) -> str:
    """The first line of `exc` with every password of `dsn` left out (libpq quotes the string)."""
    return hide_secrets(_first_line(exc), dsn)


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
