"""The one place the command line chooses its search index.

Searches go through the store's persistent index (`search.lmdb_index.LmdbIndex`), which
catches up with the log before answering. A search with another analyzer than the one the
index was built with falls back to an in-memory corpus rebuilt from the log (slower, same
ranking); `eventlog reindex --analyzer NAME` rebuilds the index with that analyzer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from eventlog import LmdbEventLog, ReplayHistorySource

if TYPE_CHECKING:
    from search.analyzers import Analyzer
    from search.backend import SearchBackend
    from search.lmdb_index import LmdbIndex

# The index modules (numpy, pydantic-ai) are imported on first use, keeping the CLI's start fast.

__all__ = ['Progress', 'backend_for', 'index_state', 'rebuild_index']

Progress = Callable[[int, int], None]
"""Called with (done, total) as a long operation advances."""


def backend_for(log: LmdbEventLog, analyzer: Analyzer) -> SearchBackend:
    """The persistent index of `log` when it was built with `analyzer`, else an in-memory corpus per search."""
    from search.lmdb_index import IndexAnalyzerMismatch, LmdbIndex
    from search.memory_index import HistorySourceBackend

    try:
        return LmdbIndex(log, analyzer)
    except IndexAnalyzerMismatch:
        return HistorySourceBackend(ReplayHistorySource(log))


def _existing_index(log: LmdbEventLog) -> LmdbIndex:
    """The index of `log` opened with the analyzer it was built with (`default` when none is built)."""
    from search.lmdb_index import LmdbIndex

    return LmdbIndex.open_existing(log)


def index_state(log: LmdbEventLog) -> dict[str, object]:
    """Where the persistent index of `log` stands, for `eventlog stats`."""
    state = _existing_index(log).state()
    return {
        'kind': 'persistent',
        'analyzer': state.analyzer,
        'documents': state.documents,
        'position': state.position,
        'log_position': state.log_position,
        'current': state.position >= state.log_position,
    }


async def rebuild_index(log: LmdbEventLog, analyzer: Analyzer, progress: Progress) -> dict[str, object]:
    """Drop the persistent index and build it again from the log with `analyzer`; return its new state."""
    index = _existing_index(log)
    entries = await asyncio.to_thread(index.rebuild, analyzer, progress)
    return {'entries_read': entries, **index_state(log)}
