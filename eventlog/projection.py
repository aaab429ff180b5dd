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

A projection's keys are its own, but most name a `seq` or an id; `seq_key`, `key_seq` and
`id_prefix` encode them the way the log's own tables do, so that keys sort in `seq` order and
one id's prefix never matches another id's keys.
"""

from __future__ import annotations

import importlib
import re
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast, runtime_checkable

import msgspec

from eventlog import _engine as engine
from eventlog import _keys as keys
from eventlog._keys import META_PROJECTION_PREFIX
from eventlog._storage import ProjectionRecords, ProjectionWriter, ReadTxn, Table, TableId, WriteTxn, prefix_end
from eventlog.entries import ConversationRecord, Entry, RunRecord
from eventlog.errors import InvalidArgumentError

__all__ = [
    'BranchMessage',
    'CatalogueEntry',
    'CataloguedStore',
    'LogReader',
    'ProjectionOverlay',
    'ProjectionRecords',
    'ProjectionSpec',
    'ProjectionStore',
    'ProjectionWriter',
    'id_prefix',
    'keep_as_is',
    'key_seq',
    'maintain_projections',
    'seq_key',
]

T = TypeVar('T')

BranchMessage = tuple[int, str, bytes]
"""A message on a branch: its `seq`, its conversation, and its pydantic-ai JSON."""

_NAME = re.compile(r'[a-z][a-z0-9_]{0,31}')


# --- keys of a projection's records -----------------------------------------------------------


def seq_key(seq: int) -> bytes:
    """A `seq` as the 8 bytes big-endian the log's own keys use, so that keys sort in `seq` order."""
    return keys.seq_key(seq)


def key_seq(key: bytes) -> int:
    """The `seq` a key ends with (its last 8 bytes, as `seq_key` wrote them)."""
    return keys.key_seq(key)


def id_prefix(identifier: str) -> bytes:
    """An id (of a conversation or a run) as a key prefix: its UTF-8 bytes and a NUL, which ids may
    not contain, so that one id's prefix never matches the keys of another id it is a prefix of."""
    return keys.ck(identifier)


@dataclass(frozen=True)
class ProjectionSpec:
    """A projection's name and the names of its tables (lowercase letters, digits and `_`).

    Backends derive their storage names from these: LMDB keeps table `t` of projection
    `p` in the named database `p.t`. The first write of a projection records it, with its
    `format` and `maintainer`, in the store's catalogue of projections (`CatalogueEntry`).
    """

    name: str
    tables: tuple[str, ...]
    format: str = ''
    """The layout of the records, as the catalogue records it (the projection's own version)."""
    maintainer: str | None = None
    """`'module:function'`: what the log imports and calls with the store before every scrub and
    compaction, so that the projection drops what was erased or deleted (the BM25 index catches
    up). `None`: the log clears the projection instead (it rebuilds from the log)."""

    def __post_init__(self) -> None:
        for part in (self.name, *self.tables):
            if not _NAME.fullmatch(part):
                raise InvalidArgumentError(
                    f'{part!r} is not a projection or table name (lowercase letters, digits and _, up to 32)'
                )
        if len(set(self.tables)) != len(self.tables):
            raise InvalidArgumentError(f'projection {self.name!r} names a table twice')
        if self.maintainer is not None and not _REFERENCE.fullmatch(self.maintainer):
            raise InvalidArgumentError(f'a maintainer is a module:function reference, got {self.maintainer!r}')


_REFERENCE = re.compile(r'[A-Za-z_][\w.]*:[A-Za-z_]\w*')


class CatalogueEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A projection the store holds, as its catalogue records it (META `projection/<name>`)."""

    name: str
    tables: tuple[str, ...]
    format: str
    maintainer: str | None
    """What the log runs before a scrub or a compaction (`ProjectionSpec.maintainer`)."""

    @classmethod
    def of(cls, spec: ProjectionSpec) -> CatalogueEntry:
        """The entry recording `spec`."""
        return cls(spec.name, spec.tables, spec.format, spec.maintainer)


_entry_enc = msgspec.json.Encoder()
_entry_dec = msgspec.json.Decoder(CatalogueEntry)


def read_catalogue(txn: ReadTxn) -> list[CatalogueEntry]:
    """The store's catalogue of projections, by name (an entry that cannot be read is skipped:
    its projection is then cleared, not maintained)."""
    entries: list[CatalogueEntry] = []
    for _, value in txn.scan(Table.META, prefix=META_PROJECTION_PREFIX):
        try:
            entries.append(_entry_dec.decode(value))
        except msgspec.DecodeError:
            continue
    return entries


def record_in_catalogue(txn: WriteTxn, spec: ProjectionSpec) -> None:
    """Record `spec` in the store's catalogue, unless it is recorded as it is already."""
    key = META_PROJECTION_PREFIX + spec.name.encode()
    value = _entry_enc.encode(CatalogueEntry.of(spec))
    if txn.get(Table.META, key) != value:
        txn.put(Table.META, key, value)


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


class ProjectionOverlay:
    """A `ProjectionWriter` over a projection's stored records that keeps every write in memory:
    its reads see the stored records as changed by the writes made through it, and nothing
    reaches the store. What a check runs in where no write transaction may be opened (a
    read-only store: `PersistentIndex.verify`); it holds every record written in memory."""

    __slots__ = ('_changes', '_cleared', '_keys', '_position', '_position_set', '_records')

    def __init__(self, records: ProjectionRecords) -> None:
        self._records = records
        self._changes: dict[str, dict[bytes, bytes | None]] = {}
        """Per table, each key written (`None`: deleted) since the overlay began."""
        self._keys: dict[str, list[bytes]] = {}
        """The keys of `_changes`, per table, in key order."""
        self._cleared = False
        self._position: int | None = None
        self._position_set = False

    def position(self) -> int | None:
        """The position set through the overlay, else the stored one."""
        if self._position_set:
            return self._position
        return None if self._cleared else self._records.position()

    def get(self, table: str, key: bytes) -> bytes | None:
        """A record as the overlay's writes left it."""
        changes = self._changes.get(table)
        if changes is not None and key in changes:
            return changes[key]
        return None if self._cleared else self._records.get(table, key)

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The stored records merged with the overlay's writes, in the order `ProjectionRecords.scan` gives."""
        stored = iter(()) if self._cleared else self._records.scan(table, prefix=prefix, start=start, reverse=reverse)
        changes = self._changes.get(table, {})
        written = self._written(table, prefix, start, reverse)
        mine = next(written, None)
        theirs = next(stored, None)
        while mine is not None or theirs is not None:
            if theirs is None or (mine is not None and (mine < theirs[0] if not reverse else mine > theirs[0])):
                assert mine is not None
                value = changes[mine]
                if value is not None:
                    yield mine, value
                mine = next(written, None)
                continue
            if mine is not None and mine == theirs[0]:  # the overlay's write hides the stored record
                value = changes[mine]
                if value is not None:
                    yield mine, value
                mine = next(written, None)
            else:
                yield theirs
            theirs = next(stored, None)

    def _written(self, table: str, prefix: bytes, start: bytes | None, reverse: bool) -> Iterator[bytes]:
        keys = self._keys.get(table, [])
        if not reverse:
            index = bisect_left(keys, prefix if start is None else max(prefix, start))
            while index < len(keys) and keys[index].startswith(prefix):
                yield keys[index]
                index += 1
            return
        if start is not None:
            index = bisect_right(keys, start)
        else:
            upper = prefix_end(prefix)
            index = len(keys) if upper is None else bisect_left(keys, upper)
        while index > 0:
            index -= 1
            key = keys[index]
            if not key.startswith(prefix):
                if key < prefix:
                    return
                continue
            yield key

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        """The record with the largest key starting with `prefix`."""
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def _set(self, table: str, key: bytes, value: bytes | None) -> None:
        changes = self._changes.setdefault(table, {})
        if key not in changes:
            insort(self._keys.setdefault(table, []), key)
        changes[key] = value

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Write a record, in memory only."""
        self._set(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        """Delete a record, in memory only."""
        self._set(table, key, None)

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        """Delete every record whose key starts with `prefix`, in memory only; return their keys."""
        removed = [key for key, _ in self.scan(table, prefix=prefix)]
        for key in removed:
            self._set(table, key, None)
        return removed

    def set_position(self, seq: int) -> None:
        """Set the position, in memory only."""
        self._position, self._position_set = seq, True

    def clear(self) -> None:
        """Hide every stored record and the position, in memory only."""
        self._cleared = True
        self._changes.clear()
        self._keys.clear()
        self._position, self._position_set = None, True


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


@runtime_checkable
class CataloguedStore(ProjectionStore, Protocol):
    """A projection store with a catalogue of its projections (every backend, and `LocalProjections`)."""

    def projection_catalogue(self) -> list[CatalogueEntry]:
        """The projections recorded in the store's catalogue."""
        ...

    def present_projections(self) -> set[str]:
        """The names of every projection the store holds records or a position of, catalogued or not."""
        ...

    def clear_projection(self, name: str) -> None:
        """Remove every record and the position of the projection `name` (it rebuilds from the log)."""
        ...


def keep_as_is(store: ProjectionStore) -> None:
    """A maintainer for a projection that copies no content of the log (counts, positions): a
    scrub or a compaction leaves it as it is."""


def maintain_projections(store: CataloguedStore) -> list[str]:
    """Before a scrub or a compaction: run the maintainer of every projection the store holds, and
    clear each one without a maintainer, or whose maintainer cannot be imported or fails.

    Returns the names of the projections cleared. Clearing is always safe (a projection rebuilds
    from the log), so what a process imported never decides whether erased text stays in one.
    Errors of clearing itself propagate (the scrub then reports it did not finish).
    """
    catalogue = {entry.name: entry for entry in store.projection_catalogue()}
    cleared: list[str] = []
    for name in sorted(store.present_projections() | catalogue.keys()):
        entry = catalogue.get(name)
        if entry is not None and entry.maintainer is not None:
            try:
                _resolve(entry.maintainer)(store)
                continue
            except Exception:  # any failure: clear instead, which is always safe
                pass
        store.clear_projection(name)
        cleared.append(name)
    return cleared


def _resolve(reference: str) -> Callable[[ProjectionStore], object]:
    module, _, function = reference.partition(':')
    found = getattr(importlib.import_module(module), function)
    if not callable(found):
        raise TypeError(f'{reference} is not callable')
    return cast('Callable[[ProjectionStore], object]', found)
