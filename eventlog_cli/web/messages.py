"""Stored messages as the web viewer shows them: `eventlog_cli.entries`' one presentation, bounded
for a page.

Every view reads a message through `eventlog_cli.entries` (the same parts, labels and texts as
the terminal); the web viewer adds only its bounds. A part's text or JSON (indented here) is
clipped at `TEXT_LIMIT` characters, and a message whose payload exceeds `PAYLOAD_LIMIT` bytes is
not decoded at all: only its first bytes are read from the store (`EventLogBase.entry_heads`) and
shown, as far as they go, as the start of its JSON (`payload_preview`); either way the page links
to the full payload (`/e/{seq}/payload`). Binary
items are never inlined: each is a download (`/e/{seq}/file/{index}`, `binary_item`).
"""

from __future__ import annotations

import json

from pydantic_core import from_json

from eventlog.entries import Entry
from eventlog_cli import entries
from eventlog_cli.entries import PAYLOAD_LIMIT, MessageView, Part, binary_item, clip_body

__all__ = [
    'PAYLOAD_LIMIT',
    'TEXT_LIMIT',
    'MessageView',
    'binary_item',
    'compaction_view',
    'message_view',
    'part_body',
    'payload_preview',
    'payload_view',
    'pretty_json',
]

TEXT_LIMIT = 20_000
"""Most characters of one part's text or JSON a page shows; the rest is behind the payload link."""

PREVIEW_BYTES = 8 * TEXT_LIMIT
"""The bytes of an omitted payload a preview reads: enough for `TEXT_LIMIT` characters however
they are written in JSON (a `\\uXXXX` escape is six bytes)."""


def pretty_json(value: object) -> str:
    """`value` as indented JSON, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


def part_body(part: Part) -> tuple[str, int]:
    """What a part says as a page shows it (JSON indented), clipped at `TEXT_LIMIT`, and how many
    characters were left out."""
    return clip_body(part.main(pretty=True), TEXT_LIMIT)


def message_view(entry: Entry, size: int | None = None) -> MessageView:
    """A `message` entry's parts; over `PAYLOAD_LIMIT` bytes (its payload's full `size`, when the
    entry holds only the start of it), not decoded but previewed (`payload_preview`)."""
    big = _previewed(entry.payload, size)
    return entries.message_view(entry, max_bytes=PAYLOAD_LIMIT) if big is None else big


def _previewed(payload: bytes, size: int | None) -> MessageView | None:
    """The view of a message over `PAYLOAD_LIMIT` bytes (`size`, else its length) whose
    `payload` (or its start) is previewed, not decoded; `None` for any other."""
    size = len(payload) if size is None else size
    if size <= PAYLOAD_LIMIT:
        return None
    return MessageView(role='unknown', parts=[], omitted=size, preview=payload_preview(payload))


def payload_preview(start: bytes) -> str:
    """The first `TEXT_LIMIT` characters of a stored message read from the `start` of its JSON
    (its first `PREVIEW_BYTES` are read, strings cut short kept), indented; the text itself when
    it is not the start of JSON."""
    text = start[:PREVIEW_BYTES].decode('utf-8', 'ignore')  # a character cut at the end is dropped
    try:
        shown = pretty_json(from_json(text, allow_partial='trailing-strings'))
    except ValueError:
        shown = text
    return clip_body(shown, TEXT_LIMIT)[0]


def payload_view(payload: bytes, size: int | None = None) -> MessageView:
    """A stored message's parts; over `PAYLOAD_LIMIT` bytes (its full `size`, when `payload` is
    only its start), not decoded but previewed (`payload_preview`)."""
    big = _previewed(payload, size)
    return entries.payload_view(payload, max_bytes=PAYLOAD_LIMIT) if big is None else big


def compaction_view(entry: Entry) -> tuple[list[int], list[MessageView]]:
    """A `compaction` entry: the `seq`s its summary replaces, and the summary messages."""
    return entries.compaction_views(entry)
