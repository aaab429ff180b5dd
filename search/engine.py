"""The search itself: a query in, a `SearchResult` (`find`) or an answer written for a model (`search`) out.

`SearchEngine.search` never raises for anything a model or a store can cause: an empty
or unusable query, an unknown run, an empty store, a store that fails to read. Each
gets an answer that says what happened.

Scope is enforced here. Under `'conversation'` the corpus is the calling run's
conversation only, and a run without a conversation id searches nothing (it fails closed
rather than falling back to every unlabelled run). Answers never mention anything out of
scope: counts are in-scope counts, and a run id from another conversation gets the very
answer an unknown run id gets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Literal, cast, overload

from search.backend import Corpus, Hit, NumberedCorpus, PayloadCorpus, RunSpan, SearchBackend
from search.bm25 import unique_terms
from search.options import MAX_QUERY_TERMS, AnswerStyle, SearchOptions, validate_mode, validate_search_options
from search.result import SearchHit, SearchOutcome, SearchResult, SearchTimings, WindowMessage
from search.semantic import SearchMode, TextVectors, fuse_rankings, fuse_scores, semantic_ranking
from search.source import HistorySource

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from search.vector_index import VectorIndex

# pydantic-ai (with the answer's wording and the in-memory index, which need it) is imported where
# an answer is written or a history source is indexed in memory: a search of the persistent index
# that shows stored payloads (`find(decode=False)`, the command line's) runs without it.

__all__ = [
    'MAX_QUERY_TERMS',
    'AnswerStyle',
    'ScopeDefaultWarning',
    'SearchEngine',
    'SearchMode',
    'SearchOptions',
    'SearchScope',
    'as_backend',
    'validate_mode',
    'validate_search_options',
]

logger = logging.getLogger('search')

SearchScope = Literal['all', 'conversation']
"""How far one search reaches.

`'conversation'`: only runs whose conversation id is the calling run's. `'all'`: every run
the source lists; only for stores already isolated to one principal, since any run can then
read any other conversation's messages.
"""


class ScopeDefaultWarning(DeprecationWarning):
    """`scope` was left unset and resolved to `'conversation'`.

    Emitted once per capability instance. Pass `scope='conversation'` to keep that
    behaviour without the warning, or `scope='all'` to search every run in the store.
    """


def as_backend(source: HistorySource | SearchBackend) -> SearchBackend:
    """`source` itself when it is a `SearchBackend` (it has its own index), else an in-memory backend over it."""
    if isinstance(source, SearchBackend):
        return source
    from search.memory_index import HistorySourceBackend

    return HistorySourceBackend(source)


class SearchEngine:
    """Answers `search_conversation_history` queries over a backend, within a scope."""

    def __init__(self, source: HistorySource | SearchBackend, options: SearchOptions | None = None) -> None:
        """Search `source` (a `HistorySource`, or a `SearchBackend` with its own index) with `options`."""
        self.backend: SearchBackend = as_backend(source)
        self.options: SearchOptions = options if options is not None else SearchOptions()
        self._vectors: VectorIndex | None = None
        self._texts: TextVectors | None = None

    def vector_index(self) -> VectorIndex | None:
        """The vector index semantic searches read: the one of the event log the backend reads
        (`VectorIndex.for_log`), or `None` when the backend reads no event log or no embedder is set."""
        embedder = self.options.embedder
        if embedder is None:
            return None
        if self._vectors is None:
            from eventlog.projection import ProjectionStore
            from search.vector_index import VectorIndex

            log = _log_of(self.backend)
            if isinstance(log, ProjectionStore):
                self._vectors = VectorIndex.for_log(log, embedder)
        return self._vectors

    async def search(
        self,
        query: str,
        *,
        scope: SearchScope,
        conversation_id: str | None,
        run_id: str | None = None,
        searching_run_id: str | None = None,
    ) -> str:
        """The answer to `query`, as text for the model (`search.answer.answer_text` of `find`'s result).

        Never raises for anything a model or a store can cause: a failed read is answered too.
        The arguments are `find`'s.
        """
        try:
            result = await self.find(
                query,
                scope=scope,
                conversation_id=conversation_id,
                run_id=run_id,
                searching_run_id=searching_run_id,
                entry_numbers=False,
            )
        except Exception as exc:
            logger.warning('conversation search failed', exc_info=True)
            result = SearchResult(
                query=query,
                terms=tuple(unique_terms(self.options.analyzer.tokens(query))),
                outcome='failed',
                conversation_id=conversation_id if scope == 'conversation' else None,
                run_id=run_id,
                error=type(exc).__name__,
                mode=self.options.mode,
            )
        from search.answer import answer_text

        return answer_text(result, self.options)

    async def find(
        self,
        query: str,
        *,
        scope: SearchScope,
        conversation_id: str | None,
        run_id: str | None = None,
        searching_run_id: str | None = None,
        entry_numbers: bool = True,
        decode: bool = True,
    ) -> SearchResult:
        """What `query` finds, as a `SearchResult`.

        Args:
            query: What to look for; each distinct term counts independently.
            scope: `'conversation'` to search only `conversation_id`, `'all'` to search every run.
            conversation_id: The calling run's conversation id; ignored under `'all'`.
            run_id: Search only this run (within scope).
            searching_run_id: The run asking. Its own messages (the request that prompted the search,
                the response calling the tool) are in its context already, so they are not results,
                unless `run_id` names that very run. They still count in the corpus statistics.
            entry_numbers: Also read the entry number (`seq`) of every message shown, when the
                corpus can tell (see `search.backend.NumberedCorpus`); otherwise they are `None`.
            decode: Decode the messages shown (`WindowMessage.decoded`). Without it each shown message
                comes as pydantic-ai's JSON (`WindowMessage.payload`): a persistent index reads the stored
                payloads and decodes nothing (no pydantic-ai import, no decoded copy of a large message);
                an in-memory corpus, which holds decoded messages, encodes them.

        Raises:
            Whatever the backend raises when the store cannot be read.
        """
        within = conversation_id if scope == 'conversation' else None
        terms = tuple(unique_terms(self.options.analyzer.tokens(query)))
        facts = partial(
            SearchResult, query=query, terms=terms, conversation_id=within, run_id=run_id, mode=self.options.mode
        )
        if scope == 'conversation' and conversation_id is None:
            return facts(outcome='no_conversation')
        if len(terms) > MAX_QUERY_TERMS:
            return facts(outcome='too_many_terms')

        options = self.options
        began = time.perf_counter()
        corpus = await self.backend.open_corpus(conversation_id=within, run_id=run_id, analyzer=options.analyzer)
        opened = time.perf_counter()
        facts = partial(facts, unindexed=_unindexed(corpus))
        if corpus.document_count == 0:
            outcome: SearchOutcome = 'unknown_run' if run_id is not None else 'nothing_stored'
            return facts(outcome=outcome, timings=SearchTimings(corpus=opened - began))
        if not terms:
            await _settle(corpus)
            return facts(
                outcome='no_terms',
                documents=corpus.document_count,
                timings=SearchTimings(opened - began),
                unindexed=_unindexed(corpus),
            )

        pending = 0
        if options.mode == 'bm25':
            hits: Sequence[Hit] = await corpus.rank(terms, k1=options.bm25_k1, b=options.bm25_b)
        else:
            assert options.embedder is not None
            if self._texts is None:
                self._texts = TextVectors(options.embedder)
            semantic, pending = await semantic_ranking(
                corpus, query, embedder=options.embedder, vectors=self.vector_index(), texts=self._texts
            )
            if options.mode == 'semantic':
                hits = semantic
            else:
                lexical = await corpus.rank(terms, k1=options.bm25_k1, b=options.bm25_b)
                if options.fusion == 'rrf':
                    hits = fuse_rankings([lexical, semantic])
                else:
                    hits = fuse_scores(lexical, semantic, lexical_weight=options.lexical_weight)
        facts = partial(facts, pending=pending, unindexed=_unindexed(corpus))  # a corpus settling may learn of more
        # A corpus may learn while ranking that the store moved on, and rank again: count after it.
        total = corpus.document_count
        if total == 0:
            outcome = 'unknown_run' if run_id is not None else 'nothing_stored'
            return facts(outcome=outcome, timings=SearchTimings(corpus=opened - began))
        skip = searching_run_id if searching_run_id != run_id else None
        if skip is not None:
            hits = _WithoutRun(hits, skip)
        ranked = time.perf_counter()
        if not hits:
            timings = SearchTimings(corpus=opened - began, rank=ranked - opened)
            return facts(outcome='no_match', documents=total, timings=timings, ranked=hits)
        shown = await self._shown_hits(corpus, hits, entry_numbers=entry_numbers, decode=decode)
        timings = SearchTimings(corpus=opened - began, rank=ranked - opened, windows=time.perf_counter() - ranked)
        return facts(outcome='found', documents=total, hits=tuple(shown), timings=timings, ranked=hits)

    async def _shown_hits(
        self, corpus: Corpus, hits: Sequence[Hit], *, entry_numbers: bool, decode: bool
    ) -> list[SearchHit]:
        """The hits shown, each with its window of neighbours.

        A hit already shown in an earlier hit's window is passed over. Windows are planned first
        and their messages fetched together, so a corpus that can read many windows at once
        (`messages_many`) does it in one pass.
        """
        options = self.options
        shown: set[tuple[str, int]] = set()
        spans: dict[str, RunSpan] = {}
        plans: list[tuple[Hit, RunSpan, int, int, set[int]]] = []
        for hit in hits:
            if len(plans) == options.max_matches:
                break
            if (hit.run_id, hit.position) in shown:
                continue
            span = spans.get(hit.run_id)
            if span is None:
                span = spans[hit.run_id] = await corpus.span(hit.run_id)
            start = max(span.start, hit.position - options.context_lines)
            end = min(span.end, hit.position + options.context_lines + 1)
            repeated = {position for position in range(start, end) if (hit.run_id, position) in shown}
            shown.update((hit.run_id, position) for position in range(start, end))
            plans.append((hit, span, start, end, repeated))
        ranges = [(hit.run_id, start, end) for hit, _, start, end, _ in plans]
        windows = await (_fetch_windows(corpus, ranges) if decode else _fetch_payloads(corpus, ranges))
        numbers: list[dict[int, int]] = await _fetch_seqs(corpus, ranges) if entry_numbers else [{} for _ in ranges]
        out: list[SearchHit] = []
        for rank, ((hit, span, _, _, repeated), window, seqs) in enumerate(
            zip(plans, windows, numbers, strict=True), start=1
        ):
            messages = tuple(
                WindowMessage(position, seqs.get(position), decoded, position in repeated, payload)
                for position, decoded, payload in window
            )
            out.append(
                SearchHit(
                    rank=rank,
                    score=hit.score,
                    run_id=hit.run_id,
                    conversation_id=span.conversation_id,
                    position=hit.position,
                    seq=seqs.get(hit.position),
                    window=messages,
                )
            )
        return out


def _log_of(backend: SearchBackend) -> object:
    """The event log a backend reads, if any: a persistent index's log, or a replayed log's."""
    log = getattr(backend, 'log', None)
    if log is not None:
        return log
    source = getattr(backend, 'source', None)
    return getattr(source, 'log', None)


class _WithoutRun(Sequence[Hit]):
    """Ranked hits less those of one run, read lazily.

    Ranking stays as the corpus computed it; the run's hits are only passed over, and they are
    counted (a walk over every hit) only when the total number is asked for.
    """

    def __init__(self, hits: Sequence[Hit], run_id: str) -> None:
        self._hits = hits
        self._run_id = run_id

    def __iter__(self) -> Iterator[Hit]:
        return (hit for hit in self._hits if hit.run_id != self._run_id)

    def __bool__(self) -> bool:
        return next(iter(self), None) is not None

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @overload
    def __getitem__(self, index: int) -> Hit: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Hit]: ...

    def __getitem__(self, index: int | slice) -> Hit | Sequence[Hit]:
        return list(self)[index]


def _unindexed(corpus: Corpus) -> tuple[int, ...]:
    """The messages in scope a corpus could not read to index (`SearchResult.unindexed`): a
    corpus built from stored payloads says so in `unindexed`; one built from decoded messages reads them all."""
    found: object = getattr(corpus, 'unindexed', ())
    return tuple(cast('tuple[int, ...]', found)) if isinstance(found, tuple) else ()


async def _settle(corpus: Corpus) -> None:
    """Let a corpus that checks it is current while it ranks (`search.index_corpus` over a local
    index) finish that check, so that its `document_count` is final without ranking."""
    settle = getattr(corpus, 'settle', None)
    if settle is not None:
        await settle()


_Window = list[tuple[int, 'ModelMessage | None', bytes | None]]
"""One window's messages: position, the decoded message and/or its JSON."""


async def _decoded(corpus: Corpus, windows: list[tuple[str, int, int]]) -> list[list[tuple[int, ModelMessage]]]:
    """The messages of each `(run_id, start, end)` window, decoded, in one call when the corpus can."""
    many = getattr(corpus, 'messages_many', None)
    if many is not None:
        return await many(windows)
    return [await corpus.messages(run_id, start, end) for run_id, start, end in windows]


async def _fetch_windows(corpus: Corpus, windows: list[tuple[str, int, int]]) -> list[_Window]:
    """The messages of each window, decoded."""
    return [[(position, message, None) for position, message in window] for window in await _decoded(corpus, windows)]


async def _fetch_payloads(corpus: Corpus, windows: list[tuple[str, int, int]]) -> list[_Window]:
    """The messages of each window as pydantic-ai's JSON: a `PayloadCorpus`'s stored payloads, or the
    messages of another corpus encoded (and kept decoded too)."""
    if isinstance(corpus, PayloadCorpus):
        stored = await corpus.payloads_many(windows)
        return [[(position, None, payload) for position, payload in window] for window in stored]
    from eventlog.entries import encode_message

    return [
        [(position, message, encode_message(message)) for position, message in window]
        for window in await _decoded(corpus, windows)
    ]


async def _fetch_seqs(corpus: Corpus, windows: list[tuple[str, int, int]]) -> list[dict[int, int]]:
    """The entry number of each message of each window, by position; empty where the corpus cannot tell."""
    if not windows or not isinstance(corpus, NumberedCorpus):
        return [{} for _ in windows]
    return await corpus.entry_seqs(windows)
