"""`LocalProjections`: projections of a shared log kept in a local LMDB directory.

A projection's records can live in the log's own store (the default: on PostgreSQL, tables
every machine shares) or, with this class, in an LMDB directory on the machine that reads
them, following the shared log by position. Each machine then keeps its own copy of, say, the
search index: its reads are local memory-mapped reads instead of network round trips, and it
still sees every append any machine committed, because it catches up to the log's last `seq`
before answering (docs/postgres.md).

The position is stored with the records in the local store, in the same LMDB transaction, so a
crash never leaves records the position does not account for; the directory can be deleted at
any time and is rebuilt from the log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from eventlog._storage import ReadTxn, TableId
from eventlog.entries import RunRecord
from eventlog.lmdb_log import LmdbEventLog
from eventlog.projection import CatalogueEntry, LogReader, ProjectionRecords, ProjectionSpec, ProjectionWriter

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = ['LocalProjections', 'PendingPosition', 'SnapshotLog']

T = TypeVar('T')


class PendingPosition(Protocol):
    """A read of the log's last `seq` under way: `result()` waits for it."""

    def result(self) -> int: ...


class SnapshotLog(Protocol):
    """A log that can hold a read snapshot open (`PostgresEventLog`), with a run's record and messages."""

    def snapshot(self, *, consistent: bool = True) -> AbstractContextManager[ReadTxn]: ...

    def start_last_seq(self) -> PendingPosition: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def run_messages(self, run_id: str) -> list[ModelMessage]: ...


class _LazySnapshot:
    """A `ReadTxn` over the log that takes a connection on its first read (many projection reads
    need only their own records, and then cost no round trip to the log), each read a statement
    of its own."""

    def __init__(self, log: SnapshotLog) -> None:
        self._log = log
        self._opened: AbstractContextManager[ReadTxn] | None = None
        self._txn: ReadTxn | None = None

    def _open(self) -> ReadTxn:
        if self._txn is None:
            # Searches read entries (which never change) and the last seq: no snapshot needed.
            opened = self._log.snapshot(consistent=False)
            self._txn = opened.__enter__()
            self._opened = opened
        return self._txn

    def close(self, error: BaseException | None = None) -> None:
        """Give back the connection, if a read took one (most reads of a local projection take
        none); `error` is what the reader raised, if anything."""
        opened, self._opened, self._txn = self._opened, None, None
        if opened is None:
            return
        if error is None:
            opened.__exit__(None, None, None)
        else:
            opened.__exit__(type(error), error, error.__traceback__)

    def get(self, table: TableId, key: bytes) -> bytes | None:
        return self._open().get(table, key)

    def get_many(self, table: TableId, keys: Sequence[bytes]) -> list[bytes | None]:
        txn = self._open()
        get_many = getattr(txn, 'get_many', None)
        if get_many is None:
            return [txn.get(table, key) for key in keys]
        return cast('Callable[[TableId, Sequence[bytes]], list[bytes | None]]', get_many)(table, keys)

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._open().scan(table, prefix=prefix, start=start, reverse=reverse)

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return self._open().last(table, prefix)


class LocalProjections:
    """The projection API (`eventlog.projection.ProjectionStore`) of `log`, with the records in
    the LMDB directory `path` (created if absent) and the log read from `log`.

    Pass it wherever a log's projections are used, e.g. `PersistentIndex(LocalProjections(log, path))`
    for a search index local to this machine. Close it when done (`close`, or `with`).
    """

    persistent = True
    projections_apart = True
    """The records are kept apart from the log: a projection keeps locally what its readers show
    (the search index keeps the messages it shows), since every read of the log is a round trip."""

    def __init__(self, log: SnapshotLog, path: str | os.PathLike[str]) -> None:
        self.log = log
        self._records = LmdbEventLog(path)
        self.path = self._records.path
        """The local directory."""

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the local records (one LMDB read transaction) and a reader of the log that
        connects only if `fn` reads the log; its reads are single statements, not one snapshot
        (entries never change; a projection's reads that need a snapshot happen in `write_projection`)."""

        def run(records: ProjectionRecords, _: LogReader) -> T:
            lazy = _LazySnapshot(self.log)
            try:
                result = fn(records, LogReader(lazy))
            except BaseException as exc:
                lazy.close(exc)
                raise
            lazy.close()
            return result

        return self._records.read_projection(spec, run)

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one local write transaction (records and position commit together) over one
        snapshot of the log; writers in this directory take turns."""

        def run(records: ProjectionWriter, _: LogReader) -> T:
            with self.log.snapshot() as txn:
                return fn(records, LogReader(txn))

        return self._records.write_projection(spec, run)

    def start_log_position(self) -> PendingPosition:
        """Start reading the log's last `seq` and return at once (`result()` waits for it).

        A reader of a local projection checks that it is current with one round trip to the
        log; started first, that round trip overlaps the reader's local work (the search index
        searches its records meanwhile, then catches up and searches again only when the log
        moved on). Every append committed before this call counts (on PostgreSQL, once the
        appends in flight before it have ended: the log's settled position).
        """
        return self.log.start_last_seq()

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in the local directory."""
        return self._records.has_projection(name)

    def projection_catalogue(self) -> list[CatalogueEntry]:
        """The projections recorded in the local directory's catalogue."""
        return self._records.projection_catalogue()

    def present_projections(self) -> set[str]:
        """The names of the projections the local directory holds."""
        return self._records.present_projections()

    def clear_projection(self, name: str) -> None:
        """Empty the projection `name` in the local directory (it rebuilds from the log)."""
        self._records.clear_projection(name)

    def compact(self) -> None:
        """Rewrite the local directory's `data.mdb` without its free pages (which may hold text
        an erasure removed from the projections): `LmdbEventLog.compact` of the directory. Its
        projections are maintained beforehand by the log's scrub, which reads the shared log.

        Raises `StoreBusyError` when another process has the directory open.
        """
        self._records._compact_sync(maintain=False)  # pyright: ignore[reportPrivateUsage]

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run's record, from the log."""
        return await self.log.get_run(run_id)

    async def run_messages(self, run_id: str) -> list[ModelMessage]:
        """The run's messages, from the log."""
        return await self.log.run_messages(run_id)

    def close(self) -> None:
        """Close the local directory (the log stays open)."""
        self._records.close()

    def __enter__(self) -> LocalProjections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
