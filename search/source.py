"""Where the search corpus comes from: the `HistorySource` protocol.

The search layer reads history through this protocol only, so it never depends on a
particular store. It is structurally the same protocol as pydantic-ai-harness's
`HistorySource`: a source written for either side can be searched by the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = ['HistorySource', 'NumberedHistorySource', 'RunInfo']


@runtime_checkable
class RunInfo(Protocol):
    """The two facts the search needs about a stored run."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def conversation_id(self) -> str | None:
        """The conversation the run belongs to, or `None` when it has none."""
        ...


@runtime_checkable
class HistorySource(Protocol):
    """Read access to stored runs and their messages."""

    async def list_runs(self) -> Sequence[RunInfo]:
        """Every stored run, in the order the runs started."""
        ...

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        """The run's full message record, oldest first; `[]` for a run id the source does not know.

        The record holds the original messages, including those that context compaction
        later dropped from the live context, and no compaction summaries.
        """
        ...


@runtime_checkable
class NumberedHistorySource(Protocol):
    """A `HistorySource` that can also number its messages by the log entries that stored them
    (optional; `eventlog.ReplayHistorySource` is one)."""

    async def run_entry_seqs(self, *, run_id: str) -> list[int]:
        """The `seq` of the entry that stored each message of the run's full record, in record
        order (aligned with `run_history`); `[]` for a run id the source does not know."""
        ...
