"""`ReplayHistorySource`: the search layer's history source, by plain replay of entries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventlog.entries import RunRecord
from eventlog.errors import InvalidArgumentError, RunNotFound
from eventlog.log import EventLogBase

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = ['ReplayHistorySource']


class ReplayHistorySource:
    """Runs and their exact original messages, read straight from an event log.

    It satisfies the search layer's `HistorySource` protocol (and, structurally, the
    reference's), so either side's search can read it. There is nothing to reconcile:
    each message was appended once, and a run's record is the branch it continues
    followed by what it added. Compaction summaries are separate entries and never
    appear here.
    """

    def __init__(self, log: EventLogBase) -> None:
        """Read runs and messages from `log`."""
        self.log = log

    def __eq__(self, other: object) -> bool:
        """Two sources over the same log are the same source."""
        return isinstance(other, ReplayHistorySource) and other.log is self.log

    def __hash__(self) -> int:
        """Hash of the log's identity, consistent with `__eq__`."""
        return id(self.log)

    async def list_runs(self) -> list[RunRecord]:
        """Every run in the log, in start order."""
        return await self.log.list_runs()

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        """The run's original messages in order; `[]` for a run id the log does not hold."""
        try:
            return await self.log.run_messages(run_id)
        except (RunNotFound, InvalidArgumentError):
            return []

    async def run_entry_seqs(self, *, run_id: str) -> list[int]:
        """The `seq` of the entry that stored each message of the run's full record, in order
        (aligned with `run_history`); `[]` for a run id the log does not hold."""
        try:
            record = await self.log.get_run(run_id)
        except InvalidArgumentError:
            return []
        if record is None:
            return []
        return [entry.seq for entry in await self.log.branch(record.last_seq) if entry.kind == 'message']
