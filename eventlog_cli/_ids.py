"""How the command line takes and shows run and conversation ids: unique prefixes, as `git` does
with hashes.

Taking: `resolve` turns what the user typed into an id. An exact id always wins; otherwise a
prefix of at least `MIN_PREFIX` characters that starts exactly one id names it; a prefix that
starts several is refused with `AmbiguousIdError`, naming a few of them; one that starts none is
passed on unchanged, so the command fails as it does for any unknown id. Every command that takes
a run or conversation id calls it, once, right after opening the store.

Showing: `ShortIds` abbreviates generated ids (UUIDs such as pydantic-ai's run ids, long hex
strings) to their shortest prefix that no other id of the store starts with, and at least
`ABBREV` characters; an id a person chose (`orbit-migration`) is shown whole. Copied back into
any command, an abbreviation names the same run or conversation, until a new id sharing it is
stored (as with `git`'s abbreviated hashes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from eventlog.errors import AmbiguousIdError

if TYPE_CHECKING:
    from eventlog._ids import IdKind
    from eventlog.entries import ConversationRecord, Entry, RunRecord

__all__ = ['ABBREV', 'MIN_PREFIX', 'IdLookup', 'ShortIds', 'abbreviate', 'is_generated', 'matches', 'resolve']

MIN_PREFIX = 4
"""The shortest prefix taken for an id (as `git` takes 4 hex digits); a shorter one must be the whole id."""

ABBREV = 8
"""The shortest abbreviation shown: a UUID's first group."""

_CANDIDATES = 4
"""Candidates an ambiguity error names."""

_GENERATED = re.compile(r'[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|[0-9a-f]{20,}', re.IGNORECASE)


class IdLookup(Protocol):
    """What taking and showing ids reads from a store: an `EventLogBase`, or the command line's
    synchronous reader (`eventlog_cli._sync_store.SyncStore`)."""

    async def get_run(self, run_id: str) -> RunRecord | None:
        """A run's record, or None."""
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """A live conversation's record, or None."""
        ...

    async def ids_with_prefix(self, kind: IdKind, prefix: str, *, limit: int) -> list[str]:
        """Up to `limit` ids of `kind` that start with `prefix`, in order."""
        ...

    async def unique_prefix_lengths(self, kind: IdKind, identifiers: Iterable[str]) -> dict[str, int]:
        """For each id, the length of its shortest prefix no other id of `kind` starts with."""
        ...


def is_generated(identifier: str) -> bool:
    """Whether an id looks generated (a UUID, or 20 or more hex digits): those are abbreviated."""
    return _GENERATED.fullmatch(identifier) is not None


def abbreviate(identifier: str, unique: int) -> str:
    """`identifier` cut to `unique` characters but at least `ABBREV`, never ending on a `-`."""
    length = max(ABBREV, unique)
    while length < len(identifier) and identifier[length - 1] == '-':
        length += 1
    return identifier[:length]


async def _exists(log: IdLookup, kind: IdKind, identifier: str) -> bool:
    if kind == 'run':
        return await log.get_run(identifier) is not None
    return await log.get_conversation(identifier) is not None


async def matches(log: IdLookup, kind: IdKind, text: str, *, limit: int = _CANDIDATES + 1) -> list[str]:
    """The ids `text` may name, by `resolve`'s rule: `[text]` when it is an id of the store, else
    the first `limit` ids it is a prefix of (none when it is shorter than `MIN_PREFIX`)."""
    if await _exists(log, kind, text):
        return [text]
    if len(text) < MIN_PREFIX:
        return []
    return await log.ids_with_prefix(kind, text, limit=limit)


async def resolve(log: IdLookup, kind: IdKind, text: str) -> str:
    """The id `text` names: itself when it is an id of the store, else the one id it is a prefix
    of; `AmbiguousIdError` when it starts several; `text` unchanged when it starts none."""
    found = await matches(log, kind, text)
    if not found:
        return text
    if len(found) == 1:
        return found[0]
    names = ', '.join(found[:_CANDIDATES]) + (', ...' if len(found) > _CANDIDATES else '')
    raise AmbiguousIdError(f'{kind} id prefix {text!r} is ambiguous: it starts {names}; give more of the id')


async def resolve_run(log: IdLookup, text: str) -> str:
    """`resolve` for a run id."""
    return await resolve(log, 'run', text)


async def resolve_conversation(log: IdLookup, text: str) -> str:
    """`resolve` for a conversation id."""
    return await resolve(log, 'conversation', text)


class ShortIds:
    """The abbreviations of the ids one view prints: `learn` the ids first (one store look-up for
    all of them), then `run(id)` and `conversation(id)` give each one's abbreviation.

    With `full`, every id is shown whole (`--full-ids`). With `uniform` (a table's column), the
    ids learnt in one call are cut to one length, the longest any of them needs.
    """

    def __init__(self, log: IdLookup, *, full: bool = False, uniform: bool = False) -> None:
        """Abbreviations for ids of `log`'s store."""
        self._log = log
        self._full = full
        self._uniform = uniform
        self._short: dict[tuple[IdKind, str], str] = {}

    async def learn(self, kind: IdKind, identifiers: Iterable[str | None]) -> None:
        """Look up how short each of `identifiers` (of `kind`) may be; `None`s and known ids are skipped."""
        if self._full:
            return
        wanted = [i for i in identifiers if i and (kind, i) not in self._short and is_generated(i)]
        if not wanted:
            return
        lengths = await self._log.unique_prefix_lengths(kind, wanted)
        longest = max(lengths.values())
        for identifier, length in lengths.items():
            self._short[kind, identifier] = abbreviate(identifier, longest if self._uniform else length)

    async def learn_entries(self, entries: Sequence[Entry]) -> None:
        """`learn` the conversation and run ids of `entries`."""
        await self.learn('conversation', (entry.conversation_id for entry in entries))
        await self.learn('run', (entry.run_id for entry in entries))

    def run(self, identifier: str | None) -> str:
        """A run id as shown (`''` for `None`)."""
        return self._shown('run', identifier)

    def conversation(self, identifier: str | None) -> str:
        """A conversation id as shown (`''` for `None`)."""
        return self._shown('conversation', identifier)

    def _shown(self, kind: IdKind, identifier: str | None) -> str:
        if identifier is None:
            return ''
        return self._short.get((kind, identifier), identifier)
