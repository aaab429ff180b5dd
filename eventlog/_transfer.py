"""Export and import as JSON Lines: a lossless, human-readable copy of entries.

The first line is a header naming the format; every other line is one entry with its
payload embedded as JSON (every payload the log accepts is JSON, or empty) and its
chain hash in hex. Importing re-checks each conversation's chain before writing, so an
edited export is refused instead of silently imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import IO

import msgspec

from eventlog import _engine as engine
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.entries import Entry, ForkInfo, NewEntry
from eventlog.errors import ConversationNotFound, InvalidArgumentError

FORMAT_NAME = 'pydantic-ai-eventlog'
EXPORT_VERSION = 1
"""The version of the JSON Lines layout (independent of the store's on-disk format)."""


class Header(msgspec.Struct, frozen=True):
    format: str
    version: int


class ExportedEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of an export."""

    seq: int
    conversation_id: str
    run_id: str | None = None
    kind: str
    timestamp: datetime
    parent: int | None = None
    idempotency_key: str | None = None
    inherited: bool = False
    payload: msgspec.Raw
    """The payload's JSON as stored; `null` for an empty payload."""
    hash: str


_encoder = msgspec.json.Encoder()
_header_decoder = msgspec.json.Decoder(Header)
_line_decoder = msgspec.json.Decoder(ExportedEntry)


def _closure(txn: ReadTxn, conversation_ids: list[str]) -> set[str]:
    """The conversations asked for plus every conversation their history reaches into."""
    wanted: set[str] = set()
    todo = list(conversation_ids)
    while todo:
        conv_id = todo.pop()
        if conv_id in wanted:
            continue
        conv = engine.get_conversation(txn, conv_id)
        if conv is None or conv.deleted:
            raise ConversationNotFound(f'no conversation {conv_id!r} in this log')
        wanted.add(conv_id)
        if conv.forked_from is not None:
            todo.append(conv.forked_from.conversation_id)
        for run in engine.list_runs(txn, conversation_id=conv_id):
            if run.branch_parent is not None:
                body = engine.get_entry(txn, run.branch_parent)
                if body is not None and body.conversation_id != conv_id:
                    todo.append(body.conversation_id)
    return wanted


def export_lines(txn: ReadTxn, conversation_ids: list[str] | None) -> Iterator[bytes]:
    """The export, one encoded line (with its newline) at a time."""
    wanted = None if conversation_ids is None else _closure(txn, conversation_ids)
    yield _encoder.encode(Header(FORMAT_NAME, EXPORT_VERSION)) + b'\n'
    for entry in engine.iter_entries(txn):
        if wanted is not None and entry.conversation_id not in wanted:
            continue
        yield _encoder.encode(_exported(entry)) + b'\n'


def _exported(entry: Entry) -> ExportedEntry:
    return ExportedEntry(
        seq=entry.seq,
        conversation_id=entry.conversation_id,
        run_id=entry.run_id,
        kind=entry.kind,
        timestamp=entry.timestamp,
        parent=entry.parent,
        idempotency_key=entry.idempotency_key,
        inherited=entry.inherited,
        payload=msgspec.Raw(entry.payload or b'null'),
        hash=entry.hash.hex(),
    )


def read_export(stream: IO[bytes]) -> list[ExportedEntry]:
    """Parse and check an export completely before anything is written."""
    first = stream.readline()
    try:
        header = _header_decoder.decode(first)
    except msgspec.DecodeError:
        raise InvalidArgumentError('not an eventlog export: the first line is not its header') from None
    if header.format != FORMAT_NAME:
        raise InvalidArgumentError(f'not an eventlog export (format {header.format!r})')
    if header.version > EXPORT_VERSION:
        raise InvalidArgumentError(
            f'the export is in format {header.version}; this version reads format {EXPORT_VERSION} at most'
        )
    lines: list[ExportedEntry] = []
    heads: dict[str, bytes] = {}
    last = 0
    for number, raw in enumerate(stream, start=2):
        if not raw.strip():
            continue
        try:
            line = _line_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise InvalidArgumentError(f'line {number} of the export is not a valid entry: {exc}') from None
        if line.seq <= last:
            raise InvalidArgumentError(f'line {number}: entries are out of order (seq {line.seq} after {last})')
        last = line.seq
        prev = b'' if line.kind == 'deleted' else heads.get(line.conversation_id, b'')
        body = engine.encode_body_of(line, payload_of(line))
        digest = engine.chain_hash(prev, body)
        if digest.hex() != line.hash:
            raise InvalidArgumentError(
                f'line {number} (seq {line.seq}, conversation {line.conversation_id!r}) fails its hash check: '
                'the export was altered or is missing entries'
            )
        heads[line.conversation_id] = digest
        lines.append(line)
    return lines


def import_lines(txn: WriteTxn, lines: list[ExportedEntry]) -> int:
    """Write checked export lines into the store; returns how many entries were written."""
    conversations = {line.conversation_id for line in lines}
    for conv_id in sorted(conversations):
        existing = engine.get_conversation(txn, conv_id)
        if existing is not None and not existing.deleted:
            raise InvalidArgumentError(f'conversation {conv_id!r} already exists in this log; nothing was imported')
    mapping: dict[int, int] = {}
    written = 0
    for line in lines:
        parent = None if line.parent is None else mapping.get(line.parent)
        if line.parent is not None and parent is None:
            existing_parent = engine.get_entry(txn, line.parent)
            parent = line.parent if existing_parent is not None else None
        new = NewEntry(
            conversation_id=line.conversation_id,
            run_id=line.run_id,
            kind=line.kind,
            payload=payload_of(line),
            parent=parent if line.kind in ('run_started', 'forked_from') else None,
            idempotency_key=line.idempotency_key,
            inherited=line.inherited,
            timestamp=line.timestamp,
            prevalidated=False,
        )
        if line.kind == 'forked_from' and parent is not None:
            new = _retarget_fork(new, parent)
        (seq,) = engine.append_entries(txn, [new], allow_internal=True, seq_hints=[line.seq])
        mapping[line.seq] = seq
        written += 1
    return written


def payload_of(line: ExportedEntry) -> bytes:
    """The stored payload bytes an export line carries."""
    raw = bytes(line.payload)
    return b'' if raw == b'null' else raw


def _retarget_fork(entry: NewEntry, parent: int) -> NewEntry:
    info = msgspec.json.decode(entry.payload, type=ForkInfo)
    payload = msgspec.json.encode(ForkInfo(conversation_id=info.conversation_id, seq=parent))
    return NewEntry(
        conversation_id=entry.conversation_id,
        kind=entry.kind,
        payload=payload,
        parent=parent,
        timestamp=entry.timestamp,
    )
