"""Redaction before storage: a caller's function applied to each message before it is appended.

The redactor gets a deep copy of the message (the live run keeps the original) and returns the
message to store. When the stored message differs from the original, its `metadata` carries
`REDACTED_METADATA_KEY` naming the redactor, so the audit trail shows that (and by what) the
entry was redacted; the log replays exactly the redacted bytes (docs/erasure.md).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from eventlog import InvalidArgumentError, encode_message

__all__ = ['REDACTED_METADATA_KEY', 'Redaction', 'RedactionError', 'Redactor']

REDACTED_METADATA_KEY: Final = 'eventlog_redacted'
"""The stored message's `metadata` key recording that a redactor changed it (value: its name)."""

Redactor = Callable[[ModelMessage], ModelMessage]
"""Takes a copy of a message about to be stored and returns the message to store in its place."""


class RedactionError(InvalidArgumentError):
    """The redactor returned something other than a pydantic-ai message."""


@dataclass(frozen=True, slots=True)
class Redaction:
    """A redactor applied the same way wherever the recorder encodes a message, so that what it
    compares with the log (threaded histories, repeated steps) is what the log holds."""

    redact: Redactor | None = None

    @property
    def name(self) -> str:
        """How the stored messages name the redactor."""
        fn = self.redact
        return str(getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or type(fn).__name__)

    def message(self, message: ModelMessage) -> ModelMessage:
        """The message to store for `message` (itself when there is no redactor)."""
        if self.redact is None:
            return message
        redacted: object = self.redact(copy.deepcopy(message))
        if not isinstance(redacted, (ModelRequest, ModelResponse)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise RedactionError(
                f'the redactor {self.name} returned {type(redacted).__name__}, not a ModelRequest or ModelResponse'
            )
        if encode_message(redacted) == encode_message(message):
            return message
        metadata: dict[str, Any] = dict(redacted.metadata or {})
        metadata[REDACTED_METADATA_KEY] = self.name
        redacted.metadata = metadata
        return redacted

    def encode(self, message: ModelMessage) -> bytes:
        """The payload stored for `message`: pydantic-ai's JSON of its redacted form."""
        return encode_message(self.message(message))
