"""`EventLogConversationStore`: the event log as pydantic-ai's own conversation store.

pydantic-ai (2.66 and later) keeps a conversation as a `Conversation` that `agent.run(...,
conversation=...)` continues, and a `ConversationStore` that loads and saves it, one entry per
message, with a record per conversation checked by revision on every save. Its UI adapters
(`VercelAIAdapter`, `AGUIAdapter`, 2.68 and later) take one as `conversation_store=`.

This store keeps all of it in the log's own store (memory, LMDB or PostgreSQL, encrypted or
not): a record is a `saved` entry of the conversation, and each store entry links to the log's
`message` entry that holds its message (docs/conversations.md). So what the store keeps is what
`replay`, `verify`, `search`, export and erasure already cover, and a run recorded step by step
with `EventLogPersistence` is linked when it is saved, not stored a second time.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from capability._equivalence import canonical, same_message
from eventlog import EventLogBase, InvalidArgumentError, RevisionConflict, SavedInfo, decode_messages, encode_message
from eventlog._convstore import NewStoreEntry

try:
    from pydantic import TypeAdapter
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.usage import RunUsage
except ImportError:  # pragma: no cover - exercised by tests/capability/test_conversation_store_version.py
    _installed = importlib.metadata.version('pydantic-ai-slim')
    raise ImportError(
        f'EventLogConversationStore needs pydantic-ai-slim 2.66 or newer (installed: {_installed}); '
        "upgrade with: pip install -U 'pydantic-ai-slim>=2.66'"
    ) from None

__all__ = ['EventLogConversationStore']

_USAGE: Final = TypeAdapter(RunUsage)
_DEFERRED: Final = TypeAdapter(DeferredToolRequests)
_CALL_LISTS: Final = ('calls', 'approvals')
_DEFERRED_SEARCH: Final = 16
"""How many of a history's last messages are searched for the tool calls a record waits on."""


class EventLogConversationStore(ConversationStore):
    """A `ConversationStore` kept in an event log, on any of its backends.

    Why the log rather than a table of its own: what the store holds is then part of the same
    append-only, hash-chained record as every run. Pair it with `EventLogPersistence`, which
    makes each step of a run durable as it happens (a crash mid-run keeps every finished step,
    which a store saved only at the end of a run cannot), and a save links the messages that
    capability already recorded instead of writing them again: each message is stored once.

    - A save's revision check, the messages it adds and its record commit in one transaction of
      the log: a stale save raises `ConversationConflict` and writes nothing.
    - `scope` fails closed: a conversation saved with another scope is one the store lacks.
    - `list_conversations` reads an index, newest save first; `load(limit=n)` reads only the
      last `n` entries, a range at a time rather than an entry at a time.
    - Forks share the entries they were forked from by reference.
    - `delete` erases, in the same transaction, the content of every entry of the conversation
      that no other record reaches (a fork keeps what it shares), with the log's erasure, then
      scrubs it from the store's files and projections as `EventLogBase.erase` does
      (docs/erasure.md): deleting here removes the messages, not only the record.

    The metadata a tool attaches to a deferred call (`DeferredToolRequests.metadata`) is kept
    with the record, in clear text even in an encrypted store; the calls themselves are read
    from the history's messages.
    """

    def __init__(self, log: EventLogBase) -> None:
        """Keep conversations in `log` (an `InMemoryEventLog`, `LmdbEventLog` or `PostgresEventLog`)."""
        if not isinstance(log, EventLogBase):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f'EventLogConversationStore takes an event log (InMemoryEventLog, LmdbEventLog or '
                f'PostgresEventLog), not {type(log).__name__}'
            )
        self.log = log
        """The log the conversations are kept in."""

    async def delete(self, conversation_id: str, *, scope: str | None = None) -> None:
        """Delete a conversation, so it no longer loads or lists, and erase its messages.

        In the transaction that drops the record, the content of every entry of the conversation
        that no other record reaches is erased (the log's erasure: each entry keeps its place in
        the hash chain, holding a placeholder), then scrubbed from the store's files and
        projections. A fork keeps the entries it shares; they are erased when it is deleted too.
        With `scope`, a conversation saved with another scope is left as it is.
        """
        await super().delete(conversation_id, scope=scope)

    # -- the five primitives, and a history read in one transaction ------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record for a conversation, or `None` if the store doesn't have it."""
        info = await self.log.store_record(conversation_id)
        return None if info is None else await self._record(conversation_id, info)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        """The stored records, or those with the given `scope`, most recently saved first, at most `limit`."""
        found = await self.log.store_records(scope=scope, limit=limit)
        return [await self._record(item.conversation_id, item.info) for item in found]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Store a record and the entries its history adds, in one transaction, if the stored
        revision is `expected_revision`; raise `ConversationConflict` (nothing written) if not."""
        info = SavedInfo(
            revision=record.revision,
            expected=expected_revision,
            head=record.head_id,
            scope=record.scope,
            forked_from=record.forked_from,
            forked_at=record.forked_at,
            branches=list(record.branches),
            usage=_USAGE.dump_python(record.usage, mode='json'),
            deferred=_deferred_refs(record.deferred_tool_requests),
            updated_at=record.updated_at,
        )
        new = [
            NewStoreEntry(entry.id, entry.parent_id, encode_message(entry.message), entry.message.run_id)
            for entry in new_entries
        ]
        new = await self._copies_of_resumed(new)
        try:
            await self.log.store_save(record.conversation_id, info, new)
        except RevisionConflict:
            raise ConversationConflict(record.conversation_id) from None

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete a conversation's record and erase the content of its entries no other record
        reaches (see the class docstring); `ConversationConflict` if its revision changed."""
        try:
            await self.log.store_delete(
                conversation_id,
                expected=expected_revision,
                revision=str(uuid.uuid4()),
                updated_at=datetime.now(UTC),
            )
        except RevisionConflict:
            raise ConversationConflict(conversation_id) from None

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this identifier; a `LookupError` (`eventlog.NotFoundError`) if the store lacks it."""
        found = await self.log.store_entry(entry_id)
        (message,) = decode_messages([found.payload], where=f'entry {found.seq}')
        return ConversationEntry(id=found.id, parent_id=found.parent, message=message)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first one up to `head_id`, in order, or only the last `limit`, in one read."""
        if limit is not None and limit < 0:
            raise InvalidArgumentError('limit must not be negative')
        found = await self.log.store_history(head_id, limit=limit)
        messages = decode_messages([entry.payload for entry in found])
        return [
            ConversationEntry(id=entry.id, parent_id=entry.parent, message=message)
            for entry, message in zip(found, messages, strict=True)
        ]

    async def _copies_of_resumed(self, new: list[NewStoreEntry]) -> list[NewStoreEntry]:
        """`new`, with the first request of each run that resumed from a recorded request (a UI
        client's regenerate) marked as standing for it when it is that request's copy.

        `EventLogPersistence` records the original only, for the copy pydantic-ai sends again
        (docs/persistence.md); the save then links the original instead of storing the copy.
        """
        seen: set[str] = set()
        marked = list(new)
        for index, entry in enumerate(new):
            run_id = entry.run_id
            if run_id is None or run_id in seen:
                continue
            seen.add(run_id)
            run = await self.log.get_run(run_id)
            if run is None or run.branch_parent is None or not entry.payload.startswith(b'{"parts":'):
                continue
            origin = await self.log.get_entry(run.branch_parent)
            if origin is None or origin.kind != 'message' or origin.erased or origin.run_id == run_id:
                continue
            if b'"kind":"request"' in entry.payload and same_message(
                canonical(entry.payload), canonical(origin.payload)
            ):
                marked[index] = dataclasses.replace(entry, stands_for=origin.seq)
        return marked

    # -- records ---------------------------------------------------------------------------------

    async def _record(self, conversation_id: str, info: SavedInfo) -> ConversationRecord:
        deferred = None
        if info.deferred is not None:
            deferred = await self._deferred(info.head, info.deferred)
        return ConversationRecord(
            conversation_id=conversation_id,
            head_id=info.head,
            usage=_USAGE.validate_python(info.usage),
            deferred_tool_requests=deferred,
            scope=info.scope,
            forked_from=info.forked_from,
            forked_at=info.forked_at,
            branches=list(info.branches),
            revision=info.revision,
            updated_at=info.updated_at,
        )

    async def _deferred(self, head: str | None, refs: dict[str, Any]) -> DeferredToolRequests:
        """The deferred tool requests `refs` names, with each call read from the history's last messages."""
        calls: dict[str, dict[str, Any]] = {}
        for entry in reversed(await self.read_history(head, limit=_DEFERRED_SEARCH)):
            if isinstance(entry.message, ModelResponse):
                for part in entry.message.parts:
                    if isinstance(part, ToolCallPart) and part.tool_call_id not in calls:
                        calls[part.tool_call_id] = _CALL.dump_python(part, mode='json')
        data = dict(refs)
        for name in _CALL_LISTS:
            ids: list[str] = data.get(name, [])
            data[name] = [calls[call_id] for call_id in ids if call_id in calls]
        return _DEFERRED.validate_python(data)


_CALL: Final = TypeAdapter(ToolCallPart)


def _deferred_refs(requests: DeferredToolRequests | None) -> dict[str, Any] | None:
    """`requests` as pydantic-ai serializes them, with each tool call replaced by its id."""
    if requests is None:
        return None
    data: dict[str, Any] = _DEFERRED.dump_python(requests, mode='json')
    for name in _CALL_LISTS:
        data[name] = [call.tool_call_id for call in getattr(requests, name)]
    return data
