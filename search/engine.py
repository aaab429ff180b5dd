"""The search itself: a query in, an answer written for a model out.

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
import math
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from pydantic_ai.messages import ModelMessage

from search.analyzers import Analyzer, DefaultAnalyzer
from search.backend import Corpus, Hit, RunSpan, SearchBackend
from search.bm25 import DEFAULT_B, DEFAULT_K1, unique_terms
from search.memory_index import HistorySourceBackend
from search.render import display_lines, make_locator
from search.source import HistorySource

__all__ = [
    'MAX_QUERY_TERMS',
    'ScopeDefaultWarning',
    'SearchEngine',
    'SearchOptions',
    'SearchScope',
    'as_backend',
    'validate_search_options',
]

logger = logging.getLogger('search')

SearchScope = Literal['all', 'conversation']
"""How far one search reaches.

`'conversation'`: only runs whose conversation id is the calling run's. `'all'`: every run
the source lists; only for stores already isolated to one principal, since any run can then
read any other conversation's messages.
"""

MAX_QUERY_TERMS = 1000
"""A query with more distinct terms than this is refused rather than ranked."""

_ECHO_CHARS = 200
"""How much of a query or run id an answer repeats back."""


class ScopeDefaultWarning(DeprecationWarning):
    """`scope` was left unset and resolved to `'conversation'`.

    Emitted once per capability instance. Pass `scope='conversation'` to keep that
    behaviour without the warning, or `scope='all'` to search every run in the store.
    """


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_search_options(*, max_matches: int, context_lines: int, bm25_k1: float, bm25_b: float) -> None:
    """Check the search options, raising `ValueError` naming the first bad one.

    `max_matches` and `context_lines` are non-negative integers, `bm25_k1` a finite
    non-negative number (a negative one can zero a denominator, and `nan` or `inf` would turn
    every score into `nan`), and `bm25_b` a number from 0 to 1.
    """
    if not _is_count(max_matches) or max_matches < 0:
        raise ValueError(f'max_matches must be a non-negative integer, got {max_matches!r}.')
    if not _is_count(context_lines) or context_lines < 0:
        raise ValueError(f'context_lines must be a non-negative integer, got {context_lines!r}.')
    if not _is_real(bm25_k1) or not math.isfinite(bm25_k1) or bm25_k1 < 0:
        raise ValueError(f'bm25_k1 must be a finite number of at least 0, got {bm25_k1!r}.')
    if not _is_real(bm25_b) or not 0.0 <= bm25_b <= 1.0:
        raise ValueError(f'bm25_b must be a number from 0.0 to 1.0, got {bm25_b!r}.')


@dataclass(frozen=True)
class SearchOptions:
    """How a search ranks and how much it shows; validated on creation."""

    max_matches: int = 10
    """The most results one answer shows."""

    context_lines: int = 5
    """Messages shown before and after each match, from the match's own run."""

    bm25_k1: float = DEFAULT_K1
    """BM25 term-frequency saturation."""

    bm25_b: float = DEFAULT_B
    """BM25 length normalisation."""

    analyzer: Analyzer = field(default_factory=DefaultAnalyzer)
    """How messages and queries become terms."""

    def __post_init__(self) -> None:
        """Reject invalid values with a `ValueError`."""
        validate_search_options(
            max_matches=self.max_matches,
            context_lines=self.context_lines,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
        )


def as_backend(source: HistorySource | SearchBackend) -> SearchBackend:
    """`source` itself when it is a `SearchBackend` (it has its own index), else an in-memory backend over it."""
    if isinstance(source, SearchBackend):
        return source
    return HistorySourceBackend(source)


def _echo(text: str) -> str:
    """`text` in double quotes, shortened, with line breaks and control characters escaped."""
    shortened = text if len(text) <= _ECHO_CHARS else text[:_ECHO_CHARS] + '…'
    out: list[str] = ['"']
    for char in shortened:
        if char in '"\\':
            out.append('\\' + char)
        elif unicodedata.category(char) in ('Cc', 'Zl', 'Zp'):
            out.append(f'\\u{ord(char):04x}' if ord(char) > 0xFF else f'\\x{ord(char):02x}')
        else:
            out.append(char)
    out.append('"')
    return ''.join(out)


def _plural(count: int, singular: str, plural: str) -> str:
    return f'{count} {singular if count == 1 else plural}'


def _indent_continuation(lines: Sequence[str]) -> str:
    """A message's lines as one block: only its first line starts at the margin."""
    text = '\n'.join(lines)
    return text.replace('\n', '\n    ')


_NO_CONVERSATION_ID = (
    'Nothing was searched: this search only covers the current conversation, and the current run has '
    'no conversation id, so there is no conversation to search. Start runs with `conversation_id=...` '
    '(or continue from an earlier run with `message_history`, which keeps its conversation id) to make '
    'their history searchable.'
)
_EMPTY_QUERY = (
    'Nothing was searched: the query is empty. Ask for the words you expect in the earlier messages, '
    'such as a name, a number, an identifier or a distinctive phrase.'
)
_NOTHING_STORED_IN_CONVERSATION = (
    'This conversation has no stored history yet, so there is nothing to search. Only runs sharing the '
    "current run's conversation id are searched; a run gets that id from `conversation_id=` or inherits "
    'it through `message_history`.'
)
_NOTHING_STORED = (
    'There is no stored history to search yet. History becomes searchable once runs are recorded to the '
    'store this search reads.'
)


class SearchEngine:
    """Answers `search_conversation_history` queries over a backend, within a scope."""

    def __init__(self, source: HistorySource | SearchBackend, options: SearchOptions | None = None) -> None:
        """Search `source` (a `HistorySource`, or a `SearchBackend` with its own index) with `options`."""
        self.backend: SearchBackend = as_backend(source)
        self.options: SearchOptions = options if options is not None else SearchOptions()

    async def search(
        self,
        query: str,
        *,
        scope: SearchScope,
        conversation_id: str | None,
        run_id: str | None = None,
        searching_run_id: str | None = None,
    ) -> str:
        """The answer to `query`.

        Args:
            query: What to look for; each distinct term counts independently.
            scope: `'conversation'` to search only `conversation_id`, `'all'` to search every run.
            conversation_id: The calling run's conversation id; ignored under `'all'`.
            run_id: Search only this run (within scope).
            searching_run_id: The run asking. Its own messages (the request that prompted the search,
                the response calling the tool) are in its context already, so they are not results,
                unless `run_id` names that very run. They still count in the corpus statistics.

        Returns:
            Text for the model: the results, or why there are none.
        """
        if scope == 'conversation':
            if conversation_id is None:
                return _NO_CONVERSATION_ID
            within: str | None = conversation_id
        else:
            within = None

        if not query.strip():
            return _EMPTY_QUERY
        terms = unique_terms(self.options.analyzer.tokens(query))
        if not terms:
            return (
                f'Nothing was searched: the query {_echo(query)} has no searchable words, only punctuation, '
                'symbols or spaces. Search with words or numbers.'
            )
        if len(terms) > MAX_QUERY_TERMS:
            return (
                f'Nothing was searched: the query has {len(terms)} distinct words, and a search accepts at most '
                f'{MAX_QUERY_TERMS}. Keep only the few words that identify what you are looking for.'
            )

        try:
            skip = searching_run_id if searching_run_id != run_id else None
            return await self._search(query, terms, within=within, run_id=run_id, skip_run=skip)
        except Exception as exc:
            logger.warning('conversation search failed', exc_info=True)
            return (
                f'The search could not be completed: reading or ranking the stored history failed '
                f'({type(exc).__name__}). Nothing was found; the store may be closed or unavailable. '
                'The current conversation is not affected.'
            )

    async def _search(
        self, query: str, terms: list[str], *, within: str | None, run_id: str | None, skip_run: str | None
    ) -> str:
        options = self.options
        corpus = await self.backend.open_corpus(conversation_id=within, run_id=run_id, analyzer=options.analyzer)
        total = corpus.document_count
        if run_id is not None and total == 0:
            return f'There is no stored history for run {_echo(run_id)}. Check the id, or search without `run_id`.'
        if total == 0:
            return _NOTHING_STORED_IN_CONVERSATION if within is not None else _NOTHING_STORED
        where = f'stored {"message" if total == 1 else "messages"}'
        if run_id is not None:
            where += f' of run {_echo(run_id)}'

        hits: Sequence[Hit] = await corpus.rank(terms, k1=options.bm25_k1, b=options.bm25_b)
        if skip_run is not None:
            hits = _WithoutRun(hits, skip_run)
        if not hits:
            return (
                f'No message matches {_echo(query)} among the {total} {where}. Try other words: a synonym, '
                'another spelling, or a distinctive name or number.'
            )
        if options.max_matches == 0:
            return (
                f'{_plural(len(hits), "message matches", "messages match")} {_echo(query)} among the {total} '
                f'{where}, but this search is configured to show no results (max_matches=0).'
            )

        blocks = await self._result_blocks(corpus, hits, terms)
        header = (
            f'{_plural(len(blocks), "result", "results")} for {_echo(query)} from {total} {where}, '
            'best first. Numbers in brackets are positions in the run.'
        )
        numbered = [f'Result {index} of {len(blocks)} | {block}' for index, block in enumerate(blocks, start=1)]
        return '\n\n'.join([header, *numbered])

    async def _result_blocks(self, corpus: Corpus, hits: Sequence[Hit], terms: list[str]) -> list[str]:
        """One block per shown match: a header line, then the new messages of its window.

        Windows are planned first and their messages fetched together, so a corpus that can
        read many windows at once (`messages_many`) does it in one pass.
        """
        options = self.options
        locate = make_locator(options.analyzer, frozenset(terms))
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
            fresh = {position for position in range(start, end) if (hit.run_id, position) not in shown}
            shown.update((hit.run_id, position) for position in range(start, end))
            plans.append((hit, span, start, end, fresh))
        windows = await _fetch_windows(corpus, [(hit.run_id, start, end) for hit, _, start, end, _ in plans])
        blocks: list[str] = []
        for (hit, span, _, _, fresh), window in zip(plans, windows, strict=True):
            lines: list[str] = []
            for position, message in window:
                if position not in fresh:
                    continue
                rendered = display_lines(message, locate) or ['(no text in this message)']
                lines.append(f'[{position}] {_indent_continuation(rendered)}')
            conversation = (
                f'conversation {span.conversation_id}' if span.conversation_id is not None else 'no conversation id'
            )
            heading = f'score {hit.score:.1f} | run {hit.run_id} | {conversation}'
            blocks.append('\n'.join([heading, *lines]))
        return blocks


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


async def _fetch_windows(corpus: Corpus, windows: list[tuple[str, int, int]]) -> list[list[tuple[int, ModelMessage]]]:
    """The messages of each `(run_id, start, end)` window, in one call when the corpus can."""
    many = getattr(corpus, 'messages_many', None)
    if many is not None:
        return await many(windows)
    return [await corpus.messages(run_id, start, end) for run_id, start, end in windows]
