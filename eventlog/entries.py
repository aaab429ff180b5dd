"""The entry model: what the log stores, and the records derived from it.

An `Entry` is the unit of the log. Callers describe what to append with a `NewEntry`
(no `seq`, no hash: the log assigns both) and read back `Entry` objects. Message
payloads are pydantic-ai's own JSON for one message, so replay is byte-exact; the
payloads of the other kinds are small msgspec structs defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import msgspec

from eventlog.errors import CorruptEntryError, InvalidPayloadError
from eventlog.nesting import json_depth, may_nest_deeper

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = [
    'CONVERSATION_KINDS',
    'ERASABLE_KINDS',
    'KINDS',
    'MAX_SEQ',
    'PAYLOAD_TYPES',
    'RUN_KINDS',
    'CompactionInfo',
    'ConversationRecord',
    'DurableStepInfo',
    'Entry',
    'EntryBody',
    'ErasureInfo',
    'ForkInfo',
    'Kind',
    'NewEntry',
    'RecallInfo',
    'RecalledHit',
    'RunFinishedInfo',
    'RunLease',
    'RunRecord',
    'RunStartedInfo',
    'RunStatus',
    'SavedInfo',
    'ShredInfo',
    'StoreLink',
    'TitleInfo',
    'ToolEffectInfo',
    'ToolEffectStatus',
    'VerifyProblem',
    'VerifyReport',
    'compaction_entry',
    'decode_messages',
    'durable_step_entry',
    'encode_info',
    'encode_message',
    'fold_compaction',
    'message_entry',
    'recall_entry',
    'run_finished_entry',
    'run_started_entry',
    'tool_effect_entry',
    'top_level_runs',
]

Kind = Literal[
    'message',
    'run_started',
    'run_finished',
    'compaction',
    'tool_effect',
    'durable_step',
    'recall',
    'title',
    'archived',
    'unarchived',
    'forked_from',
    'deleted',
    'erasure',
    'shred',
    'saved',
]
"""Every kind of entry the log knows."""

T = TypeVar('T')

RUN_KINDS: Final[frozenset[Kind]] = frozenset(
    {'message', 'run_started', 'run_finished', 'compaction', 'tool_effect', 'durable_step', 'recall'}
)
"""Kinds that belong to a run: they carry a `run_id` and sit on the run's branch."""

CONVERSATION_KINDS: Final[frozenset[Kind]] = frozenset(
    {'title', 'archived', 'unarchived', 'forked_from', 'deleted', 'erasure', 'shred', 'saved'}
)
"""Kinds that describe a conversation as a whole and carry no `run_id`."""

KINDS: Final[frozenset[Kind]] = RUN_KINDS | CONVERSATION_KINDS

ERASABLE_KINDS: Final[frozenset[Kind]] = frozenset({'message', 'compaction', 'durable_step', 'recall'})
"""Kinds whose payload holds message content (a `durable_step` holds a model response or a tool
result, a `recall` entry quotes the messages it recalled), which `erase` replaces with a placeholder."""

MAX_SEQ: Final = 2**53 - 1
"""The largest `seq` the log assigns or accepts, and the bound of every seq-like or counting
integer it takes (`parent`, `at_seq`, `after_seq`, `limit`, usage values, compaction `replaced`).

2**53 - 1 is the largest integer every JSON reader (JavaScript's included) holds exactly, so
`--json` output and exports stay exact, and it is far inside the 8-byte keys the store packs
`seq`s into. At a million appends a second a log takes 285 years to reach it."""

RunStatus = Literal['running', 'completed', 'failed', 'cancelled']
"""The life of a run: `running` until a `run_finished` entry says how it ended."""

ToolEffectStatus = Literal['started', 'completed', 'failed']
"""Where a tool call stood when its `tool_effect` entry was written."""


class EntryBody(msgspec.Struct, frozen=True, gc=False):
    """The fields of an entry that its chain hash covers.

    The one definition of an entry's shape: `Entry` adds the hash, the store keeps these
    fields as a msgpack array (`_keys.StoredBody`), and an export line carries them by name.
    """

    seq: int
    """Global position in the log, strictly increasing, assigned at append."""
    conversation_id: str
    run_id: str | None
    kind: Kind
    timestamp: datetime
    parent: int | None
    """The `seq` of the entry this one follows on its branch, or `None` at a root."""
    idempotency_key: str | None
    inherited: bool
    """True for a message handed in as history that the log had never seen before."""
    payload: bytes


class Entry(EntryBody, frozen=True, kw_only=True):
    """One committed entry of the log, exactly as stored."""

    hash: bytes
    """Chains this entry to the previous entry of its conversation (see `verify`)."""
    erased: bool = False
    """True when `erase` removed this entry's content: `payload` is then a placeholder that
    names the erasure (docs/erasure.md), and `hash` is the one stored before the erasure, which
    `verify` recomputes from the original's digest the entry keeps (or, for an entry appended
    before its store's format 4, takes as given)."""

    def message(self) -> ModelMessage:
        """Decode a `message` entry's payload into a pydantic-ai message.

        Raises `CorruptEntryError` when the stored bytes are not one message (a damaged store:
        `verify` names the entry).
        """
        decoded = decode_messages([self.payload], where=f'entry {self.seq}')
        if len(decoded) != 1:
            raise CorruptEntryError(f'entry {self.seq} holds {len(decoded)} messages instead of one; run verify')
        return decoded[0]


def decode_messages(payloads: Sequence[bytes], *, where: str = 'a stored message') -> list[ModelMessage]:
    """Decode stored message payloads (pydantic-ai's JSON, one message each) in one call.

    Raises `CorruptEntryError`, naming `where`, when the bytes are not messages: what the log
    stored was validated, so only a damaged store gets here.
    """
    if not payloads:
        return []
    import pydantic  # imported on first use (with pydantic-ai): keeps start-up fast
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    try:
        return ModelMessagesTypeAdapter.validate_json(b'[' + b','.join(payloads) + b']')
    except (pydantic.ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CorruptEntryError(f'{where} cannot be decoded ({first}); run verify') from None


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEntry:
    """An entry to append; the log assigns `seq`, the hash and (unless given) the timestamp."""

    conversation_id: str
    kind: Kind
    run_id: str | None = None
    payload: bytes = b''
    parent: int | None = None
    """Only for a run's first entry (its branch point) or a `forked_from` entry; the log
    links every later entry of a run to the run's previous entry itself."""
    idempotency_key: str | None = None
    """A second append with the same (`run_id`, key) writes nothing and returns the first `seq`."""
    inherited: bool = False
    timestamp: datetime | None = None
    prevalidated: bool = field(default=False, repr=False)
    """Set by `message_entry`, whose payload pydantic-ai itself produced; skips re-validation."""


class RunStartedInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `run_started` entry."""

    agent_name: str | None = None
    parent_run_id: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class RunFinishedInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `run_finished` entry."""

    status: Literal['completed', 'failed', 'cancelled']
    error: str | None = None
    usage: dict[str, int] = msgspec.field(default_factory=dict)


class CompactionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Payload of a `compaction` entry: a summary that replaced part of the live context.

    `replaced` lists the `seq`s of the message entries (or of earlier `compaction`
    entries, meaning their summaries) that the summary stands in for. `summary` holds
    the summary messages as pydantic-ai JSON objects, one per message.
    """

    replaced: list[int]
    summary: list[msgspec.Raw]


class ToolEffectInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `tool_effect` entry."""

    tool_call_id: str
    tool_name: str
    status: ToolEffectStatus
    error: str | None = None


class DurableStepInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `durable_step` entry: one durable unit of a run (a model request, a tool call,
    a capability operation) and its result, journaled by `capability.EventLogDurability`.

    Replay, search and the context views ignore these entries; a re-executed run reads them back
    instead of executing the unit again.
    """

    step: int
    """The unit's position in the run (1 for the first unit; 0 for the run's input record)."""
    name: str
    """The unit's persisted operation name; a re-executed run must ask for the same one here."""
    result: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b'null'))
    """The unit's result as the engine's codec encoded it (JSON)."""
    inputs: dict[str, str] | None = None
    """Digests of the unit's input by part (`messages`, `model_settings`, `args`, ...): SHA-256 of
    each part as the engine's codec encodes it, canonically; a re-executed run must send the same.
    `None` in entries journaled before inputs were recorded (and once the run is erased)."""


class RecalledHit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One stored message a `recall` entry brought into a model request."""

    run_id: str
    """The run whose record holds the message."""
    position: int
    """Its position in that run's full record."""
    score: float
    """Its relevance score (BM25 for `mode='bm25'`)."""
    seq: int | None = None
    """The entry that stored it, when the recall read this same log (else unknown)."""
    truncated: bool = False
    """Whether only the start of its text fitted in the token budget."""


class RecallInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Payload of a `recall` entry: stored messages added to one model request of the run.

    The injected text is sent to the model with that request only; it is not a message of the
    run, so replay and search ignore it (docs/recall.md).
    """

    query: str
    """The text the recall searched with (the run's latest user prompt)."""
    mode: str
    """How it ranked: `'bm25'`, `'semantic'` or `'hybrid'`."""
    hits: list[RecalledHit]
    """The recalled messages, best first."""
    text: str
    """Exactly the text added to the request."""
    tokens: int
    """`text`'s size as the capability estimated it."""
    max_tokens: int
    """The budget it was held to."""


class TitleInfo(msgspec.Struct, frozen=True):
    """Payload of a `title` entry."""

    title: str


class ForkInfo(msgspec.Struct, frozen=True):
    """Payload of a `forked_from` entry: where the new conversation's history comes from."""

    conversation_id: str
    seq: int


class ErasureInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of an `erasure` entry: which entries of the conversation `erase` emptied, and why."""

    seqs: list[int]
    """The erased entries, in `seq` order."""
    run_id: str | None = None
    """The run the erasure was limited to, if any."""
    reason: str | None = None
    """Why (a ticket, a retention policy, ...), as the caller gave it."""
    by: str | None = None
    """Who asked for it, as the caller gave it."""


class ShredInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `shred` entry: the conversation's data key was destroyed (docs/encryption.md)."""

    reason: str | None = None
    """Why, as the caller gave it."""
    by: str | None = None
    """Who asked for it, as the caller gave it."""


class StoreLink(msgspec.Struct, frozen=True, array_like=True):
    """One entry a conversation store's save added: the store's id for it, the entry before it,
    and the `seq` of the `message` entry of the log that holds its message."""

    id: str
    parent: str | None
    seq: int


class SavedInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Payload of a `saved` entry: a conversation's record in the conversation store
    (`capability.EventLogConversationStore`) as a save, branch, fork or delete left it.

    The store's records are these entries: the latest one of a conversation is its record, and
    the STORE index (`_keys`) is derived from them, so an export carries the records and `verify`
    rebuilds the index. Only identifiers, counts and the tool-call ids of deferred requests are
    kept here; every message stays in a `message` entry, which `links` point at.
    """

    revision: str
    """The record's revision after this write (an opaque token, compared for equality)."""
    expected: str | None = None
    """The revision this write replaced (`None`: the conversation was new to the store)."""
    head: str | None = None
    """The store's id of the newest entry of the conversation's history."""
    scope: str | None = None
    forked_from: str | None = None
    forked_at: str | None = None
    branches: list[str] = msgspec.field(default_factory=list)
    """The last entries of the branches the conversation left, oldest first."""
    usage: dict[str, Any] = msgspec.field(default_factory=dict)
    """The conversation's accumulated usage, as pydantic-ai's `RunUsage` serializes."""
    deferred: dict[str, Any] | None = None
    """The deferred tool requests the conversation waits on, as pydantic-ai serializes them, with
    each tool call replaced by its `tool_call_id` (the call itself is in the history's messages)."""
    updated_at: datetime
    links: list[StoreLink] = msgspec.field(default_factory=list)
    """The entries this write added, in order, each after the one it names as parent."""
    deleted: bool = False
    """The conversation was deleted from the store: it no longer loads or lists."""
    released: list[str] = msgspec.field(default_factory=list)
    """With `deleted`: the store's entries no other record reaches, which the delete dropped."""


PAYLOAD_TYPES: Final[Mapping[Kind, type[msgspec.Struct] | None]] = {
    'message': None,
    'run_started': RunStartedInfo,
    'run_finished': RunFinishedInfo,
    'compaction': CompactionInfo,
    'tool_effect': ToolEffectInfo,
    'durable_step': DurableStepInfo,
    'recall': RecallInfo,
    'title': TitleInfo,
    'archived': None,
    'unarchived': None,
    'forked_from': ForkInfo,
    'deleted': None,
    'erasure': ErasureInfo,
    'shred': ShredInfo,
    'saved': SavedInfo,
}
"""The payload struct of each kind (JSON), or None: a `message` holds one pydantic-ai message,
`archived`, `unarchived` and `deleted` hold nothing."""


def fold_compaction(
    live: Sequence[T], info: CompactionInfo, summary: Iterable[T], anchor: Callable[[T], int]
) -> list[T]:
    """Apply one compaction to a context: the one fold every reader of a branch uses.

    `live` is the context so far, each item standing for the entry whose `seq` `anchor` gives
    (a message, or an earlier compaction whose summary it holds). The items whose anchor
    `info.replaced` names are dropped, and `summary` takes the place of the first of them
    (the end of the context when none is held).
    """
    replaced = set(info.replaced)
    position = next((i for i, item in enumerate(live) if anchor(item) in replaced), len(live))
    before = [item for item in live[:position] if anchor(item) not in replaced]
    after = [item for item in live[position:] if anchor(item) not in replaced]
    return [*before, *summary, *after]


class RunLease(msgspec.Struct, frozen=True, kw_only=True):
    """The lease of a run being executed, as the store holds it: a fencing token.

    One execution at a time holds a run's lease (`EventLogBase.take_run_lease`). `owner` names
    the execution (unique per execution); `epoch` counts the holders since the lease was last
    free, so `(owner, epoch)` is the token. Appends made under the lease
    (`EventLogBase.run_lease_fence`) check in their own transaction that the store still holds
    this token, so a holder whose lease was taken over appends nothing more.
    """

    run_id: str
    owner: str
    epoch: int
    expires: float
    """When the lease lapses unless renewed (seconds since the epoch, by the holder's clock)."""
    executor: str | None = None
    """The executor (a process identity that persists across restarts) the execution belongs to,
    if it named one: another execution of the same executor takes the lease over at once."""


class RunRecord(msgspec.Struct, kw_only=True):
    """A run as derived from its entries, kept current with every append."""

    run_id: str
    conversation_id: str
    parent_run_id: str | None = None
    agent_name: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    started_at: datetime
    finished_at: datetime | None = None
    status: RunStatus = 'running'
    error: str | None = None
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    start_seq: int
    """The `seq` of the run's `run_started` entry (start order)."""
    branch_parent: int | None = None
    """The `seq` the run continues from (the tip of the history it inherited)."""
    last_seq: int
    message_count: int = 0
    entry_count: int = 0


def top_level_runs(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """The runs of `runs` that were not started inside another run of their own conversation, in
    their order: a conversation's main line, without the sub-agent runs recorded under its id.

    A run whose parent run is in another conversation (a sub-agent with a conversation of its own)
    is top-level in its conversation. A parent is recognised only among `runs`: pass a
    conversation's whole `list_runs(conversation_id=...)` (or every run of the log). The log's
    `context` continues from the last of them.
    """
    runs = list(runs)
    conversation_of = {run.run_id: run.conversation_id for run in runs}
    return [
        run
        for run in runs
        if run.parent_run_id is None or conversation_of.get(run.parent_run_id) != run.conversation_id
    ]


class ConversationRecord(msgspec.Struct, kw_only=True):
    """A conversation as derived from its entries, kept current with every append."""

    conversation_id: str
    title: str | None = None
    created_at: datetime
    updated_at: datetime
    archived: bool = False
    deleted: bool = False
    forked_from: ForkInfo | None = None
    entry_count: int = 0
    message_count: int = 0
    run_count: int = 0
    compaction_count: int = 0
    payload_bytes: int = 0
    first_seq: int
    last_seq: int
    head_hash: bytes = b''


class VerifyProblem(msgspec.Struct, frozen=True):
    """One finding of `verify`: the first bad entry of a conversation, a derived record or index
    key that does not match the entries, or damage to the store file (docs/verify.md)."""

    conversation_id: str
    """The conversation concerned; empty for a finding about the store as a whole."""
    seq: int
    """The entry concerned (the first bad one of a broken chain); 0 when none applies."""
    reason: str
    code: str = 'hash-mismatch'
    """What kind of finding: 'hash-mismatch', 'entry-removed', 'entry-undecodable', 'entry-invalid',
    'chain-truncated', 'conversation-record', 'run-record', 'index-key', 'meta', 'structure',
    'search-index', 'erasure-unrecorded', 'erasure-incomplete', 'erasure-altered', or against signed checkpoints
    'checkpoint-mismatch', 'checkpoint-missing', 'checkpoint-added' (docs/verify.md, docs/audit.md,
    docs/erasure.md)."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What `verify` found: `ok` only when every chain is intact and everything derived from the
    entries (records, indexes, the store file's structure) matches them."""

    ok: bool
    entries_checked: int
    conversations_checked: int
    problems: list[VerifyProblem]
    scrub_pending: int | None = None
    """The `seq` of the latest erasure or deletion whose removed bytes the store's files may still
    hold (its scrub has not finished; `scrub()` or `eventlog compact` finishes it). Not a fault
    of the chains: `ok` does not depend on it."""
    chain_from: int | None = None
    """The first `seq` chained by rule 2, which recomputes every link through erased entries
    (format 4); `None` for a store still in format 3 or older, whose erased entries' hashes are
    taken as given (opening it writable migrates it: docs/verify.md)."""


_json_encoder = msgspec.json.Encoder()


def encode_message(message: ModelMessage) -> bytes:
    """One message as pydantic-ai serializes it inside `ModelMessagesTypeAdapter` output.

    A `ModelRequest` or `ModelResponse` (exactly those classes, with their own `kind`) goes
    through its own branch of that adapter's schema, built once per process with the adapter's
    config (`_message_serializers`): the same bytes without wrapping the message in a list and
    dispatching on the tagged union, about half the cost. Anything else goes through the adapter.

    Raises `InvalidPayloadError` when pydantic-ai cannot serialize it (tool arguments nested
    deeper than its limit, values it cannot encode, lone surrogates) or could not read it back
    (nested deeper than its JSON reader goes).
    """
    serializers = _SERIALIZERS or _message_serializers()
    try:
        direct = serializers.get(type(message))
        if direct is not None and direct[0] == message.kind:
            payload = direct[1](message)
        else:
            from pydantic_ai.messages import ModelMessagesTypeAdapter  # imported on first use: keeps start-up fast

            payload = ModelMessagesTypeAdapter.dump_json([message])[1:-1]
    except (ValueError, TypeError, RecursionError) as exc:  # PydanticSerializationError is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidPayloadError(f'the message cannot be serialized: {first}') from None
    if (
        payload.count(b'{') + payload.count(b'[') > _READ_CHECK_DEPTH
        and may_nest_deeper(payload, _READ_CHECK_DEPTH)
        and (depth := json_depth(payload)) > _READ_CHECK_DEPTH
    ):
        from eventlog._checks import validate_messages

        try:
            validate_messages([payload])  # pydantic-ai writes deeper JSON than it reads back
        except InvalidPayloadError:
            raise InvalidPayloadError(
                f'the message nests {depth} levels deep, deeper than pydantic-ai reads back'
            ) from None
    return payload


_READ_CHECK_DEPTH: Final = 100
"""Nesting past which `encode_message` checks that pydantic-ai reads the message back (its JSON
reader stops at about 200 levels, its writer does not): a message stored but unreadable would
break every replay of its run."""


_SERIALIZERS: dict[type, tuple[str, Callable[[ModelMessage], bytes]]] = {}
"""The class -> (`kind`, serializer) of `encode_message`'s direct path, built on first use."""


def _message_serializers() -> dict[type, tuple[str, Callable[[ModelMessage], bytes]]]:
    """One serializer per branch of `ModelMessagesTypeAdapter`'s tagged union, sharing the
    adapter's definitions and config, so each writes exactly what the adapter writes for a
    message of that kind. When pydantic or pydantic-ai lay the schema out otherwise, or a probe
    message does not encode to the adapter's bytes, the map holds a sentinel and every message
    goes through the adapter."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse, TextPart, ToolReturnPart

    built: dict[type, tuple[str, Callable[[ModelMessage], bytes]]] = {}
    try:
        from pydantic._internal._config import ConfigWrapper  # the adapter's config as pydantic-core takes it
        from pydantic_core import SchemaSerializer

        adapter: Any = ModelMessagesTypeAdapter
        adapter.rebuild()  # built lazily (`defer_build`): make sure the schema is there
        schema: Any = adapter.core_schema
        definitions: Any = []
        if schema['type'] == 'definitions':
            definitions = schema['definitions']
            schema = schema['schema']
        union: Any = schema['items_schema']
        config: Any = ConfigWrapper(adapter._config).core_config(None)  # pyright: ignore[reportPrivateUsage]
        for cls, kind in ((ModelRequest, 'request'), (ModelResponse, 'response')):
            branch: Any = union['choices'][kind]
            if definitions:
                branch = {'type': 'definitions', 'schema': branch, 'definitions': definitions}
            built[cls] = (kind, SchemaSerializer(branch, config).to_json)
        probes: list[Any] = [
            ModelRequest(parts=[ToolReturnPart('probe', {'bytes': b'\x00\xff'}, tool_call_id='probe')]),
            ModelResponse(parts=[TextPart('probe')]),
        ]
        if any(built[type(m)][1](m) != ModelMessagesTypeAdapter.dump_json([m])[1:-1] for m in probes):
            built = {}
    except Exception:  # any other layout: the adapter serves every message
        built = {}
    _SERIALIZERS.update(built or {_Unmatched: ('', _unmatched)})
    return _SERIALIZERS


class _Unmatched:
    """The sentinel class `_SERIALIZERS` holds when the direct path is off (no message is one)."""


def _unmatched(message: ModelMessage) -> bytes:  # pragma: no cover - never called: no message is an `_Unmatched`
    raise AssertionError(message)


def encode_info(info: msgspec.Struct) -> bytes:
    """A non-message payload struct as JSON; `InvalidPayloadError` when a value cannot be encoded."""
    try:
        return _json_encoder.encode(info)
    except (ValueError, TypeError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise InvalidPayloadError(f'the {type(info).__name__} payload cannot be encoded: {exc}') from None


def message_entry(
    message: ModelMessage,
    *,
    conversation_id: str,
    run_id: str,
    idempotency_key: str | None = None,
    inherited: bool = False,
    parent: int | None = None,
) -> NewEntry:
    """A `message` entry for one pydantic-ai message."""
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='message',
        payload=encode_message(message),
        idempotency_key=idempotency_key,
        inherited=inherited,
        parent=parent,
        prevalidated=True,
    )


def run_started_entry(
    *,
    conversation_id: str,
    run_id: str,
    agent_name: str | None = None,
    parent_run_id: str | None = None,
    metadata: Mapping[str, str] | None = None,
    parent: int | None = None,
    idempotency_key: str | None = None,
) -> NewEntry:
    """A `run_started` entry; `parent` is the tip of the history the run continues."""
    info = RunStartedInfo(agent_name=agent_name, parent_run_id=parent_run_id, metadata=dict(metadata or {}))
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='run_started',
        payload=encode_info(info),
        parent=parent,
        idempotency_key=idempotency_key,
    )


def run_finished_entry(
    *,
    conversation_id: str,
    run_id: str,
    status: Literal['completed', 'failed', 'cancelled'],
    error: str | None = None,
    usage: Mapping[str, int] | None = None,
    idempotency_key: str | None = None,
) -> NewEntry:
    """A `run_finished` entry."""
    info = RunFinishedInfo(status=status, error=error, usage=dict(usage or {}))
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='run_finished',
        payload=encode_info(info),
        idempotency_key=idempotency_key,
    )


def tool_effect_entry(
    *,
    conversation_id: str,
    run_id: str,
    tool_call_id: str,
    tool_name: str,
    status: ToolEffectStatus,
    error: str | None = None,
    idempotency_key: str | None = None,
) -> NewEntry:
    """A `tool_effect` entry for one tool call."""
    info = ToolEffectInfo(tool_call_id=tool_call_id, tool_name=tool_name, status=status, error=error)
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='tool_effect',
        payload=encode_info(info),
        idempotency_key=idempotency_key,
    )


def durable_step_entry(
    *,
    conversation_id: str,
    run_id: str,
    step: int,
    name: str,
    result: bytes,
    inputs: dict[str, str] | None = None,
    idempotency_key: str | None = None,
) -> NewEntry:
    """A `durable_step` entry: the JSON `result` of unit `step` (operation `name`) of a run, and
    the digests of its `inputs`."""
    info = DurableStepInfo(step=step, name=name, result=msgspec.Raw(result), inputs=inputs)
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='durable_step',
        payload=encode_info(info),
        idempotency_key=idempotency_key,
    )


def recall_entry(
    *, conversation_id: str, run_id: str, info: RecallInfo, idempotency_key: str | None = None
) -> NewEntry:
    """A `recall` entry: what a recall capability added to one model request of the run."""
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='recall',
        payload=encode_info(info),
        idempotency_key=idempotency_key,
    )


def compaction_entry(
    *,
    conversation_id: str,
    run_id: str,
    replaced: list[int],
    summary: list[ModelMessage],
    idempotency_key: str | None = None,
) -> NewEntry:
    """A `compaction` entry: `summary` stands in for the entries `replaced` in the live context."""
    info = CompactionInfo(replaced=list(replaced), summary=[msgspec.Raw(encode_message(m)) for m in summary])
    return NewEntry(
        conversation_id=conversation_id,
        run_id=run_id,
        kind='compaction',
        payload=encode_info(info),
        idempotency_key=idempotency_key,
    )
