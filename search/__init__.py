"""BM25 recall over stored conversation history.

The in-memory search reads history through `HistorySource`; the persistent index
(`search.persistent_index`) is a tracked projection of the event log and stands on its storage
protocol (`eventlog.projection`). So the search layer imports the event log, never the
capabilities, and the event log never imports search. Its parts:

- `search.source`: the `HistorySource` protocol.
- `search.render`: a message as indexed text and as a clipped excerpt.
- `search.excerpt`: the excerpt rules without pydantic-ai (display caps, `clip`, `make_locator`),
  for views that show stored payloads; `search.wire_text`: a stored message's lines read from its JSON.
- `search.analyzers`: text to terms (`default`, `english`, `cjk`).
- `search.bm25`: scoring over postings, shared by every index.
- `search.backend`: the `SearchBackend` / `Corpus` seam an index implements.
- `search.memory_index`: the in-memory corpus rebuilt from a `HistorySource` per search.
- `search.options`: `SearchOptions`, how a search ranks and how much it shows (read by the two below).
- `search.engine`: the search itself: a `SearchResult`, or an answer written for a model.
- `search.result`: `SearchResult` and its hits, what one search found, as data.
- `search.answer`: a result as the text a model reads (the reference's wording, or explained).
- `search.persistent_index`: the index kept in the log's store, current with the log by position,
  on every backend (`PersistentIndex`); its parts are `search.index_format` (tables and codecs),
  `search.index_writer`, `search.index_check` (what `verify` compares) and `search.index_corpus`
  (the query side).
- `search.vector_index`: message embeddings kept in the log's store the same way (extra `semantic`
  for a local model: `search.local_model`).
- `search.semantic`: the `'semantic'` and `'hybrid'` search modes (cosine similarity, rank fusion).

The package exports what an application needs to search or to plug in its own history;
scoring and index internals stay in their modules (`search.bm25`, `search.backend`, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventlog._lazy import lazy_exports

if TYPE_CHECKING:
    from search.analyzers import ANALYZER_NAMES, Analyzer, CjkAnalyzer, DefaultAnalyzer, EnglishAnalyzer, get_analyzer
    from search.answer import answer_text
    from search.backend import SearchBackend
    from search.engine import ScopeDefaultWarning, SearchEngine, SearchScope
    from search.options import AnswerStyle, SearchOptions
    from search.result import SearchHit, SearchOutcome, SearchResult, SearchTimings, WindowMessage
    from search.semantic import SearchMode
    from search.source import HistorySource, RunInfo
    from search.vector_index import VectorIndex, VectorState

__all__ = [
    'ANALYZER_NAMES',
    'Analyzer',
    'AnswerStyle',
    'CjkAnalyzer',
    'DefaultAnalyzer',
    'EnglishAnalyzer',
    'HistorySource',
    'RunInfo',
    'ScopeDefaultWarning',
    'SearchBackend',
    'SearchEngine',
    'SearchHit',
    'SearchMode',
    'SearchOptions',
    'SearchOutcome',
    'SearchResult',
    'SearchScope',
    'SearchTimings',
    'VectorIndex',
    'VectorState',
    'WindowMessage',
    'answer_text',
    'get_analyzer',
]

# Each name is imported on first use, so that importing a light part, such as
# `search.analyzers`, does not pull in numpy and pydantic-ai with the rest.
_SUBMODULE: dict[str, str] = {
    'ANALYZER_NAMES': 'search.analyzers',
    'Analyzer': 'search.analyzers',
    'AnswerStyle': 'search.options',
    'CjkAnalyzer': 'search.analyzers',
    'DefaultAnalyzer': 'search.analyzers',
    'EnglishAnalyzer': 'search.analyzers',
    'HistorySource': 'search.source',
    'RunInfo': 'search.source',
    'ScopeDefaultWarning': 'search.engine',
    'SearchBackend': 'search.backend',
    'SearchEngine': 'search.engine',
    'SearchHit': 'search.result',
    'SearchMode': 'search.semantic',
    'SearchOptions': 'search.options',
    'SearchOutcome': 'search.result',
    'SearchResult': 'search.result',
    'SearchScope': 'search.engine',
    'SearchTimings': 'search.result',
    'VectorIndex': 'search.vector_index',
    'VectorState': 'search.vector_index',
    'WindowMessage': 'search.result',
    'answer_text': 'search.answer',
    'get_analyzer': 'search.analyzers',
}

__getattr__, __dir__ = lazy_exports(globals(), _SUBMODULE)
