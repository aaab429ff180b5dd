"""BM25 recall over stored conversation history.

The search layer reads history through `HistorySource` and never imports the event log
or the capabilities. Its parts:

- `search.source`: the `HistorySource` protocol.
- `search.render`: a message as indexed text and as a clipped excerpt.
- `search.analyzers`: text to terms (`default`, `english`, `cjk`).
- `search.bm25`: scoring over postings, shared by every index.
- `search.backend`: the `SearchBackend` / `Corpus` seam an index implements.
- `search.memory_index`: the in-memory corpus rebuilt from a `HistorySource` per search.
- `search.engine`: the search itself, answering in text written for a model.
"""

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
from search.source import HistorySource, RunInfo

__all__ = [
    'ANALYZER_NAMES',
    'MAX_QUERY_TERMS',
    'Analyzer',
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
    'SearchOptions',
    'SearchScope',
    'TermPostings',
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
