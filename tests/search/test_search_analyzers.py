"""Analyzers: default, english, cjk, and the registry."""

from __future__ import annotations

import sys

import pytest

from search import ANALYZER_NAMES, Analyzer, CjkAnalyzer, DefaultAnalyzer, EnglishAnalyzer, get_analyzer
from search.analyzers import LocatingAnalyzer, resolve_analyzer


def test_default_is_lowercased_word_runs() -> None:
    assert DefaultAnalyzer().tokens('Hello, WORLD! foo_bar-42 Kraków\tÉTÉ') == [
        'hello',
        'world',
        'foo_bar',
        '42',
        'kraków',
        'été',
    ]


def test_default_spans_point_at_the_words() -> None:
    text = 'The Deploy key'
    assert list(DefaultAnalyzer().token_spans(text)) == [('the', 0, 3), ('deploy', 4, 10), ('key', 11, 14)]


def test_default_keeps_unbroken_cjk_text_as_one_term() -> None:
    assert DefaultAnalyzer().tokens('私は東京に行きました') == ['私は東京に行きました']


def test_english_stems_both_sides() -> None:
    english = EnglishAnalyzer()
    assert english.tokens('Deploying deployed deployment') == ['deploy', 'deploy', 'deploy']
    assert english.tokens('running runs') == ['run', 'run']
    spans = list(english.token_spans('We were Running'))
    assert spans[-1] == ('run', 8, 15)


def test_english_without_pystemmer_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, 'Stemmer', None)  # makes `import Stemmer` fail
    with pytest.raises(ImportError, match=r"PyStemmer.*extra 'english'.*pip install '\.\[english\]'"):
        get_analyzer('english')


def test_cjk_adds_bigrams_inside_cjk_runs() -> None:
    cjk = CjkAnalyzer()
    tokens = cjk.tokens('私は東京に行きました')
    assert tokens[0] == '私は東京に行きました'
    assert '東京' in tokens
    assert '行き' in tokens
    assert cjk.tokens('Hello 世界') == ['hello', '世界', '世界']
    assert cjk.tokens('서울에서 만나요') == ['서울에서', '만나요', '서울', '울에', '에서', '만나', '나요']


def test_cjk_single_character_run_is_its_own_term() -> None:
    assert CjkAnalyzer().tokens('abc猫def') == ['abc猫def', '猫']


def test_cjk_spans_locate_the_bigram() -> None:
    text = '私は東京に行きました'
    spans = [span for span in CjkAnalyzer().token_spans(text) if span[0] == '東京']
    assert spans == [('東京', 2, 4)]


def test_cjk_leaves_latin_text_as_default() -> None:
    text = 'Plain English text, nothing else.'
    assert CjkAnalyzer().tokens(text) == DefaultAnalyzer().tokens(text)


def test_registry() -> None:
    assert ANALYZER_NAMES == ('default', 'english', 'cjk')
    for name in ANALYZER_NAMES:
        analyzer = get_analyzer(name)
        assert analyzer.name == name
        assert isinstance(analyzer, Analyzer)
        assert isinstance(analyzer, LocatingAnalyzer)


def test_unknown_analyzer_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match=r"Unknown analyzer 'klingon'; choose one of 'default', 'english', 'cjk'"):
        get_analyzer('klingon')


def test_resolve_accepts_names_and_instances() -> None:
    cjk = CjkAnalyzer()
    assert resolve_analyzer(cjk) is cjk
    assert isinstance(resolve_analyzer('default'), DefaultAnalyzer)
    with pytest.raises(TypeError, match='analyzer must be a name or an Analyzer'):
        resolve_analyzer(42)  # pyright: ignore[reportArgumentType]
