"""Rendering messages to indexed and shown text."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
from pydantic_ai import messages as m
from pydantic_ai.messages import ModelRequest, ModelResponse
from searchtools import FIXED_TIME, every_part_kind

from search import CjkAnalyzer, DefaultAnalyzer, EnglishAnalyzer
from search.render import (
    ELLIPSIS,
    EXCERPT_CHARS,
    SHORT_EXCERPT_CHARS,
    clip,
    display_lines,
    index_text,
    make_locator,
    message_segments,
)


def lines_of(message: m.ModelMessage) -> list[str]:
    return index_text(message).split('\n') if index_text(message) else []


def test_every_label() -> None:
    text = '\n'.join(index_text(message) for message in every_part_kind())
    for label in (
        'User: ',
        'System: ',
        'Tool [lookup_office]: ',
        'Tool Call [lookup_office]: {"city": "Kraków", "floors": 3, "tags": ["a", "ß"]}',
        'Retry [retry_str]: try a smaller number',
        'Retry [fixme]: please fix the zebra',
        'Retry: output was bad',
        'Retry [old_tool]: legacy retry walrus',
        'Summary: Earlier we agreed the budget is 4200 euros.',
        'Speech [user]: spoken question about the pelican',
        'Speech [assistant]: spoken answer about the pelican',
        'Assistant: The Kraków office opens in March',
        '[Compaction summary]',
    ):
        assert label in text


def test_what_is_not_indexed() -> None:
    text = '\n'.join(index_text(message) for message in every_part_kind())
    for absent in ('badgers', 'only thinking here', 'native search', 'native result', 'alpha_tool', 'otters'):
        assert absent not in text
    assert 'provider compaction text' not in text  # a provider's compaction in a response is not conversation


def test_user_prompt_joins_text_items_and_skips_media() -> None:
    message = ModelRequest(
        parts=[
            m.UserPromptPart(
                ['one', m.TextContent('two'), m.ImageUrl('https://example.com/x.png'), 'three'], timestamp=FIXED_TIME
            )
        ]
    )
    assert lines_of(message) == ['User: one two three']


def test_tool_return_names_files_by_identifier() -> None:
    image = m.ImageUrl('https://example.com/chart.png')
    message = ModelRequest(parts=[m.ToolReturnPart('plot', ['the chart', image], timestamp=FIXED_TIME)])
    assert lines_of(message) == [f'Tool [plot]: the chart See file {image.identifier}.']


def test_retried_tool_return_shows_the_errors_as_json() -> None:
    errors = [{'type': 'missing', 'loc': ['x'], 'msg': 'Field required', 'input': {}}]
    message = ModelRequest(parts=[m.ToolReturnPart('calc', errors, outcome='retried', timestamp=FIXED_TIME)])
    (line,) = lines_of(message)
    assert line.startswith('Retry [calc]: [')
    assert '"msg":"Field required"' in line


def test_invalid_tool_arguments_still_render() -> None:
    message = ModelResponse(parts=[m.ToolCallPart('t', '{broken')], timestamp=FIXED_TIME)
    assert lines_of(message) == ['Tool Call [t]: {"INVALID_JSON": "{broken"}']


def test_arguments_that_do_not_serialize_fall_back_to_text() -> None:
    message = ModelResponse(parts=[m.ToolCallPart('t', {'when': FIXED_TIME})], timestamp=FIXED_TIME)
    assert lines_of(message) == ['Tool Call [t]: {"when": "2026-01-02 03:04:05+00:00"}']


@dataclass
class FuturePart:
    """A part kind from a pydantic-ai release newer than the search layer."""

    content: str = 'from the future'
    part_kind: str = 'future'


def test_unknown_part_kinds_contribute_nothing() -> None:
    request = ModelRequest(parts=[FuturePart(), m.UserPromptPart('kept', timestamp=FIXED_TIME)])  # pyright: ignore[reportArgumentType]
    response = ModelResponse(parts=[FuturePart(), m.TextPart('also kept')], timestamp=FIXED_TIME)  # pyright: ignore[reportArgumentType]
    assert lines_of(request) == ['User: kept']
    assert lines_of(response) == ['Assistant: also kept']
    assert index_text('not a message') == ''  # pyright: ignore[reportArgumentType]


def test_a_part_that_fails_to_render_contributes_nothing() -> None:
    class Exploding:
        def __str__(self) -> str:
            raise RuntimeError('boom')

    message = ModelRequest(
        parts=[m.ToolReturnPart('t', Exploding(), timestamp=FIXED_TIME), m.UserPromptPart('kept', timestamp=FIXED_TIME)]
    )
    assert lines_of(message) == ['User: kept']


def test_segments_carry_their_display_caps() -> None:
    message = ModelRequest(
        parts=[m.SystemPromptPart('sys', timestamp=FIXED_TIME), m.UserPromptPart('hi', timestamp=FIXED_TIME)]
    )
    assert [(s.label, s.limit) for s in message_segments(message)] == [
        ('System: ', SHORT_EXCERPT_CHARS),
        ('User: ', EXCERPT_CHARS),
    ]


# --- clipping ------------------------------------------------------------------------------------


def test_clip_keeps_short_text() -> None:
    assert clip('short', 10, None) == 'short'


def test_clip_cuts_the_head_when_the_term_is_early_or_absent() -> None:
    text = 'needle ' + 'x' * 100
    assert clip(text, 20, (0, 6)) == text[:20] + ELLIPSIS
    assert clip(text, 20, None) == text[:20] + ELLIPSIS


def test_clip_centres_a_late_term() -> None:
    text = 'a' * 100 + ' needle ' + 'b' * 100
    out = clip(text, 40, (101, 107))
    assert 'needle' in out
    assert out.startswith(ELLIPSIS) and out.endswith(ELLIPSIS)
    assert len(out) == 40 + 2 * len(ELLIPSIS)
    assert out[1:].index('needle') == 101 - (101 - 20)


def test_clip_keeps_a_long_term_whole() -> None:
    term = 'n' * 30
    text = 'a' * 100 + ' ' + term + ' ' + 'b' * 100
    out = clip(text, 40, (101, 131))
    assert term in out


def test_clip_ends_with_the_text_when_the_term_is_near_the_end() -> None:
    text = 'a' * 100 + ' needle'
    out = clip(text, 40, (101, 107))
    assert out == ELLIPSIS + text[-40:]


def test_display_clips_each_part_around_the_first_query_term() -> None:
    long_text = 'filler ' * 150 + 'the vault code is 9931 ' + 'more ' * 100
    message = ModelRequest(
        parts=[
            m.UserPromptPart(long_text, timestamp=FIXED_TIME),
            m.SystemPromptPart('s ' * 150 + 'vault rules', timestamp=FIXED_TIME),
        ]
    )
    locate = make_locator(DefaultAnalyzer(), frozenset({'vault'}))
    user_line, system_line = display_lines(message, locate)
    assert 'the vault code is 9931' in user_line
    assert len(user_line) <= len('User: ') + EXCERPT_CHARS + 2
    assert 'vault rules' in system_line
    assert len(system_line) <= len('System: ') + SHORT_EXCERPT_CHARS + 2


@pytest.mark.parametrize(
    ('analyzer', 'term', 'expected'),
    [
        (EnglishAnalyzer(), 'deploy', 'the deployment starts'),
        (CjkAnalyzer(), '東京', '私は東京に行きました'),
    ],
)
def test_display_locates_terms_with_the_analyzer(analyzer: object, term: str, expected: str) -> None:
    text = 'x ' * 400 + expected + ' ' + 'y ' * 400
    message = ModelRequest(parts=[m.UserPromptPart(text, timestamp=FIXED_TIME)])
    (line,) = display_lines(message, make_locator(analyzer, frozenset({term})))  # pyright: ignore[reportArgumentType]
    assert expected in line


def test_module_imports_when_optional_part_classes_are_missing() -> None:
    """A pydantic-ai-slim without some part classes (renamed or removed upstream) still works."""
    code = textwrap.dedent(
        """
        import pydantic_ai.messages as messages
        for name in ('RetryPromptPart', 'SpeechPart', 'CompactionPart', 'InstructionDeltaPart',
                     'RetryFeedbackPart', 'TextContent', 'error_details_ta', 'is_multi_modal_content'):
            delattr(messages, name)
        from search.render import index_text
        from pydantic_ai.messages import ModelRequest, UserPromptPart, ModelResponse, TextPart
        print(index_text(ModelRequest(parts=[UserPromptPart('still works')])))
        print(index_text(ModelResponse(parts=[TextPart('reply')])))
        """
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.split('\n')[:2] == ['User: still works', 'Assistant: reply']
