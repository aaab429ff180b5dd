"""The text a model reads for a `SearchResult`: `answer_text`, in one of two styles.

`'reference'` (the default) is the text pydantic-ai-harness's `ConversationSearch` gives for
the same corpus, byte for byte, so swapping its capability for this one changes no prompt:
a `Found N match(es) ...` header, then per hit `[score: S | run: R | conversation: C]` and
the hit's whole window, each message as `[position] text`, windows separated by `---`.

`'explained'` says more: every answer that finds nothing says why and what to try, query
and run ids are quoted with control characters escaped, and a message already shown in an
earlier result's window is not repeated.

Either style answers a query with more than `MAX_QUERY_TERMS` distinct terms, and a search
that failed to read the store, with the explained text (the reference ranks the former and
raises on the latter).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from search.options import MAX_QUERY_TERMS, AnswerStyle, SearchOptions
from search.render import Locator, display_lines, make_locator
from search.result import SearchHit, SearchResult

__all__ = ['MAX_QUERY_TERMS', 'AnswerStyle', 'answer_text']

_ECHO_CHARS = 200
"""How much of a query or run id an explained answer repeats back."""

_REFERENCE_ELLIPSIS = '...'
_REFERENCE_NO_TEXT = '[no text content]'


def answer_text(result: SearchResult, options: SearchOptions) -> str:
    """The answer a model reads for `result`, worded in `options.answer_style`.

    A `'semantic'` or `'hybrid'` search whose vector index was behind says so in a last line
    (a `'bm25'` answer is never changed)."""
    if options.answer_style == 'reference':
        text = _unsearched_text(result) or _reference_text(result, options)
    else:
        text = _explained_text(result, options)
    if result.mode != 'bm25' and result.pending > 0 and result.outcome in ('found', 'no_match'):
        text += (
            f'\n\n(The semantic index is {result.pending} log entries behind: the newest messages could only '
            'be matched once they are embedded.)'
        )
    return text


def _score(hit: SearchHit, mode: str) -> str:
    """A hit's score as shown: one decimal for BM25, more for a similarity or a fused rank score."""
    if mode == 'bm25':
        return f'{hit.score:.1f}'
    return f'{hit.score:.3f}' if mode == 'semantic' else f'{hit.score:.4f}'


def _unsearched_text(result: SearchResult) -> str | None:
    """The answer to a query refused for its size, or to a search that failed; `None` otherwise."""
    if result.outcome == 'too_many_terms':
        return (
            f'Nothing was searched: the query has {len(result.terms)} distinct words, and a search accepts at most '
            f'{MAX_QUERY_TERMS}. Keep only the few words that identify what you are looking for.'
        )
    if result.outcome == 'failed':
        return (
            f'The search could not be completed: reading or ranking the stored history failed '
            f'({result.error}). Nothing was found; the store may be closed or unavailable. '
            'The current conversation is not affected.'
        )
    return None


# --- the reference's wording ------------------------------------------------------------------


def _reference_text(result: SearchResult, options: SearchOptions) -> str:
    query = result.query
    if result.outcome == 'no_conversation':
        return (
            'Conversation-scoped search needs a conversation id, and this run has none. '
            'Pass `conversation_id=` to `Agent.run(...)` so the search can tell this '
            "conversation's history from other conversations in the same store."
        )
    if result.outcome == 'unknown_run':
        return f"No persisted history for run '{result.run_id}'."
    if result.outcome == 'nothing_stored':
        if result.conversation_id is not None:
            return (
                'No persisted history in this conversation yet. Search covers only runs '
                "sharing this run's conversation id, which comes from an explicit "
                '`conversation_id=` argument or is inherited from `message_history`; runs '
                'started with neither belong to other conversations.'
            )
        return (
            'No persisted conversation history to search yet. History accumulates '
            'as runs persist their steps (pair this capability with `StepPersistence` '
            'on a shared store).'
        )
    if result.outcome in ('no_match', 'no_terms'):
        return f"No matches for '{query}' in {result.documents} persisted messages."
    locate = make_locator(options.analyzer, frozenset(result.terms))
    blocks: list[str] = []
    for hit in result.hits:
        label = f'run: {hit.run_id}'
        if hit.conversation_id is not None:
            label += f' | conversation: {hit.conversation_id}'
        lines = [f'[score: {_score(hit, result.mode)} | {label}]']
        for shown in hit.window:
            text = '\n'.join(display_lines(shown.message, locate, ellipsis=_REFERENCE_ELLIPSIS))
            lines.append(f'[{shown.position}] {text or _REFERENCE_NO_TEXT}')
        blocks.append('\n'.join(lines))
    header = f"Found {len(blocks)} match(es) for '{query}' in {result.documents} persisted messages:\n\n"
    return header + '\n\n---\n\n'.join(blocks)


# --- explained ----------------------------------------------------------------------------------

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
    return '\n'.join(lines).replace('\n', '\n    ')


def _explained_text(result: SearchResult, options: SearchOptions) -> str:
    query = result.query
    if result.outcome == 'no_conversation':
        return _NO_CONVERSATION_ID
    if not query.strip():
        return _EMPTY_QUERY
    if not result.terms:
        return (
            f'Nothing was searched: the query {_echo(query)} has no searchable words, only punctuation, '
            'symbols or spaces. Search with words or numbers.'
        )
    unsearched = _unsearched_text(result)
    if unsearched is not None:
        return unsearched
    if result.outcome == 'unknown_run':
        run = _echo(result.run_id or '')
        return f'There is no stored history for run {run}. Check the id, or search without `run_id`.'
    if result.outcome == 'nothing_stored':
        return _NOTHING_STORED_IN_CONVERSATION if result.conversation_id is not None else _NOTHING_STORED
    total = result.documents
    where = f'stored {"message" if total == 1 else "messages"}'
    if result.run_id is not None:
        where += f' of run {_echo(result.run_id)}'
    if result.outcome == 'no_match':
        return (
            f'No message matches {_echo(query)} among the {total} {where}. Try other words: a synonym, '
            'another spelling, or a distinctive name or number.'
        )
    if not result.hits:
        return (
            f'{_plural(result.matches, "message matches", "messages match")} {_echo(query)} among the {total} '
            f'{where}, but this search is configured to show no results (max_matches={options.max_matches}).'
        )
    locate = make_locator(options.analyzer, frozenset(result.terms))
    header = (
        f'{_plural(len(result.hits), "result", "results")} for {_echo(query)} from {total} {where}, '
        'best first. Numbers in brackets are positions in the run.'
    )
    numbered = [
        f'Result {hit.rank} of {len(result.hits)} | {_explained_block(hit, locate, result.mode)}' for hit in result.hits
    ]
    return '\n\n'.join([header, *numbered])


def _explained_block(hit: SearchHit, locator: Locator, mode: str = 'bm25') -> str:
    """A hit's heading line, then the messages of its window no earlier hit showed."""
    lines: list[str] = []
    for shown in hit.window:
        if shown.repeated:
            continue
        rendered = display_lines(shown.message, locator) or ['(no text in this message)']
        lines.append(f'[{shown.position}] {_indent_continuation(rendered)}')
    conversation = f'conversation {hit.conversation_id}' if hit.conversation_id is not None else 'no conversation id'
    heading = f'score {_score(hit, mode)} | run {hit.run_id} | {conversation}'
    return '\n'.join([heading, *lines])
