"""When a message a UI client sent back is a recorded message: what a UI round trip keeps.

pydantic-ai's UI adapters (`VercelAIAdapter`, `AGUIAdapter`) in their default client-managed mode
rebuild the whole chat from the client's UI messages on every turn. The rebuilt copies are not
the recorded bytes. Measured with both adapters (pydantic-ai-slim 2.68) on text, tool calls,
tool returns (text and JSON), tool errors (`ModelRetry`, invalid arguments, unknown tool),
thinking and system prompts:

- lost or changed: every timestamp, `run_id`, `conversation_id`, `instructions`, usage, model and
  provider fields, part ids and provider details, message `metadata` (the adapters put the
  client's UI message id there), a tool return's `outcome` and `retry` (`retried` comes back as
  `failed` from Vercel, as `success` from an AG-UI client that drops the encrypted value), the
  order of one request's tool returns (AG-UI sends them as the tools finish), tool-call
  arguments as a JSON string or as an object, a non-string tool return as the value or as its
  JSON text, system prompts (both adapters strip the client's by default) and thinking (AG-UI);
- kept: the kind of each message and the sequence of messages, user prompt content, text,
  thinking (Vercel), tool names, tool call ids, tool-call arguments and tool-return content as
  JSON values.

`canonical` reduces a message to what is kept; `same_message` says whether a rebuilt copy is a
recorded original. Everything here is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ['Canonical', 'canonical', 'same_message']

_DROPPABLE = ('system', 'thinking')
"""Part classes a round trip may drop from a message as a whole (adapters strip system prompts,
AG-UI clients drop thinking): a copy without any of them matches an original that has them."""

_VOLATILE = frozenset({'id', 'timestamp', 'provider_name', 'provider_details', 'signature', 'part_kind', 'metadata'})
"""Fields left out of parts of the kinds no adapter round trip was measured for."""

_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class Canonical:
    """A message as a UI round trip keeps it: its kind and its parts, each a tagged tuple."""

    kind: str
    parts: tuple[tuple[Any, ...], ...]
    """In message order, except that a request's tool returns come last, sorted by call id."""
    tags: frozenset[str]


def canonical(payload: bytes) -> Canonical:
    """`payload` (one message as pydantic-ai JSON) reduced to what a UI round trip keeps."""
    data: dict[str, Any] = _decoder.decode(payload)
    ordered: list[tuple[Any, ...]] = []
    returns: list[tuple[Any, ...]] = []
    for part in data.get('parts') or ():
        item = _part(part)
        (returns if item[0] == 'return' else ordered).append(item)
    returns.sort(key=lambda item: (str(item[2]), repr(item[1:])))
    parts = (*ordered, *returns)
    return Canonical(str(data.get('kind')), parts, frozenset(str(p[0]) for p in parts))


def same_message(copy: Canonical, original: Canonical) -> bool:
    """Whether `copy` (rebuilt by a UI adapter) is `original` (recorded): everything a round trip
    keeps is equal, and the original's system prompts or thinking count only where the copy has
    parts of that class."""
    if copy.kind != original.kind:
        return False
    if copy.parts == original.parts:
        return True
    dropped = [tag for tag in _DROPPABLE if tag in original.tags and tag not in copy.tags]
    if not dropped:
        return False
    return copy.parts == tuple(p for p in original.parts if p[0] not in dropped)


def _part(part: dict[str, Any]) -> tuple[Any, ...]:
    kind = part.get('part_kind')
    if kind == 'system-prompt':
        return ('system', part.get('content'))
    if kind == 'user-prompt':
        return ('user', part.get('content'))
    if kind == 'text':
        return ('text', part.get('content'))
    if kind == 'thinking':
        return ('thinking', part.get('content'))
    if kind == 'tool-call':
        return ('call', part.get('tool_name'), part.get('tool_call_id'), _arguments(part.get('args')))
    if kind in ('tool-return', 'retry-prompt') and part.get('tool_name') is not None:
        return ('return', part.get('tool_name'), part.get('tool_call_id'), _value(part.get('content')))
    return (str(kind), {k: v for k, v in part.items() if k not in _VOLATILE})


def _arguments(args: Any) -> Any:
    """Tool-call arguments as a JSON value (they are recorded as a JSON string or as an object)."""
    if args is None or args == '':
        return {}
    if isinstance(args, str):
        try:
            return _decoder.decode(args)
        except msgspec.DecodeError:
            return args
    return args


def _value(content: Any) -> Any:
    """Tool-return content as a JSON value: text that is JSON of a non-string value is that value."""
    if isinstance(content, str):
        try:
            value = _decoder.decode(content)
        except msgspec.DecodeError:
            return content
        return content if isinstance(value, str) else value
    return content
