"""The check of the search index (`PersistentIndex.verify`): the index rebuilt beside itself, compared.

`PersistentIndex.verify` brings the index up to the log's last `seq`, rebuilds it from the entries
into `ScratchRecords` (the same tables, under the `SCRATCH` key prefix, in a transaction that is
always aborted), and `index_differences` walks the stored and rebuilt tables side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import msgspec

from eventlog.projection import ProjectionRecords, ProjectionWriter
from search.index_format import ALL_KEY, DROPPED, TABLES

__all__ = ['MAX_INDEX_FINDINGS', 'SCRATCH', 'IndexFinding', 'ScratchRecords', 'Verified', 'index_differences']


class IndexFinding(msgspec.Struct, frozen=True):
    """A difference between the search index and what the log's entries give it."""

    conversation_id: str
    """The conversation concerned; empty when the difference is not one conversation's."""
    table: str
    """The index table (`ix.` + this name) where the difference lies."""
    reason: str


class Verified(Exception):
    """Raised to abort `PersistentIndex.verify`'s transaction, carrying its findings."""

    def __init__(self, findings: list[IndexFinding]) -> None:
        super().__init__()
        self.findings = findings


MAX_INDEX_FINDINGS: Final = 20
"""Differences listed per index table; the rest are counted."""


SCRATCH: Final = b'\xff\xff\xffverify\x00'
"""Key prefix under which `PersistentIndex.verify` rebuilds the index beside the stored one, in its always
aborted transaction. No key the index writes starts with `0xff` (ids and terms are UTF-8, `seq`s
are big-endian below 2**63), so the rebuilt records sort after every stored one."""
_AFTER_SCRATCH: Final = SCRATCH[:-1] + b'\x01'
"""The smallest key after every key starting with `SCRATCH`."""


class ScratchRecords:
    """`ProjectionWriter` over the keys of another starting with `SCRATCH`: an empty projection
    of its own (with its position kept here) for `PersistentIndex.verify` to rebuild the index into."""

    __slots__ = ('_position', '_records')

    def __init__(self, records: ProjectionWriter) -> None:
        self._records = records
        self._position: int | None = None

    def position(self) -> int | None:
        return self._position

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._records.get(table, SCRATCH + key)

    def scan(
        self, table: str, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        cut = len(SCRATCH)
        found = self._records.scan(
            table, prefix=SCRATCH + prefix, start=None if start is None else SCRATCH + start, reverse=reverse
        )
        return ((key[cut:], value) for key, value in found)

    def last(self, table: str, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return next(self.scan(table, prefix=prefix, reverse=True), None)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._records.put(table, SCRATCH + key, value)

    def delete(self, table: str, key: bytes) -> None:
        self._records.delete(table, SCRATCH + key)

    def delete_prefix(self, table: str, prefix: bytes) -> list[bytes]:
        cut = len(SCRATCH)
        return [key[cut:] for key in self._records.delete_prefix(table, SCRATCH + prefix)]

    def set_position(self, seq: int) -> None:
        self._position = seq

    def clear(self) -> None:
        for table in TABLES:
            self._records.delete_prefix(table, SCRATCH)
        self._position = None


def _stored_items(records: ProjectionRecords, table: str) -> Iterator[tuple[bytes, bytes]]:
    """The stored records of `table` in key order, without the rebuilt ones (`SCRATCH`) nor
    the `DROPPED` mark (for caches, absent from indexes built before it: not derived content)."""
    for key, value in records.scan(table):
        if key.startswith(SCRATCH):
            break
        if table != 'meta' or key != DROPPED:
            yield key, value
    for key, value in records.scan(table, start=_AFTER_SCRATCH):  # damaged keys sorting after the rebuilt ones
        if table != 'meta' or key != DROPPED:
            yield key, value


def _rebuilt_items(records: ProjectionRecords, table: str) -> Iterator[tuple[bytes, bytes]]:
    cut = len(SCRATCH)
    for key, value in records.scan(table, prefix=SCRATCH):
        if table != 'meta' or key[cut:] != DROPPED:
            yield key[cut:], value


def _index_conversation(table: str, key: bytes) -> str:
    if table in ('meta', 'runs', 'starts') or key == ALL_KEY:
        return ''
    cut = key.find(b'\x00')
    return key[: max(cut, 0)].decode(errors='replace')


def _table_differences(
    table: str, have: Iterator[tuple[bytes, bytes]], want: Iterator[tuple[bytes, bytes]]
) -> list[IndexFinding]:
    """The differences between two tables given in key order, walked side by side: the first
    `MAX_INDEX_FINDINGS`, then how many more (neither table is held in memory)."""
    findings: list[IndexFinding] = []
    more = 0
    stored, rebuilt = next(have, None), next(want, None)
    while True:
        if stored is not None and (rebuilt is None or stored[0] < rebuilt[0]):
            key, what = stored[0], 'holds a key the entries do not give: {!r}'
            stored = next(have, None)
        elif rebuilt is not None and (stored is None or rebuilt[0] < stored[0]):
            key, what = rebuilt[0], 'lacks the key {!r}'
            rebuilt = next(want, None)
        elif stored is not None and rebuilt is not None:
            key, same = stored[0], stored[1] == rebuilt[1]
            stored, rebuilt = next(have, None), next(want, None)
            if same:
                continue
            what = 'holds another value under {!r}'
        else:
            break
        if len(findings) < MAX_INDEX_FINDINGS:
            shown = key[:60].decode('utf-8', errors='backslashreplace')
            findings.append(IndexFinding(_index_conversation(table, key), table, f'ix.{table} {what.format(shown)}'))
        else:
            more += 1
    if more:
        findings.append(IndexFinding('', table, f'ix.{table}: {more} more differences'))
    return findings


def index_differences(records: ProjectionRecords) -> list[IndexFinding]:
    """The differences between the stored index and the one rebuilt beside it (`SCRATCH`), table by table."""
    findings: list[IndexFinding] = []
    for table in TABLES:
        findings += _table_differences(table, _stored_items(records, table), _rebuilt_items(records, table))
    return findings
