"""Stored messages as the web viewer shows them: `eventlog_cli.entries`' one presentation, bounded
for a page.

Every view reads a message through `eventlog_cli.entries` (the same parts, labels and texts as
the terminal); the web viewer adds only its bounds. A part's text or JSON (indented here) is
clipped at `TEXT_LIMIT` characters, and a message whose payload exceeds `PAYLOAD_LIMIT` bytes is
not decoded at all; either way the page links to the full payload (`/e/{seq}/payload`). Binary
items are never inlined: each is a download (`/e/{seq}/file/{index}`, `binary_item`).
"""

from __future__ import annotations

import json

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
    'payload_view',
    'pretty_json',
]

TEXT_LIMIT = 20_000
"""Most characters of one part's text or JSON a page shows; the rest is behind the payload link."""


def pretty_json(value: object) -> str:
    """`value` as indented JSON, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


def part_body(part: Part) -> tuple[str, int]:
    """What a part says as a page shows it (JSON indented), clipped at `TEXT_LIMIT`, and how many
    characters were left out."""
    return clip_body(part.main(pretty=True), TEXT_LIMIT)


def message_view(entry: Entry) -> MessageView:
    """A `message` entry's parts; not decoded over `PAYLOAD_LIMIT` bytes."""
    return entries.message_view(entry, max_bytes=PAYLOAD_LIMIT)


def payload_view(payload: bytes) -> MessageView:
    """A stored message's parts; not decoded over `PAYLOAD_LIMIT` bytes."""
    return entries.payload_view(payload, max_bytes=PAYLOAD_LIMIT)


def compaction_view(entry: Entry) -> tuple[list[int], list[MessageView]]:
    """A `compaction` entry: the `seq`s its summary replaces, and the summary messages."""
    return entries.compaction_views(entry)
