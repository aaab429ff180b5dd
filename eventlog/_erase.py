"""Erasure: remove the content of entries for good while their place in the chain stays provable.

An erased entry keeps its `seq`, kind, conversation, run, parent, timestamp, idempotency key and
stored chain hash; its payload becomes a placeholder (a message that says it was erased, with the
original's role and tool-call skeleton), and its stored body carries the erasure mark
(`_keys.encode_erased_body`): the SHA-256 of the original body for an entry of chain rule 2, from
which `verify` recomputes its link, or `True` for one of rule 1 (appended before its store was
migrated to format 4), whose stored hash `verify` can only take as given (docs/erasure.md). An
`erasure` entry appended in the same transaction records which entries were erased, why and by whom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from eventlog._admin import mark_scrub_pending
from eventlog._append import append_entries
from eventlog._checks import check_id
from eventlog._keys import (
    StoredBody,
    Table,
    body_digest,
    chain_from,
    conv_key,
    encode_conversation,
    encode_erased_body,
    rule_of,
    seq_key,
    split_value,
)
from eventlog._read import conv_or_raise, get_run, iter_entries, last_seq
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.encryption import seal_body
from eventlog.entries import (
    ERASABLE_KINDS,
    CompactionInfo,
    DurableStepInfo,
    Entry,
    ErasureInfo,
    NewEntry,
    RecallInfo,
    encode_info,
)
from eventlog.errors import InvalidArgumentError, RunNotFound

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

__all__ = [
    'ERASABLE_KINDS',
    'ERASED_METADATA_KEY',
    'ERASED_TEXT',
    'Erased',
    'erase',
    'placeholder_erasure',
    'placeholder_message',
    'shown_payload',
]

ERASED_TEXT: Final = '[erased: the content of this message was removed by erasure entry {seq}]'
"""The text every part of a placeholder message holds (`{seq}`: the `erasure` entry's seq)."""

ERASED_METADATA_KEY: Final = 'eventlog_erased'
"""The placeholder message's `metadata` key; its value is the `erasure` entry's seq."""

MAX_REASON: Final = 1000
"""Longest `reason` or `by` an erasure records, in characters."""

Predicate = Callable[[Entry], bool]

_compaction_decoder = msgspec.json.Decoder(CompactionInfo)
_recall_decoder = msgspec.json.Decoder(RecallInfo)


@dataclass(frozen=True, slots=True)
class Erased:
    """What one `erase` call did inside its transaction."""

    conversation_id: str
    seqs: list[int]
    """The entries whose content was removed (empty when nothing matched)."""
    erasure_seq: int | None
    """The `erasure` entry recording it, or `None` when nothing was erased."""
    payload_bytes: int
    """Bytes of stored payload removed (the erased originals; their placeholders are not subtracted)."""
    scrubbed: bool = False
    """Whether the removed bytes were also purged from the store's files and projections (`scrub`)."""
    scrub_error: str | None = None
    """Why purging failed, when it did; the erasure itself is committed (run `scrub` again later)."""


def check_text(value: str | None, what: str) -> str | None:
    """A `reason` or `by` string, or `InvalidArgumentError`."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_REASON:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(f'{what} must be a string of at most {MAX_REASON} characters')
    return value


def erase(
    txn: WriteTxn,
    conversation_id: str,
    *,
    run_id: str | None = None,
    where: Predicate | None = None,
    reason: str | None = None,
    by: str | None = None,
) -> Erased:
    """Erase the content of the conversation's message and compaction entries (only those of
    `run_id`, and only those `where` accepts, when given) and record it in an `erasure` entry.

    Entries already erased are skipped. Raises `ConversationNotFound`, `RunNotFound` (a run not
    in this conversation) or `InvalidArgumentError` (a predicate that is not callable, raises, or
    returns something other than a bool).
    """
    conv = conv_or_raise(txn, conversation_id)
    if run_id is not None:
        check_id(run_id, 'run_id')
        run = get_run(txn, run_id)
        if run is None or run.conversation_id != conversation_id:
            raise RunNotFound(f'no run {run_id!r} in conversation {conversation_id!r}')
    if where is not None and not callable(where):
        raise InvalidArgumentError(f'where must be a callable taking an Entry and returning a bool, not {where!r}')
    reason = check_text(reason, 'reason')
    by = check_text(by, 'by')
    chosen: list[Entry] = []
    for entry in iter_entries(txn, conversation_id=conversation_id, run_id=run_id, kinds=ERASABLE_KINDS):
        if entry.erased or not _accepts(where, entry):
            continue
        chosen.append(entry)
    if not chosen:
        return Erased(conversation_id, [], None, 0)
    erasure_seq = last_seq(txn) + 1
    first_rule_2 = chain_from(txn)
    removed = 0
    delta = 0
    for entry in chosen:
        placeholder = _placeholder_payload(entry.kind, entry.payload, erasure_seq)
        body = StoredBody(
            entry.seq,
            entry.conversation_id,
            entry.run_id,
            entry.kind,
            entry.timestamp,
            entry.parent,
            entry.idempotency_key,
            entry.inherited,
            placeholder,
        )
        # An encrypted store seals the placeholder too (its role and tool names are content).
        body = seal_body(txn, body)
        # Rule 2 chains the original body's digest: kept, so the link is still checked (`_keys.link`).
        digest = None
        if rule_of(entry.seq, first_rule_2) == 2:
            # The stored bytes as hashed (an encrypted store's transaction opens what it reads).
            stored = cast('ReadTxn', getattr(txn, 'raw', txn)).get(Table.ENTRIES, seq_key(entry.seq))
            assert stored is not None, entry.seq
            digest = body_digest(split_value(stored)[0])
        txn.put(Table.ENTRIES, seq_key(entry.seq), encode_erased_body(body, digest) + entry.hash)
        removed += len(entry.payload)
        delta += len(placeholder) - len(entry.payload)
    conv.payload_bytes += delta
    txn.put(Table.CONVS, conv_key(conversation_id), encode_conversation(conv))
    info = ErasureInfo(seqs=[entry.seq for entry in chosen], run_id=run_id, reason=reason, by=by)
    new = NewEntry(conversation_id=conversation_id, kind='erasure', payload=encode_info(info))
    (seq,) = append_entries(txn, [new], allow_internal=True)
    assert seq == erasure_seq, (seq, erasure_seq)
    mark_scrub_pending(txn, seq)
    return Erased(conversation_id, info.seqs, seq, removed)


def _accepts(where: Predicate | None, entry: Entry) -> bool:
    if where is None:
        return True
    try:
        verdict: object = where(entry)
    except Exception as exc:  # a caller's predicate: any failure is a bad argument
        raise InvalidArgumentError(
            f'the where predicate failed on entry {entry.seq}: {type(exc).__name__}: {exc}'.splitlines()[0]
        ) from None
    if not isinstance(verdict, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidArgumentError(
            f'the where predicate must return a bool, it returned {type(verdict).__name__} for entry {entry.seq}'
        )
    return verdict


# --- placeholders -----------------------------------------------------------------------------


def _placeholder_payload(kind: str, payload: bytes, erasure_seq: int) -> bytes:
    """The placeholder `erase` writes in place of a `kind` entry's `payload`."""
    from eventlog.entries import decode_messages, encode_message

    if kind == 'durable_step':
        step = msgspec.json.decode(payload, type=DurableStepInfo)
        return encode_info(DurableStepInfo(step=step.step, name=step.name))  # the result is gone: `null`
    if kind == 'compaction':
        info = _compaction_decoder.decode(payload)
        try:
            summary = decode_messages([bytes(raw) for raw in info.summary])
        except Exception:
            summary = []
        stand_ins = [placeholder_message(m, erasure_seq) for m in summary] or [placeholder_message(None, erasure_seq)]
        out = CompactionInfo(replaced=info.replaced, summary=[msgspec.Raw(encode_message(m)) for m in stand_ins])
        return encode_info(out)
    if kind == 'recall':
        # The quoted text and the query go; which messages were recalled (ids, scores) stays.
        recall = _recall_decoder.decode(payload)
        text = ERASED_TEXT.format(seq=erasure_seq)
        return encode_info(msgspec.structs.replace(recall, query=text, text=text))
    try:
        decoded = decode_messages([payload])
        original: ModelMessage | None = decoded[0] if len(decoded) == 1 else None
    except Exception:
        original = None
    return encode_message(placeholder_message(original, erasure_seq))


def placeholder_erasure(kind: str, payload: bytes) -> int | None:
    """The `erasure` entry's seq a canonical placeholder of `kind` names (0 for a `durable_step`'s,
    which names none); `None` when `payload` is anything else: the one placeholder `erase` writes
    for what it replaced, and nothing more, is what an erased slot may hold.

    The check is that the placeholder of `payload` is `payload` itself: erasing a placeholder
    again keeps its role, tool names and call ids and writes the same texts, so any other text,
    part or field makes them differ.
    """
    from eventlog.entries import decode_messages

    try:
        if kind == 'durable_step':
            step = msgspec.json.decode(payload, type=DurableStepInfo)
            return 0 if encode_info(DurableStepInfo(step=step.step, name=step.name)) == payload else None
        if kind == 'recall':
            recall = _recall_decoder.decode(payload)
            seq = _erasure_seq_of(recall.text)
            return seq if seq is not None and _placeholder_payload(kind, payload, seq) == payload else None
        if kind == 'compaction':
            summary = decode_messages([bytes(raw) for raw in _compaction_decoder.decode(payload).summary])
            named = {_metadata_seq(message) for message in summary}
        elif kind == 'message':
            named = {_metadata_seq(message) for message in decode_messages([payload])}
        else:
            return None
        if len(named) != 1:
            return None
        (seq,) = named
        if seq is None:
            return None
        return seq if _placeholder_payload(kind, payload, seq) == payload else None
    except Exception:  # not even decodable as its kind: not a placeholder
        return None


def shown_payload(kind: str, payload: bytes) -> bytes:
    """What a view shows for an erased entry holding `payload`: the payload itself when it is the
    canonical placeholder (`placeholder_erasure`), else the placeholder of whatever the slot holds,
    every text replaced, so that text written into an erased slot never shows as a message
    (`verify` names the slot: `erasure-altered`)."""
    if placeholder_erasure(kind, payload) is not None:
        return payload
    from eventlog.entries import encode_message

    try:
        return _placeholder_payload(kind, payload, 0)
    except Exception:  # not even decodable as its kind
        return encode_message(placeholder_message(None, 0))


def _metadata_seq(message: ModelMessage) -> int | None:
    value: object = (message.metadata or {}).get(ERASED_METADATA_KEY)
    return value if type(value) is int and value > 0 else None


_TEXT_HEAD, _TEXT_TAIL = ERASED_TEXT.split('{seq}')


def _erasure_seq_of(text: str) -> int | None:
    """The seq an `ERASED_TEXT` names, or `None` when `text` is not one."""
    middle = text.removeprefix(_TEXT_HEAD).removesuffix(_TEXT_TAIL)
    if len(middle) + len(_TEXT_HEAD) + len(_TEXT_TAIL) != len(text) or not middle.isascii() or not middle.isdigit():
        return None
    return int(middle)


def placeholder_message(original: ModelMessage | None, erasure_seq: int) -> ModelMessage:
    """The message an erased one replays as: the same role (request or response) and, for tool
    calls and returns, the same tool names and call ids (so a replayed history stays well formed),
    every text replaced by `ERASED_TEXT`, and `metadata` naming the `erasure` entry.

    With `original` unknown (`None`, or undecodable), a response holding only the text.
    """
    from pydantic_ai.messages import (
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    text = ERASED_TEXT.format(seq=erasure_seq)
    metadata: dict[str, Any] = {ERASED_METADATA_KEY: erasure_seq}
    if isinstance(original, ModelRequest):
        parts: list[ModelRequestPart] = []
        fallback = original.timestamp or _epoch()
        for part in original.parts:
            stamp = _timestamp_of(part, fallback)
            tool_name: object = getattr(part, 'tool_name', None)
            call_id: object = getattr(part, 'tool_call_id', None)
            if isinstance(tool_name, str) and isinstance(call_id, str):  # a tool's return (or retry)
                parts.append(ToolReturnPart(tool_name=tool_name, content=text, tool_call_id=call_id, timestamp=stamp))
            elif isinstance(part, SystemPromptPart):
                parts.append(SystemPromptPart(content=text, timestamp=stamp))
            else:
                parts.append(UserPromptPart(content=text, timestamp=stamp))
        if not parts:
            parts.append(UserPromptPart(content=text, timestamp=fallback))
        return ModelRequest(
            parts=parts,
            timestamp=original.timestamp,
            run_id=original.run_id,
            conversation_id=original.conversation_id,
            metadata=metadata,
        )
    response_parts: list[ModelResponsePart] = []
    if isinstance(original, ModelResponse):
        texts = False
        for part in original.parts:
            if isinstance(part, ToolCallPart):
                response_parts.append(ToolCallPart(tool_name=part.tool_name, args={}, tool_call_id=part.tool_call_id))
            elif not texts:
                response_parts.append(TextPart(content=text))
                texts = True
        if not response_parts:
            response_parts.append(TextPart(content=text))
        return ModelResponse(
            parts=response_parts,
            model_name=original.model_name,
            timestamp=original.timestamp,
            run_id=original.run_id,
            conversation_id=original.conversation_id,
            metadata=metadata,
        )
    return ModelResponse(parts=[TextPart(content=text)], timestamp=_epoch(), metadata=metadata)


def _timestamp_of(part: object, fallback: datetime) -> datetime:
    stamp: object = getattr(part, 'timestamp', None)
    return stamp if isinstance(stamp, datetime) else fallback


def _epoch() -> datetime:
    from datetime import UTC

    return datetime(1970, 1, 1, tzinfo=UTC)
