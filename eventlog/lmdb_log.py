"""`LmdbEventLog`: the log in an LMDB environment on disk.

LMDB gives the log what it needs with nothing to wrap away: one writer at a time
across all processes (its lock file), readers that never block, copy-on-write pages
that leave nothing to recover after a crash, and a synced commit per transaction.
Each append call is one write transaction; a batch is one transaction too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

import lmdb

from eventlog import _engine as engine
from eventlog import _lmdb_check as lmdb_check
from eventlog import _lmdb_projection as lmdb_projection
from eventlog._files import sync_directory
from eventlog._keys import LMDB_TABLES, Table
from eventlog._storage import (
    ProjectionRecords,
    ProjectionWriter,
    ReadTxn,
    TableId,
    WriteTxn,
    prefix_end,
)
from eventlog._threads import to_thread
from eventlog.encryption import KeyProvider
from eventlog.entries import VerifyProblem, VerifyReport
from eventlog.errors import (
    CorruptEntryError,
    EventLogError,
    InvalidArgumentError,
    LogClosedError,
    ReadOnlyStoreError,
    StorageError,
    StoreBusyError,
    StoreLocationError,
    StoreReplacedError,
)
from eventlog.log import EventLogBase
from eventlog.projection import (
    CatalogueEntry,
    LogReader,
    ProjectionSpec,
    is_projection_name,
    read_catalogue,
    record_in_catalogue,
)

if TYPE_CHECKING:
    from eventlog.retention import RetentionPolicy

__all__ = ['CompactResult', 'LmdbEventLog', 'write_blocker']

T = TypeVar('T')

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
"""Initial map size; the map doubles by itself whenever it fills."""

_MAX_DBS = 32
"""Named databases the environment can hold: the log's tables plus room for projections."""


_Layout = dict[TableId, tuple[lmdb._Database, bytes]]
"""Where each logical table lives: an LMDB database and a key prefix within it."""

PHYSICAL_NAMES = frozenset(name for name, _ in LMDB_TABLES.values())
"""The LMDB databases the log itself uses; projections choose other names."""


class _LmdbTxn:
    """The `_storage` transaction protocols over one LMDB transaction."""

    __slots__ = ('_layout', '_txn')

    def __init__(self, txn: lmdb.Transaction, layout: _Layout) -> None:
        self._txn = txn
        self._layout = layout

    def get(self, table: TableId, key: bytes) -> bytes | None:
        db, prefix = self._layout[table]
        return cast('bytes | None', self._txn.get(prefix + key, db=db))

    def _rows(self, table: TableId, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """A cursor's rows as `scan` reads them (here: as LMDB gives them, copies)."""
        return rows

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        db, table_prefix = self._layout[table]
        cut = len(table_prefix)
        full = table_prefix + prefix
        cursor = self._txn.cursor(db=db)
        if not reverse:
            first = full if start is None else max(full, table_prefix + start)
            if not cursor.set_range(first):
                return
            for key, value in self._rows(table, cast('Iterator[tuple[bytes, bytes]]', iter(cursor))):
                if not key.startswith(full):
                    return
                yield key[cut:], value
            return
        positioned: bool
        if start is not None:
            bound = table_prefix + start
            positioned = cursor.key() == bound or cursor.prev() if cursor.set_range(bound) else cursor.last()
        else:
            upper = prefix_end(full)
            positioned = cursor.prev() if upper is not None and cursor.set_range(upper) else cursor.last()
        if not positioned:
            return
        for key, value in self._rows(table, cast('Iterator[tuple[bytes, bytes]]', cursor.iterprev())):
            if not key.startswith(full):
                if key < full:
                    return
                continue
            yield key[cut:], value

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def last_entry_key(self) -> bytes | None:
        """The key of the last entry (ENTRIES is a database of its own, so its last key), or
        `None` when there is none: an LMDB store derives its last `seq` from it (`_read.last_seq`)."""
        cursor = self._txn.cursor(db=self._layout[Table.ENTRIES][0])
        return bytes(cast('bytes', cursor.key())) if cursor.last() else None

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        db, prefix = self._layout[table]
        # Positional arguments (dupdata, overwrite, append, db): parsed faster than keywords.
        self._txn.put(prefix + key, value, True, True, False, db)

    def put_last(self, table: TableId, key: bytes, value: bytes) -> None:
        db, prefix = self._layout[table]
        if not self._txn.put(prefix + key, value, True, True, True, db):  # pragma: no cover - seq is monotonic
            raise CorruptEntryError(f'entry key {key.hex()} is not the last of its table')

    def delete(self, table: TableId, key: bytes) -> None:
        db, prefix = self._layout[table]
        self._txn.delete(prefix + key, db=db)


class _LmdbViewTxn(_LmdbTxn):
    """A read transaction opened with `buffers=True` (`LmdbEventLog._read_views_sync`): ENTRIES
    values are views of the map, read only as far as they are used; keys and other values are
    copied, so that only entry values (which `_read.iter_entry_heads` cuts) are views."""

    __slots__ = ()

    def get(self, table: TableId, key: bytes) -> bytes | None:
        db, prefix = self._layout[table]
        value = cast('bytes | None', self._txn.get(prefix + key, db=db))
        return value if value is None or table == Table.ENTRIES else bytes(value)

    def _rows(self, table: TableId, rows: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        if table == Table.ENTRIES:
            return ((bytes(key), value) for key, value in rows)
        return ((bytes(key), bytes(value)) for key, value in rows)


class _SharedEnv:
    """One LMDB environment per store per process (LMDB forbids opening it twice).

    Growing the map needs every transaction of this process closed, so readers and the
    writer register here and a resize waits for them.
    """

    def __init__(
        self, env: lmdb.Environment, path: Path, sync: bool, ident: tuple[int, int], read_only: bool = False
    ) -> None:
        self.env = env
        self.read_only = read_only
        """Whether the environment was opened with LMDB's `readonly` (no write transaction possible)."""
        self.lockless = False
        """Whether it was opened without LMDB's lock file (`lock=False`): its readers take no slot
        in the reader table, so no process may write the store meanwhile."""
        self.dbs: _Layout = {}
        self.path = path
        self.sync = sync
        self.data_path = str(path / 'data.mdb')
        self.ident = ident
        """(device, inode) of the `data.mdb` this environment maps."""
        self.refs = 0
        self.active = 0
        self.resizing = False
        self.cond = threading.Condition()
        self.write_lock = threading.Lock()

    def enter(self) -> None:
        with self.cond:
            while self.resizing:
                self.cond.wait()
            self.active += 1

    def leave(self) -> None:
        with self.cond:
            self.active -= 1
            # Only a resize or a compaction waits on `cond` for transactions to end, and each sets
            # `resizing` (under `cond`) before it waits; the transactions `enter` holds back are
            # woken when it is cleared. So with `resizing` false no one waits for this.
            if self.resizing:
                self.cond.notify_all()

    def check_identity(self) -> None:
        """Raise `StoreReplacedError` unless `data.mdb` is still the file this environment maps.

        Called by every write transaction right after it took LMDB's writer lock, which a
        compaction holds while it puts its copy in place: a commit can never land in a file that
        is no longer the store's."""
        try:
            st = os.stat(self.data_path)
        except OSError as exc:
            raise StoreReplacedError(
                f'the store file {self.data_path} is gone ({exc.strerror or exc}); nothing was written. '
                f'Close the store and open it again'
            ) from None
        if (st.st_dev, st.st_ino) != self.ident:
            raise StoreReplacedError(
                f'the store file {self.data_path} was replaced by another file while this process had it open '
                f'(a compaction that did not hold the store lock, or a file restored over it); nothing was '
                f'written. Close the store and open it again'
            )

    def resize(self, new_size: int) -> None:
        """Set the map size (0: adopt the size another process set) once no transaction is open.

        When the map cannot grow (the address space is exhausted, `ulimit -v`), LMDB leaves the
        environment unusable: it is opened again at its old size, so the handle goes on serving
        reads and the writes that fit, and `StorageError` says why this one could not be made.
        """
        with self.cond:
            self.resizing = True
            try:
                while self.active:
                    self.cond.wait()
                old = self.env.info()['map_size']
                try:
                    self.env.set_mapsize(new_size)
                except lmdb.Error as exc:
                    self._reopen(old)
                    raise StorageError(
                        f'the store at {self.path} needs a memory map of {new_size} bytes and the system refused '
                        f'it ({exc}); this write was not committed, nothing earlier was lost, and the store '
                        f'stays open for reads and smaller writes. Raise the address-space limit (ulimit -v)'
                    ) from None
            finally:
                self.resizing = False
                self.cond.notify_all()

    def _reopen(self, map_size: int) -> None:
        with contextlib.suppress(lmdb.Error):
            self.env.close()
        self.env = _open_env(self.path, map_size, self.sync, read_only=self.read_only, lock=not self.lockless)
        self.dbs = _open_tables(self)


_registry: dict[tuple[int, int], _SharedEnv] = {}
_registry_lock = threading.Lock()


def _prepare_directory(path: Path, *, read_only: bool) -> None:
    try:
        if path.exists():
            if not path.is_dir():
                raise StoreLocationError(f'{path} exists and is not a directory; an LmdbEventLog store is a directory')
        elif read_only:
            raise StoreLocationError(f'no store at {path} (a read-only open creates nothing)')
        else:
            path.mkdir(mode=0o700, parents=True)
            os.chmod(path, 0o700)
    except StoreLocationError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise StoreLocationError(
            f'cannot create the store directory {path}: {getattr(exc, "strerror", None) or exc}'
        ) from None
    if read_only:
        if not os.access(path, os.R_OK | os.X_OK):
            raise StoreLocationError(f'the store directory {path} is not readable by this process')
        if not (path / 'data.mdb').exists():
            raise StoreLocationError(f'{path} holds no store (no data.mdb), and a read-only open creates nothing')
        return
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise StoreLocationError(
            f'the store directory {path} is not readable and writable by this process; '
            f'to read it, open it read-only (read_only=True)'
        )


def write_blocker(path: str | os.PathLike[str]) -> str | None:
    """Why this process cannot write the store at `path` (its file system is mounted read-only,
    the directory or one of its files is not writable by this process), or `None` when nothing
    stands in the way. Cheap: a `statvfs` and a few `access` calls; it writes nothing."""
    where = Path(path)
    if not where.is_dir():
        return None  # absent or not a store: opening says what is wrong
    if _on_read_only_media(where):
        return 'its file system is mounted read-only'
    if not os.access(where, os.W_OK):
        return f'this process may not write the directory {where}'
    for name in ('data.mdb', 'lock.mdb', LOCK_FILE):  # the files a writer writes
        file = where / name
        if file.exists() and not os.access(file, os.W_OK):
            return f'this process may not write {file}'
    return None


def _open_shared(path: Path, map_size: int, sync: bool, *, read_only: bool = False) -> _SharedEnv:
    st = path.stat()
    key = (st.st_dev, st.st_ino)
    with _registry_lock:
        shared = _registry.get(key)
        if shared is not None and shared.read_only and not read_only:
            raise ReadOnlyStoreError(
                f'the store at {path} is open read-only in this process already (LMDB maps a store once per '
                f'process); close those handles before opening it for writing'
            )
        if shared is None:
            lmdb_check.check_files(path)
            lockless = False
            if read_only:
                # With LMDB's lock file where it exists and this process may write it, readers keep
                # their slots; otherwise (read-only media, lock.mdb absent, never created here, or
                # another user's), LMDB reads without it.
                lock_file = path / 'lock.mdb'
                try:
                    if _on_read_only_media(path) or not os.access(lock_file, os.R_OK | os.W_OK):
                        raise StoreLocationError(f'{lock_file} cannot be written')
                    env = _open_env(path, map_size, sync, read_only=True, lock=True)
                except StoreLocationError:
                    env = _open_env(path, map_size, sync, read_only=True, lock=False)
                    lockless = True
            else:
                env = _open_env(path, map_size, sync)
            try:
                if not read_only:
                    env.reader_check()
                st = os.stat(path / 'data.mdb')
                shared = _SharedEnv(env, path, sync, (st.st_dev, st.st_ino), read_only)
                shared.lockless = lockless
                shared.dbs = _open_tables(shared)
            except BaseException:
                env.close()
                raise
            _registry[key] = shared
        shared.refs += 1
        return shared


def _on_read_only_media(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _open_env(path: Path, map_size: int, sync: bool, *, read_only: bool = False, lock: bool = True) -> lmdb.Environment:
    try:
        return lmdb.open(
            str(path),
            map_size=map_size,
            max_dbs=_MAX_DBS,
            subdir=True,
            sync=sync,
            metasync=sync,
            lock=lock,
            readonly=read_only,
            create=not read_only,
            mode=0o600,
            readahead=False,
            max_readers=256,
        )
    except lmdb.Error as exc:
        raise StoreLocationError(f'cannot open an LMDB store at {path}: {exc}') from None


def _open_tables(shared: _SharedEnv) -> _Layout:
    """Open (creating if needed) the log's tables and check the store's format version."""
    env = shared.env
    if shared.read_only:
        return _open_tables_read_only(shared)
    while True:
        try:
            opened = {name: env.open_db(name, create=True) for name in PHYSICAL_NAMES}
            dbs = {table: (opened[name], prefix) for table, (name, prefix) in LMDB_TABLES.items()}
            with env.begin(write=True) as txn:
                shared.check_identity()
                engine.init_format(_LmdbTxn(txn, dbs))
            return dbs
        except lmdb.MapResizedError:
            env.set_mapsize(0)  # another process grew the map; adopt its size and try again
        except lmdb.MapFullError:
            env.set_mapsize(env.info()['map_size'] * 2)
        except lmdb.Error as exc:
            raise StoreLocationError(f'cannot open the store tables: {exc}') from None


def _open_tables_read_only(shared: _SharedEnv) -> _Layout:
    """Open the log's tables of a store opened read-only, creating nothing: the store must hold
    them, in the current format or one read as it is (`engine.readable_as_is`; an older one needs
    its migration, a write)."""
    env = shared.env
    try:
        opened = {name: env.open_db(name, create=False) for name in PHYSICAL_NAMES}
    except lmdb.NotFoundError:
        raise StoreLocationError(f'{shared.path} holds no event log tables (it is not an eventlog store)') from None
    except lmdb.Error as exc:
        raise StoreLocationError(f'cannot open the store tables: {exc}') from None
    dbs = {table: (opened[name], prefix) for table, (name, prefix) in LMDB_TABLES.items()}
    with env.begin() as txn:
        version = engine.check_format(_LmdbTxn(txn, dbs))
    if not engine.readable_as_is(version):
        raise ReadOnlyStoreError(
            f'the store at {shared.path} is in format {version or "(none recorded)"}, which is brought to format '
            f'{engine.FORMAT_VERSION} by opening it for writing once; opened read-only, nothing may be written'
        )
    return dbs


class LmdbEventLog(EventLogBase):
    """An `EventLog` in an LMDB directory, shared safely by threads and processes.

    Args:
        path: The store's directory; created (readable by the owner only) if absent.
        sync: Flush every commit to disk before the call returns (the default). With
            `sync=False` a machine crash may lose the latest commits, never corrupt the store.
        map_size: The initial size of the memory map; it grows by itself when full.
        retention: A `RetentionPolicy` applied as the store opens (erasing or deleting what is
            older than it allows); what it did is in `retention_report`.
        read_only: Open the store for reading only (`True`), for writing (`False`, the default), or
            read-only only when this process cannot write it (`None`: a read-only file system, a
            directory or files it may not write; `write_blocker` says why). A read-only handle
            creates nothing and writes nothing, not even at open (no pending scrub finished, no
            catalogue entry, no lock file): every read works, including `verify` and searches of
            the store's index, and every call that would write raises `ReadOnlyStoreError`.
        keys: A `KeyProvider` (e.g. `FileKeyProvider`): the store's content payloads are sealed
            under a data key per conversation that the provider holds (docs/encryption.md). An empty
            store opened with keys becomes encrypted for good; an encrypted store opened for
            writing needs them (`EncryptionSetupError`); read-only, it reads records and verifies
            without them.

    Opened read-only, the store is opened with LMDB's `readonly`; where LMDB's lock file cannot be
    opened for writing (read-only media, files of another user), without its lock file. That
    assumes no process writes the store while it is open read-only: such readers take no slot in
    LMDB's reader table, so a writer could reuse the pages under them. It holds for a copy, a
    snapshot, read-only media or a mount nobody writes (docs/operations.md).

    Opening a store whose last erasure or deletion was not scrubbed from its files yet (see
    `scrub_pending`) finishes that scrub when no other process has the store open (never when
    read-only: `verify` then reports it pending).
    """

    persistent: ClassVar[bool] = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        retention: RetentionPolicy | None = None,
        read_only: bool | None = False,
        keys: KeyProvider | None = None,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise StoreLocationError(f'the store path must be a string or a path, got {type(path).__name__}')
        if not os.fspath(path):
            raise StoreLocationError('the store path is empty (name a directory; "." for this one)')
        if read_only not in (True, False, None):
            raise InvalidArgumentError(f'read_only must be True, False or None, got {read_only!r}')
        self.path = Path(path)
        self.sync = sync
        if read_only is None:
            reason = write_blocker(self.path) if self.path.exists() else None
        else:
            reason = 'opened read-only as asked' if read_only else None
        self.read_only_reason = reason
        _prepare_directory(self.path, read_only=reason is not None)
        self._store_lock = _acquire_store_lock(self.path, read_only=reason is not None)
        try:
            self._shared = _open_shared(self.path, map_size, sync, read_only=reason is not None)
        except BaseException:
            _release_store_lock(self._store_lock)
            raise
        self._closed = False
        self._projection_handles: dict[ProjectionSpec, lmdb_projection.ProjectionHandles] = {}
        self._catalogued: set[ProjectionSpec] = set()
        try:
            self._setup_encryption(keys)
        except BaseException:
            self.close()
            raise
        self._retain_on_open(retention)
        if reason is None:
            self._finish_pending_scrub()

    def _store_name(self) -> str:
        return f'the store at {self.path}'

    @property
    def lockless(self) -> bool:
        """Whether the store is open without LMDB's lock file (read-only media, files of another
        user): no process may write it while this handle has it open (see the class docstring)."""
        return self._shared.lockless

    def _finish_pending_scrub(self) -> None:
        """Finish the scrub an erasure or deletion left pending (a crash before its compaction,
        the store busy then), when this process can have the store to itself now; else leave it
        recorded for the next opportunity (`scrub_pending` says so)."""
        try:
            pending = self._read_sync(engine.scrub_pending)
        except EventLogError:  # a damaged store: verify says what is wrong
            return
        if pending is not None and self._shared.refs == 1:
            self._scrub_sync()

    @property
    def env(self) -> lmdb.Environment:
        """The LMDB environment, for projections that keep their own tables in the same store."""
        self._check_open()
        return self._shared.env

    def _read_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        return self.run_in_txn(lambda txn: fn(_LmdbTxn(txn, self._shared.dbs)), write=False)

    def _read_views_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        return self.run_in_txn(lambda txn: fn(_LmdbViewTxn(txn, self._shared.dbs)), write=False, buffers=True)

    def _write_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        return self.run_in_txn(lambda txn: fn(_LmdbTxn(txn, self._shared.dbs)), write=True)

    def run_in_txn(self, fn: Callable[[lmdb.Transaction], T], *, write: bool, buffers: bool = False) -> T:
        """Run `fn` in an LMDB transaction: committed if it returns (when `write`), aborted if it
        raises; retried after growing the map when it fills. For projections over this store.
        With `buffers`, values are views of the map, valid only inside `fn`."""
        if self._closed:
            raise LogClosedError('LmdbEventLog is closed')
        if write:
            self._refuse_write()
        shared = self._shared
        lock = shared.write_lock if write else None
        while True:
            if lock is not None:
                lock.acquire()
            shared.enter()
            grow = 0
            try:
                with shared.env.begin(write=write, buffers=buffers) as txn:
                    if write:
                        shared.check_identity()
                    return fn(txn)
            except lmdb.MapFullError:
                grow = max(shared.env.info()['map_size'] * 2, DEFAULT_MAP_SIZE)
            except lmdb.MapResizedError:
                grow = -1
            except lmdb.Error as exc:
                raise _storage_error(exc, self.path) from None
            finally:
                shared.leave()
                if lock is not None:
                    lock.release()
            shared.resize(0 if grow < 0 else grow)

    def open_table(self, name: bytes) -> lmdb._Database:
        """A named table of this store for a projection (created if absent); names of the
        log's own tables are refused."""
        if name in PHYSICAL_NAMES:
            raise ValueError(f"{name!r} is one of the log's own tables")
        self._check_open()
        self._refuse_write()
        shared = self._shared
        with shared.write_lock:
            shared.enter()
            try:
                with shared.env.begin(write=True) as txn:
                    shared.check_identity()
                    return shared.env.open_db(name, txn=txn, create=True)
            except lmdb.Error as exc:
                raise _storage_error(exc, self.path) from None
            finally:
                shared.leave()

    def _existing_table(self, name: bytes) -> lmdb._Database | None:
        """A projection's table for a read-only handle, or `None` when the store holds none (it
        then reads as empty); creates nothing."""
        shared = self._shared
        shared.enter()
        try:
            return shared.env.open_db(name, create=False)
        except lmdb.NotFoundError:
            return None
        except lmdb.Error as exc:
            raise _storage_error(exc, self.path) from None
        finally:
            shared.leave()

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the projection's records and the log in one read transaction (see
        `eventlog.projection`); the projection's tables are created on first use. An encrypted
        store's projections are kept in memory (docs/encryption.md)."""
        if self._memory_projections is not None:
            return self._memory_projection(spec, fn, write=False)  # pyright: ignore[reportArgumentType]
        return self._run_projection(spec, fn, write=False)

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one write transaction: the projection's writes and position commit together
        when it returns, none when it raises; retried after the map grows, as appends are. The
        first write of `spec` through this handle records it in the store's catalogue."""
        if self._memory_projections is not None:
            return self._memory_projection(spec, fn, write=True)
        self._refuse_write()
        if spec not in self._catalogued:
            self._write_sync(lambda txn: record_in_catalogue(txn, spec))
            self._catalogued.add(spec)
        return self._run_projection(spec, fn, write=True)

    def projection_catalogue(self) -> list[CatalogueEntry]:
        """The projections recorded in the store's catalogue (see `eventlog.projection`)."""
        return self._read_sync(read_catalogue)

    def present_projections(self) -> set[str]:
        """The names of the projections the store holds tables or a position of."""
        if self._memory_projections is not None:
            return self._memory_projections.names()
        return self.run_in_txn(lmdb_projection.present_projections, write=False)

    def clear_projection(self, name: str) -> None:
        """Empty every table of the projection `name` and forget its position (a database under its
        name whose table name no projection can have is left alone, `is_projection_name`)."""
        if self._memory_projections is not None:
            self._memory_projections.begin(name).clear()
            return
        self._refuse_write()
        found = self.run_in_txn(lambda txn: lmdb_projection.projection_tables(txn, name), write=False)
        tables = tuple(table for table in found if is_projection_name(table))
        self._run_projection(ProjectionSpec(name, tables), lambda records, _: records.clear(), write=True)

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store; asking creates nothing."""
        if self._memory_projections is not None:
            return self._memory_projections.has(name)
        return self.run_in_txn(lambda txn: lmdb_projection.has_projection(txn, name), write=False)

    def _run_projection(
        self, spec: ProjectionSpec, fn: Callable[[lmdb_projection.LmdbProjectionTxn, LogReader], T], *, write: bool
    ) -> T:
        while True:
            handles = self._projection_handles.get(spec)
            if handles is None or handles.env is not self._shared.env:  # new, or the store was compacted
                self._check_open()
                opener = self._existing_table if self.read_only else self.open_table
                handles = lmdb_projection.ProjectionHandles(self._shared.env, spec.name, spec.tables, opener)
                self._projection_handles[spec] = handles

            def run(txn: lmdb.Transaction, handles: lmdb_projection.ProjectionHandles = handles) -> T:
                if handles.env is not self._shared.env:  # compacted between opening and this transaction
                    raise lmdb_projection.StaleHandles
                return fn(lmdb_projection.LmdbProjectionTxn(txn, handles), LogReader(_LmdbTxn(txn, self._shared.dbs)))

            try:
                return self.run_in_txn(run, write=write)
            except lmdb_projection.StaleHandles:
                continue

    def _verify_sync(self) -> VerifyReport:
        """`verify`, after walking the file's B-trees in the same snapshot (`_verify_snapshot`)."""
        for _ in range(_VERIFY_TRIES):
            report = self.run_in_txn(lambda txn: _verify_snapshot(self.path, self._shared.dbs, txn), write=False)
            if report is not None:
                return report
        raise StorageError('the store changed too often during verify to pin one snapshot; run it again')

    def disk_size(self) -> int:
        """Bytes the store's data file takes on disk."""
        return os.stat(self.path / 'data.mdb').st_blocks * 512

    def close(self) -> None:
        """Close this handle; the environment closes with the process's last handle on it."""
        if self._closed:
            return
        self._closed = True
        with _registry_lock:
            shared = self._shared
            shared.refs -= 1
            if shared.refs == 0:
                for key, value in list(_registry.items()):
                    if value is shared:
                        del _registry[key]
                shared.env.close()
        _release_store_lock(self._store_lock)

    async def compact(self) -> CompactResult:
        """Rewrite the store into a compact copy and put it in place of `data.mdb`, so that the
        pages freed by deletes (which still hold the deleted text) are gone from the disk.

        The store must be open nowhere else: not in another process (`StoreBusyError` naming
        the processes holding it, where the system tells) and not through another handle of
        this process. Readers and writers of this handle wait while it runs; table handles a
        projection took with `open_table` before are invalid afterwards (open them again).
        Every projection in the store's catalogue is brought up to date by its maintainer first,
        or cleared (`eventlog.projection.maintain_projections`).
        A crash at any point leaves either the old store or the compacted one, both complete.
        A read-only handle raises `ReadOnlyStoreError`.
        """
        self._check_open()
        self._refuse_write()
        return await to_thread(self._compact_sync)

    def _rewrite_sync(self) -> str | None:
        """`compact`, so that the pages freed by an erasure or a delete are gone from the disk."""
        try:
            self._compact_sync(maintain=False)  # `scrub` has maintained the projections
        except EventLogError as exc:  # busy elsewhere, no room for the copy: the removal stays committed
            return f'the removed text stays in the free pages of data.mdb: {exc}'
        return None

    def _compact_sync(self, *, maintain: bool = True) -> CompactResult:
        self._check_open()
        self._refuse_write()
        pending = self._read_sync(engine.scrub_pending)
        if maintain:
            self._maintain_projections()
        lock = self._store_lock
        with _store_locks_cond:
            while lock.compacting:
                _store_locks_cond.wait()
            if lock.refs > 1:
                raise StoreBusyError(
                    f'the store at {self.path} is open through another handle in this process; '
                    f'close the other handles and compact again'
                )
            lock.compacting = True
        try:
            result = self._compact_exclusive(lock)
        finally:
            with _store_locks_cond:
                lock.compacting = False
                _store_locks_cond.notify_all()
        if pending is not None:  # the removals committed before the copy are gone from the file now
            self._write_sync(lambda txn: engine.clear_scrub_pending(txn, pending))
        return result

    def _compact_exclusive(self, lock: _StoreLock) -> CompactResult:
        gate = _upgrade_store_lock(lock, self.path)
        shared = self._shared
        try:
            with shared.write_lock, shared.cond:
                shared.resizing = True  # this handle's readers and writers wait until the swap is done
                try:
                    while shared.active:
                        shared.cond.wait()
                    return self._swap_in_compact_copy(shared)
                finally:
                    shared.resizing = False
                    shared.cond.notify_all()
        finally:
            _downgrade_store_lock(lock, gate)

    def _swap_in_compact_copy(self, shared: _SharedEnv) -> CompactResult:
        import shutil  # here: only compaction needs them, and reading a store should not wait for them
        import tempfile

        data = self.path / 'data.mdb'
        for stale in self.path.glob('.compact-*'):  # left by a compaction that crashed
            shutil.rmtree(stale, ignore_errors=True)
        before = os.stat(data).st_size
        map_size = shared.env.info()['map_size']
        try:
            staging = Path(tempfile.mkdtemp(prefix='.compact-', dir=self.path))
        except OSError as exc:
            raise _compaction_error(exc.strerror or str(exc), self.path, before) from None
        try:
            # LMDB's writer lock (in lock.mdb, shared by every process on the store) is held from
            # before the copy until the copy is in place: no commit can fall between the two, and a
            # writer that takes the lock next sees the new file (`check_identity`) before writing.
            hold = shared.env.begin(write=True)
            try:
                shared.check_identity()
                try:
                    shared.env.copy(str(staging), compact=True)
                except lmdb.Error as exc:
                    raise _compaction_error(str(exc), self.path, before) from None
                copy = staging / 'data.mdb'
                try:
                    fd = os.open(copy, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        os.fchmod(fd, 0o600)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    os.replace(copy, data)
                except OSError as exc:
                    raise _compaction_error(exc.strerror or str(exc), self.path, before) from None
                sync_directory(self.path)
            finally:
                hold.abort()
            with _registry_lock:
                for key, value in list(_registry.items()):
                    if value is shared:
                        del _registry[key]
                shared.env.close()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        # The old map is closed: open the compacted file (this handle's transactions wait meanwhile).
        try:
            fresh = _open_shared(self.path, map_size, self.sync)
        except BaseException:
            self._closed = True
            _release_store_lock(self._store_lock)
            raise
        shared.env, shared.dbs, shared.ident = fresh.env, fresh.dbs, fresh.ident
        with _registry_lock:
            for key, value in list(_registry.items()):
                if value is fresh:
                    _registry[key] = shared
        after = os.stat(data).st_size
        return CompactResult(bytes_before=before, bytes_after=after)


@dataclass(frozen=True)
class CompactResult:
    """What `LmdbEventLog.compact` did: the size of `data.mdb` before and after, in bytes."""

    bytes_before: int
    bytes_after: int


# --- the store lock: shared by every open handle, exclusive for compact -------------------------

LOCK_FILE = 'eventlog.lock'
"""The file in the store directory every process opening the store holds a shared `flock` on."""

COMPACT_LOCK_FILE = 'eventlog.compact.lock'
"""The gate a compaction holds (exclusive `flock`) while it asks for, holds and gives back the
exclusive lock on `LOCK_FILE`."""


class _StoreLock:
    """This process's shared `flock` on one store's lock file, counted over its handles."""

    def __init__(self, key: tuple[int, int], fd: int, path: Path) -> None:
        self.key = key
        self.fd = fd
        self.path = path
        self.refs = 1
        self.compacting = False
        self.lockable = True


_store_locks: dict[tuple[int, int], _StoreLock] = {}
_store_locks_cond = threading.Condition()


def _acquire_store_lock(path: Path, *, read_only: bool = False) -> _StoreLock:
    """Hold a shared lock on the store for one more handle of this process (waits while a
    compaction, here or in another process, has it).

    `read_only`: the lock file is opened for reading and never created; where it is absent or
    unreadable, the handle holds no lock (`lockable` is then false: nothing to compact anyway)."""
    st = path.stat()
    key = (st.st_dev, st.st_ino)
    lock_path = path / LOCK_FILE
    while True:
        with _store_locks_cond:
            held = _store_locks.get(key)
            while held is not None and held.compacting:
                _store_locks_cond.wait()
                held = _store_locks.get(key)
            if held is not None:
                held.refs += 1
                return held
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        try:
            fd = os.open(lock_path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if read_only:
                fd = -1  # a copy without the lock file, or one this process may not read
            else:
                raise StoreLocationError(
                    f'cannot open the lock file {lock_path}: {exc.strerror or exc}'
                    + ('; to read the store, open it read-only (read_only=True)' if _write_refused(exc) else '')
                ) from None
        if fd < 0:
            with _store_locks_cond:
                if key not in _store_locks:
                    lock = _store_locks[key] = _StoreLock(key, fd, path)
                    lock.lockable = False
                    return lock
            continue
        lockable = True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # blocks only while another process compacts
        except OSError as exc:
            if not read_only and exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                os.close(fd)
                raise StoreLocationError(f'cannot lock {lock_path}: {exc.strerror or exc}') from None
            lockable = False  # a file system without flock: the store opens, compact refuses
        with _store_locks_cond:
            if key not in _store_locks:
                lock = _store_locks[key] = _StoreLock(key, fd, path)
                lock.lockable = lockable
                return lock
        os.close(fd)  # another thread registered the store meanwhile: count on its lock


def _release_store_lock(lock: _StoreLock) -> None:
    with _store_locks_cond:
        lock.refs -= 1
        if lock.refs == 0:
            if _store_locks.get(lock.key) is lock:
                del _store_locks[lock.key]
            if lock.fd >= 0:
                os.close(lock.fd)  # releases the flock


def _write_refused(exc: OSError) -> bool:
    """Whether `exc` says the file system or the permissions refuse a write."""
    return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)


def _upgrade_store_lock(lock: _StoreLock, path: Path) -> int:
    """Turn this process's shared lock into an exclusive one, or raise `StoreBusyError`; return
    the descriptor of the gate, held until `_downgrade_store_lock`.

    `flock` converts a lock by dropping it and taking the other kind, so a conversion that fails
    (or succeeds) can leave a moment with no lock held. Only a process holding the gate (the
    exclusive lock on `COMPACT_LOCK_FILE`) ever asks for the exclusive store lock, so in that
    moment nobody else can take it: taking the shared lock back never waits, and no other
    compaction can start while this process still has the store mapped.
    """
    if not lock.lockable:
        raise StoreBusyError(
            f'the file system holding {path} does not support file locks, so whether another process has '
            f'the store open cannot be told; compact refuses rather than risk its writes'
        )
    gate_path = path / COMPACT_LOCK_FILE
    try:
        gate = os.open(gate_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StoreBusyError(f'cannot open the compaction lock {gate_path}: {exc.strerror or exc}') from None
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(gate)
        if isinstance(exc, BlockingIOError):
            raise StoreBusyError(f'another process is compacting the store at {path}; compact again later') from None
        raise StoreBusyError(f'cannot lock {gate_path}: {exc.strerror or exc}') from None
    try:
        fcntl.flock(lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fcntl.flock(lock.fd, fcntl.LOCK_SH)  # never waits: only the gate's holder takes LOCK_EX
        holders = _lock_holders(lock.fd)
        os.close(gate)
        who = f' (pid {", ".join(map(str, holders))})' if holders else ''
        raise StoreBusyError(
            f'the store at {path} is open in another process{who}; compacting it now would lose that '
            f"process's writes. Close it and run compact again"
        ) from None
    except BaseException:
        os.close(gate)
        raise
    return gate


def _downgrade_store_lock(lock: _StoreLock, gate: int) -> None:
    """Back to the shared lock, then release the gate (in this order: see `_upgrade_store_lock`)."""
    with contextlib.suppress(OSError):  # the descriptor is gone when the handle closed on a failed reopen
        fcntl.flock(lock.fd, fcntl.LOCK_SH)
    os.close(gate)


def _lock_holders(fd: int) -> list[int]:
    """Other processes holding a `flock` on the file behind `fd`, where /proc/locks tells (Linux)."""
    st = os.fstat(fd)
    ident = f'{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}'
    holders: set[int] = set()
    with contextlib.suppress(OSError), open('/proc/locks') as fh:
        for line in fh:
            fields = line.split()
            if 'FLOCK' in fields and len(fields) >= 6 and fields[-3] == ident:
                pid = fields[-4]
                if pid.isdigit() and int(pid) != os.getpid():
                    holders.add(int(pid))
    return sorted(holders)


_LOW_SPACE = 8 * 1024 * 1024
"""Free bytes under which a failed write is blamed on a full disk (LMDB often reports it as EIO)."""


def _free_bytes(path: Path) -> int | None:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _compaction_error(reason: str, path: Path, size: int) -> StorageError:
    """A compaction that failed before its copy was in place: the store is as it was."""
    free = _free_bytes(path)
    room = f'; it needs room for a copy of up to {size} bytes and {free} bytes are free' if free is not None else ''
    return StorageError(f'compacting {path} failed ({reason}){room}. The store is unchanged')


def _storage_error(exc: lmdb.Error, path: Path) -> StorageError:
    free = _free_bytes(path)
    full = isinstance(exc, lmdb.DiskError) or getattr(exc, 'errno', None) == errno.ENOSPC or 'No space' in str(exc)
    if full or (free is not None and free < _LOW_SPACE and ('Input/output' in str(exc) or 'commit' in str(exc))):
        where = f'{free} bytes free' if free is not None else 'no space left'
        return StorageError(
            f'the disk holding {path} is full ({where}); this write was not committed, nothing earlier was lost. '
            f'Free some space and reopen the store. ({exc})'
        )
    if isinstance(exc, lmdb.ReadersFullError):
        return StorageError(f'too many readers hold the store open ({exc})')
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError)):
        return StorageError(f'the store file is damaged ({exc}); restore it from an export or a backup')
    return StorageError(f'the storage engine failed: {exc}')


_VERIFY_TRIES = 20
"""Read transactions `verify` starts before giving up on finding its snapshot's meta page."""


def _verify_snapshot(path: Path, layout: _Layout, txn: lmdb.Transaction) -> VerifyReport | None:
    """Walk the file's structure in the snapshot `txn` pins; if it is sound, run the logical
    checks in the same transaction. None when a writer moved on too fast to find the snapshot.

    On a damaged structure the logical checks are skipped: LMDB cursors over a damaged tree
    can crash the process.
    """
    from eventlog._verify import report_of
    from eventlog._verify import verify as verify_store

    try:
        fd = os.open(path / 'data.mdb', os.O_RDONLY)
    except OSError as exc:
        raise StorageError(f'cannot read {path / "data.mdb"}: {exc.strerror or exc}') from None
    try:
        findings = lmdb_check.walk(lambda offset, size: os.pread(fd, size, offset), txn.id())
    except LookupError:
        return None
    finally:
        os.close(fd)
    if findings:
        problems = [VerifyProblem('', 0, f'{where}: {reason}', code='structure') for where, reason in findings]
        problems.append(
            VerifyProblem(
                '',
                0,
                'the store file is damaged, so its entries were not read (a damaged tree can crash a reader); '
                'restore the store from a backup or an export',
                code='structure',
            )
        )
        return report_of(problems)
    return verify_store(_LmdbTxn(txn, layout))
