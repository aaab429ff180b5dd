"""The command line's view of the store's persistent search index: its state, its analyzer, rebuilding it.

Which index a search reads is `search.persistent_index.backend_for`, the one policy of the capability and the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from eventlog._threads import to_thread

if TYPE_CHECKING:
    from search.analyzers import Analyzer
    from search.persistent_index import IndexedLog, PersistentIndex

# The index modules (numpy, pydantic-ai) are imported on first use, keeping the CLI's start fast.

__all__ = ['Progress', 'index_analyzer', 'index_state', 'rebuild_index']

Progress = Callable[[int, int], None]
"""Called with (done, total) as a long operation advances."""


def _existing_index(log: IndexedLog) -> PersistentIndex:
    """The index of `log` opened with the analyzer it was built with (`default` when none is built)."""
    from search.persistent_index import PersistentIndex

    return PersistentIndex.open_existing(log)


def index_analyzer(log: IndexedLog) -> str | None:
    """The name of the analyzer the store's index was built with; `None` when none is built yet."""
    return _existing_index(log).state().analyzer


def index_state(log: IndexedLog) -> dict[str, object]:
    """Where the persistent index of `log` stands, for `eventlog stats` (`kind` is `memory` for an
    encrypted store, which keeps its index in the process's memory only)."""
    state = _existing_index(log).state()
    return {
        'kind': 'memory' if getattr(log, 'encrypted', False) is True else 'persistent',
        'analyzer': state.analyzer,
        'documents': state.documents,
        'unindexed': list(state.unindexed),
        'position': state.position,
        'log_position': state.log_position,
        'current': state.position >= state.log_position,
    }


async def rebuild_index(log: IndexedLog, analyzer: Analyzer, progress: Progress) -> dict[str, object]:
    """Drop the persistent index and build it again from the log with `analyzer`; return its new state."""
    index = _existing_index(log)
    entries = await to_thread(index.rebuild, analyzer, progress)
    return {'entries_read': entries, **index_state(log)}
