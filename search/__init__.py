"""BM25 recall over stored conversation history.

The in-memory search reads history through `HistorySource`; the persistent index
(`search.lmdb_index`) is a tracked projection of the event log and stands on its storage
protocol (`eventlog.projection`). So the search layer imports the event log, never the
capabilities, and the event log never imports search. Its parts:

- `search.source`: the `HistorySource` protocol.
- `search.render`: a message as indexed text and as a clipped excerpt.
- `search.analyzers`: text to terms (`default`, `english`, `cjk`).
- `search.bm25`: scoring over postings, shared by every index.
- `search.backend`: the `SearchBackend` / `Corpus` seam an index implements.
- `search.memory_index`: the in-memory corpus rebuilt from a `HistorySource` per search.
- `search.engine`: the search itself: a `SearchResult`, or an answer written for a model.
- `search.result`: `SearchResult` and its hits, what one search found, as data.
- `search.answer`: a result as the text a model reads (the reference's wording, or explained).
- `search.lmdb_index`: the index kept in the log's store, current with the log by position.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from search.analyzers import (
        ANALYZER_NAMES,
        Analyzer,
        CjkAnalyzer,
        DefaultAnalyzer,
        EnglishAnalyzer,
        LocatingAnalyzer,
        get_analyzer,
        resolve_analyzer,
    )
    from search.answer import AnswerStyle, answer_text
    from search.backend import Corpus, Hit, RankedHits, RunSpan, SearchBackend
    from search.bm25 import TermPostings, average_length, idf, score_postings, score_unranked, unique_terms
    from search.engine import (
        MAX_QUERY_TERMS,
        ScopeDefaultWarning,
        SearchEngine,
        SearchOptions,
        SearchScope,
        as_backend,
        validate_search_options,
    )
    from search.memory_index import HistorySourceBackend, MemoryCorpus, message_identity
    from search.render import display_lines, index_text, message_segments
    from search.result import SearchHit, SearchOutcome, SearchResult, SearchTimings, WindowMessage
    from search.source import HistorySource, RunInfo

__all__ = [
    'ANALYZER_NAMES',
    'MAX_QUERY_TERMS',
    'Analyzer',
    'AnswerStyle',
    'CjkAnalyzer',
    'Corpus',
    'DefaultAnalyzer',
    'EnglishAnalyzer',
    'HistorySource',
    'HistorySourceBackend',
    'Hit',
    'LocatingAnalyzer',
    'MemoryCorpus',
    'RankedHits',
    'RunInfo',
    'RunSpan',
    'ScopeDefaultWarning',
    'SearchBackend',
    'SearchEngine',
    'SearchHit',
    'SearchOptions',
    'SearchOutcome',
    'SearchResult',
    'SearchScope',
    'SearchTimings',
    'TermPostings',
    'WindowMessage',
    'answer_text',
    'as_backend',
    'average_length',
    'display_lines',
    'get_analyzer',
    'idf',
    'index_text',
    'message_identity',
    'message_segments',
    'resolve_analyzer',
    'score_postings',
    'score_unranked',
    'unique_terms',
    'validate_search_options',
]


# The names are imported on first use (PEP 562), so that importing one light part, such as
# `search.analyzers`, does not pull in numpy and pydantic-ai with the rest.
_SUBMODULE: dict[str, str] = {
    'ANALYZER_NAMES': 'search.analyzers',
    'Analyzer': 'search.analyzers',
    'CjkAnalyzer': 'search.analyzers',
    'DefaultAnalyzer': 'search.analyzers',
    'EnglishAnalyzer': 'search.analyzers',
    'LocatingAnalyzer': 'search.analyzers',
    'get_analyzer': 'search.analyzers',
    'resolve_analyzer': 'search.analyzers',
    'Corpus': 'search.backend',
    'Hit': 'search.backend',
    'RankedHits': 'search.backend',
    'RunSpan': 'search.backend',
    'SearchBackend': 'search.backend',
    'TermPostings': 'search.bm25',
    'average_length': 'search.bm25',
    'idf': 'search.bm25',
    'score_postings': 'search.bm25',
    'score_unranked': 'search.bm25',
    'unique_terms': 'search.bm25',
    'AnswerStyle': 'search.answer',
    'answer_text': 'search.answer',
    'SearchHit': 'search.result',
    'SearchOutcome': 'search.result',
    'SearchResult': 'search.result',
    'SearchTimings': 'search.result',
    'WindowMessage': 'search.result',
    'MAX_QUERY_TERMS': 'search.engine',
    'ScopeDefaultWarning': 'search.engine',
    'SearchEngine': 'search.engine',
    'SearchOptions': 'search.engine',
    'SearchScope': 'search.engine',
    'as_backend': 'search.engine',
    'validate_search_options': 'search.engine',
    'HistorySourceBackend': 'search.memory_index',
    'MemoryCorpus': 'search.memory_index',
    'message_identity': 'search.memory_index',
    'display_lines': 'search.render',
    'index_text': 'search.render',
    'message_segments': 'search.render',
    'HistorySource': 'search.source',
    'RunInfo': 'search.source',
}


def __getattr__(name: str) -> object:
    """Import the submodule that defines `name` on first access and keep the name here."""
    module = _SUBMODULE.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value: object = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, imported or not yet."""
    return sorted(__all__)
