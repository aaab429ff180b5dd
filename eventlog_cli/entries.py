"""One presentation of stored messages, shared by every view: the terminal's and the web viewer's.

A message entry's payload is pydantic-ai's JSON for one message. Every view shows it through
`message_view`, which reads that JSON with msgspec (never with pydantic-ai, whose import alone
costs most of a browsing command's start-up) into a `MessageView`: the message's role and one
`Part` per stored part, each with its kind, a label, the name it is bound to (a tool, a
speaker), what it says (`text`, or a structured `value` shown as JSON), the URLs it refers to
and the binary items it holds (`FileItem`: media type and size, never the bytes).

Every part kind pydantic-ai stores is shown, the search tool's calls and returns included; a
part kind this module does not know shows as its kind and its whole JSON, so a newer
pydantic-ai never breaks a view. The terminal prints a part as `Label [name]: text` (JSON on
one line); the web viewer prints the same label, name and text (JSON indented).

Strings are raw stored text: each view makes them safe to print (`eventlog_cli._text.clean`,
Jinja's autoescape).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

import msgspec

from eventlog.entries import CompactionInfo, Entry
from eventlog.errors import CorruptEntryError
from eventlog.nesting import CLIPPED, DEPTH_LIMIT, decode_clipped

__all__ = [
    'INSTRUCTIONS_KIND',
    'LABELS',
    'PAYLOAD_LIMIT',
    'FileItem',
    'InstructionsShown',
    'MessageView',
    'Part',
    'binary_item',
    'clip_body',
    'compaction_views',
    'hit_lines',
    'message_view',
    'payload_view',
    'summary_keeps',
]

PAYLOAD_LIMIT: Final = 1 << 20
"""A web page does not decode a message payload larger than this (bytes); it links it."""

LABELS: Final[dict[str, str]] = {
    'system-prompt': 'System',
    'user-prompt': 'User',
    'tool-return': 'Tool',
    'retry-prompt': 'Retry',
    'retry-feedback': 'Retry',
    'text': 'Assistant',
    'thinking': 'Thinking',
    'tool-call': 'Tool Call',
    'builtin-tool-call': 'Built-in Tool Call',
    'builtin-tool-return': 'Built-in Tool',
    'file': 'File',
    'compaction': 'Summary',
    'speech': 'Speech',
    'instruction-delta': 'Instructions',
    'instruction-baseline': 'Instructions',
    'tool-availability-delta': 'Tools',
    'model-settings-delta': 'Settings',
}
"""The label of each part kind pydantic-ai stores (a tool return that asked for a retry is a
`Retry`, one that failed or was denied says so); any other kind is labelled by its kind."""


class FileItem(msgspec.Struct, frozen=True, kw_only=True):
    """A binary item of a message: described, never inlined (the web viewer serves it)."""

    index: int
    """Its number among the message's binary items, in document order (0 first)."""
    media_type: str
    """The media type it was stored with."""
    size: int
    """Its size in bytes, decoded."""
    identifier: str | None = None
    """pydantic-ai's identifier of the item, when stored."""

    def describe(self) -> str:
        """`file 0 (image/png, 264 B)`."""
        from eventlog_cli._text import size  # _text imports this module

        name = f' {self.identifier}' if self.identifier else ''
        return f'file {self.index}{name} ({self.media_type}, {size(self.size)})'


class Part(msgspec.Struct, kw_only=True):
    """One part of a message, as every view shows it."""

    kind: str
    """pydantic-ai's `part_kind` (`user-prompt`, `tool-call`, `text`, ...), as stored."""
    label: str
    """How views name it (`LABELS`)."""
    name: str | None = None
    """The tool it calls or returns for, or the speaker of a speech part."""
    call_id: str | None = None
    """The tool call id, when stored."""
    text: str | None = None
    """What it says, when that is text (a prompt, a reply, a text tool return)."""
    value: Any = None
    """What it says, when that is structured (tool arguments, a JSON return): JSON data, binary
    items replaced by `<file N ...>` notes. Meaningful only when `structured`."""
    structured: bool = False
    """Whether `value` (not `text`) holds what it says."""
    urls: list[str] = msgspec.field(default_factory=list[str])
    """URLs it refers to (image, document, audio, video URLs): shown, never loaded."""
    files: list[FileItem] = msgspec.field(default_factory=list[FileItem])
    """Binary items it holds."""

    def main(self, *, pretty: bool = False) -> str:
        """What it says, as text: its text, or its value as JSON (one line, or indented when `pretty`)."""
        if self.structured:
            return json.dumps(self.value, ensure_ascii=False, indent=2 if pretty else None)
        return self.text or ''

    def refers(self) -> list[str]:
        """The URLs and files a text part refers to, one note each (`<url ...>`, `<file 0 (...)>`);
        a structured part holds its notes inside its value."""
        if self.structured:
            return []
        return [f'<url {url}>' for url in self.urls] + [f'<{item.describe()}>' for item in self.files]

    def body(self, *, pretty: bool = False) -> str:
        """`main`, then the `refers` notes on lines of their own; `(empty)` when it says nothing."""
        return '\n'.join(piece for piece in (self.main(pretty=pretty), *self.refers()) if piece) or '(empty)'

    def head(self) -> str:
        """Its label and name: `Tool Call [lookup]`."""
        return f'{self.label} [{self.name}]' if self.name is not None else self.label

    def line(self) -> str:
        """The part on one logical line as the terminal prints it: `Tool Call [lookup]: {"key": 1}`."""
        return f'{self.head()}: {self.body()}'


class MessageView(msgspec.Struct, kw_only=True):
    """A stored message: its role and its parts in stored order."""

    role: str
    """`request` or `response` (`unknown` for a payload that is not a message)."""
    parts: list[Part]
    """Every part, in stored order."""
    model_name: str | None = None
    """The model that produced a response, when stored."""
    usage: dict[str, int] = msgspec.field(default_factory=dict[str, int])
    """A response's non-zero token counts."""
    omitted: int = 0
    """The payload's size when it was over the caller's `max_bytes` and so not decoded."""
    preview: str = ''
    """For an omitted payload, the start of its JSON as a reader may show it (`web.messages.payload_preview`)."""
    instructions: str | None = None
    """A request's `instructions` as stored (pydantic-ai's `ModelRequest.instructions`: the agent's
    `instructions`, a capability's such as `ConversationSearch`'s, joined). Views show them through
    `InstructionsShown`, once per run and where they change, not on every request."""

    def lines(self) -> list[str]:
        """Each part's `Part.line`."""
        return [part.line() for part in self.parts]


# --- reading the stored JSON ------------------------------------------------------------------


class _StoredPart(msgspec.Struct, forbid_unknown_fields=False):
    part_kind: str = '?'
    content: Any = None
    tool_name: Any = None
    tool_call_id: Any = None
    args: Any = None
    outcome: Any = None
    speaker: Any = None
    transcript: Any = None


class _StoredMessage(msgspec.Struct, forbid_unknown_fields=False):
    kind: str
    parts: list[msgspec.Raw]
    model_name: Any = None
    usage: Any = None
    instructions: Any = None


_decode_any = msgspec.json.Decoder().decode
_decode_message = msgspec.json.Decoder(_StoredMessage).decode
_decode_part = msgspec.json.Decoder(_StoredPart).decode
_decode_compaction = msgspec.json.Decoder(CompactionInfo).decode


def _nested(value: object) -> bool:
    """Whether `value` is a dict or a list (what nests)."""
    return isinstance(value, dict | list)


def _is_binary(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    item = cast(dict[str, Any], value)
    return item.get('kind') == 'binary' and isinstance(item.get('data'), str)


def _is_url(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    item = cast(dict[str, Any], value)
    return isinstance(item.get('url'), str) and str(item.get('kind', '')).endswith('-url')


def _decoded_size(data: str) -> int:
    """The decoded length of base64 `data` (without decoding it)."""
    return len(data.strip().rstrip('=')) * 3 // 4


class _Numbering:
    """Numbers one message's binary items in document order."""

    def __init__(self) -> None:
        self.count = 0

    def item(self, value: dict[str, Any]) -> FileItem:
        identifier = value.get('identifier')
        found = FileItem(
            index=self.count,
            media_type=str(value.get('media_type') or 'application/octet-stream'),
            size=_decoded_size(str(value['data'])),
            identifier=None if identifier is None else str(identifier),
        )
        self.count += 1
        return found

    def strip(self, value: object, part: Part, room: int = DEPTH_LIMIT) -> object:
        """`value` with each binary item replaced by a note (added to `part.files`), each URL
        item by its URL (added to `part.urls`), and each dict or list nested below `room` more
        levels by `eventlog.nesting.CLIPPED`.

        `room` counts from a part's content (`DEPTH_LIMIT` there, one more for a whole part), so
        that the items numbered are those `binary_item` finds."""
        if room <= 0 and _nested(value):
            return CLIPPED
        if _is_binary(value):
            found = self.item(cast(dict[str, Any], value))
            part.files.append(found)
            return f'<{found.describe()}>'
        if _is_url(value):
            url = str(cast(dict[str, Any], value)['url'])
            return f'<url {url}>'
        if isinstance(value, dict):
            return {str(key): self.strip(item, part, room - 1) for key, item in cast(dict[Any, Any], value).items()}
        if isinstance(value, list):
            return [self.strip(item, part, room - 1) for item in cast(list[Any], value)]
        return value


def _args_value(args: object) -> tuple[object, bool]:
    """Tool call arguments as JSON data (a stored JSON string parsed, clipped at
    `eventlog.nesting.DEPTH_LIMIT` levels however deep it nests), or as text when it is not JSON."""
    if args is None or args == '':
        return {}, True
    if isinstance(args, str):
        try:
            return decode_clipped(args), True
        except msgspec.DecodeError:
            return args, False
    return args, True


def _set_content(part: Part, content: object, numbering: _Numbering) -> None:
    """`part` says `content`: text as is, anything else as structured JSON (files described)."""
    if isinstance(content, str):
        part.text = content
    elif _is_binary(content):
        part.files.append(numbering.item(cast(dict[str, Any], content)))
    elif _is_url(content):
        part.urls.append(str(cast(dict[str, Any], content)['url']))
    elif content is not None:
        part.value = numbering.strip(content, part)
        part.structured = True


def _user_content(part: Part, content: object, numbering: _Numbering) -> None:
    if not isinstance(content, list):
        _set_content(part, content, numbering)
        return
    texts: list[str] = []
    items: list[object] = cast(list[object], content)
    for item in items:
        if isinstance(item, str):
            texts.append(item)
        elif _is_binary(item):
            part.files.append(numbering.item(cast(dict[str, Any], item)))
        elif _is_url(item):
            part.urls.append(str(cast(dict[str, Any], item)['url']))
        elif isinstance(item, dict) and cast(dict[str, Any], item).get('kind') == 'text-content':
            texts.append(str(cast(dict[str, Any], item).get('content', '')))
        elif isinstance(item, dict) and cast(dict[str, Any], item).get('kind') == 'cache-point':
            continue  # a caching hint for the provider: says nothing
        else:
            texts.append(json.dumps(numbering.strip(cast(object, item), part, DEPTH_LIMIT - 1), ensure_ascii=False))
    part.text = ' '.join(texts)


def _part(raw: msgspec.Raw, numbering: _Numbering) -> Part:
    try:
        stored = _decode_part(raw)
    except msgspec.DecodeError:  # not an object, or `part_kind` not text: shown as stored
        generic = Part(kind='?', label='Part', structured=True)
        generic.value = numbering.strip(_decode_any(raw), generic, DEPTH_LIMIT + 1)
        return generic
    kind = stored.part_kind
    part = Part(kind=kind, label=LABELS.get(kind, kind))
    if isinstance(stored.tool_name, str):
        part.name = stored.tool_name
    if isinstance(stored.tool_call_id, str):
        part.call_id = stored.tool_call_id
    if kind in ('tool-call', 'builtin-tool-call'):
        value, structured = _args_value(stored.args)
        if structured:
            part.value, part.structured = numbering.strip(value, part), True
        else:
            part.text = cast(str, value)
    elif kind == 'user-prompt':
        _user_content(part, stored.content, numbering)
    elif kind == 'speech':
        part.name = stored.speaker if isinstance(stored.speaker, str) else None
        part.text = stored.transcript if isinstance(stored.transcript, str) else '(no transcript)'
    elif kind == 'instruction-delta' and stored.content is None:
        part.text = '(removed)'
    elif kind in ('tool-return', 'builtin-tool-return'):
        if stored.outcome == 'retried':
            part.label = 'Retry'
        elif isinstance(stored.outcome, str) and stored.outcome != 'success':
            part.label = f'{part.label} {stored.outcome}'
        _set_content(part, stored.content, numbering)
    elif kind in LABELS and kind not in ('instruction-baseline', 'tool-availability-delta', 'model-settings-delta'):
        _set_content(part, stored.content, numbering)
    else:  # bookkeeping parts, and part kinds this module does not know: everything stored
        everything: dict[str, Any] = {
            k: v for k, v in cast(dict[str, Any], _decode_any(raw)).items() if k != 'part_kind'
        }
        part.value, part.structured = numbering.strip(everything, part, DEPTH_LIMIT + 1), True
    return part


def _message(data: bytes) -> MessageView:
    try:
        stored = _decode_message(data)
    except msgspec.ValidationError:  # JSON, but not a message: shown as stored
        whole = Part(kind='?', label='Stored', structured=True)
        whole.value = _Numbering().strip(_decode_any(data), whole, DEPTH_LIMIT + 3)
        return MessageView(role='unknown', parts=[whole])
    numbering = _Numbering()
    parts = [_part(raw, numbering) for raw in stored.parts]
    usage: dict[str, int] = {}
    if isinstance(stored.usage, dict):
        for key, value in cast(dict[str, Any], stored.usage).items():
            if isinstance(value, int) and not isinstance(value, bool) and value:
                usage[str(key)] = value
    return MessageView(
        role=stored.kind,
        parts=parts,
        model_name=stored.model_name if isinstance(stored.model_name, str) else None,
        usage=usage,
        instructions=stored.instructions if isinstance(stored.instructions, str) else None,
    )


def payload_view(payload: bytes, *, where: str = 'a stored message', max_bytes: int | None = None) -> MessageView:
    """A stored message (pydantic-ai's JSON of one message) by its parts.

    A payload over `max_bytes` is not decoded (`omitted` says its size). Raises
    `CorruptEntryError`, naming `where`, for bytes that are not JSON.
    """
    if max_bytes is not None and len(payload) > max_bytes:
        return MessageView(role='unknown', parts=[], omitted=len(payload))
    try:
        return _message(payload)
    except msgspec.DecodeError:
        raise CorruptEntryError(f'{where} holds a payload that is not JSON; run verify') from None


def message_view(entry: Entry, *, max_bytes: int | None = None) -> MessageView:
    """A `message` entry's parts (`payload_view`)."""
    return payload_view(entry.payload, where=f'entry {entry.seq}', max_bytes=max_bytes)


def compaction_views(entry: Entry) -> tuple[list[int], list[MessageView]]:
    """A `compaction` entry: the `seq`s its summary replaces, and the summary messages."""
    try:
        info = _decode_compaction(entry.payload)
    except msgspec.DecodeError:
        raise CorruptEntryError(f'entry {entry.seq} holds an undecodable compaction; run verify') from None
    where = f'entry {entry.seq}'
    return list(info.replaced), [payload_view(bytes(raw), where=where) for raw in info.summary]


def summary_keeps(original: bytes, summary: bytes) -> bool:
    """Whether the summary request `summary` ends with every part of the request `original`
    (a compaction that kept that message after its summary, merged into the summary's request)."""
    try:
        first, second = _decode_any(original), _decode_any(summary)
    except msgspec.DecodeError:
        return False
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return False
    a, b = cast(dict[str, Any], first), cast(dict[str, Any], second)
    if a.get('kind') != 'request' or b.get('kind') != 'request':
        return False
    kept, parts = a.get('parts'), b.get('parts')
    if not (isinstance(kept, list) and isinstance(parts, list)):
        return False
    kept_parts, all_parts = cast(list[object], kept), cast(list[object], parts)
    return 0 < len(kept_parts) < len(all_parts) and all_parts[-len(kept_parts) :] == kept_parts


INSTRUCTIONS_KIND: Final = 'instructions'
"""The kind of the part `InstructionsShown` adds to a request: the request's `instructions`, which
pydantic-ai stores beside the parts rather than as one."""


class InstructionsShown:
    """Shows each run's instructions once, and again where they change.

    A request carries its run's whole `instructions` every time it is sent; a view feeds each
    message it shows, in order, to `show`, which puts an `Instructions` part first in the run's
    first request that has instructions, an `Instructions (changed)` part in a later request whose
    instructions differ from the run's previous ones (`(none)` when they were dropped), and nothing
    in the others. Instructions this view has shown whole already are not repeated: the part says
    `(as at #N)`, naming the entry that showed them. Runs are told apart by the key a view gives
    (the entry's run id).
    """

    def __init__(self) -> None:
        """Nothing shown yet."""
        self._last: dict[str | None, str | None] = {}
        self._shown: dict[str, int] = {}

    def show(self, key: str | None, message: MessageView, seq: int) -> MessageView:
        """`message`, entry `seq`, with its run's instructions as its first part where they are due
        (see the class); the view is changed in place and returned."""
        if message.role != 'request' or message.omitted:
            return message
        text = message.instructions
        if key not in self._last:
            if text is None:
                return message
            label = 'Instructions'
        elif self._last[key] == text:
            return message
        else:
            label = 'Instructions (changed)'
        self._last[key] = text
        if text is None:
            shown = '(none)'
        elif text in self._shown:
            shown = f'(as at #{self._shown[text]})'
        else:
            shown = text
            self._shown[text] = seq
        message.parts.insert(0, Part(kind=INSTRUCTIONS_KIND, label=label, text=shown))
        return message


def clip_body(text: str, limit: int | None) -> tuple[str, int]:
    """`text` cut to `limit` characters (whole when `limit` is `None`), and how many were left out."""
    if limit is None or len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


_SHORT_KINDS: Final = frozenset(
    {'system-prompt', 'tool-call', 'builtin-tool-call', 'instruction-delta', 'instruction-baseline'}
    | {'tool-availability-delta', 'model-settings-delta'}
)
"""Part kinds whose text a search hit clips shorter (`search.excerpt.SHORT_EXCERPT_CHARS`)."""


def hit_lines(payload: bytes, locate: Callable[[str], tuple[int, int] | None]) -> list[str]:
    """The lines a search hit shows of the stored message `payload`: each part's line, its text
    clipped around the first query term `locate` finds (`search.excerpt.clip`). Read with msgspec
    like every view, so that showing a hit needs no pydantic-ai and no decoded message."""
    from search.excerpt import EXCERPT_CHARS, SHORT_EXCERPT_CHARS, clip

    lines: list[str] = []
    for part in payload_view(payload).parts:
        text = part.body()
        limit = SHORT_EXCERPT_CHARS if part.kind in _SHORT_KINDS else EXCERPT_CHARS
        focus = locate(text) if len(text) > limit else None
        lines.append(f'{part.head()}: {clip(text, limit, focus)}')
    return lines


# --- binary items -----------------------------------------------------------------------------


def _binaries(value: object, room: int) -> Iterator[dict[str, Any]]:
    """Every binary item inside `value` within `room` levels, in document order (the items
    `_Numbering.strip` numbers, in the order `FileItem.index` counts)."""
    if room <= 0 and _nested(value):
        return
    if _is_binary(value):
        yield cast(dict[str, Any], value)
    elif isinstance(value, dict):
        for item in cast(dict[str, Any], value).values():
            yield from _binaries(item, room - 1)
    elif isinstance(value, list):
        for item in cast(list[Any], value):
            yield from _binaries(item, room - 1)


def _b64(data: str) -> bytes:
    """Decode base64 as pydantic writes it (the URL-safe alphabet) or in the standard alphabet."""
    text = data.strip().replace('-', '+').replace('_', '/')
    return base64.b64decode(text + '=' * (-len(text) % 4), validate=True)


def binary_item(entry: Entry, index: int) -> tuple[bytes, str] | None:
    """The `index`-th binary item of a message entry (`FileItem.index`), decoded, with its media
    type; `None` when there is no such item."""
    if entry.kind != 'message' or entry.erased or index < 0:
        return None
    try:
        data = _decode_any(entry.payload)
    except msgspec.DecodeError:
        raise CorruptEntryError(f'entry {entry.seq} holds a payload that is not JSON; run verify') from None
    parts = cast(dict[str, Any], data).get('parts') if isinstance(data, dict) else None
    for number, item in enumerate(_binaries(parts, DEPTH_LIMIT + 2)):  # the parts list, a part, its content
        if number == index:
            try:
                return _b64(str(item['data'])), str(item.get('media_type') or 'application/octet-stream')
            except (binascii.Error, ValueError):
                raise CorruptEntryError(f'entry {entry.seq} holds binary content that is not base64') from None
    return None
