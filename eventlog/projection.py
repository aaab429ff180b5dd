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
import importlib.metadata
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar, cast, runtime_checkable

import msgspec

from eventlog import _engine as engine
from eventlog import _keys as keys
from eventlog._keys import META_PROJECTION_PREFIX
from eventlog._storage import ProjectionRecords, ProjectionWriter, ReadTxn, Table, TableId, WriteTxn
from eventlog.entries import ConversationRecord, Entry, RunRecord
from eventlog.errors import InvalidArgumentError

__all__ = [
    'MAINTAINER_GROUP',
    'BranchMessage',
    'CatalogueEntry',
    'CataloguedStore',
    'LogReader',
    'ProjectionRecords',
    'ProjectionSpec',
    'ProjectionStore',
    'ProjectionWriter',
    'id_prefix',
    'is_projection_name',
    'keep_as_is',
    'key_seq',
    'maintain_projections',
    'maintainer_for',
    'seq_key',
]

T = TypeVar('T')

BranchMessage = tuple[int, str, bytes]
"""A message on a branch: its `seq`, its conversation, and its pydantic-ai JSON."""

_NAME = re.compile(r'[a-z][a-z0-9_]{0,31}')


def is_projection_name(name: str) -> bool:
    """Whether `name` can name a projection or one of its tables (lowercase letters, digits and
    `_`, starting with a letter, up to 32). Other names found in a store were not written by a
    projection: a scrub leaves them alone rather than failing on them."""
    return _NAME.fullmatch(name) is not None


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
    `format`, in the store's catalogue of projections (`CatalogueEntry`).

    The name is also the projection's kind: it is all the log goes by to choose the code that
    maintains the projection before a scrub or a compaction (`maintainer_for`), code installed in
    this process, never named by the store.
    """

    name: str
    tables: tuple[str, ...]
    format: str = ''
    """The layout of the records, as the catalogue records it (the projection's own version)."""

    def __post_init__(self) -> None:
        for part in (self.name, *self.tables):
            if not is_projection_name(part):
                raise InvalidArgumentError(
                    f'{part!r} is not a projection or table name (lowercase letters, digits and _, up to 32)'
                )
        if len(set(self.tables)) != len(self.tables):
            raise InvalidArgumentError(f'projection {self.name!r} names a table twice')


class CatalogueEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A projection the store holds, as its catalogue records it (META `projection/<name>`)."""

    name: str
    tables: tuple[str, ...]
    format: str
    maintainer: str | None = None
    """Earlier versions recorded a `module:function` here, which the log imported and called. It
    is read and ignored: the projection's name (its kind) alone chooses its maintainer, from code
    installed in this process (`maintainer_for`). New entries record `None`."""

    @classmethod
    def of(cls, spec: ProjectionSpec) -> CatalogueEntry:
        """The entry recording `spec`."""
        return cls(spec.name, spec.tables, spec.format)


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

    def as_of(self, seq: int) -> LogReader:
        """This reader, with the log ending at `seq`: `last_seq` is at most `seq` and
        `entries_after` stops there (to rebuild a projection to the position it was read at)."""
        return _LogReaderAsOf(self._txn, seq)


class _LogReaderAsOf(LogReader):
    """A `LogReader` whose log ends at `end` (`LogReader.as_of`)."""

    def __init__(self, txn: ReadTxn, end: int) -> None:
        super().__init__(txn)
        self._end = end

    def last_seq(self) -> int:
        return min(super().last_seq(), self._end)

    def entries_after(self, seq: int, *, limit: int | None = None) -> Iterator[Entry]:
        bounded = _until(engine.iter_entries(self._txn, after_seq=seq), self._end)
        return bounded if limit is None else _take(bounded, limit)

    def as_of(self, seq: int) -> LogReader:
        return _LogReaderAsOf(self._txn, min(seq, self._end))


def _until(entries: Iterator[Entry], end: int) -> Iterator[Entry]:
    """`entries` (in `seq` order) up to the first past `end`."""
    for entry in entries:
        if entry.seq > end:
            return
        yield entry


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


MAINTAINER_GROUP: Final = 'eventlog.projections'
"""The entry-point group through which an installed package names the maintainer of its own
projection kind: an entry `mykind = mypackage.module:maintain` in the package's metadata. Whoever
installed the package chose that code; a store only ever names the kind."""

_BUILT_IN: Final[Mapping[str, tuple[str, str]]] = {
    'ix': ('search.persistent_index', 'maintain_index'),
    'vx': ('search.vector_index', 'maintain_vectors'),
}
"""The kinds this distribution ships, by name: the persistent search index and the vectors.
Their modules are imported only when a store holds them (`eventlog` never imports `search`)."""


def maintainer_for(kind: str) -> Callable[[ProjectionStore], object] | None:
    """The code that maintains projections of `kind` (a projection's name) before a scrub or a
    compaction: this distribution's own for the kinds it ships (`ix`, `vx`), else an entry of
    `MAINTAINER_GROUP` in installed packages' metadata; `None` when there is none or it cannot be
    loaded (the projection is then cleared, which is always safe). Nothing read from a store is
    imported: the kind is only looked up in these two tables."""
    built_in = _BUILT_IN.get(kind)
    try:
        if built_in is not None:
            module, function = built_in
            found: object = getattr(importlib.import_module(module), function)
        else:
            entries = importlib.metadata.entry_points(group=MAINTAINER_GROUP, name=kind)
            found = next(iter(entries)).load() if entries else None
    except Exception:  # not installed, or broken: the projection is cleared instead
        return None
    return cast('Callable[[ProjectionStore], object]', found) if callable(found) else None


def maintain_projections(store: CataloguedStore) -> list[str]:
    """Before a scrub or a compaction: run the maintainer of every catalogued projection
    (`maintainer_for` its name), and clear each one without a maintainer, whose maintainer fails,
    or that the store holds without a catalogue entry.

    Returns the names of the projections cleared. Clearing is always safe (a projection rebuilds
    from the log), so what a process has installed never decides whether erased text stays in one.
    A name no projection can have (`is_projection_name`; written into the store by hand) is left
    alone, so that it cannot keep the scrub from finishing. Errors of clearing itself propagate
    (the scrub then reports it did not finish).
    """
    catalogued = {entry.name for entry in store.projection_catalogue()}
    cleared: list[str] = []
    for name in sorted(n for n in store.present_projections() | catalogued if is_projection_name(n)):
        maintainer = maintainer_for(name) if name in catalogued else None
        if maintainer is not None:
            try:
                maintainer(store)
                continue
            except Exception:  # any failure: clear instead, which is always safe
                pass
        store.clear_projection(name)
        cleared.append(name)
    return cleared
