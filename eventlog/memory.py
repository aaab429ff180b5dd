"""`InMemoryEventLog`: the log in process memory, for tests and short-lived agents."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from eventlog import _engine as engine
from eventlog._memory_projection import MemoryProjections
from eventlog._storage import MemoryTables, MemoryTxn, ProjectionRecords, ProjectionWriter, ReadTxn, WriteTxn
from eventlog.log import EventLogBase
from eventlog.projection import CatalogueEntry, LogReader, ProjectionSpec, read_catalogue, record_in_catalogue

__all__ = ['InMemoryEventLog']

T = TypeVar('T')


class InMemoryEventLog(EventLogBase):
    """An `EventLog` kept in memory: same behaviour as `LmdbEventLog`, nothing persisted.

    Transactions are serialized by a lock, so a write is all-or-nothing and readers in
    worker threads never see half of one.
    """

    def __init__(self) -> None:
        self._tables = MemoryTables()
        self._lock = threading.RLock()
        self._projections = MemoryProjections()
        self._write_sync(engine.init_format)

    def _read_sync(self, fn: Callable[[ReadTxn], T]) -> T:
        with self._lock:
            return fn(MemoryTxn(self._tables))

    def _write_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        with self._lock:
            txn = MemoryTxn(self._tables)
            try:
                return fn(txn)
            except BaseException:
                txn.rollback()
                raise

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the projection's records and the log (see `eventlog.projection`)."""
        with self._lock:
            return fn(self._projections.begin(spec.name), LogReader(MemoryTxn(self._tables)))

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one write transaction of the projection: all of it applies, or none if it
        raises. The first write of `spec` records it in the store's catalogue."""
        with self._lock:
            self._write_sync(lambda log_txn: record_in_catalogue(log_txn, spec))
            txn = self._projections.begin(spec.name)
            try:
                return fn(txn, LogReader(MemoryTxn(self._tables)))
            except BaseException:
                txn.rollback()
                raise

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store."""
        with self._lock:
            return self._projections.has(name)

    def projection_catalogue(self) -> list[CatalogueEntry]:
        """The projections recorded in the store's catalogue (see `eventlog.projection`)."""
        return self._read_sync(read_catalogue)

    def present_projections(self) -> set[str]:
        """The names of the projections ever opened in this store."""
        with self._lock:
            return self._projections.names()

    def clear_projection(self, name: str) -> None:
        """Empty the projection `name` and forget its position."""
        with self._lock:
            self._projections.begin(name).clear()

    def disk_size(self) -> int:
        """0: an in-memory log keeps nothing on disk."""
        return 0
