"""`InMemoryEventLog`: the log in process memory, for tests and short-lived agents."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from eventlog import _engine as engine
from eventlog._storage import MemoryTables, MemoryTxn, ReadTxn, WriteTxn
from eventlog.log import EventLogBase

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
