"""Analyzers: how text becomes the terms BM25 counts.

The same analyzer must turn both the documents and the query into terms. Three ship:

- `default`: lowercased runs of word characters (`\\w+`), the reference's tokenization.
- `english`: `default`, then Snowball English stemming, so `deploying` finds `deployed`
  (needs PyStemmer, the `[english]` extra).
- `cjk`: `default`, plus overlapping character bigrams inside runs of Han, Kana and Hangul
  characters, so a word inside unbroken Chinese, Japanese or Korean text is found.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from typing import Protocol, runtime_checkable

__all__ = [
    'ANALYZER_NAMES',
    'Analyzer',
    'CjkAnalyzer',
    'DefaultAnalyzer',
    'EnglishAnalyzer',
    'LocatingAnalyzer',
    'TokenSpan',
    'get_analyzer',
    'resolve_analyzer',
    'term_counts',
]

WORD_RE = re.compile(r'\w+')
"""A word: a run of Unicode letters, digits and underscores."""

TokenSpan = tuple[str, int, int]
"""A term and the `[start, end)` character range of the text it came from."""


@runtime_checkable
class Analyzer(Protocol):
    """Turns text into the list of terms BM25 counts (repeats included)."""

    @property
    def name(self) -> str:
        """A short name that identifies the analyzer and its settings (stored with a persistent index)."""
        ...

    def tokens(self, text: str) -> list[str]:
        """The terms of `text`, in order, with repeats."""
        ...


@runtime_checkable
class LocatingAnalyzer(Analyzer, Protocol):
    """An analyzer that can also say where in the text each term came from.

    Display uses it to clip a long part around the first query term. An analyzer without
    it is located word by word instead.
    """

    def token_spans(self, text: str) -> Iterator[TokenSpan]:
        """Each term of `text` with its character range, in order."""
        ...


class DefaultAnalyzer:
    """Lowercased `\\w+` runs: exactly the reference's tokenization."""

    @property
    def name(self) -> str:
        """`'default'`."""
        return 'default'

    def tokens(self, text: str) -> list[str]:
        """The lowercased word runs of `text`."""
        return [match.group().lower() for match in WORD_RE.finditer(text)]

    def token_spans(self, text: str) -> Iterator[TokenSpan]:
        """Each lowercased word run with its range."""
        for match in WORD_RE.finditer(text):
            yield match.group().lower(), match.start(), match.end()

    def __repr__(self) -> str:
        return 'DefaultAnalyzer()'


class EnglishAnalyzer:
    """Lowercased `\\w+` runs reduced to their Snowball English stems.

    PyStemmer is imported when the analyzer is created, not when this module is.
    """

    def __init__(self) -> None:
        """Load the stemmer; raises `ImportError` naming the `[english]` extra when PyStemmer is missing."""
        try:
            import Stemmer  # pyright: ignore[reportMissingImports]
        except ImportError as exc:
            raise ImportError(
                "The 'english' analyzer needs PyStemmer, which is not installed. "
                "Install the extra 'english' (in a clone of this repository: pip install '.[english]')."
            ) from exc
        stemmer = Stemmer.Stemmer('english')  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        self._stem_words: Callable[[list[str]], list[str]] = stemmer.stemWords  # pyright: ignore[reportUnknownMemberType]

    @property
    def name(self) -> str:
        """`'english'`."""
        return 'english'

    def tokens(self, text: str) -> list[str]:
        """The stems of the lowercased word runs of `text`."""
        return self._stem_words([match.group().lower() for match in WORD_RE.finditer(text)])

    def token_spans(self, text: str) -> Iterator[TokenSpan]:
        """Each stem with the range of the word it came from."""
        matches = list(WORD_RE.finditer(text))
        stems = self._stem_words([match.group().lower() for match in matches])
        for stem, match in zip(stems, matches, strict=True):
            yield stem, match.start(), match.end()

    def __repr__(self) -> str:
        return 'EnglishAnalyzer()'


_CJK_CHARS = (
    '\u1100-\u11ff'  # Hangul Jamo
    '\u3040-\u309f'  # Hiragana
    '\u30a0-\u30ff'  # Katakana
    '\u3130-\u318f'  # Hangul Compatibility Jamo
    '\u31f0-\u31ff'  # Katakana Phonetic Extensions
    '\u3400-\u4dbf'  # CJK Unified Ideographs Extension A
    '\u4e00-\u9fff'  # CJK Unified Ideographs
    '\ua960-\ua97f'  # Hangul Jamo Extended-A
    '\uac00-\ud7af'  # Hangul Syllables
    '\ud7b0-\ud7ff'  # Hangul Jamo Extended-B
    '\uf900-\ufaff'  # CJK Compatibility Ideographs
    '\uff66-\uff9f'  # Halfwidth Katakana
    '\U0001b000-\U0001b16f'  # Kana Supplement and Extended-A
    '\U00020000-\U0003134f'  # CJK Unified Ideographs Extensions B to G
)


@cache
def _cjk_runs() -> re.Pattern[str]:
    """A run of CJK characters: compiled when first used (a class this large takes milliseconds,
    which every command that imports the analyzers would pay)."""
    return re.compile(f'[{_CJK_CHARS}]+')


class CjkAnalyzer:
    """`default` plus overlapping character bigrams inside runs of Han, Kana and Hangul characters.

    Chinese and Japanese are written without spaces, so `default` makes a whole clause one
    term and a query for one word inside it never matches. Bigrams make such a word findable:
    `東京` is a term of `私は東京に行きました`. A run of a single such character adds itself
    as a term. A one-character query only matches where that character stands alone.
    """

    @property
    def name(self) -> str:
        """`'cjk'`."""
        return 'cjk'

    def tokens(self, text: str) -> list[str]:
        """The default terms of `text`, followed by the bigrams of its CJK runs."""
        return [token for token, _, _ in self.token_spans(text)]

    def token_spans(self, text: str) -> Iterator[TokenSpan]:
        """Each word run (lowercased), then each CJK bigram, with its range."""
        for match in WORD_RE.finditer(text):
            yield match.group().lower(), match.start(), match.end()
        for run in _cjk_runs().finditer(text):
            start, chars = run.start(), run.group()
            if len(chars) == 1:
                yield chars, start, start + 1
                continue
            for offset in range(len(chars) - 1):
                yield chars[offset : offset + 2], start + offset, start + offset + 2

    def __repr__(self) -> str:
        return 'CjkAnalyzer()'


_FACTORIES: dict[str, Callable[[], Analyzer]] = {
    'default': DefaultAnalyzer,
    'english': EnglishAnalyzer,
    'cjk': CjkAnalyzer,
}

ANALYZER_NAMES: tuple[str, ...] = tuple(_FACTORIES)
"""The names `get_analyzer` accepts."""


def get_analyzer(name: str) -> Analyzer:
    """The analyzer registered under `name`.

    Raises:
        ValueError: `name` is not one of `ANALYZER_NAMES`.
        ImportError: the analyzer needs an optional dependency that is not installed.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        known = ', '.join(repr(known) for known in ANALYZER_NAMES)
        raise ValueError(f'Unknown analyzer {name!r}; choose one of {known}.')
    return factory()


def resolve_analyzer(analyzer: str | Analyzer) -> Analyzer:
    """`analyzer` itself, or the registered analyzer of that name."""
    if isinstance(analyzer, str):
        return get_analyzer(analyzer)
    if not isinstance(analyzer, Analyzer):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f'analyzer must be a name or an Analyzer, got {type(analyzer).__name__}.')
    return analyzer


TERM_CHUNK = 1 << 20
"""Characters of text an analyzer is given at once by `term_counts`."""

_SPACE_RE = re.compile(r'\s')


def term_counts(analyzer: Analyzer, text: str) -> Counter[str]:
    """How often each term of `text` occurs, the text analyzed `TERM_CHUNK` characters at a time
    (cut after a whitespace, so no word is split): a huge message never makes a list of all its
    terms, only counts of its distinct ones."""
    if len(text) <= TERM_CHUNK:
        return Counter(analyzer.tokens(text))
    counts: Counter[str] = Counter()
    start = 0
    while start < len(text):
        end = start + TERM_CHUNK
        if end < len(text):
            window = text[end - 4096 : end]  # the last whitespace near the cut, if any
            found = [m.end() for m in _SPACE_RE.finditer(window)]
            if found:
                end = end - 4096 + found[-1]
        counts.update(analyzer.tokens(text[start:end]))
        start = end
    return counts
