"""`search.wire_text` reads a message's lines from its JSON exactly as `message_segments` renders them.

Wherever the fast path answers, it must answer what the full decode gives; where it declines, the
views fall back to the full decode, so declining is always safe and answering wrongly never is.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as m
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from searchtools import FIXED_TIME, every_part_kind

from search.render import SEARCH_TOOL_NAME, message_segments
from search.wire_text import wire_lines


def _payload(message: ModelMessage) -> bytes:
    return ModelMessagesTypeAdapter.dump_json([message])[1:-1]


def _full(message: ModelMessage) -> tuple[str, list[tuple[str, str]]]:
    """What the views show without the fast path: the stored bytes decoded by pydantic-ai, rendered."""
    [message] = ModelMessagesTypeAdapter.validate_json(b'[' + _payload(message) + b']')
    role = 'response' if isinstance(message, ModelResponse) else 'request'
    return role, [(segment.label, segment.text) for segment in message_segments(message)]


def test_every_part_kind_is_read_exactly_or_declined() -> None:
    answered = 0
    for message in every_part_kind():
        fast = wire_lines(_payload(message))
        if fast is not None:
            answered += 1
            assert fast == _full(message), message
    assert answered >= 3  # the common shapes do take the fast path


def test_the_common_shapes_take_the_fast_path() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                m.SystemPromptPart('be brief', timestamp=FIXED_TIME),
                m.UserPromptPart('where is the file?', timestamp=FIXED_TIME),
                m.ToolReturnPart('ls', {'files': ['a.txt', 'b.txt'], 'count': 2, 'ok': True}, timestamp=FIXED_TIME),
                m.ToolReturnPart('ls', 'it failed', outcome='failed', timestamp=FIXED_TIME),
                m.ToolReturnPart(SEARCH_TOOL_NAME, 'earlier results', timestamp=FIXED_TIME),
                m.CompactionPart('we agreed on 4200 euros'),
                m.CompactionPart(None),
            ]
        ),
        ModelResponse(
            parts=[
                m.ThinkingPart('hmm'),
                m.TextPart('In /srv/data.'),
                m.ToolCallPart('ls', {'path': '/srv', 'depth': 1.5}),
                m.ToolCallPart('ls', '{"path": "/tmp"}'),
                m.ToolCallPart('noop', None),
                m.ToolCallPart(SEARCH_TOOL_NAME, {'query': 'file'}),
                m.CompactionPart('provider summary'),
            ],
            timestamp=FIXED_TIME,
        ),
    ]
    for message in messages:
        fast = wire_lines(_payload(message))
        assert fast is not None, message
        assert fast == _full(message)


def test_a_message_it_cannot_read_exactly_is_declined() -> None:
    image = m.ImageUrl('https://example.com/cat.png')
    for message in [
        ModelRequest(parts=[m.UserPromptPart(['look', image], timestamp=FIXED_TIME)]),
        ModelRequest(parts=[m.ToolReturnPart('draw', image, timestamp=FIXED_TIME)]),
        ModelRequest(parts=[m.ToolReturnPart('calc', 'too big', outcome='retried', timestamp=FIXED_TIME)]),
        ModelResponse(parts=[m.ToolCallPart('bad', '{not json')], timestamp=FIXED_TIME),
    ]:
        assert wire_lines(_payload(message)) is None
    assert wire_lines(b'not json at all') is None
    assert wire_lines(b'{"kind": "notice", "parts": []}') is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(text=st.text(), tool=st.text(min_size=1, max_size=12), value=_json, args=st.dictionaries(st.text(), _json))
def test_generated_messages_agree_with_the_full_decode(
    text: str, tool: str, value: object, args: dict[str, object]
) -> None:
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                m.UserPromptPart(text, timestamp=FIXED_TIME),
                m.ToolReturnPart(tool, value, timestamp=FIXED_TIME),
            ]
        ),
        ModelResponse(parts=[m.TextPart(text), m.ToolCallPart(tool, args)], timestamp=FIXED_TIME),
    ]
    for message in messages:
        fast = wire_lines(_payload(message))
        if fast is not None:
            assert fast == _full(message)
