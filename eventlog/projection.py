"""Read access to an LMDB log's tables for projections kept in the same store.

A projection (the persistent search index, say) follows the log by position: it
remembers the last `seq` it applied and, inside one LMDB transaction, reads what came
after and writes its own tables. Sharing the transaction means the projection sees
exactly the entries its writes account for, and it can always be dropped and rebuilt
from the entries (DESIGN invariant 6).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import lmdb

from eventlog import _engine as engine
from eventlog._storage import Table
from eventlog.entries import ConversationRecord, Entry, RunRecord
from eventlog.lmdb_log import LmdbEventLog, _LmdbTxn  # pyright: ignore[reportPrivateUsage]

__all__ = ['BranchMessage', 'LogReader', 'run_projection']

T = TypeVar('T')

BranchMessage = tuple[int, str, bytes]
"""A message on a branch: its `seq`, its conversation, and its pydantic-ai JSON."""


class LogReader:
    """The log as seen from inside one transaction."""

    def __init__(self, txn: _LmdbTxn) -> None:
        self._txn = txn

    def last_seq(self) -> int:
        """The largest `seq` assigned so far."""
        return engine.last_seq(self._txn)

    def entries_after(self, seq: int) -> Iterator[Entry]:
        """Every entry with a larger `seq`, in order."""
        return engine.iter_entries(self._txn, after_seq=seq)

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

    def branch_messages(self, tip: int | None) -> list[BranchMessage]:
        """The messages on the branch ending at `tip`, oldest first."""
        bodies = engine.branch_bodies(self._txn, tip)
        return [(b.seq, b.conversation_id, b.payload) for b in bodies if b.kind == 'message']


def run_projection(log: LmdbEventLog, fn: Callable[[lmdb.Transaction, LogReader], T], *, write: bool) -> T:
    """Run `fn` with an LMDB transaction and a `LogReader` over the same snapshot.

    Write transactions commit when `fn` returns, abort when it raises, and are retried after
    the map grows, exactly like the log's own appends.
    """
    dbs = log._shared.dbs  # pyright: ignore[reportPrivateUsage]
    return log.run_in_txn(lambda txn: fn(txn, LogReader(_LmdbTxn(txn, dbs))), write=write)
