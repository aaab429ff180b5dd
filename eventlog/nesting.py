"""How deep a view walks stored JSON: one limit, and the clipped forms past it.

Stored messages are JSON, and parts of them are JSON text again (a tool call's arguments as the
model sent them). Nothing bounds how deep that text nests: 600 levels fit in 3.6 KB, and a
recursive walk of it, or `json`/`msgspec` decoding 2,000 levels, raises `RecursionError`. Every
view and every text extraction therefore walks at most `DEPTH_LIMIT` levels and shows what lies
deeper as `CLIPPED`. Decoding JSON text deeper than that goes through `decode_clipped`, which
cuts the deep part out of the text before decoding, so no decoder ever sees it. The stored bytes
are never changed: replay and export return them as they are.

Imports only msgspec: the terminal's quick views use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import msgspec

__all__ = ['CLIPPED', 'DEPTH_LIMIT', 'clip_json', 'decode_clipped', 'json_depth', 'may_nest_deeper']

DEPTH_LIMIT: Final = 32
"""The most levels of nested JSON (objects and arrays) a view shows or a walk descends."""

CLIPPED: Final = '…'
"""What stands in for an object or array nested deeper than `DEPTH_LIMIT`."""

_TOKENS: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""The tokens that matter to nesting: whole strings (skipped, brackets in them are text) and brackets."""

_decode: Final = msgspec.json.Decoder().decode
_AS_BRACES: Final = bytes.maketrans(b'[]', b'{}')
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b'[]{}')))


def _brackets(text: str) -> Iterator[re.Match[str]]:
    """Each bracket of JSON `text` outside strings, as a regex match."""
    return (match for match in _TOKENS.finditer(text) if match.group()[0] != '"')


def json_depth(text: str | bytes) -> int:
    """How deep JSON `text` nests (0 for a scalar, 1 for `[1]`), read without decoding it."""
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    depth = deepest = 0
    for match in _brackets(text):
        if match.group() in '[{':
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def may_nest_deeper(data: bytes, depth: int) -> bool:
    """Whether JSON `data` may nest deeper than `depth` levels, told at C speed (no decoding, no
    loop over characters): `False` is certain; `True` may come of brackets inside strings, so a
    caller that must know confirms it with `json_depth`."""
    brackets = data.translate(_AS_BRACES, _NOT_BRACKETS)
    for _ in range(depth):  # each pass removes the innermost pairs: one level
        if not brackets:
            return False
        brackets = brackets.replace(b'{}', b'')
    return bool(brackets)


def clip_json(text: str, limit: int = DEPTH_LIMIT) -> str:
    """JSON `text` with every object or array below `limit` levels replaced by the string
    `CLIPPED` (the text itself when it is not that deep). Text that is not JSON stays not JSON."""
    pieces: list[str] = []
    depth = 0
    kept = 0  # where the text still to copy starts
    for match in _brackets(text):
        if match.group() in '[{':
            depth += 1
            if depth == limit + 1:
                pieces.append(text[kept : match.start()])
                pieces.append(f'"{CLIPPED}"')
        else:
            if depth == limit + 1:
                kept = match.end()
            depth -= 1
    if not pieces:
        return text
    if depth > limit:  # unclosed: the clipped part runs to the end
        kept = len(text)
    pieces.append(text[kept:])
    return ''.join(pieces)


def decode_clipped(text: str | bytes, limit: int = DEPTH_LIMIT) -> Any:
    """JSON `text` decoded, objects and arrays below `limit` levels as `CLIPPED`.

    Never raises `RecursionError`, however deep the text; raises `msgspec.DecodeError` when it is
    not JSON."""
    data = text if isinstance(text, bytes) else text.encode('utf-8', 'surrogatepass')
    if not may_nest_deeper(data, limit):
        return _decode(data)
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise msgspec.DecodeError('not UTF-8') from None
    return _decode(clip_json(text, limit))
