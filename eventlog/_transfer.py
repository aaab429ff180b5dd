"""Export and import as JSON Lines: a lossless, human-readable copy of entries.

The first line is a header naming the format and its version; every other line but the
last is one entry with its payload embedded as JSON (every payload the log accepts is JSON,
or empty; an encrypted store's sealed payloads are carried as `"sealed:<base64>"` strings, checked
but never imported) and its chain hash in hex; the last line closes the export with the number of
entries and the last hash of each conversation, so an export cut short is refused instead
of imported as a shorter log. Importing re-checks each conversation's chain while it reads,
so an edited export is refused too. docs/transfer.md describes the format and the rules.
"""

from __future__ import annotations

import base64
import bisect
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Final

import msgspec

from eventlog._append import append_entries
from eventlog._checks import check_id
from eventlog._erase import placeholder_erasure
from eventlog._files import open_export_file
from eventlog._keys import (
    Table,
    append_hash,
    chain_from,
    chain_hash,
    encode_body_of,
    erased_digest,
    rule_2_hash,
    rule_of,
    seq_key,
)
from eventlog._read import get_conversation, get_entry, iter_entries, list_runs
from eventlog._storage import ReadTxn, WriteTxn
from eventlog.encryption import check_sealed, is_sealed, read_store_id, seal_problem
from eventlog.entries import (
    CompactionInfo,
    Entry,
    ErasureInfo,
    ForkInfo,
    Kind,
    NewEntry,
    SavedInfo,
    StoreLink,
    encode_info,
)
from eventlog.errors import ConversationNotFound, InvalidArgumentError

FORMAT_NAME: Final = 'pydantic-ai-eventlog'
EXPORT_VERSION: Final = 3
"""The version of the JSON Lines layout this code writes (independent of the store's on-disk format).

Version 2 added the closing line and the `detached` mark; version 3 the header's `chain_from` and
an erased line's `digest` (chain rule 2, `_keys.link`); version 1 (no closing line) is read only
when the caller asks for it (`allow_version_1`)."""
READ_VERSIONS: Final = (1, 2, 3)
"""Every export version this code reads."""

IMPORT_MAX_SEQ: Final = 2**48
"""The largest `seq` (or `parent`) an import accepts.

An import keeps the `seq`s of its entries when the store has not reached them, so a crafted
export could otherwise move the store's next `seq` next to `MAX_SEQ` and leave it unable to
take more appends. At 2**48 the store keeps 2**53 - 2**48 (over 8.7e15) `seq`s of room: over
270 years of a million appends a second. Real stores are nowhere near 2**48 (2.8e14) entries."""

BRANCHING_KINDS: Final[frozenset[Kind]] = frozenset({'run_started', 'forked_from'})
"""Kinds whose `parent` is a branch point (a run's) or a fork point, possibly in another
conversation: an import maps it to the `seq` that entry got here, or drops it when the export
marks it `detached`."""

_BATCH_ENTRIES: Final = 512
_BATCH_BYTES: Final = 8 << 20
"""An import hands entries to the engine in batches of at most this many entries or payload
bytes, so memory stays bounded whatever the export's size."""


class Header(msgspec.Struct, frozen=True, omit_defaults=True):
    """The first line of an export."""

    format: str
    version: int
    chain_from: int | None = None
    """The source store's first `seq` chained by rule 2 (`_keys.link`; version 3); before it, and
    in older versions, every line is chained by rule 1."""


class ExportedEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry line of an export."""

    seq: int
    conversation_id: str
    run_id: str | None = None
    kind: Kind
    timestamp: datetime
    parent: int | None = None
    idempotency_key: str | None = None
    inherited: bool = False
    payload: msgspec.Raw
    """The payload's JSON as stored; `null` for an empty payload."""
    hash: str
    detached: bool = False
    """The entry's `parent` (a run's branch point or a fork point) is not in the export because
    the source store no longer held it (its conversation was deleted); an import drops it."""
    erased: bool = False
    """The entry's content was erased in the source store (`payload` is its placeholder); an
    import refuses it."""
    digest: str | None = None
    """An erased entry of chain rule 2: the SHA-256 (hex) of its original body, from which its
    `hash` is checked (one of rule 1 has none: its `hash` is taken as given)."""


class Closing(msgspec.Struct, frozen=True, kw_only=True, tag_field='type', tag='closing'):
    """The last line of an export (version 2): what a reader must have read to have it all."""

    entries: int
    """How many entry lines the export holds."""
    heads: dict[str, str]
    """The hash (hex) of the last entry of each conversation in the export."""


_encoder = msgspec.json.Encoder()
_header_decoder = msgspec.json.Decoder(Header)
_line_decoder = msgspec.json.Decoder(ExportedEntry)
_closing_decoder = msgspec.json.Decoder(Closing)
_erasure_decoder = msgspec.json.Decoder(ErasureInfo)
_TRAILER_STARTS: Final = (b'{"type":"checkpoint"', b'{"type":"signed"')
"""How the lines a signed export adds after its closing line begin (`eventlog.checkpoint.TRAILER_TYPES`)."""


# --- export -----------------------------------------------------------------------------------


def _closure(txn: ReadTxn, conversation_ids: list[str]) -> set[str]:
    """The conversations asked for plus every conversation their history reaches into."""
    wanted: set[str] = set()
    todo = list(conversation_ids)
    asked = set(conversation_ids)
    while todo:
        conv_id = todo.pop()
        if conv_id in wanted:
            continue
        conv = get_conversation(txn, conv_id)
        if conv is None or conv.deleted:
            if conv_id not in asked:
                continue  # history deleted in this store: its references are exported as detached
            raise ConversationNotFound(f'no conversation {conv_id!r} in this log')
        wanted.add(conv_id)
        if conv.forked_from is not None:
            todo.append(conv.forked_from.conversation_id)
        for run in list_runs(txn, conversation_id=conv_id):
            if run.branch_parent is not None:
                body = get_entry(txn, run.branch_parent)
                if body is not None and body.conversation_id != conv_id:
                    todo.append(body.conversation_id)
    return wanted


def export_lines(txn: ReadTxn, conversation_ids: list[str] | None) -> Iterator[bytes]:
    """The export as encoded lines (with their newlines): the header, each entry, the closing line.

    The closing line comes in one chunk with the last entry's line (with the header's when
    there are no entries), so the number of chunks after the first is the number of entries.
    """
    wanted = None if conversation_ids is None else _closure(txn, conversation_ids)
    encrypted = read_store_id(txn) is not None
    pending = _encoder.encode(Header(FORMAT_NAME, EXPORT_VERSION, chain_from(txn))) + b'\n'
    heads: dict[str, str] = {}
    count = 0
    for entry in iter_entries(txn):
        if wanted is not None and entry.conversation_id not in wanted:
            continue
        if encrypted:  # an unsealed content entry is never exported as if it were genuine
            check_sealed(entry.seq, entry.conversation_id, entry.kind, entry.payload)
        yield pending
        line = _exported(entry, detached=_is_detached(txn, entry, wanted), digest=_erased_digest(txn, entry))
        heads[entry.conversation_id] = line.hash
        count += 1
        pending = _encoder.encode(line) + b'\n'
    yield pending + _encoder.encode(Closing(entries=count, heads=heads)) + b'\n'


def _is_detached(txn: ReadTxn, entry: Entry, wanted: set[str] | None) -> bool:
    """Whether the entry's branch point or fork point is missing from the export."""
    if entry.parent is None or entry.kind not in BRANCHING_KINDS:
        return False
    held = get_entry(txn, entry.parent)
    return held is None or (wanted is not None and held.conversation_id not in wanted)


def _erased_digest(txn: ReadTxn, entry: Entry) -> str | None:
    """The digest an erased entry keeps (rule 2), in hex; `None` for any other entry."""
    if not entry.erased:
        return None
    value = txn.get(Table.ENTRIES, seq_key(entry.seq))
    digest = None if value is None else erased_digest(value)
    return None if digest is None else digest.hex()


def _exported(entry: Entry, *, detached: bool, digest: str | None = None) -> ExportedEntry:
    return ExportedEntry(
        seq=entry.seq,
        conversation_id=entry.conversation_id,
        run_id=entry.run_id,
        kind=entry.kind,
        timestamp=entry.timestamp,
        parent=entry.parent,
        idempotency_key=entry.idempotency_key,
        inherited=entry.inherited,
        payload=msgspec.Raw(_exported_payload(entry.payload)),
        hash=entry.hash.hex(),
        detached=detached,
        erased=entry.erased,
        digest=digest,
    )


# --- reading ----------------------------------------------------------------------------------


class RestartableLines:
    """The lines of a byte stream, readable from the start again as often as needed.

    An import reads its source inside a write transaction that the LMDB backend runs again
    from the start when the store's map had to grow, so the source must be readable twice.
    A seekable stream is sought back to where it started; any other stream (a pipe, stdin) is
    copied to a temporary file as it is read, and later passes read that copy first. Only one
    line is held in memory at a time.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        """Wrap `stream`, positioned at the export's first byte."""
        self._stream = stream
        self._start: int | None = None
        try:
            if stream.seekable():
                self._start = stream.tell()
        except (AttributeError, OSError, ValueError):
            self._start = None
        self._spool: IO[bytes] | None = None
        self._spooled = 0

    def __iter__(self) -> Iterator[bytes]:
        """Every line from the start of the export."""
        stream = self._stream
        if self._start is not None:
            stream.seek(self._start)
            yield from iter(stream.readline, b'')
            return
        if self._spool is None:
            self._spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
        spool = self._spool
        spool.seek(0)
        done = 0
        while done < self._spooled:
            line = spool.readline()
            if not line:  # pragma: no cover - the copy is never shorter than what was counted
                break
            done += len(line)
            yield line
        spool.seek(self._spooled)
        for line in iter(stream.readline, b''):
            spool.write(line)
            self._spooled += len(line)
            yield line

    def close(self) -> None:
        """Remove the temporary copy, if one was made (the stream itself stays open)."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None
            self._spooled = 0


def _line_hash(prev: bytes, line: ExportedEntry, rule: int) -> bytes:
    """The hash an export line must carry after `prev` under chain `rule` (`_keys.link`); empty
    when it cannot be computed (an erased line of rule 2 without its digest, bad hex)."""
    try:
        if line.erased and rule == 1:  # the content is gone: the hash is taken as given (docs/erasure.md)
            return bytes.fromhex(line.hash)
        if line.erased:
            return b'' if line.digest is None else rule_2_hash(prev, bytes.fromhex(line.digest))
    except ValueError:
        return b''
    body = encode_body_of(line, payload_of(line))
    return chain_hash(prev, body) if rule == 1 else append_hash(prev, body)


def read_export(
    lines: Iterable[bytes],
    *,
    allow_version_1: bool = False,
    trailer: list[bytes] | None = None,
    header_out: list[Header] | None = None,
) -> Iterator[tuple[int, ExportedEntry]]:
    """Parse and check an export line by line; yield `(line number, entry)` for each entry.

    Each entry is checked (its bounds, its place in the order, its hash chain) before it is
    yielded, and the closing line is checked against everything read before the generator
    finishes; any problem raises `InvalidArgumentError`, so a caller writing inside one
    transaction aborts it and nothing is imported. The checkpoint and signature lines a signed
    export adds after its closing line (`eventlog.checkpoint`) are accepted and, when `trailer`
    is a list, appended to it; an import ignores them. `header_out`, a list, receives the header.
    """
    it = iter(lines)
    first = next(it, b'')
    try:
        header = _header_decoder.decode(first)
    except msgspec.DecodeError:
        raise InvalidArgumentError('not an eventlog export: the first line is not its header') from None
    if header.format != FORMAT_NAME:
        raise InvalidArgumentError(f'not an eventlog export (format {header.format!r})')
    if header_out is not None:
        header_out.append(header)
    if header.version not in READ_VERSIONS:
        raise InvalidArgumentError(
            f'the export says it is in format {header.version}, which this version does not know; '
            f'it reads formats {", ".join(map(str, READ_VERSIONS))}'
        )
    if header.version == 1 and not allow_version_1:
        raise InvalidArgumentError(
            'the export is in format 1, which has no closing line, so a copy cut short cannot be told '
            'from a whole one; export the store again with this version, or import it with '
            'allow_version_1=True (eventlog import --allow-version-1) if you know the file is complete'
        )
    heads: dict[str, bytes] = {}
    last = 0
    count = 0
    closing: Closing | None = None
    sealed = False
    """Whether a line carries a sealed payload: the export is an encrypted store's."""
    in_clear: tuple[int, ExportedEntry] | None = None
    """The first line whose content is in clear (breaking the sealing rule of an encrypted store)."""
    erased = _ErasedLines()
    for number, raw in enumerate(it, start=2):
        if not raw.strip():
            continue
        if closing is not None:
            if raw.startswith(_TRAILER_STARTS):
                if trailer is not None:
                    trailer.append(raw)
                continue
            raise InvalidArgumentError(f'line {number} of the export follows its closing line')
        try:
            line = _line_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            if header.version >= 2:
                try:
                    closing = _closing_decoder.decode(raw)
                except msgspec.DecodeError:
                    pass
                else:
                    continue
            raise InvalidArgumentError(f'line {number} of the export is not a valid entry: {exc}') from None
        _check_line(number, line, last)
        last = line.seq
        prev = b'' if line.kind == 'deleted' else heads.get(line.conversation_id, b'')
        digest = _line_hash(prev, line, rule_of(line.seq, header.chain_from))
        if digest.hex() != line.hash or len(digest) != 32:
            raise InvalidArgumentError(
                f'line {number} (seq {line.seq}, conversation {line.conversation_id!r}) fails its hash check: '
                'the export was altered or is missing entries'
            )
        erased.check(number, line)
        heads[line.conversation_id] = digest
        count += 1
        payload = payload_of(line)
        sealed = sealed or is_sealed(payload)
        if in_clear is None and seal_problem(True, line.kind, payload) is not None:
            in_clear = (number, line)
        yield number, line
    erased.finish()
    if sealed and in_clear is not None:
        number, line = in_clear
        raise InvalidArgumentError(
            f'line {number} (seq {line.seq}) holds {line.kind} content in clear in an export of an encrypted '
            'store, where every content payload is sealed: the export was altered; nothing was imported'
        )
    if header.version == 1:
        return
    if closing is None:
        raise InvalidArgumentError(
            f'the export ends after {count} entries without its closing line: it was cut short; nothing was imported'
        )
    if closing.entries != count or closing.heads != {conv: digest.hex() for conv, digest in heads.items()}:
        raise InvalidArgumentError(
            f'the closing line of the export (for {closing.entries} entries) does not match the {count} '
            'entries read: entries are missing or were added; nothing was imported'
        )


class _ErasedLines:
    """The erased lines of an export, each checked to hold its placeholder and to be recorded by an
    `erasure` line of its conversation, as `verify` checks a store's (`_erase.placeholder_erasure`)."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[str, int]] = {}
        """Erased lines not yet recorded: seq -> (conversation, the erasure its placeholder names)."""

    def check(self, number: int, line: ExportedEntry) -> None:
        """One entry line, in order; `InvalidArgumentError` when it breaks the rule."""
        if line.erased:
            payload = payload_of(line)
            named = 0 if is_sealed(payload) else placeholder_erasure(line.kind, payload)
            if named is None:
                raise InvalidArgumentError(
                    f'line {number} (seq {line.seq}) is marked erased but holds something other than its '
                    'placeholder: the export was altered'
                )
            self.pending[line.seq] = (line.conversation_id, named)
        elif line.kind == 'erasure':
            try:
                info = _erasure_decoder.decode(payload_of(line))
            except msgspec.DecodeError as exc:
                raise InvalidArgumentError(f'line {number}: the erasure payload cannot be decoded ({exc})') from None
            for seq in info.seqs:
                found = self.pending.pop(seq, None)
                if found is not None and (found[0] != line.conversation_id or found[1] not in (0, line.seq)):
                    raise InvalidArgumentError(
                        f'line {number} (seq {line.seq}) records entry {seq} as erased, but that entry holds '
                        'the placeholder of another erasure: the export was altered'
                    )

    def finish(self) -> None:
        """After the last entry line: every erased line was recorded."""
        if self.pending:
            seq = min(self.pending)
            raise InvalidArgumentError(
                f'entry {seq} is marked erased but no erasure entry of its conversation records it: '
                'the export was altered'
            )


def _check_line(number: int, line: ExportedEntry, last: int) -> None:
    if not 1 <= line.seq <= IMPORT_MAX_SEQ:
        raise InvalidArgumentError(
            f'line {number}: seq {line.seq} is outside 1..{IMPORT_MAX_SEQ}, which imports accept'
        )
    if line.parent is not None and not 1 <= line.parent <= IMPORT_MAX_SEQ:
        raise InvalidArgumentError(
            f'line {number}: parent {line.parent} is outside 1..{IMPORT_MAX_SEQ}, which imports accept'
        )
    if line.seq <= last:
        raise InvalidArgumentError(f'line {number}: entries are out of order (seq {line.seq} after {last})')


_SEALED_PREFIX: Final = b'"sealed:'
"""How an export line carries a sealed payload (an encrypted store's, which is not JSON): a JSON
string of this prefix and the payload's base64."""


def _exported_payload(payload: bytes) -> bytes:
    if is_sealed(payload):
        return _SEALED_PREFIX + base64.b64encode(payload) + b'"'
    return payload or b'null'


def payload_of(line: ExportedEntry) -> bytes:
    """The stored payload bytes an export line carries."""
    raw = bytes(line.payload)
    if raw.startswith(_SEALED_PREFIX) and raw.endswith(b'"'):
        try:
            return base64.b64decode(raw[len(_SEALED_PREFIX) : -1], validate=True)
        except ValueError:
            return raw
    return b'' if raw == b'null' else raw


# --- importing --------------------------------------------------------------------------------


class _SeqMap:
    """The `seq` each imported line got, by the `seq` it had in the export (16 bytes an entry)."""

    def __init__(self) -> None:
        self.old: array[int] = array('Q')
        self.new: array[int] = array('Q')

    def add(self, old: int, new: int) -> None:
        self.old.append(old)
        self.new.append(new)

    def get(self, old: int) -> int | None:
        index = bisect.bisect_left(self.old, old)
        if index < len(self.old) and self.old[index] == old:
            return self.new[index]
        return None


def import_lines(txn: WriteTxn, lines: Iterable[tuple[int, ExportedEntry]]) -> int:
    """Write checked export lines into the store; return how many entries were written.

    A `run_started` or `forked_from` entry's parent must be an entry imported before it from
    the same export: it is never looked up among the store's own entries, so an export cannot
    graft another conversation's history into the ones it brings. A parent the export marks
    `detached` (deleted in the source) is dropped: the run, or the fork, starts with no history,
    as its source replayed it.
    """
    seen: set[str] = set()
    mapping = _SeqMap()
    pending: list[tuple[int, NewEntry]] = []
    pending_bytes = 0
    written = 0

    def flush() -> None:
        nonlocal pending_bytes, written
        if not pending:
            return
        hints = [old for old, _ in pending]
        seqs = append_entries(txn, [new for _, new in pending], allow_internal=True, seq_hints=hints)
        for old, new_seq in zip(hints, seqs, strict=True):
            if mapping.old and new_seq <= mapping.new[-1]:
                raise InvalidArgumentError(f'the entry with seq {old} repeats an idempotency key of its run')
            mapping.add(old, new_seq)
        written += len(pending)
        pending.clear()
        pending_bytes = 0

    for number, line in lines:
        conv_id = line.conversation_id
        if line.erased or line.kind == 'erasure':
            what = 'was erased' if line.erased else 'records an erasure'
            raise InvalidArgumentError(
                f'line {number} (seq {line.seq}) {what} in the source store: an export holding erasures '
                'can be checked but not imported (erased hashes cannot be recomputed here); nothing was imported'
            )
        if line.kind == 'shred' or is_sealed(payload_of(line)):
            raise InvalidArgumentError(
                f'line {number} (seq {line.seq}) holds a sealed payload: an export of an encrypted store can be '
                'checked but not imported (its payloads open only in their own store); nothing was imported'
            )
        if conv_id not in seen:
            check_id(conv_id, f'line {number}: conversation_id')
            existing = get_conversation(txn, conv_id)
            if existing is not None and not existing.deleted:
                raise InvalidArgumentError(f'conversation {conv_id!r} already exists in this log; nothing was imported')
            seen.add(conv_id)
        parent: int | None = None
        payload = payload_of(line)
        if line.kind in BRANCHING_KINDS and line.parent is not None:
            flush()  # the parent may be in the batch not yet written
            parent = _resolve_parent(number, line, mapping)
            if line.kind == 'forked_from' and parent is not None:
                payload = _retarget_fork(number, line, parent, seen)
        elif line.kind == 'compaction':
            flush()
            payload = _retarget_compaction(number, payload, mapping)
        elif line.kind == 'saved':
            flush()
            payload = _retarget_saved(number, line, payload, mapping)
        pending.append(
            (
                line.seq,
                NewEntry(
                    conversation_id=conv_id,
                    run_id=line.run_id,
                    kind=line.kind,
                    payload=payload,
                    parent=parent,
                    idempotency_key=line.idempotency_key,
                    inherited=line.inherited,
                    timestamp=line.timestamp,
                ),
            )
        )
        pending_bytes += len(payload)
        if len(pending) >= _BATCH_ENTRIES or pending_bytes >= _BATCH_BYTES:
            flush()
    flush()
    return written


def _resolve_parent(number: int, line: ExportedEntry, mapping: _SeqMap) -> int | None:
    assert line.parent is not None
    parent = mapping.get(line.parent)
    if parent is not None:
        if line.detached:
            raise InvalidArgumentError(f'line {number}: marked detached, yet its parent {line.parent} is in the export')
        return parent
    if line.detached:
        return None
    raise InvalidArgumentError(
        f'line {number} (seq {line.seq}, conversation {line.conversation_id!r}) continues from entry '
        f'{line.parent}, which the export does not carry; an import may only reference its own entries'
    )


def _retarget_fork(number: int, line: ExportedEntry, parent: int, imported: set[str]) -> bytes:
    """The `forked_from` payload pointing at the fork point's `seq` in this store."""
    try:
        info = msgspec.json.decode(payload_of(line), type=ForkInfo)
    except msgspec.DecodeError as exc:
        raise InvalidArgumentError(f'line {number}: the forked_from payload is not valid: {exc}') from None
    if info.conversation_id not in imported:
        raise InvalidArgumentError(
            f'line {number}: conversation {line.conversation_id!r} is a fork of {info.conversation_id!r}, '
            'which the export does not carry; an import may only reference its own entries'
        )
    return msgspec.json.encode(ForkInfo(conversation_id=info.conversation_id, seq=parent))


def _retarget_compaction(number: int, payload: bytes, mapping: _SeqMap) -> bytes:
    """The `compaction` payload naming the replaced entries by their `seq`s in this store.

    A replaced `seq` the export does not carry (deleted in the source) cannot be on the
    branch in this store either, so it is left out rather than matched against whatever
    entry holds that number here.
    """
    try:
        info = msgspec.json.decode(payload, type=CompactionInfo)
    except msgspec.DecodeError as exc:
        raise InvalidArgumentError(f'line {number}: the compaction payload is not valid: {exc}') from None
    replaced = [new for old in info.replaced if (new := mapping.get(old)) is not None]
    if replaced == info.replaced:
        return payload
    return msgspec.json.encode(CompactionInfo(replaced=replaced, summary=info.summary))


def _retarget_saved(number: int, line: ExportedEntry, payload: bytes, mapping: _SeqMap) -> bytes:
    """The `saved` payload linking each store entry to its message's `seq` in this store; every
    message it links must be an entry of the export."""
    try:
        info = msgspec.json.decode(payload, type=SavedInfo)
    except msgspec.DecodeError as exc:
        raise InvalidArgumentError(f'line {number}: the saved payload is not valid: {exc}') from None
    links: list[StoreLink] = []
    for link in info.links:
        seq = mapping.get(link.seq)
        if seq is None:
            raise InvalidArgumentError(
                f'line {number} (seq {line.seq}, conversation {line.conversation_id!r}) links store entry '
                f'{link.id!r} to entry {link.seq}, which the export does not carry; an import may only '
                'reference its own entries'
            )
        links.append(StoreLink(link.id, link.parent, seq))
    if links == info.links:
        return payload
    return encode_info(msgspec.structs.replace(info, links=links))


def import_from(
    write: Callable[[Callable[[WriteTxn], int]], int],
    source: str | Path | IO[bytes],
    *,
    allow_version_1: bool = False,
) -> int:
    """Read the export at `source` (a path or a binary stream) and write it with `write`, which
    runs a function in one write transaction and may run it again from the start."""

    def run(stream: IO[bytes]) -> int:
        lines = RestartableLines(stream)
        try:
            return write(lambda txn: import_lines(txn, read_export(lines, allow_version_1=allow_version_1)))
        finally:
            lines.close()

    if isinstance(source, (str, Path)):
        with open_export_file(source) as fh:
            return run(fh)
    return run(source)
