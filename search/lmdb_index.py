"""The search index's former module, kept so that what names it still works.

The index ran on every backend, PostgreSQL included, and this module was its writer, its check
and its query side at once; it is now split by job: `search.persistent_index` (the index,
`PersistentIndex`, formerly `LmdbIndex`, with `maintain_index`), `search.index_format`,
`search.index_writer`, `search.index_check` and `search.index_corpus`. This module re-exports
their names under the ones it gave them.

Stores record the index's maintainer as `search.lmdb_index:maintain_index` in their catalogue
of projections (`INDEX_PROJECTION.maintainer`), and the log imports it by that reference before
every scrub and compaction: this module must keep exporting `maintain_index`.
"""

from __future__ import annotations

from search.index_format import INDEX_FORMAT, INDEX_PROJECTION, LOCAL_INDEX_FORMAT, LOCAL_INDEX_PROJECTION, IndexedLog
from search.persistent_index import (
    IndexAnalyzerMismatch,
    IndexFinding,
    IndexState,
    PersistentIndex,
    backend_for,
    maintain_index,
)

LmdbIndex = PersistentIndex
"""The index's former name (it runs on every backend, not only LMDB)."""

__all__ = [
    'INDEX_FORMAT',
    'INDEX_PROJECTION',
    'LOCAL_INDEX_FORMAT',
    'LOCAL_INDEX_PROJECTION',
    'IndexAnalyzerMismatch',
    'IndexFinding',
    'IndexState',
    'IndexedLog',
    'LmdbIndex',
    'PersistentIndex',
    'backend_for',
    'maintain_index',
]
