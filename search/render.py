"""Messages as text: the full text that is indexed and the clipped text that is shown.

Each part that carries conversation becomes one line with a role label:

| part | line |
|---|---|
| user prompt (text items joined by spaces) | `User: ...` |
| system prompt, instruction change | `System: ...` |
| tool return | `Tool [name]: ...` |
| tool return that asked for a retry, legacy retry prompt | `Retry [name]: ...` |
| retry feedback bound to no call | `Retry: ...` |
| summary an application wrote (`CompactionPart` in a request) | `Summary: ...` |
| speech transcript | `Speech [speaker]: ...` |
| text reply | `Assistant: ...` |
| tool call (arguments as JSON) | `Tool Call [name]: ...` |

Everything else (thinking, files, native tool parts, tool-list, settings and instruction
bookkeeping, and any part kind a newer pydantic-ai adds) contributes nothing. This yields
the same terms as the reference's rendering, so the same corpus ranks the same way.

The indexed text is full length. The shown text clips each part to about
`EXCERPT_CHARS` characters (`SHORT_EXCERPT_CHARS` for system text and tool-call
arguments), keeping the first query term in view (those rules live in `search.excerpt`, which
needs no pydantic-ai; this module re-exports them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai import messages as _messages
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from search.excerpt import ELLIPSIS, EXCERPT_CHARS, SHORT_EXCERPT_CHARS, Locator, clip, make_locator
from search.wire_text import LEGACY_SUMMARY_PREFIX, SEARCH_TOOL_NAME

__all__ = [
    'ELLIPSIS',
    'EXCERPT_CHARS',
    'LEGACY_SUMMARY_PREFIX',
    'SEARCH_TOOL_NAME',
    'SHORT_EXCERPT_CHARS',
    'Locator',
    'Segment',
    'clip',
    'display_lines',
    'index_text',
    'make_locator',
    'message_segments',
]

_LEGACY_SUMMARY_MARKER = '[Compaction summary]'


class _Absent:
    """Stands in for a part class this pydantic-ai version does not have; nothing is an instance of it."""


if TYPE_CHECKING:
    from pydantic_ai.messages import (
        CompactionPart,
        InstructionDeltaPart,
        RetryFeedbackPart,
        RetryPromptPart,  # pyright: ignore[reportDeprecated]
        SpeechPart,
        TextContent,
    )
else:
    # Part classes that exist in pydantic-ai-slim 2.62 but may be renamed or removed later
    # (the legacy retry prompt is already deprecated). A missing one renders nothing.
    CompactionPart = getattr(_messages, 'CompactionPart', _Absent)
    InstructionDeltaPart = getattr(_messages, 'InstructionDeltaPart', _Absent)
    RetryFeedbackPart = getattr(_messages, 'RetryFeedbackPart', _Absent)
    RetryPromptPart = getattr(_messages, 'RetryPromptPart', _Absent)
    SpeechPart = getattr(_messages, 'SpeechPart', _Absent)
    TextContent = getattr(_messages, 'TextContent', _Absent)

_is_multi_modal: Callable[[object], bool] = getattr(_messages, 'is_multi_modal_content', lambda _item: False)
_error_details_adapter: Any = getattr(_messages, 'error_details_ta', None)


@dataclass(frozen=True, slots=True)
class Segment:
    """One part's line: a role label and the part's text, with the part's display cap."""

    label: str
    """The line's start, e.g. `'User: '` or `'Tool [lookup]: '`."""

    text: str
    """The part's full text."""

    limit: int
    """How many characters of `text` a shown excerpt keeps."""

    def full(self) -> str:
        """The whole line, as indexed."""
        return self.label + self.text


def _user_text(part: UserPromptPart) -> str:
    content = part.content
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, TextContent):
            texts.append(item.content)
    return ' '.join(texts)


def _tool_return_text(part: ToolReturnPart[Any]) -> str:
    if not part.files:
        return str(part.content)
    pieces: list[str] = []
    for item in part.content_items():
        if _is_multi_modal(item):
            pieces.append(f'See file {cast(Any, item).identifier}.')
        else:
            pieces.append(str(item))
    return ' '.join(pieces)


def _error_details_text(content: object) -> str:
    """Retry content as text: a message as is, validation errors as compact JSON without their `ctx`."""
    if isinstance(content, str):
        return content
    if _error_details_adapter is not None:
        dumped = _error_details_adapter.dump_json(content, exclude={'__all__': {'ctx'}})
        return cast(bytes, dumped).decode()
    errors = [
        {key: value for key, value in cast(dict[str, Any], error).items() if key != 'ctx'}
        for error in cast(list[object], content)
    ]
    return json.dumps(errors, ensure_ascii=False, separators=(',', ':'), default=str)


def _tool_args_text(part: ToolCallPart[Any]) -> str:
    return json.dumps(part.args_as_dict(), ensure_ascii=False, default=str)


def _request_segment(part: object) -> Segment | None:
    if isinstance(part, UserPromptPart):
        return Segment('User: ', _user_text(part), EXCERPT_CHARS)
    if isinstance(part, SystemPromptPart):
        if part.content.startswith(LEGACY_SUMMARY_PREFIX):
            return Segment(_LEGACY_SUMMARY_MARKER, '', SHORT_EXCERPT_CHARS)
        return Segment('System: ', part.content, SHORT_EXCERPT_CHARS)
    if isinstance(part, InstructionDeltaPart):
        return Segment('System: ', part.render(), SHORT_EXCERPT_CHARS)
    if isinstance(part, ToolReturnPart):
        if part.tool_name == SEARCH_TOOL_NAME:
            return None
        if part.outcome == 'retried':
            return Segment(f'Retry [{part.tool_name}]: ', part.model_response_str(wrap_if_error=False), EXCERPT_CHARS)
        return Segment(
            f'Tool [{part.tool_name}]: ', _tool_return_text(cast('ToolReturnPart[Any]', part)), EXCERPT_CHARS
        )
    if isinstance(part, RetryFeedbackPart):
        return Segment('Retry: ', _error_details_text(part.content), EXCERPT_CHARS)
    if isinstance(part, RetryPromptPart):  # pyright: ignore[reportDeprecated]
        if part.tool_name == SEARCH_TOOL_NAME:
            return None
        return Segment(f'Retry [{part.tool_name}]: ', _error_details_text(part.content), EXCERPT_CHARS)
    if isinstance(part, CompactionPart):
        return Segment('Summary: ', part.content, EXCERPT_CHARS) if part.content else None
    if isinstance(part, SpeechPart):
        return Segment(f'Speech [{part.speaker}]: ', part.transcript, EXCERPT_CHARS) if part.transcript else None
    return None


def _response_segment(part: object) -> Segment | None:
    if isinstance(part, TextPart):
        return Segment('Assistant: ', part.content, EXCERPT_CHARS)
    if isinstance(part, ToolCallPart):
        if part.tool_name == SEARCH_TOOL_NAME:
            return None
        return Segment(
            f'Tool Call [{part.tool_name}]: ', _tool_args_text(cast('ToolCallPart[Any]', part)), SHORT_EXCERPT_CHARS
        )
    if isinstance(part, SpeechPart) and part.transcript:
        return Segment(f'Speech [{part.speaker}]: ', part.transcript, EXCERPT_CHARS)
    return None


def message_segments(message: ModelMessage) -> list[Segment]:
    """The lines `message` contributes, one per part that carries conversation.

    A part whose text cannot be produced (content that does not serialize, say) contributes
    nothing rather than failing the search.
    """
    if isinstance(message, ModelRequest):
        render_part = _request_segment
    elif isinstance(message, ModelResponse):  # pyright: ignore[reportUnnecessaryIsInstance]
        render_part = _response_segment
    else:  # a message kind newer than this module
        return []
    segments: list[Segment] = []
    for part in cast(Sequence[object], message.parts):
        try:
            segment = render_part(part)
        except Exception:
            continue
        if segment is not None:
            segments.append(segment)
    return segments


def index_text(message: ModelMessage) -> str:
    """The full text of `message` that is indexed: its lines joined by newlines."""
    return '\n'.join(segment.full() for segment in message_segments(message))


def display_lines(message: ModelMessage, locate: Locator, *, ellipsis: str = ELLIPSIS) -> list[str]:
    """The lines shown for `message`: each part's line with its text clipped around the first query term,
    cut ends marked with `ellipsis`."""
    lines: list[str] = []
    for segment in message_segments(message):
        text = segment.text
        focus = locate(text) if len(text) > segment.limit else None
        lines.append(segment.label + clip(text, segment.limit, focus, ellipsis))
    return lines
