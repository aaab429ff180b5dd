"""`verify`: check a store's entries and everything derived from them.

Two checks run in one pass over the entries:

- the hash chains: each conversation's entries chain by SHA-256, so an altered, reordered
  or removed entry is named by the first bad `seq` of its conversation;
- the derived records and indexes (docs/invariants.md, invariant 6: everything derived
  from the entries can be rebuilt from them): the run and conversation records, BY_CONV,
  RUN_ORDER, CONV_RUNS, IDEM and META's last `seq` are rebuilt in memory from the entries
  alone, the way the append path builds them, and compared with what the store holds.
  Replay, listings and search read these, so a store whose replay would differ from its
  entries never verifies.

Findings carry a `code` (see docs/verify.md). A conversation whose chain is broken gets
one finding, the first bad entry; differences in its derived records follow from that
and are not listed again.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, cast

import msgspec

from eventlog._admin import check_format, scrub_pending
from eventlog._erase import placeholder_erasure
from eventlog._keys import (
    HASH_SIZE,
    META_LAST_SEQ,
    SEQ_SIZE,
    StoredBody,
    Table,
    by_conv_conversation,
    by_conv_key,
    by_conv_keys,
    chain_from,
    ck,
    conv_idem_prefix,
    conv_runs_key,
    decode_body,
    decode_body_clipped,
    decode_conversation,
    decode_id,
    decode_run,
    entry_hash,
    entry_key_of,
    idem_conversation,
    idem_key_of,
    idem_run_start,
    is_erased_value,
    key_conversation,
    key_seq,
    link,
    rule_of,
    run_idem_prefix,
    run_key,
    seq_key,
)
from eventlog._read import derives_last_seq
from eventlog._storage import MemoryTables, MemoryTxn, ReadTxn
from eventlog._store_index import apply_saved, forget_conversation
from eventlog.encryption import META_ENCRYPTION, SEAL_MARK_SIZE, is_sealed, seal_problem
from eventlog.entries import (
    CompactionInfo,
    ConversationRecord,
    ErasureInfo,
    ForkInfo,
    Kind,
    RecallInfo,
    RunFinishedInfo,
    RunRecord,
    RunStartedInfo,
    SavedInfo,
    TitleInfo,
    VerifyProblem,
    VerifyReport,
)
from eventlog.errors import CorruptEntryError, CorruptStoreError, InvalidArgumentError

__all__ = ['MAX_FINDINGS_PER_CODE', 'report_of', 'verify']

MAX_FINDINGS_PER_CODE: Final = 50
"""Differences listed per finding code; the rest are counted in one last finding."""

_started: Final = msgspec.json.Decoder(RunStartedInfo)
_finished: Final = msgspec.json.Decoder(RunFinishedInfo)
_compaction: Final = msgspec.json.Decoder(CompactionInfo)
_title: Final = msgspec.json.Decoder(TitleInfo)
_fork: Final = msgspec.json.Decoder(ForkInfo)
_saved: Final = msgspec.json.Decoder(SavedInfo)
_erasure: Final = msgspec.json.Decoder(ErasureInfo)
_recall: Final = msgspec.json.Decoder(RecallInfo)

_INDEX_NAMES: Final = {
    Table.BY_CONV: 'the conversation index (BY_CONV)',
    Table.RUN_ORDER: 'the run order index (RUN_ORDER)',
    Table.CONV_RUNS: "the conversation's runs index (CONV_RUNS)",
    Table.IDEM: 'the idempotency index (IDEM)',
    Table.STORE: "the conversation store's index (STORE)",
}


class _Invalid(Exception):
    """An entry that does not follow from the entries before it."""


class _Rebuild:
    """The derived records and indexes, rebuilt from the entries in `seq` order.

    Mirrors the append path (`_append.append_entries`, each kind's rule, `_write_entry`) and
    `delete_conversation`, without its checks on what other conversations hold: a fork's
    source, or a run's parent, may have been deleted since.
    """

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.convs: dict[str, ConversationRecord] = {}
        self.conv_seqs: dict[str, array[int]] = {}
        self.run_order: dict[bytes, bytes] = {}
        self.conv_runs: dict[bytes, bytes] = {}
        self.idem: dict[bytes, bytes] = {}
        self.conv_run_ids: dict[str, list[str]] = {}
        self.conv_idem: dict[str, list[bytes]] = {}
        self.erasure_listed: dict[str, dict[int, int]] = {}
        """The `seq`s each conversation's `erasure` entries record as erased, each with the first
        `erasure` entry recording it."""
        self.max_seq = 0
        self.store = MemoryTables([Table.STORE])
        """The conversation store's index (STORE), as the `saved` entries give it."""
        self.store_txn = MemoryTxn(self.store)

    def _reopen(self, conversation_id: str, seq: int, body: Any) -> ConversationRecord:
        conv = ConversationRecord(
            conversation_id=conversation_id,
            created_at=body.timestamp,
            updated_at=body.timestamp,
            first_seq=seq,
            last_seq=seq,
        )
        self.convs[conversation_id] = conv
        return conv

    def _forget(self, conversation_id: str) -> None:
        """What `delete_conversation` removes (the entries are already gone from the store)."""
        for run_id in self.conv_run_ids.pop(conversation_id, []):
            run = self.runs.pop(run_id, None)
            if run is not None:
                self.run_order.pop(seq_key(run.start_seq), None)
                self.conv_runs.pop(conv_runs_key(conversation_id, run.start_seq), None)
        for key in self.conv_idem.pop(conversation_id, []):
            self.idem.pop(key, None)
        self.conv_seqs.pop(conversation_id, None)
        self.erasure_listed.pop(conversation_id, None)

    def apply(self, seq: int, body: StoredBody, size: int | None = None) -> None:
        """Apply one decoded entry whose payload has `size` bytes (when its body holds none of
        them, as a message's in `verify`; else its payload's length); `_Invalid` if it cannot
        follow the ones before it."""
        conv_id = body.conversation_id
        kind = body.kind
        try:
            conv, run = _REBUILD[kind](self, seq, body)
        except msgspec.DecodeError as exc:
            raise _Invalid(f'the {kind} payload cannot be decoded ({exc})') from None
        if body.idempotency_key is not None:
            prefix = conv_idem_prefix(conv_id) if run is None else run_idem_prefix(run.start_seq)
            key = idem_key_of(prefix, body.idempotency_key)
            self.idem[key] = seq_key(seq)
            self.conv_idem.setdefault(conv_id, []).append(key)
        conv.last_seq = seq
        conv.updated_at = body.timestamp
        conv.entry_count += 1
        conv.payload_bytes += len(body.payload) if size is None else size
        self.conv_seqs.setdefault(conv_id, array('Q')).append(seq)
        self.max_seq = seq

    # Each kind's rule, as the write path's (`_append`) without its checks on other conversations;
    # each returns the entry's conversation record and, for a run's entry, the run's.

    def _conversation_entry(self, body: StoredBody) -> ConversationRecord | None:
        if body.run_id is not None:
            raise _Invalid(f'a {body.kind} entry names a run')
        return self.convs.get(body.conversation_id)

    def _forked_from(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._conversation_entry(body)
        info: ForkInfo = _fork.decode(body.payload)
        if conv is not None and not conv.deleted:
            raise _Invalid('a fork reuses the id of a live conversation')
        conv = self._reopen(body.conversation_id, seq, body)
        if body.parent is not None:  # None: imported after its fork point was deleted
            conv.forked_from = info
        return conv, None

    def _deleted(self, seq: int, body: StoredBody) -> _Applied:
        self._conversation_entry(body)
        self._forget(body.conversation_id)
        forget_conversation(self.store_txn, body.conversation_id)
        conv = self._reopen(body.conversation_id, seq, body)
        conv.deleted = True
        return conv, None

    def _saved(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._conversation_entry(body)
        if conv is None or conv.deleted:
            conv = self._reopen(body.conversation_id, seq, body)
        info: SavedInfo = _saved.decode(body.payload)
        try:
            apply_saved(self.store_txn, body.conversation_id, seq, info)
        except (InvalidArgumentError, CorruptStoreError) as exc:
            raise _Invalid(str(exc)) from None
        return conv, None

    def _live_conversation(self, body: StoredBody) -> ConversationRecord:
        conv = self._conversation_entry(body)
        if conv is None or conv.deleted:
            raise _Invalid(f'a {body.kind} entry of a conversation that does not exist')
        return conv

    def _title(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._live_conversation(body)
        conv.title = _title.decode(body.payload).title
        return conv, None

    def _archived(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._live_conversation(body)
        conv.archived = True
        return conv, None

    def _unarchived(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._live_conversation(body)
        conv.archived = False
        return conv, None

    def _erasure(self, seq: int, body: StoredBody) -> _Applied:
        conv = self._live_conversation(body)
        info: ErasureInfo = _erasure.decode(body.payload)
        listed = self.erasure_listed.setdefault(body.conversation_id, {})
        for erased in info.seqs:
            listed.setdefault(erased, seq)
        return conv, None

    def _shred(self, seq: int, body: StoredBody) -> _Applied:
        return self._live_conversation(body), None

    def _run_id(self, body: StoredBody) -> str:
        if body.run_id is None:
            raise _Invalid(f'a {body.kind} entry names no run')
        return body.run_id

    def _run_started(self, seq: int, body: StoredBody) -> _Applied:
        run_id = self._run_id(body)
        conv_id = body.conversation_id
        if run_id in self.runs:
            raise _Invalid(f'run {run_id!r} starts twice')
        started: RunStartedInfo = _started.decode(body.payload or b'{}')
        conv = self.convs.get(conv_id)
        if conv is None or conv.deleted:
            conv = self._reopen(conv_id, seq, body)
        run = RunRecord(
            run_id=run_id,
            conversation_id=conv_id,
            parent_run_id=started.parent_run_id,
            agent_name=started.agent_name,
            metadata=dict(started.metadata),
            started_at=body.timestamp,
            start_seq=seq,
            branch_parent=body.parent,
            last_seq=seq,
            entry_count=1,
        )
        self.runs[run_id] = run
        self.conv_run_ids.setdefault(conv_id, []).append(run_id)
        conv.run_count += 1
        self.run_order[seq_key(seq)] = run_key(run_id)
        self.conv_runs[conv_runs_key(conv_id, seq)] = run_key(run_id)
        return conv, run

    def _running(self, body: StoredBody) -> tuple[ConversationRecord, RunRecord]:
        """The conversation and run a later entry of a run continues."""
        run_id = body.run_id
        if run_id is None:
            raise _Invalid(f'a {body.kind} entry names no run')
        run = self.runs.get(run_id)
        conv = self.convs.get(body.conversation_id)
        if run is None or conv is None or run.conversation_id != body.conversation_id:
            raise _Invalid(f'a {body.kind} entry of run {run_id!r}, which has not started in this conversation')
        if run.status != 'running':
            raise _Invalid(f'a {body.kind} entry of run {run_id!r} after it finished')
        return conv, run

    def _message(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        run.message_count += 1
        conv.message_count += 1
        run.last_seq = seq
        run.entry_count += 1
        return conv, run

    def _run_finished(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        finished: RunFinishedInfo = _finished.decode(body.payload)
        run.status = finished.status
        run.error = finished.error
        run.usage = dict(finished.usage)
        run.finished_at = body.timestamp
        return conv, _follow(run, seq)

    def _compaction(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        if not is_sealed(body.payload):  # a sealed payload is checked by its tag when opened
            _compaction.decode(body.payload)
        conv.compaction_count += 1
        return conv, _follow(run, seq)

    def _tool_effect(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        return conv, _follow(run, seq)

    def _durable_step(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        return conv, _follow(run, seq)

    def _recall(self, seq: int, body: StoredBody) -> _Applied:
        conv, run = self._running(body)
        if not is_sealed(body.payload):
            _recall.decode(body.payload)
        return conv, _follow(run, seq)


_Applied = tuple[ConversationRecord, 'RunRecord | None']


def _follow(run: RunRecord, seq: int) -> RunRecord:
    run.last_seq = seq
    run.entry_count += 1
    return run


_REBUILD: Final[dict[Kind, Callable[[_Rebuild, int, StoredBody], _Applied]]] = {
    'run_started': _Rebuild._run_started,  # pyright: ignore[reportPrivateUsage]
    'message': _Rebuild._message,  # pyright: ignore[reportPrivateUsage]
    'run_finished': _Rebuild._run_finished,  # pyright: ignore[reportPrivateUsage]
    'compaction': _Rebuild._compaction,  # pyright: ignore[reportPrivateUsage]
    'tool_effect': _Rebuild._tool_effect,  # pyright: ignore[reportPrivateUsage]
    'durable_step': _Rebuild._durable_step,  # pyright: ignore[reportPrivateUsage]
    'recall': _Rebuild._recall,  # pyright: ignore[reportPrivateUsage]
    'forked_from': _Rebuild._forked_from,  # pyright: ignore[reportPrivateUsage]
    'deleted': _Rebuild._deleted,  # pyright: ignore[reportPrivateUsage]
    'title': _Rebuild._title,  # pyright: ignore[reportPrivateUsage]
    'archived': _Rebuild._archived,  # pyright: ignore[reportPrivateUsage]
    'unarchived': _Rebuild._unarchived,  # pyright: ignore[reportPrivateUsage]
    'erasure': _Rebuild._erasure,  # pyright: ignore[reportPrivateUsage]
    'shred': _Rebuild._shred,  # pyright: ignore[reportPrivateUsage]
    'saved': _Rebuild._saved,  # pyright: ignore[reportPrivateUsage]
}
"""Each kind's rule in the rebuild: the one place `verify` tells kinds apart."""


class _Findings:
    """Findings, at most `MAX_FINDINGS_PER_CODE` listed per code."""

    def __init__(self) -> None:
        self.listed: list[VerifyProblem] = []
        self.counts: Counter[str] = Counter()
        self.skip: set[str] = set()
        """Conversations whose chain is broken: their derived differences are not listed."""

    def add(self, code: str, conversation_id: str, seq: int, reason: str) -> None:
        if conversation_id and conversation_id in self.skip:
            return
        self.counts[code] += 1
        if self.counts[code] <= MAX_FINDINGS_PER_CODE:
            self.listed.append(VerifyProblem(conversation_id, seq, reason, code=code))

    def all(self) -> list[VerifyProblem]:
        out = list(self.listed)
        for code, count in sorted(self.counts.items()):
            if count > MAX_FINDINGS_PER_CODE:
                out.append(
                    VerifyProblem('', 0, f'{count - MAX_FINDINGS_PER_CODE} more {code} findings not listed', code=code)
                )
        return out


def verify(txn: ReadTxn) -> VerifyReport:
    """Check every hash chain and every derived record and index against the entries."""
    chain: dict[str, VerifyProblem] = {}
    heads: dict[str, tuple[int, bytes]] = {}
    rebuild = _Rebuild()
    findings = _Findings()
    marked: dict[str, dict[int, int | None]] = {}
    """The `seq`s of each conversation's entries that carry the erasure mark, each with the
    `erasure` entry its placeholder names (`_erase.placeholder_erasure`; `None`: not a placeholder)."""
    undecodable: list[int] = []
    first_rule_2 = _chain_from(txn, findings)
    checked = 0
    encrypted = txn.get(Table.META, META_ENCRYPTION) is not None
    for key, value in txn.scan(Table.ENTRIES):
        checked += 1
        if len(key) != SEQ_SIZE:
            findings.add('index-key', '', 0, f'an entry is stored under a malformed key {key[:20].hex()}')
            continue
        seq = key_seq(key)
        try:
            # A message's payload is read only as far as its seal mark (it may be large): its size is
            # enough for the records. An erased one is read whole, to check its placeholder.
            body, size = decode_body_clipped(seq, value, SEAL_MARK_SIZE)
            if body.kind != 'message' or is_erased_value(value):
                body = decode_body(seq, value)
        except CorruptEntryError:
            undecodable.append(seq)  # its conversation is looked up with the others' after the scan
            continue
        conv_id = body.conversation_id
        _check_seal(encrypted, body, findings)
        try:
            rebuild.apply(seq, body, size)
        except _Invalid as exc:
            chain.setdefault(
                conv_id,
                VerifyProblem(conv_id, seq, f'the entry cannot follow the ones before it: {exc}', code='entry-invalid'),
            )
        if conv_id in chain:
            continue
        prev_seq, prev = heads.get(conv_id, (0, b''))
        if body.kind == 'deleted':
            prev = b''
            marked.pop(conv_id, None)
        stored_hash = entry_hash(value)
        if is_erased_value(value):
            marked.setdefault(conv_id, {})[seq] = _named_erasure(body)
        # Rule 2 recomputes an erased entry's link from the digest it keeps; rule 1 (entries older
        # than the store's format 4) can only take its stored hash as given (docs/erasure.md).
        digest = link(prev, value, rule=rule_of(seq, first_rule_2))
        if digest is None or len(value) <= HASH_SIZE or digest != stored_hash:
            chain[conv_id] = _explain_break(txn, body, prev_seq)
            continue
        heads[conv_id] = (seq, digest)
    _name_undecodable(txn, undecodable, chain)
    stored_convs = _stored_conversations(txn, findings)
    for conv_id, conv in stored_convs.items():
        if conv_id in chain:
            continue
        head_seq, head = heads.get(conv_id, (0, b''))
        if head != conv.head_hash:
            missing = _first_missing(txn, conv_id, head_seq, None)
            chain[conv_id] = VerifyProblem(
                conv_id,
                missing or conv.last_seq,
                'the chain ends early: the latest entries were removed',
                code='chain-truncated',
            )
    for conv_id in heads:
        if conv_id not in stored_convs and conv_id not in chain:
            chain[conv_id] = VerifyProblem(
                conv_id,
                heads[conv_id][0],
                'entries exist for a conversation with no record',
                code='conversation-record',
            )
    findings.skip = set(chain)
    _compare_erasures(txn, rebuild, marked, findings)
    _compare_conversations(rebuild, stored_convs, findings)
    _compare_runs(txn, rebuild, findings)
    _compare_by_conv(txn, rebuild, findings)
    _compare_index(txn, Table.RUN_ORDER, rebuild.run_order, findings, _run_conversation(rebuild))
    _compare_index(txn, Table.CONV_RUNS, rebuild.conv_runs, findings, key_conversation)
    _compare_index(txn, Table.IDEM, rebuild.idem, findings, _idem_conversation(rebuild))
    _compare_index(txn, Table.STORE, dict(rebuild.store_txn.scan(Table.STORE)), findings, _store_conversation)
    _check_meta(txn, rebuild, findings, tail_broken=any(p.code == 'chain-truncated' for p in chain.values()))
    problems = sorted([*chain.values(), *findings.all()], key=lambda p: (p.conversation_id, p.seq))
    return VerifyReport(
        ok=not problems,
        entries_checked=checked,
        conversations_checked=len(set(stored_convs) | set(heads)),
        problems=problems,
        scrub_pending=scrub_pending(txn),
        chain_from=first_rule_2,
    )


def _chain_from(txn: ReadTxn, findings: _Findings) -> int | None:
    """The first seq chained by rule 2, or None (format 3 or older; a malformed record is a finding)."""
    try:
        return chain_from(txn)
    except CorruptStoreError as exc:
        findings.add('meta', '', 0, str(exc).removesuffix('; run verify'))
        return None


def report_of(problems: Iterable[VerifyProblem], base: VerifyReport | None = None) -> VerifyReport:
    """A report holding `problems` added to `base` (or alone)."""
    extra = list(problems)
    if base is None:
        return VerifyReport(ok=not extra, entries_checked=0, conversations_checked=0, problems=extra)
    merged = sorted([*base.problems, *extra], key=lambda p: (p.conversation_id, p.seq))
    return VerifyReport(
        ok=not merged,
        entries_checked=base.entries_checked,
        conversations_checked=base.conversations_checked,
        problems=merged,
        scrub_pending=base.scrub_pending,
        chain_from=base.chain_from,
    )


def _check_seal(encrypted: bool, body: StoredBody, findings: _Findings) -> None:
    """An `entry-unsealed` finding when the entry breaks the sealing rule (`encryption.seal_problem`):
    a content entry of an encrypted store that is not sealed, or a sealed payload in a plain store."""
    problem = seal_problem(encrypted, body.kind, body.payload)
    if problem is not None:
        findings.add('entry-unsealed', body.conversation_id, body.seq, problem)


# --- chains -----------------------------------------------------------------------------------


def _explain_break(txn: ReadTxn, body: Any, prev_seq: int) -> VerifyProblem:
    """Name the first bad entry when `body` does not chain to the entry before it."""
    conv_id: str = body.conversation_id
    missing = _first_missing(txn, conv_id, prev_seq, body.seq)
    if missing is not None:
        return VerifyProblem(conv_id, missing, 'the entry was removed', code='entry-removed')
    parent = body.parent
    if parent is not None and parent > prev_seq and txn.get(Table.ENTRIES, seq_key(parent)) is None:
        return VerifyProblem(conv_id, parent, 'the entry was removed (with its index keys)', code='entry-removed')
    return VerifyProblem(
        conv_id,
        body.seq,
        'hash mismatch: the entry was altered, reordered, or one before it removed',
        code='hash-mismatch',
    )


def _first_missing(txn: ReadTxn, conversation_id: str, after: int, before: int | None) -> int | None:
    """The first indexed seq of the conversation in (after, before) whose entry is gone."""
    prefix = ck(conversation_id)
    for key, _ in txn.scan(Table.BY_CONV, prefix=prefix, start=by_conv_key(conversation_id, after + 1)):
        if len(key) != len(prefix) + SEQ_SIZE:
            continue
        seq = key_seq(key)
        if before is not None and seq >= before:
            break
        if txn.get(Table.ENTRIES, entry_key_of(key)) is None:
            return seq
    return None


def _name_undecodable(txn: ReadTxn, seqs: list[int], chain: dict[str, VerifyProblem]) -> None:
    """Give each undecodable entry (`seqs`, ascending) to its conversation through BY_CONV, in one
    scan of it whatever their number, as the first bad entry of its chain unless an earlier one is.

    An entry no BY_CONV key names goes to the conversation `?`.
    """
    if not seqs:
        return
    wanted = set(seqs)
    owner: dict[int, str] = {}
    for key, _ in txn.scan(Table.BY_CONV):
        if len(key) > SEQ_SIZE:
            seq = key_seq(key)
            if seq in wanted and seq not in owner:
                owner[seq] = by_conv_conversation(key)
    for seq in seqs:
        conv_id = owner.get(seq, '?')
        known = chain.get(conv_id)
        if known is None or known.seq > seq:
            chain[conv_id] = VerifyProblem(conv_id, seq, 'the entry cannot be decoded', code='entry-undecodable')


# --- erasures ---------------------------------------------------------------------------------


def _named_erasure(body: StoredBody) -> int | None:
    """The `erasure` entry an erased entry's placeholder names (0 for one that names none, and for
    a sealed one, which its tag checks when opened); `None` when it holds anything but its placeholder."""
    if is_sealed(body.payload):
        return 0
    return placeholder_erasure(body.kind, body.payload)


def _compare_erasures(
    txn: ReadTxn, rebuild: _Rebuild, marked: dict[str, dict[int, int | None]], findings: _Findings
) -> None:
    """Every entry marked erased holds the placeholder of the `erasure` entry of its conversation
    that records it, and every entry such an entry records is erased."""
    for conv_id in sorted(set(marked) | set(rebuild.erasure_listed)):
        have = marked.get(conv_id, {})
        listed = rebuild.erasure_listed.get(conv_id, {})
        for seq, named in sorted(have.items()):
            recorder = listed.get(seq)
            if recorder is None:
                findings.add(
                    'erasure-unrecorded',
                    conv_id,
                    seq,
                    'the entry is marked erased but no erasure entry records it: its content was removed '
                    'outside erase()',
                )
            elif named is None or named not in (0, recorder):
                findings.add(
                    'erasure-altered',
                    conv_id,
                    seq,
                    'the erased entry holds something other than the placeholder of erasure entry '
                    f'{recorder}: it was written after the erasure',
                )
        for seq in sorted(set(listed) - set(have)):
            if txn.get(Table.BY_CONV, by_conv_key(conv_id, seq)) is None:
                continue  # not an entry of this conversation (any more): the chain check speaks for it
            findings.add(
                'erasure-incomplete',
                conv_id,
                seq,
                'an erasure entry records the entry as erased, but it still holds content',
            )


# --- derived records --------------------------------------------------------------------------


def _stored_conversations(txn: ReadTxn, findings: _Findings) -> dict[str, ConversationRecord]:
    out: dict[str, ConversationRecord] = {}
    for key, raw in txn.scan(Table.CONVS):
        try:
            conv_id = decode_id(key, 'the conversation record key')
            conv = decode_conversation(conv_id, raw)
        except CorruptStoreError as exc:
            findings.add('conversation-record', '', 0, str(exc).removesuffix('; run verify'))
            continue
        if conv.conversation_id != conv_id:
            findings.add(
                'conversation-record',
                conv_id,
                conv.last_seq,
                f'the record stored under {conv_id!r} is the record of {conv.conversation_id!r}',
            )
            continue
        out[conv_id] = conv
    return out


def _differences(stored: msgspec.Struct, derived: msgspec.Struct, ignore: frozenset[str] = frozenset()) -> list[str]:
    names = [name for name in type(derived).__struct_fields__ if name not in ignore]
    return [
        f'{name} is {getattr(stored, name)!r}, the entries give {getattr(derived, name)!r}'
        for name in names
        if getattr(stored, name) != getattr(derived, name)
    ]


def _compare_conversations(rebuild: _Rebuild, stored: dict[str, ConversationRecord], findings: _Findings) -> None:
    for conv_id, derived in rebuild.convs.items():
        conv = stored.get(conv_id)
        if conv is None:
            findings.add('conversation-record', conv_id, derived.first_seq, 'the conversation record is missing')
            continue
        diffs = _differences(conv, derived, frozenset({'head_hash'}))
        if diffs:
            findings.add(
                'conversation-record',
                conv_id,
                derived.first_seq,
                'the conversation record does not match its entries: ' + '; '.join(diffs),
            )
    for conv_id, conv in stored.items():
        if conv_id not in rebuild.convs:
            findings.add('conversation-record', conv_id, conv.first_seq, 'a conversation record has no entries')


def _compare_runs(txn: ReadTxn, rebuild: _Rebuild, findings: _Findings) -> None:
    seen: set[str] = set()
    for key, raw in txn.scan(Table.RUNS):
        try:
            run_id = decode_id(key, 'the run record key')
            run = decode_run(run_id, raw)
        except CorruptStoreError as exc:
            findings.add('run-record', '', 0, str(exc).removesuffix('; run verify'))
            continue
        seen.add(run_id)
        derived = rebuild.runs.get(run_id)
        if derived is None:
            findings.add(
                'run-record',
                run.conversation_id,
                run.start_seq,
                f'a record of run {run_id!r} has no entries (is its key damaged?)',
            )
            continue
        diffs = _differences(run, derived)
        if diffs:
            findings.add(
                'run-record',
                derived.conversation_id,
                derived.start_seq,
                f'the record of run {run_id!r} does not match its entries: ' + '; '.join(diffs),
            )
    for run_id, derived in rebuild.runs.items():
        if run_id not in seen:
            findings.add(
                'run-record',
                derived.conversation_id,
                derived.start_seq,
                f'the record of run {run_id!r} is missing: replays of the run come back short',
            )


def _expected_by_conv(rebuild: _Rebuild) -> Iterator[bytes]:
    for _, conv_id in sorted((ck(conv_id), conv_id) for conv_id in rebuild.conv_seqs):
        yield from by_conv_keys(conv_id, rebuild.conv_seqs[conv_id])


def _merge(
    stored: Iterator[tuple[bytes, bytes]], expected: Iterator[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """Two key-ordered streams side by side: (key, stored value, expected value), None where absent."""
    done = object()
    a: Any = next(stored, done)
    b: Any = next(expected, done)
    while a is not done or b is not done:
        if b is done or (a is not done and a[0] < b[0]):
            yield a[0], a[1], None
            a = next(stored, done)
        elif a is done or b[0] < a[0]:
            yield b[0], None, b[1]
            b = next(expected, done)
        else:
            yield a[0], a[1], b[1]
            a = next(stored, done)
            b = next(expected, done)


def _run_conversation(rebuild: _Rebuild) -> Callable[[bytes], str]:
    by_start = {seq_key(run.start_seq): run.conversation_id for run in rebuild.runs.values()}

    def conversation(key: bytes) -> str:
        return by_start.get(key, '')

    return conversation


def _idem_conversation(rebuild: _Rebuild) -> Callable[[bytes], str]:
    by_start = {seq_key(run.start_seq): run.conversation_id for run in rebuild.runs.values()}

    def conversation(key: bytes) -> str:
        start = idem_run_start(key)
        if start is not None:
            return by_start.get(start, '')
        return idem_conversation(key)

    return conversation


def _describe(table: int, key: bytes, stored: bytes | None, expected: bytes | None) -> str:
    name = _INDEX_NAMES[table]
    shown = key[:60].decode('utf-8', errors='backslashreplace')
    if stored is None:
        return f'{name} lacks the key {shown!r}'
    if expected is None:
        return f'{name} holds a key no entry gives: {shown!r}'
    return f'{name} maps {shown!r} to {stored[:40]!r}; the entries give {expected[:40]!r}'


def _seq_of(key: bytes) -> int:
    return key_seq(key) if len(key) >= SEQ_SIZE else 0


def _compare_by_conv(txn: ReadTxn, rebuild: _Rebuild, findings: _Findings) -> None:
    stored = ((key, b'') for key, _ in txn.scan(Table.BY_CONV))
    expected = ((key, b'') for key in _expected_by_conv(rebuild))
    for key, have, want in _merge(stored, expected):
        if have is None or want is None:
            findings.add('index-key', key_conversation(key), _seq_of(key), _describe(Table.BY_CONV, key, have, want))


def _compare_index(
    txn: ReadTxn, table: int, expected: dict[bytes, bytes], findings: _Findings, conversation: Callable[[bytes], str]
) -> None:
    ordered = iter(sorted(expected.items()))
    for key, have, want in _merge(txn.scan(table), ordered):
        if have != want:
            seq = _seq_of(have) if have is not None and len(have) == 8 else _seq_of(key)
            findings.add('index-key', conversation(key), seq, _describe(table, key, have, want))


def _store_conversation(key: bytes) -> str:
    """The conversation a STORE key names, where it names one by its id (records and links)."""
    if key[:1] in (b'r',):
        return key[1:].decode('utf-8', errors='replace')
    if key[:1] in (b'd', b'f', b's'):
        return key[1:].split(b'\x00', 1)[0].decode('utf-8', errors='replace')
    return ''


def _check_meta(txn: ReadTxn, rebuild: _Rebuild, findings: _Findings, *, tail_broken: bool) -> None:
    try:
        check_format(txn)
    except Exception as exc:
        findings.add('meta', '', 0, str(exc))
    assigned = getattr(txn, 'assigned_last', None)
    # A store whose appends claim seqs from a counter (PostgreSQL) answers the counter: an append
    # that never committed may have left seqs past the last entry unused, so only a counter
    # below the last entry is a fault there.
    raw = txn.get(Table.META, META_LAST_SEQ) if assigned is None else cast('Callable[[], bytes]', assigned)()
    tail_broken = tail_broken or assigned is not None
    if raw is not None and len(raw) != 8:
        findings.add('meta', '', 0, f'the recorded last seq {raw[:20]!r} is malformed')
        return
    recorded = 0 if raw is None else key_seq(raw)
    # An LMDB store derives its last seq from its last entry and records it only before a deletion
    # (`_read.last_seq`): there a record below the last entry is the normal case.
    if recorded < rebuild.max_seq and not derives_last_seq(txn):
        findings.add(
            'meta',
            '',
            recorded,
            f'the recorded last seq {recorded} is below the last entry {rebuild.max_seq}: new entries would reuse seqs',
        )
    elif recorded > rebuild.max_seq and not tail_broken:
        findings.add(
            'meta',
            '',
            recorded,
            f'the recorded last seq {recorded} is beyond the last entry {rebuild.max_seq}: '
            'the latest entries were removed',
        )
