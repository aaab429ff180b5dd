"""The read model: entries, records and the histories derived from them, read in one snapshot.

Reading follows the keyspace (`_keys`): single entries and records by key, a conversation's
entries through BY_CONV, a run's over its stretch of ENTRIES, and a branch run by run back
to its root. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Final, cast

import msgspec
from msgspec.structs import astuple

from eventlog._keys import (
    META_LAST_SEQ,
    StoredBody,
    Table,
    by_conv_key,
    ck,
    conv_key,
    decode_body,
    decode_body_clipped,
    decode_conversation,
    decode_id,
    decode_run,
    entry_hash,
    is_erased_value,
    key_seq,
    run_key,
    seq_key,
)
from eventlog._storage import ReadTxn
from eventlog.entries import (
    CompactionInfo,
    ConversationRecord,
    Entry,
    RunRecord,
    decode_messages,
    fold_compaction,
)
from eventlog.errors import ConversationNotFound, CorruptEntryError, RunNotFound

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

_DENSE_SLACK: Final = 64
"""Foreign entries a run's stretch of the log may hold beyond its own before its entries are
looked up through the conversation index instead of read in order (see `_run_items`)."""

_compaction_decoder = msgspec.json.Decoder(CompactionInfo)


# --- single entries and records ---------------------------------------------------------------


def to_entry(body: StoredBody, value: bytes) -> Entry:
    """The `Entry` a stored body and its ENTRIES value make (an erased one's payload as `shown`)."""
    erased = is_erased_value(value)
    return Entry(*astuple(shown(body, value) if erased else body), hash=entry_hash(value), erased=erased)


def shown(body: StoredBody, value: bytes) -> StoredBody:
    """`body` as every read returns it: an erased entry's payload only as its placeholder, whatever
    its slot holds (`_erase.shown_payload`; `verify` reads the stored bytes and names the slot)."""
    if not is_erased_value(value):
        return body
    from eventlog._erase import shown_payload
    from eventlog.encryption import is_sealed

    if is_sealed(body.payload):  # read without its key: opened (and checked by its tag) when it is
        return body
    payload = shown_payload(body.kind, body.payload)
    return body if payload == body.payload else msgspec.structs.replace(body, payload=payload)


def get_entry(txn: ReadTxn, seq: int) -> Entry | None:
    """The entry at `seq`, or None (never assigned, or deleted)."""
    value = txn.get(Table.ENTRIES, seq_key(seq))
    if value is None:
        return None
    return to_entry(decode_body(seq, value), value)


def get_entry_head(txn: ReadTxn, seq: int, payload_limit: int) -> tuple[Entry, int] | None:
    """`get_entry` with the payload cut to its first `payload_limit` bytes, and its full size."""
    value = txn.get(Table.ENTRIES, seq_key(seq))
    if value is None:
        return None
    body, size = decode_body_clipped(seq, value, payload_limit)
    return to_entry(body, value), size


def get_body(txn: ReadTxn, seq: int) -> StoredBody | None:
    """The stored body at `seq` (an entry without its hash), or None."""
    value = txn.get(Table.ENTRIES, seq_key(seq))
    return None if value is None else shown(decode_body(seq, value), value)


def get_bodies(txn: ReadTxn, seqs: Sequence[int]) -> list[StoredBody | None]:
    """The stored bodies at `seqs`, in order (`None` for one absent), in one round trip where the
    store can read several keys at once (PostgreSQL's `get_many`)."""
    keys = [seq_key(seq) for seq in seqs]
    many = getattr(txn, 'get_many', None)
    values: list[bytes | None] = (
        many(Table.ENTRIES, keys) if many is not None else [txn.get(Table.ENTRIES, key) for key in keys]
    )
    return [
        None if value is None else shown(decode_body(seq, value), value)
        for seq, value in zip(seqs, values, strict=True)
    ]


def get_run(txn: ReadTxn, run_id: str) -> RunRecord | None:
    """A run's record, or None."""
    raw = txn.get(Table.RUNS, run_key(run_id))
    return None if raw is None else decode_run(run_id, raw)


def get_conversation(txn: ReadTxn, conversation_id: str) -> ConversationRecord | None:
    """A conversation's record (a deleted one's tombstone record too), or None."""
    raw = txn.get(Table.CONVS, conv_key(conversation_id))
    return None if raw is None else decode_conversation(conversation_id, raw)


def assigned_last_seq(txn: ReadTxn) -> int:
    """The largest `seq` ever handed out: `last_seq` on a store with one writer; on a store whose
    appends claim seqs from a counter (PostgreSQL), that counter, which can be past the last
    entry (seqs an append claimed and never committed) and past what followers see yet."""
    assigned = getattr(txn, 'assigned_last', None)
    if assigned is None:
        return last_seq(txn)
    return key_seq(cast('Callable[[], bytes]', assigned)())


def last_seq(txn: ReadTxn) -> int:
    """The largest `seq` ever assigned (entries removed by a delete keep their numbers used).

    A store whose transactions can name the last entry's key (`last_entry_key`: LMDB, where
    ENTRIES is a database of its own) derives it from that key and META `last_seq`, which it
    writes only before a deletion removes entries (`_admin.delete_conversation`), so an append
    dirties no META page; the larger of the two. Every other store records it in META with each
    write.
    """
    raw = txn.get(Table.META, META_LAST_SEQ)
    recorded = 0 if raw is None else key_seq(raw)
    tail = getattr(txn, 'last_entry_key', None)
    if tail is None:
        return recorded
    key = cast('Callable[[], bytes | None]', tail)()
    return recorded if key is None else max(recorded, key_seq(key))


def derives_last_seq(txn: ReadTxn) -> bool:
    """Whether `txn`'s store derives its last `seq` from its last entry (`last_seq`), recording
    it in META only before a deletion; otherwise every write transaction records it."""
    return getattr(txn, 'last_entry_key', None) is not None


def _log_order(txn: ReadTxn, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The log's entries from `start` on, as a follower reads them: a store whose writers commit
    concurrently (PostgreSQL) gives only its settled entries (`scan_settled`), so that one
    committed later is never passed over; elsewhere every entry."""
    settled = getattr(txn, 'scan_settled', None)
    if settled is None:
        return txn.scan(Table.ENTRIES, start=start)
    return cast('Callable[[bytes], Iterator[tuple[bytes, bytes]]]', settled)(start)


# --- entries of a run, a conversation, a branch -----------------------------------------------


def iter_entries(
    txn: ReadTxn,
    *,
    conversation_id: str | None = None,
    run_id: str | None = None,
    kinds: frozenset[str] | None = None,
    after_seq: int = 0,
) -> Iterator[Entry]:
    """Entries in `seq` order, filtered; the narrowest index is used."""
    for body, value, _ in _matching(txn, conversation_id, run_id, kinds, after_seq, None):
        yield to_entry(body, value)


def iter_entry_heads(
    txn: ReadTxn,
    *,
    conversation_id: str | None = None,
    run_id: str | None = None,
    kinds: frozenset[str] | None = None,
    after_seq: int = 0,
    payload_limit: int,
) -> Iterator[tuple[Entry, int]]:
    """`iter_entries`, each payload cut to its first `payload_limit` bytes, with its full size.
    A plain store's values may be views of its map: only the bytes kept are copied."""
    for body, value, size in _matching(txn, conversation_id, run_id, kinds, after_seq, payload_limit):
        yield to_entry(body, value), size


def _matching(
    txn: ReadTxn,
    conversation_id: str | None,
    run_id: str | None,
    kinds: frozenset[str] | None,
    after_seq: int,
    clip: int | None,
) -> Iterator[tuple[StoredBody, bytes, int]]:
    """The entries `iter_entries` gives, as bodies with their stored values and payload sizes:
    payloads cut to `clip` bytes, or whole when `clip` is `None` (the size then not told: -1)."""
    if run_id is not None:
        run = get_run(txn, run_id)
        if run is None or (conversation_id is not None and run.conversation_id != conversation_id):
            return
        for body, value, size in _run_items(txn, run, first=after_seq + 1, last=run.last_seq, clip=clip):
            if kinds is None or body.kind in kinds:
                yield body, value, size
        return
    # An encrypted store's transaction (`encryption.SealedTxn`) opens payloads as they are read:
    # entries are read raw here and only those of the wanted kinds opened.
    raw: ReadTxn = getattr(txn, 'raw', txn)
    opened: Callable[[bytes, bytes], bytes] | None = getattr(txn, 'open_value', None)
    if conversation_id is None:
        items: Iterator[tuple[bytes, bytes]] = _log_order(raw, seq_key(after_seq + 1))
    else:
        first = by_conv_key(conversation_id, after_seq + 1)
        seqs = (seq_key(key_seq(key)) for key, _ in raw.scan(Table.BY_CONV, prefix=ck(conversation_id), start=first))
        items = ((skey, value) for skey in seqs if (value := raw.get(Table.ENTRIES, skey)) is not None)
    for key, value in items:
        seq = key_seq(key)
        body, size = (decode_body(seq, value), -1) if clip is None else decode_body_clipped(seq, value, clip)
        if kinds is not None and body.kind not in kinds:
            continue
        if opened is not None:
            value = opened(key, value)
            body, size = (decode_body(seq, value), -1) if clip is None else decode_body_clipped(seq, value, clip)
        yield body, value, size


def _run_items(
    txn: ReadTxn, run: RunRecord, *, first: int, last: int, clip: int | None = None
) -> Iterator[tuple[StoredBody, bytes, int]]:
    """The run's entries with a `seq` from `first` to `last`, in order, with their stored values
    and payload sizes (as `_matching` gives them).

    A run's entries lie in its conversation between its `run_started` entry and its latest.
    When they make up most of that stretch of the log (the usual case: few runs interleave
    with it), the stretch is read in order; otherwise each entry is looked up through the
    conversation's index.
    """
    first = max(first, run.start_seq)
    last = min(last, run.last_seq)
    if run.last_seq - run.start_seq < 2 * run.entry_count + _DENSE_SLACK:
        items = txn.scan(Table.ENTRIES, start=seq_key(first))
    else:
        prefix, start = ck(run.conversation_id), by_conv_key(run.conversation_id, first)
        keys = (key_seq(k) for k, _ in txn.scan(Table.BY_CONV, prefix=prefix, start=start))
        items = ((seq_key(seq), value) for seq in keys if (value := txn.get(Table.ENTRIES, seq_key(seq))) is not None)
    for key, value in items:
        seq = key_seq(key)
        if seq > last:
            return
        body, size = (decode_body(seq, value), -1) if clip is None else decode_body_clipped(seq, value, clip)
        if body.run_id == run.run_id:
            yield shown(body, value), value, size


def _run_bodies(txn: ReadTxn, run: RunRecord, upto: int) -> list[StoredBody]:
    """The run's entries up to `seq` `upto`, in order."""
    return [body for body, _, _ in _run_items(txn, run, first=run.start_seq, last=upto)]


def run_bodies(txn: ReadTxn, run: RunRecord) -> list[StoredBody]:
    """Every entry of `run`, in order (an erased one as its placeholder)."""
    return _run_bodies(txn, run, run.last_seq)


def branch_bodies(txn: ReadTxn, tip: int | None) -> list[StoredBody]:
    """Every entry on the branch that ends at `tip`, oldest first.

    A branch is followed run by run: the entries of the tip's run up to the tip, then
    the branch the run continued from (its `run_started` parent), and so on.
    """
    segments: list[list[StoredBody]] = []
    point = tip
    while point is not None:
        body = get_body(txn, point)
        if body is None:
            break  # the rest of the branch was deleted with its conversation
        if body.run_id is not None:
            run = get_run(txn, body.run_id)
            if run is None:
                break
            segments.append(_run_bodies(txn, run, point))
            nxt = run.branch_parent
        else:
            segments.append([body])
            nxt = body.parent
        if nxt is not None and nxt >= point:
            raise CorruptEntryError(f'entry {point} points forward to {nxt}')
        point = nxt
    out: list[StoredBody] = []
    for segment in reversed(segments):
        out.extend(segment)
    return out


def run_message_payloads(txn: ReadTxn, run_id: str) -> list[bytes]:
    """The run's full record: what it inherited, then what it added."""
    run = get_run(txn, run_id)
    if run is None:
        raise RunNotFound(f'no run {run_id!r} in this log')
    return [b.payload for b in branch_bodies(txn, run.last_seq) if b.kind == 'message']


def conv_or_raise(txn: ReadTxn, conversation_id: str) -> ConversationRecord:
    conv = get_conversation(txn, conversation_id)
    if conv is None or conv.deleted:
        raise ConversationNotFound(f'no conversation {conversation_id!r} in this log')
    return conv


def _inherited_prefix(txn: ReadTxn, conversation_id: str) -> list[StoredBody]:
    """Entries the conversation's history starts from that live in another conversation:
    the fork point's branch for a fork, else the branch its first run continued from."""
    conv = get_conversation(txn, conversation_id)
    if conv is not None and conv.forked_from is not None:
        return branch_bodies(txn, conv.forked_from.seq)
    first = next(txn.scan(Table.CONV_RUNS, prefix=ck(conversation_id)), None)
    if first is not None:
        run = get_run(txn, decode_id(first[1], 'the run id'))
        if run is not None and run.branch_parent is not None:
            parent = get_body(txn, run.branch_parent)
            if parent is not None and parent.conversation_id != conversation_id:
                return branch_bodies(txn, run.branch_parent)
    return []


def transcript_payloads(txn: ReadTxn, conversation_id: str) -> list[bytes]:
    """Every original message of the conversation once, in order (inherited history first)."""
    conv_or_raise(txn, conversation_id)
    out = [b.payload for b in _inherited_prefix(txn, conversation_id) if b.kind == 'message']
    out.extend(e.payload for e in iter_entries(txn, conversation_id=conversation_id, kinds=frozenset({'message'})))
    return out


def is_nested(txn: ReadTxn, run: RunRecord) -> bool:
    """Whether `run` was started inside another run of its own conversation (a sub-agent that
    records with its parent's conversation id). A run whose parent run is in another conversation,
    or no longer in the log, is not: it is its own conversation's main line."""
    if run.parent_run_id is None:
        return False
    parent = get_run(txn, run.parent_run_id)
    return parent is not None and parent.conversation_id == run.conversation_id


def latest_main_run(txn: ReadTxn, conversation_id: str) -> RunRecord | None:
    """The conversation's latest run not nested in another of its runs (`is_nested`), or `None`."""
    for _, raw in txn.scan(Table.CONV_RUNS, prefix=ck(conversation_id), reverse=True):
        run = get_run(txn, decode_id(raw, 'the run id'))
        if run is None:
            return None  # a damaged index: `verify` names it
        if not is_nested(txn, run):
            return run
    return None


def context_tip(txn: ReadTxn, conversation_id: str) -> int | None:
    """Where the conversation's context ends: the last entry of its latest run that is not a
    nested (sub-agent) run, else its fork point; `None` for a conversation without either, one
    the log does not hold or one deleted."""
    conv = get_conversation(txn, conversation_id)
    if conv is None or conv.deleted:
        return None
    run = latest_main_run(txn, conversation_id)
    if run is not None:
        return run.last_seq
    if conv.forked_from is not None:
        return conv.forked_from.seq
    return None


def fold_context(bodies: Sequence[StoredBody]) -> list[bytes]:
    """Message payloads of a branch with each compaction's summary in place of what it replaced."""
    live: list[tuple[int, list[bytes]]] = []
    for body in bodies:
        if body.kind == 'message':
            live.append((body.seq, [body.payload]))
        elif body.kind == 'compaction':
            info: CompactionInfo = _compaction_decoder.decode(body.payload)
            live = fold_compaction(live, info, [(body.seq, [bytes(raw) for raw in info.summary])], _anchor)
    return [payload for _, payloads in live for payload in payloads]


def _anchor(item: tuple[int, list[bytes]]) -> int:
    return item[0]


def context_payloads(txn: ReadTxn, conversation_id: str) -> list[bytes]:
    """What an agent continuing the conversation would start from (none for an unknown one)."""
    return fold_context(branch_bodies(txn, context_tip(txn, conversation_id)))


def list_runs(
    txn: ReadTxn, *, conversation_id: str | None = None, parent_run_id: str | None = None, status: str | None = None
) -> list[RunRecord]:
    if conversation_id is not None:
        items = txn.scan(Table.CONV_RUNS, prefix=ck(conversation_id))
    else:
        items = txn.scan(Table.RUN_ORDER)
    out: list[RunRecord] = []
    for _, run_id in items:
        run = get_run(txn, decode_id(run_id, 'the run id'))
        if run is None:
            continue
        if parent_run_id is not None and run.parent_run_id != parent_run_id:
            continue
        if status is not None and run.status != status:
            continue
        out.append(run)
    return out


def list_conversations(txn: ReadTxn, *, include_archived: bool = False) -> list[ConversationRecord]:
    out = [decode_conversation(decode_id(key, 'the conversation key'), raw) for key, raw in txn.scan(Table.CONVS)]
    out = [c for c in out if not c.deleted and (include_archived or not c.archived)]
    out.sort(key=lambda c: c.first_seq)
    return out


def decode_payloads(payloads: Sequence[bytes]) -> list[ModelMessage]:
    """Decode message payloads in one pydantic-ai call."""
    return decode_messages(payloads)


def join_payloads(payloads: Sequence[bytes]) -> bytes:
    """Message payloads as the JSON `ModelMessagesTypeAdapter.dump_json` gives for the list."""
    return b'[' + b','.join(payloads) + b']'
