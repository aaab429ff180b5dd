"""The check of the search index (`PersistentIndex.verify`): the index rebuilt beside itself, compared.

`PersistentIndex.verify` brings the index up to the log's last `seq`, then, in one read snapshot of
the store, rebuilds it from the entries up to the index's position into a scratch LMDB directory
of its own (committed batch by batch, so memory stays bounded, and removed afterwards), and
`index_differences` walks the stored and rebuilt tables side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import msgspec

from eventlog.projection import ProjectionRecords
from search.index_format import ALL_KEY, DROPPED, TABLES

__all__ = ['MAX_INDEX_FINDINGS', 'IndexFinding', 'index_differences']


class IndexFinding(msgspec.Struct, frozen=True):
    """A difference between the search index and what the log's entries give it."""

    conversation_id: str
    """The conversation concerned; empty when the difference is not one conversation's."""
    table: str
    """The index table (`ix.` + this name) where the difference lies."""
    reason: str


MAX_INDEX_FINDINGS: Final = 20
"""Differences listed per index table; the rest are counted."""


def _items(records: ProjectionRecords, table: str) -> Iterator[tuple[bytes, bytes]]:
    """The records of `table` in key order, without the `DROPPED` mark (for caches, absent from
    indexes built before it: not derived content)."""
    for key, value in records.scan(table):
        if table != 'meta' or key != DROPPED:
            yield key, value


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


def index_differences(stored: ProjectionRecords, rebuilt: ProjectionRecords) -> list[IndexFinding]:
    """The differences between the stored index and the one rebuilt from the entries, table by table."""
    findings: list[IndexFinding] = []
    for table in TABLES:
        findings += _table_differences(table, _items(stored, table), _items(rebuilt, table))
    return findings
