"""A huge message is indexed in bounded memory: its text is analyzed a chunk at a time (cut at
whitespace) into term counts, which equal those of the whole text analyzed at once."""

from __future__ import annotations

import tracemalloc
from collections import Counter

import pytest

import search.analyzers
from search.analyzers import get_analyzer, term_counts

CHUNK = 1 << 16


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 64 K characters, so that a text of a few hundred K is huge (and the test quick)."""
    monkeypatch.setattr(search.analyzers, 'TERM_CHUNK', CHUNK)


def _huge_text() -> str:
    words = [f'w{i % 4_000}' for i in range(120_000)]
    words[12_345] = '東京都庁舎'  # a CJK run (bigrams) inside the text
    lines = [' '.join(words[i : i + 12]) for i in range(0, len(words), 12)]
    text = '\n'.join(lines)
    assert len(text) > 8 * CHUNK
    return text


@pytest.mark.parametrize('name', ['default', 'english', 'cjk'])
def test_term_counts_of_a_huge_text_equal_those_of_the_text_at_once(name: str) -> None:
    analyzer = get_analyzer(name)
    text = _huge_text()
    assert term_counts(analyzer, text) == Counter(analyzer.tokens(text))


def test_term_counts_never_hold_every_term_of_a_huge_text() -> None:
    analyzer = get_analyzer('default')
    text = _huge_text()
    tracemalloc.start()
    try:
        Counter(analyzer.tokens(text))
        _, whole = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        term_counts(analyzer, text)
        _, chunked = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert chunked * 3 < whole, (chunked, whole)
