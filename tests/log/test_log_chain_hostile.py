"""Issue 42, third round: `verify` against a forged transcript, and its cost on a damaged store.

Each test damages or forges a real store the way an attacker who can write its files would,
then checks that `verify` names it; the cost test counts the table scans `verify` makes
instead of timing it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry
from eventlog._keys import Table, TableId, seq_key
from eventlog._storage import ReadTxn, WriteTxn
from eventlog._verify import verify
from tests.log.logtools import exchange

DAMAGED = 20_000
"""Undecodable entries in the cost test: a scan per entry would read 4e8 index keys (minutes)."""


class _CountingTxn:
    """A read transaction that counts the scans made of each table, and refuses a runaway count."""

    def __init__(self, txn: ReadTxn, limit: int) -> None:
        self.txn = txn
        self.limit = limit
        self.scans: Counter[TableId] = Counter()

    def get(self, table: TableId, key: bytes) -> bytes | None:
        return self.txn.get(table, key)

    def scan(
        self, table: TableId, *, prefix: bytes = b'', start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self.scans[table] += 1
        assert self.scans[table] <= self.limit, f'more than {self.limit} scans of table {table}'
        return self.txn.scan(table, prefix=prefix, start=start, reverse=reverse)

    def last(self, table: TableId, prefix: bytes = b'') -> tuple[bytes, bytes] | None:
        return self.txn.last(table, prefix)


async def test_verify_scans_the_index_once_whatever_the_number_of_undecodable_entries(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'store')
    try:
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        messages = [m for i in range(DAMAGED // 2) for m in exchange(i)]
        for start in range(0, len(messages), 2000):
            await log.append_many(
                [message_entry(m, conversation_id='c', run_id='r') for m in messages[start : start + 2000]]
            )
        await log.append(run_finished_entry(conversation_id='c', run_id='r', status='completed'))
        damaged = [e.seq for e in await log.entries() if e.kind == 'message']
        assert len(damaged) == DAMAGED

        def damage(txn: WriteTxn) -> None:
            for seq in damaged:
                value = txn.get(Table.ENTRIES, seq_key(seq))
                assert value is not None
                txn.put(Table.ENTRIES, seq_key(seq), b'\xc1' + value[1:])  # 0xc1: never valid msgpack

        log._write_sync(damage)  # pyright: ignore[reportPrivateUsage]
        counting: list[_CountingTxn] = []

        def check(txn: ReadTxn) -> object:
            counting.append(_CountingTxn(txn, limit=10))
            return verify(counting[0])  # pyright: ignore[reportArgumentType]

        report = log._read_sync(check)  # pyright: ignore[reportPrivateUsage]
    finally:
        log.close()
    assert not report.ok  # type: ignore[attr-defined]
    firsts = [(p.conversation_id, p.seq, p.code) for p in report.problems]  # type: ignore[attr-defined]
    assert ('c', damaged[0], 'entry-undecodable') in firsts
    assert counting[0].scans[Table.ENTRIES] == 1
    assert counting[0].scans[Table.BY_CONV] <= 3
