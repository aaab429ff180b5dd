"""Checks on what callers hand the log: ids, `seq`s, counts and payloads.

Each check returns the value it accepted or raises a typed error (`InvalidArgumentError`,
`InvalidPayloadError`) naming what was wrong; nothing here touches the store.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from eventlog._keys import MAX_ID_BYTES
from eventlog.entries import MAX_SEQ
from eventlog.errors import InvalidArgumentError, InvalidPayloadError

_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]')


def check_id(value: object, what: str) -> str:
    """Return `value` if it is a usable id, else raise `InvalidArgumentError`."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f'{what} must be a string, got {type(value).__name__}')
    if not value:
        raise InvalidArgumentError(f'{what} must not be empty')
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise InvalidArgumentError(f'{what} must be valid Unicode (no lone surrogates): {value!r}') from None
    if size > MAX_ID_BYTES:
        raise InvalidArgumentError(f'{what} is longer than {MAX_ID_BYTES} bytes of UTF-8: {value[:40]!r}...')
    if _CONTROL.search(value):
        raise InvalidArgumentError(f'{what} must not contain control characters: {value!r}')
    return value


def check_seq(value: object, what: str) -> int:
    """Return `value` if it is a `seq` the log can hold (1 to `MAX_SEQ`), else raise `InvalidArgumentError`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SEQ:
        raise InvalidArgumentError(f'{what} must be an integer seq from 1 to {MAX_SEQ}, got {value!r}')
    return value


def check_count(value: object, what: str) -> int:
    """Return `value` if it is an integer from 0 to `MAX_SEQ` (a count, or a `seq` where 0 means
    "before the first"), else raise `InvalidArgumentError`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEQ:
        raise InvalidArgumentError(f'{what} must be an integer from 0 to {MAX_SEQ}, got {value!r}')
    return value


def validate_messages(payloads: Sequence[bytes]) -> None:
    """Raise `InvalidPayloadError` unless every payload is one message pydantic-ai can read."""
    if not payloads:
        return
    import pydantic  # imported on first use (with pydantic-ai): keeps start-up fast
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    try:
        decoded = ModelMessagesTypeAdapter.validate_json(b'[' + b','.join(payloads) + b']')
    except (pydantic.ValidationError, ValueError):
        decoded = None
    if decoded is not None and len(decoded) == len(payloads):
        return
    for payload in payloads:
        try:
            one = ModelMessagesTypeAdapter.validate_json(b'[' + payload + b']')
        except (pydantic.ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidPayloadError(
                f'message payload is not a pydantic-ai message ({first}): {payload[:80]!r}'
            ) from None
        if len(one) != 1:
            raise InvalidPayloadError(f'message payload must hold exactly one message: {payload[:80]!r}')
    raise InvalidPayloadError('message payloads do not form a list of messages')  # pragma: no cover


def decode_info(decoder: msgspec.json.Decoder[Any], payload: bytes, kind: str) -> Any:
    """A payload struct decoded with `decoder`; `InvalidPayloadError` naming `kind` when it is not valid."""
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise InvalidPayloadError(f'{kind} payload is not valid: {exc}') from None
