"""Stored messages as the web viewer shows them: each part as stored, read from the entry's JSON.

A message entry's payload is pydantic-ai's JSON for one message. The viewer shows it without
decoding it into pydantic-ai objects: each part becomes a `PartView` with its kind, its tool name
and call id when it has them, its text as stored, and any structured value (tool call arguments,
tool returns, retry details) as indented JSON. Binary content (`"kind": "binary"` objects with
base64 `data`) is never inlined: it becomes a `FileLink`, numbered in document order within the
entry, which `binary_item` serves as a download with its media type.

Every string here is raw stored text: the templates escape it (Jinja autoescape) and the
`visible` filter shows control characters as escapes.

Pages are bounded in bytes: a text or JSON value is clipped at `TEXT_LIMIT` characters, and a
message whose payload exceeds `PAYLOAD_LIMIT` bytes is not decoded at all; either way the page
links to the full payload (`/e/{seq}/payload`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from eventlog.entries import CompactionInfo, Entry
from eventlog.errors import CorruptEntryError

__all__ = [
    'PAYLOAD_LIMIT',
    'TEXT_LIMIT',
    'FileLink',
    'MessageView',
    'PartView',
    'binary_item',
    'compaction_view',
    'message_view',
    'payload_view',
    'pretty_json',
]


TEXT_LIMIT = 20_000
"""Most characters of one text or JSON value a page shows; the rest is behind the payload link."""

PAYLOAD_LIMIT = 1 << 20
"""A message payload larger than this (bytes) is not decoded for a page, only linked."""


@dataclass(frozen=True)
class FileLink:
    """A binary item of a message, served by `/e/{seq}/file/{index}`."""

    index: int
    """Its number among the entry's binary items, in document order (0 first)."""
    media_type: str
    """The media type it was stored with."""
    size: int
    """Its size in bytes, decoded."""
    identifier: str | None
    """pydantic-ai's identifier of the item, when stored."""


@dataclass
class PartView:
    """One part of a message, as stored."""

    kind: str
    """pydantic-ai's `part_kind` (`user-prompt`, `tool-call`, `text`, ...)."""
    label: str
    """How the viewer names it (`User`, `Tool call`, `Assistant`, ...)."""
    tool_name: str | None = None
    """The tool's name, for tool calls, returns and retries."""
    tool_call_id: str | None = None
    """The call id, for tool calls, returns and retries."""
    text: str | None = None
    """Text content, exactly as stored."""
    json: str | None = None
    """A structured value (arguments, a return, retry details), as indented JSON."""
    urls: list[str] = field(default_factory=list[str])
    """URLs the part refers to (image, document, audio, video URLs), shown as text, never loaded."""
    files: list[FileLink] = field(default_factory=list[FileLink])
    """Binary items, served as downloads."""
    clipped: int = 0
    """Characters of `text` and `json` left out (over `TEXT_LIMIT`), shown by the payload link."""


@dataclass
class MessageView:
    """A message entry: its role and parts."""

    role: str
    """`request` or `response` (`unknown` for a payload that is not a message)."""
    parts: list[PartView]
    """The parts in stored order."""
    model_name: str | None = None
    """The model that produced a response, when stored."""
    usage: dict[str, int] = field(default_factory=dict[str, int])
    """A response's non-zero token counts."""
    omitted: int = 0
    """The payload's size when it is over `PAYLOAD_LIMIT` and so not decoded (no parts then)."""


_LABELS = {
    'system-prompt': 'System',
    'user-prompt': 'User',
    'tool-return': 'Tool return',
    'retry-prompt': 'Retry',
    'text': 'Assistant',
    'thinking': 'Thinking',
    'tool-call': 'Tool call',
    'builtin-tool-call': 'Built-in tool call',
    'builtin-tool-return': 'Built-in tool return',
    'file': 'File',
    'compaction': 'Summary',
}


def pretty_json(value: object) -> str:
    """`value` as indented JSON, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


def _is_binary(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    item = cast(dict[str, Any], value)
    return item.get('kind') == 'binary' and isinstance(item.get('data'), str)


def _binaries(value: object) -> Iterator[dict[str, Any]]:
    """Every binary item inside `value`, in document order."""
    if _is_binary(value):
        yield cast(dict[str, Any], value)
    elif isinstance(value, dict):
        for item in cast(dict[str, Any], value).values():
            yield from _binaries(item)
    elif isinstance(value, list):
        for item in cast(list[Any], value):
            yield from _binaries(item)


def _b64(data: str) -> bytes:
    """Decode base64 as pydantic writes it (the URL-safe alphabet) or in the standard alphabet."""
    text = data.strip().replace('-', '+').replace('_', '/')
    return base64.b64decode(text + '=' * (-len(text) % 4), validate=True)


def _decoded_size(data: str) -> int:
    """The decoded length of base64 `data` (without decoding it)."""
    text = data.strip().rstrip('=')
    return len(text) * 3 // 4


class _Numbering:
    """Numbers the binary items of one message as they are met, replacing them by placeholders."""

    def __init__(self) -> None:
        self.count = 0

    def link(self, item: dict[str, Any]) -> FileLink:
        found = FileLink(
            index=self.count,
            media_type=str(item.get('media_type') or 'application/octet-stream'),
            size=_decoded_size(str(item['data'])),
            identifier=None if item.get('identifier') is None else str(item['identifier']),
        )
        self.count += 1
        return found

    def strip(self, value: object, files: list[FileLink]) -> object:
        """`value` with each binary item replaced by a short note, its link added to `files`."""
        if _is_binary(value):
            link = self.link(cast(dict[str, Any], value))
            files.append(link)
            return f'<binary {link.media_type}, {link.size} bytes: file {link.index}>'
        if isinstance(value, dict):
            return {key: self.strip(item, files) for key, item in cast(dict[str, Any], value).items()}
        if isinstance(value, list):
            return [self.strip(item, files) for item in cast(list[Any], value)]
        return value


def _args_json(args: object) -> str:
    """Tool call arguments as indented JSON: a stored JSON string is parsed first (kept as is if it is not JSON)."""
    if isinstance(args, str):
        try:
            return pretty_json(json.loads(args))
        except ValueError:
            return args
    return pretty_json(args)


def _part_view(part: dict[str, Any], numbering: _Numbering) -> PartView:
    kind = str(part.get('part_kind', '?'))
    view = PartView(kind=kind, label=_LABELS.get(kind, kind))
    if isinstance(part.get('tool_name'), str):
        view.tool_name = part['tool_name']
    if isinstance(part.get('tool_call_id'), str):
        view.tool_call_id = part['tool_call_id']
    content = part.get('content')
    if kind == 'tool-call' or kind == 'builtin-tool-call':
        view.json = _args_json(part.get('args'))
    elif kind == 'user-prompt' and isinstance(content, list):
        texts: list[str] = []
        for item in cast(list[object], content):
            if isinstance(item, str):
                texts.append(item)
            elif _is_binary(item):
                view.files.append(numbering.link(cast(dict[str, Any], item)))
            elif isinstance(item, dict) and isinstance(cast(dict[str, Any], item).get('url'), str):
                view.urls.append(cast(dict[str, Any], item)['url'])
            else:
                texts.append(pretty_json(numbering.strip(cast(object, item), view.files)))
        view.text = '\n'.join(texts)
    elif kind == 'file' and _is_binary(content):
        view.files.append(numbering.link(cast(dict[str, Any], content)))
    elif isinstance(content, str):
        view.text = content
    elif content is not None:
        view.json = pretty_json(numbering.strip(content, view.files))
    elif kind not in _LABELS:  # a part kind this viewer does not know: all of it, as stored
        view.json = pretty_json(numbering.strip(part, view.files))
    if view.text is not None and len(view.text) > TEXT_LIMIT:
        view.clipped += len(view.text) - TEXT_LIMIT
        view.text = view.text[:TEXT_LIMIT]
    if view.json is not None and len(view.json) > TEXT_LIMIT:
        view.clipped += len(view.json) - TEXT_LIMIT
        view.json = view.json[:TEXT_LIMIT]
    return view


def _loads(payload: bytes, seq: int) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        raise CorruptEntryError(f'entry {seq} holds a payload that is not JSON; run verify') from None


def _message_of(data: object) -> MessageView:
    if not isinstance(data, dict) or not isinstance(cast(dict[str, Any], data).get('parts'), list):
        return MessageView(
            role='unknown', parts=[PartView(kind='?', label='Stored', json=pretty_json(cast(object, data)))]
        )
    message = cast(dict[str, Any], data)
    numbering = _Numbering()
    parts = [
        _part_view(cast(dict[str, Any], p), numbering)
        for p in cast(list[object], message['parts'])
        if isinstance(p, dict)
    ]
    usage_data = message.get('usage')
    usage: dict[str, int] = {}
    if isinstance(usage_data, dict):
        for key, value in cast(dict[str, Any], usage_data).items():
            if isinstance(value, int) and not isinstance(value, bool) and value:
                usage[key] = value
    model = message.get('model_name')
    return MessageView(
        role=str(message.get('kind', 'unknown')),
        parts=parts,
        model_name=model if isinstance(model, str) else None,
        usage=usage,
    )


def message_view(entry: Entry) -> MessageView:
    """A `message` entry's parts as stored; `CorruptEntryError` for a payload that is not JSON."""
    if len(entry.payload) > PAYLOAD_LIMIT:
        return MessageView(role='unknown', parts=[], omitted=len(entry.payload))
    return _message_of(_loads(entry.payload, entry.seq))


def payload_view(payload: bytes) -> MessageView:
    """A message as stored (pydantic-ai JSON of one message), by its parts."""
    if len(payload) > PAYLOAD_LIMIT:
        return MessageView(role='unknown', parts=[], omitted=len(payload))
    return _message_of(json.loads(payload))


def compaction_view(entry: Entry) -> tuple[list[int], list[MessageView]]:
    """A `compaction` entry: the `seq`s its summary replaces, and the summary messages."""
    import msgspec

    try:
        info = msgspec.json.decode(entry.payload, type=CompactionInfo)
    except msgspec.DecodeError:
        raise CorruptEntryError(f'entry {entry.seq} holds an undecodable compaction; run verify') from None
    return list(info.replaced), [_message_of(json.loads(bytes(raw))) for raw in info.summary]


def binary_item(entry: Entry, index: int) -> tuple[bytes, str] | None:
    """The `index`-th binary item of a message entry (document order), decoded, with its media
    type; `None` when there is no such item."""
    if entry.kind != 'message' or entry.erased or index < 0:
        return None
    data = _loads(entry.payload, entry.seq)
    parts = cast(dict[str, Any], data).get('parts') if isinstance(data, dict) else None
    for number, item in enumerate(_binaries(parts)):
        if number == index:
            try:
                return _b64(str(item['data'])), str(item.get('media_type') or 'application/octet-stream')
            except (binascii.Error, ValueError):
                raise CorruptEntryError(f'entry {entry.seq} holds binary content that is not base64') from None
    return None
