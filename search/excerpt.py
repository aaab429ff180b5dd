"""Shown excerpts without pydantic-ai: the display caps, `clip`, and where a query term lies.

`search.render` turns a decoded message into lines and clips them with these; the command line
clips the lines it reads straight from a stored payload (`eventlog_cli.entries.hit_lines`) with
the same rules, so that showing a search hit needs neither pydantic-ai nor a decoded message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from search.analyzers import WORD_RE, Analyzer, DefaultAnalyzer, LocatingAnalyzer

__all__ = ['ELLIPSIS', 'EXCERPT_CHARS', 'SHORT_EXCERPT_CHARS', 'Locator', 'clip', 'make_locator']

EXCERPT_CHARS = 500
"""Display cap for conversational text: prompts, replies, tool returns, retries, summaries, speech."""

SHORT_EXCERPT_CHARS = 200
"""Display cap for system text and tool-call arguments."""

ELLIPSIS = '…'
"""Marks text cut from a shown excerpt."""

Locator = Callable[[str], tuple[int, int] | None]
"""Finds the character range of the first query term in a text, or `None` when there is none."""


def clip(text: str, limit: int, focus: tuple[int, int] | None, ellipsis: str = ELLIPSIS) -> str:
    """`text` cut to `limit` characters for display, keeping `focus` (a character range) in view.

    Text within `limit` is kept whole. Otherwise the excerpt is the head of the text, unless
    the focus ends past `limit`: then the window is placed half a window before the focus,
    moved later when the focus is longer than half a window (so it stays whole), and moved
    back when that would run past the end of the text (so the excerpt keeps `limit`
    characters). Cut ends are marked with `ellipsis`.
    """
    if len(text) <= limit:
        return text
    if focus is None or focus[1] <= limit:
        return text[:limit] + ellipsis
    focus_start, focus_end = focus
    start = min(max(focus_start - limit // 2, focus_end - limit), len(text) - limit)
    end = start + limit
    head = ellipsis if start > 0 else ''
    tail = ellipsis if end < len(text) else ''
    return head + text[start:end] + tail


def _word_spans(analyzer: Analyzer) -> Callable[[str], Iterator[tuple[str, int, int]]]:
    """How to list `analyzer`'s terms with their ranges (its own spans, else word by word)."""
    if isinstance(analyzer, LocatingAnalyzer):
        return analyzer.token_spans

    def spans(text: str) -> Iterator[tuple[str, int, int]]:
        for match in WORD_RE.finditer(text):
            for token in analyzer.tokens(match.group()):
                yield token, match.start(), match.end()

    return spans


def make_locator(analyzer: Analyzer, terms: frozenset[str]) -> Locator:
    """A `Locator` for the earliest place in a text where `analyzer` produces one of `terms`."""
    if type(analyzer) is DefaultAnalyzer:
        return _default_locator(terms)
    spans = _word_spans(analyzer)

    def locate(text: str) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for token, start, end in spans(text):
            if token in terms and (best is None or start < best[0]):
                best = (start, end)
        return best

    return locate


_SCAN_CHARS = 1 << 16
"""How much of a text the default locator lowercases at a time (a large text is not copied whole)."""


def _default_locator(terms: frozenset[str]) -> Locator:
    """The default analyzer's locator: its terms come in text order, so the first hit is the
    earliest, and a text whose lowercased form contains no term as a substring has none.

    The substring test is exact because `str.lower` maps character by character, except for the
    final-sigma rule, which looks past word boundaries: texts with a capital sigma are scanned.
    It lowercases a long text piece by piece, each piece overlapping the next by the longest term
    (a character lowercases to one character or more, so a term found in the lowercased text comes
    from at most as many characters as it has).
    """
    longest = max(map(len, terms), default=0)

    def may_hold(text: str) -> bool:
        for start in range(0, max(len(text), 1), _SCAN_CHARS):
            piece = text[start : start + _SCAN_CHARS + longest].lower()
            if any(term in piece for term in terms):
                return True
        return False

    def locate(text: str) -> tuple[int, int] | None:
        if 'Σ' not in text and not may_hold(text):
            return None
        for match in WORD_RE.finditer(text):
            if match.group().lower() in terms:
                return match.start(), match.end()
        return None

    return locate
