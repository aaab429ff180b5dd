"""Tracked projections: derived records kept in the log's store, following the log by position.

A projection (the persistent search index, say) has a name, a few named tables of its own
records, and a position: the last `seq` it has applied. Both backends run a projection's
function inside one transaction of the store, handing it the projection's records
(`ProjectionRecords`, or `ProjectionWriter` in a write transaction) and a `LogReader` over
the same snapshot of the log. The position is stored with the records, so a write
transaction commits the projection's writes and its new position together or neither: a
crash never leaves records that the position does not account for. A projection can
always be cleared and rebuilt from the entries (docs/projections.md; docs/invariants.md,
invariant 6).

Typical use, one batch of a catch-up::

    def apply(records: ProjectionWriter, log: LogReader) -> int:
        position = records.position() or 0
        for entry in log.entries_after(position, limit=1000):
            ...  # records.put(...)
            position = entry.seq
        records.set_position(position)
        return position

    log.write_projection(ProjectionSpec('mine', ('docs',)), apply)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast, runtime_checkable

from eventlog import _engine as engine
from eventlog._storage import ProjectionRecords, ProjectionWriter, ReadTxn, Table, TableId
from eventlog.entries import ConversationRecord, Entry, RunRecord
from eventlog.errors import InvalidArgumentError

__all__ = [
    'BranchMessage',
    'LogReader',
    'ProjectionRecords',
    'ProjectionSpec',
    'ProjectionStore',
    'ProjectionWriter',
]

T = TypeVar('T')

BranchMessage = tuple[int, str, bytes]
"""A message on a branch: its `seq`, its conversation, and its pydantic-ai JSON."""

_NAME = re.compile(r'[a-z][a-z0-9_]{0,31}')


@dataclass(frozen=True)
class ProjectionSpec:
    """A projection's name and the names of its tables (lowercase letters, digits and `_`).

    Backends derive their storage names from these: LMDB keeps table `t` of projection
    `p` in the named database `p.t`.
    """

    name: str
    tables: tuple[str, ...]

    def __post_init__(self) -> None:
        for part in (self.name, *self.tables):
            if not _NAME.fullmatch(part):
                raise InvalidArgumentError(
                    f'{part!r} is not a projection or table name (lowercase letters, digits and _, up to 32)'
                )
        if len(set(self.tables)) != len(self.tables):
            raise InvalidArgumentError(f'projection {self.name!r} names a table twice')


class LogReader:
    """The log as seen from inside one transaction (the snapshot a projection's function runs in)."""

    def __init__(self, txn: ReadTxn) -> None:
        self._txn = txn

    def last_seq(self) -> int:
        """The largest `seq` assigned so far."""
        return engine.last_seq(self._txn)

    def entries_after(self, seq: int, *, limit: int | None = None) -> Iterator[Entry]:
        """The entries with a larger `seq`, in order (at most `limit` of them, if given)."""
        if limit is None:
            return engine.iter_entries(self._txn, after_seq=seq)
        return _take(engine.iter_entries(self._txn, after_seq=seq), limit)

    def conversation_entries(self, conversation_id: str, *, before: int | None = None) -> Iterator[Entry]:
        """The conversation's entries in order (only those below `before`, if given)."""
        for entry in engine.iter_entries(self._txn, conversation_id=conversation_id):
            if before is not None and entry.seq >= before:
                return
            yield entry

    def run(self, run_id: str) -> RunRecord | None:
        """A run's record."""
        return engine.get_run(self._txn, run_id)

    def run_at(self, start_seq: int) -> str | None:
        """The id of the run whose `run_started` entry has this `seq`."""
        raw = self._txn.get(Table.RUN_ORDER, engine.seq_key(start_seq))
        return None if raw is None else engine.decode_id(raw, 'a run id in the run order index')

    def runs_at(self, starts: Sequence[int]) -> list[str | None]:
        """`run_at` of several `seq`s, read together where the store can (one round trip to PostgreSQL)."""
        values = self._get_many(Table.RUN_ORDER, [engine.seq_key(start) for start in starts])
        return [None if raw is None else engine.decode_id(raw, 'a run id in the run order index') for raw in values]

    def _get_many(self, table: TableId, keys: list[bytes]) -> list[bytes | None]:
        get_many = getattr(self._txn, 'get_many', None)
        if get_many is None:
            return [self._txn.get(table, key) for key in keys]
        return cast('Callable[[TableId, Sequence[bytes]], list[bytes | None]]', get_many)(table, keys)

    def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation's record (`None` when absent or deleted)."""
        record = engine.get_conversation(self._txn, conversation_id)
        return None if record is None or record.deleted else record

    def entry(self, seq: int) -> Entry | None:
        """One entry."""
        return engine.get_entry(self._txn, seq)

    def payload(self, seq: int) -> bytes | None:
        """One entry's payload, without building the whole entry."""
        value = self._txn.get(Table.ENTRIES, engine.seq_key(seq))
        return None if value is None else engine.decode_body(seq, value).payload

    def payloads(self, seqs: Sequence[int]) -> list[bytes | None]:
        """The payloads of several entries (`None` for one absent), read together where the
        store can (one round trip to PostgreSQL)."""
        values = self._get_many(Table.ENTRIES, [engine.seq_key(seq) for seq in seqs])
        return [
            None if value is None else engine.decode_body(seq, value).payload
            for seq, value in zip(seqs, values, strict=True)
        ]

    def branch_messages(self, tip: int | None) -> list[BranchMessage]:
        """The messages on the branch ending at `tip`, oldest first."""
        bodies = engine.branch_bodies(self._txn, tip)
        return [(b.seq, b.conversation_id, b.payload) for b in bodies if b.kind == 'message']


def _take(entries: Iterator[Entry], limit: int) -> Iterator[Entry]:
    if limit <= 0:
        return
    for count, entry in enumerate(entries, 1):
        yield entry
        if count >= limit:
            return


@runtime_checkable
class ProjectionStore(Protocol):
    """What a backend offers projections; `InMemoryEventLog` and `LmdbEventLog` both do."""

    def read_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionRecords, LogReader], T]) -> T:
        """Run `fn` with the projection's records and the log, both from one consistent snapshot."""
        ...

    def write_projection(self, spec: ProjectionSpec, fn: Callable[[ProjectionWriter, LogReader], T]) -> T:
        """Run `fn` in one write transaction: its writes and position commit if it returns, none if it raises.

        Writes of the log wait meanwhile, so the log does not move under the projection.
        """
        ...

    def has_projection(self, name: str) -> bool:
        """Whether the projection called `name` was ever opened in this store (its tables exist,
        empty or not); asking creates nothing."""
        ...
