"""Retention: how long a store keeps message content, and the report of applying it.

A `RetentionPolicy` gives a maximum age for the whole store and, optionally, per conversation.
`EventLogBase.retain(policy)` applies it: with `action='erase'` every message and compaction
entry older than its conversation's limit has its content erased (`erase`, the chain stays
provable); with `action='delete'` every conversation whose latest entry is older than its
limit is deleted (`delete_conversation`). docs/erasure.md describes both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final, Literal

from eventlog.errors import InvalidArgumentError

__all__ = ['RetentionAction', 'RetentionPolicy', 'RetentionReport', 'format_age', 'parse_age']

RetentionAction = Literal['erase', 'delete']
"""What happens to content older than its limit: erased in place, or its conversation deleted."""

_AGE: Final = re.compile(r'(\d{1,9})\s*([smhdw])')
_UNITS: Final = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 7 * 86400}


def parse_age(text: str) -> timedelta:
    """An age such as `30d`, `12h`, `90m`, `2w` or `1d12h` (units s, m, h, d, w) as a timedelta.

    Raises `InvalidArgumentError` for anything else, or for an age of zero.
    """
    if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(f'an age must be a string such as 30d, got {type(text).__name__}')
    compact = text.strip().lower()
    pos = 0
    seconds = 0
    for match in _AGE.finditer(compact):
        if match.start() != pos:
            break
        seconds += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not compact or pos != len(compact):
        raise InvalidArgumentError(
            f'{text!r} is not an age: use a number and a unit (s, m, h, d, w), e.g. 30d, 12h or 1d12h'
        )
    if seconds <= 0:
        raise InvalidArgumentError(f'the age {text!r} is zero; give a positive age')
    return timedelta(seconds=seconds)


def format_age(age: timedelta) -> str:
    """An age as `parse_age` reads it (`30d`, `1d12h`, `90s`), to whole seconds."""
    seconds = int(age.total_seconds())
    out = ''
    for unit in ('d', 'h', 'm', 's'):
        size = _UNITS[unit]
        if seconds >= size:
            out += f'{seconds // size}{unit}'
            seconds %= size
    return out or '0s'


def _check_age(value: object, what: str) -> timedelta:
    if isinstance(value, str):
        return parse_age(value)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidArgumentError(f'{what} must be a positive timedelta or an age such as 30d, got {value!r}')
    return value


@dataclass(frozen=True)
class RetentionPolicy:
    """How long content is kept: `max_age` for every conversation, `conversations` per id.

    An age is a positive `timedelta` or a string such as `30d` (`parse_age`). A conversation
    named in `conversations` uses its own limit; the others use `max_age`, or are kept when it
    is `None`.
    """

    max_age: timedelta | str | None = None
    conversations: Mapping[str, timedelta | str] = field(default_factory=dict[str, 'timedelta | str'])
    action: RetentionAction = 'erase'

    def __post_init__(self) -> None:
        if self.max_age is not None:
            object.__setattr__(self, 'max_age', _check_age(self.max_age, 'max_age'))
        if not isinstance(self.conversations, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidArgumentError('conversations must map conversation ids to ages')
        ages = {str(k): _check_age(v, f'the age of conversation {k!r}') for k, v in self.conversations.items()}
        object.__setattr__(self, 'conversations', ages)
        if self.action not in ('erase', 'delete'):
            raise InvalidArgumentError(f"action must be 'erase' or 'delete', got {self.action!r}")
        if self.max_age is None and not ages:
            raise InvalidArgumentError('a retention policy needs max_age or at least one conversation age')

    def age_for(self, conversation_id: str) -> timedelta | None:
        """The limit that applies to a conversation, or `None` (kept)."""
        age = self.conversations.get(conversation_id, self.max_age)
        assert age is None or isinstance(age, timedelta)
        return age


@dataclass(frozen=True)
class RetentionReport:
    """What `retain` did (or, with `dry_run`, would do)."""

    action: RetentionAction
    dry_run: bool
    erased: dict[str, int]
    """Entries erased per conversation (`action='erase'`)."""
    deleted: dict[str, int]
    """Entries removed per deleted conversation (`action='delete'`)."""
    scrubbed: bool = False
    """Whether the removed bytes were also purged from the store's files (`scrub`)."""
    scrub_error: str | None = None
    """Why purging the files failed, when it did (the erasure itself is committed)."""

    @property
    def total(self) -> int:
        """Entries erased or removed in all."""
        return sum(self.erased.values()) + sum(self.deleted.values())
