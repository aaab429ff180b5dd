"""The text lines of a stored message, read straight from its JSON without pydantic-ai.

`search.render.message_segments` defines which lines a message carries. Getting there means
decoding the message with pydantic-ai, and importing pydantic-ai alone takes about a second:
too much for a view that only summarises entries, such as `eventlog tail`. `wire_lines` reads
the same lines from the JSON pydantic-ai stored, for the part kinds that make up nearly every
conversation (prompts, replies, tool calls and returns, retries, thinking, summaries), and declines with
`None` whenever a message holds anything else, so that the caller decodes it in full instead.
Where it answers, it answers exactly what `message_segments` would (a test holds them equal on
every part kind).

The constants the two share are defined here, where reading them imports nothing heavy.
"""

from __future__ import annotations

import json
from typing import Final, cast

import msgspec

from eventlog.nesting import DEPTH_LIMIT, json_depth, may_nest_deeper

__all__ = ['LEGACY_SUMMARY_PREFIX', 'SEARCH_TOOL_NAME', 'wire_index_text', 'wire_lines']

SEARCH_TOOL_NAME: Final = 'search_conversation_history'
"""The search tool's own name. Its calls and returns are bookkeeping of earlier searches, not
conversation: they stay in the log but are neither indexed nor shown, so a search never
answers with the questions and answers of earlier searches."""

LEGACY_SUMMARY_PREFIX: Final = 'Summary of previous conversation:\n\n'
"""How a summary system prompt written by an older summarizing compaction begins.

Such a prompt is a derived artifact, not an original: it renders as a bare marker line."""


class _Part(msgspec.Struct, forbid_unknown_fields=False):
    part_kind: str
    content: object = None
    tool_name: object = None
    args: object = None
    outcome: object = None


class _Message(msgspec.Struct, forbid_unknown_fields=False):
    kind: str
    parts: list[_Part]


_decode_message = msgspec.json.Decoder(_Message).decode
_decode_args = msgspec.json.Decoder().decode


class _Decline(Exception):
    """The message holds something only the full decode renders exactly."""


def wire_lines(payload: bytes) -> tuple[str, list[tuple[str, str]]] | None:
    """The message's role (`request` or `response`) and its lines, or `None` to decode it in full.

    Each line is a label and the part's whole text (`('User: ', 'hello')`), as a `Segment` holds them.
    """
    try:
        message = _decode_message(payload)
        if message.kind == 'request':
            lines = [line for part in message.parts if (line := _request_line(part)) is not None]
        elif message.kind == 'response':
            lines = [line for part in message.parts if (line := _response_line(part)) is not None]
        else:
            return None
    except (msgspec.DecodeError, UnicodeEncodeError, _Decline):  # a lone surrogate: read in full
        return None
    return message.kind, lines


def wire_index_text(payload: bytes) -> str | None:
    """The message's indexed text (`search.render.index_text`: its lines joined by newlines), or
    `None` to decode it in full."""
    wire = wire_lines(payload)
    if wire is None:
        return None
    return '\n'.join(label + text for label, text in wire[1])


def _request_line(part: _Part) -> tuple[str, str] | None:
    kind, content = part.part_kind, part.content
    if kind == 'user-prompt' and isinstance(content, str):
        return 'User: ', content
    if kind == 'system-prompt' and isinstance(content, str) and not content.startswith(LEGACY_SUMMARY_PREFIX):
        return 'System: ', content
    if kind == 'compaction' and (content is None or isinstance(content, str)):
        return ('Summary: ', content) if content else None
    if kind in ('tool-return', 'retry-prompt') and part.tool_name == SEARCH_TOOL_NAME:
        return None
    if kind == 'tool-return' and isinstance(part.tool_name, str) and part.outcome in ('success', 'failed'):
        return f'Tool [{part.tool_name}]: ', _plain_value_text(content)
    if kind == 'retry-prompt' and isinstance(part.tool_name, str) and isinstance(content, str):
        return f'Retry [{part.tool_name}]: ', content
    raise _Decline


def _response_line(part: _Part) -> tuple[str, str] | None:
    kind = part.part_kind
    if kind == 'text' and isinstance(part.content, str):
        return 'Assistant: ', part.content
    if kind in ('thinking', 'compaction'):
        return None
    if kind == 'tool-call' and isinstance(part.tool_name, str):
        if part.tool_name == SEARCH_TOOL_NAME:
            return None
        return f'Tool Call [{part.tool_name}]: ', json.dumps(_args(part.args), ensure_ascii=False)
    raise _Decline


def _args(args: object) -> dict[str, object]:
    """Tool-call arguments as a dict, when they are a JSON object or text holding one."""
    if args is None or args == '' or args == {}:
        return {}
    if (
        isinstance(args, str)
        and may_nest_deeper(args.encode('utf-8', 'surrogatepass'), DEPTH_LIMIT)
        and json_depth(args) > DEPTH_LIMIT
    ):
        raise _Decline  # pydantic-ai reads text this deep its own way (as invalid JSON past its limit)
    value: object = _decode_args(args) if isinstance(args, str) else args
    if not isinstance(value, dict):
        raise _Decline
    mapping = cast('dict[str, object]', value)
    if not _plain(mapping):
        raise _Decline
    return mapping


def _plain_value_text(value: object) -> str:
    """A tool's return value as text, when it is plain JSON data (no files, no typed objects)."""
    if not _plain(value):
        raise _Decline
    return value if isinstance(value, str) else str(value)


def _plain(value: object) -> bool:
    """Whether `value` is JSON data that pydantic-ai keeps as is: no mapping that could be a file
    or another typed object (those carry a `kind`), and no number that JSON cannot round-trip.

    Walks with a list of its own, not by recursion: stored data may nest as deep as pydantic-ai allows."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            items = cast('dict[object, object]', item)
            if 'kind' in items:
                return False
            pending.extend(items.values())
        elif isinstance(item, list):
            pending.extend(cast('list[object]', item))
        elif isinstance(item, float):
            if item != item or item in (float('inf'), float('-inf')):
                return False
        elif not (item is None or isinstance(item, str | int | bool)):
            return False
    return True
