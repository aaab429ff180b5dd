"""`search.excerpt`: the default locator finds the first query term in a long text exactly as in a
short one, though it lowercases a long text piece by piece."""

from __future__ import annotations

import pytest

from search.analyzers import WORD_RE, DefaultAnalyzer
from search.excerpt import _SCAN_CHARS, make_locator  # pyright: ignore[reportPrivateUsage]


def _naive(text: str, terms: frozenset[str]) -> tuple[int, int] | None:
    """The first word of `text` that the default analyzer makes one of `terms` (every word tried)."""
    analyzer = DefaultAnalyzer()
    for match in WORD_RE.finditer(text):
        if any(token in terms for token in analyzer.tokens(match.group())):
            return match.start(), match.end()
    return None


@pytest.mark.parametrize('shift', [-12, -7, -3, -1, 0, 1, 5])
@pytest.mark.parametrize('filler', ['a ', 'İ ', 'ß '], ids=['ascii', 'dotted capital I', 'sharp s'])
def test_a_term_across_a_piece_boundary_is_found(shift: int, filler: str) -> None:
    """Wherever the term falls against the pieces' edges, even after characters that lowercase to
    two (the dotted capital I), the locator answers what trying every word answers."""
    terms = frozenset({'needlepoint'})
    locate = make_locator(DefaultAnalyzer(), terms)
    head = (filler * _SCAN_CHARS)[: _SCAN_CHARS + shift]
    text = head + ' NeedlePoint tail ' + 'b ' * 100
    assert locate(text) == _naive(text, terms)
    assert locate(text) is not None
    assert locate(head + ' needle point') is None


def test_a_long_text_without_the_term_has_none() -> None:
    locate = make_locator(DefaultAnalyzer(), frozenset({'walrus'}))
    assert locate('seal ' * (3 * _SCAN_CHARS)) is None
    assert locate('') is None
