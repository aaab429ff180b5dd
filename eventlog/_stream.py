"""Reading a branch piece by piece, so that long replays never hold the whole run at once.

`_engine.branch_bodies` returns every entry of a branch in one list; the functions here
describe the branch by its stretches (one per run, cheap to hold) and then read its entries
lazily from a `seq` onwards, which lets a caller take them in bounded batches, each in its own
short transaction or all in one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import msgspec

from eventlog import _engine as engine
from eventlog._storage import ReadTxn, Table
from eventlog.entries import CompactionInfo, Entry, fold_compaction
from eventlog.errors import CorruptEntryError

Stretch = tuple[str | None, int, int]
"""A run id (`None` for a lone conversation entry), the first and the last `seq` of its part of a branch."""

ContextItem = int | list[bytes]
"""A message of a context: the `seq` of a message entry, or a compaction's summary payloads."""


def branch_stretches(txn: ReadTxn, tip: int | None) -> list[Stretch]:
    """The branch ending at `tip` as stretches, oldest first, their `seq`s increasing."""
    stretches: list[Stretch] = []
    point = tip
    while point is not None:
        head = engine.get_entry_head(txn, point, 0)  # its run and parent: not its payload
        if head is None:
            break  # the rest of the branch was deleted with its conversation
        entry = head[0]
        if entry.run_id is not None:
            run = engine.get_run(txn, entry.run_id)
            if run is None:
                break
            stretches.append((run.run_id, run.start_seq, point))
            nxt = run.branch_parent
        else:
            stretches.append((None, point, point))
            nxt = entry.parent
        if nxt is not None and nxt >= point:
            raise CorruptEntryError(f'entry {point} points forward to {nxt}')
        point = nxt
    stretches.reverse()
    return stretches


def branch_entries(
    txn: ReadTxn, stretches: Iterable[Stretch], kinds: frozenset[str] | None, after: int = 0
) -> Iterator[Entry]:
    """The entries of `stretches` with a `seq` above `after`, in order, of `kinds` (all when `None`)."""
    for run_id, first, last in stretches:
        if last <= after:
            continue
        if run_id is None:
            entry = engine.get_entry(txn, first)
            if entry is not None and (kinds is None or entry.kind in kinds):
                yield entry
            continue
        for entry in engine.iter_entries(txn, run_id=run_id, kinds=kinds, after_seq=max(after, first - 1)):
            if entry.seq > last:
                break
            yield entry


def fold_entries(txn: ReadTxn, tip: int | None) -> Iterator[Entry]:
    """The messages and compactions of the branch ending at `tip`, in order, as a context plan
    reads them: compactions whole, messages without their payloads (a plan needs their `seq`s)."""
    for run_id, first, last in branch_stretches(txn, tip):
        if run_id is None:
            heads = [] if (head := engine.get_entry_head(txn, first, 0)) is None else [head]
        else:
            heads = engine.iter_entry_heads(txn, run_id=run_id, kinds=_FOLD_KINDS, after_seq=first - 1, payload_limit=0)
        for entry, size in heads:
            if entry.seq > last:
                break
            if entry.kind == 'compaction' and size:
                whole = engine.get_entry(txn, entry.seq)
                entry = entry if whole is None else whole
            if entry.kind in _FOLD_KINDS:
                yield entry


_FOLD_KINDS = frozenset({'message', 'compaction'})


def history_origin(txn: ReadTxn, conversation_id: str) -> int | None:
    """The entry of another conversation this one's history continues from: its fork point,
    else the entry its first run continued from when that lies elsewhere; `None` when neither."""
    conv = engine.get_conversation(txn, conversation_id)
    if conv is not None and conv.forked_from is not None:
        return conv.forked_from.seq
    first = next(txn.scan(Table.CONV_RUNS, prefix=engine.ck(conversation_id)), None)
    if first is None:
        return None
    run = engine.get_run(txn, engine.decode_id(first[1], 'a run id in the conversation index'))
    if run is None or run.branch_parent is None:
        return None
    parent = engine.get_entry(txn, run.branch_parent)
    if parent is None or parent.conversation_id == conversation_id:
        return None
    return run.branch_parent


def _item_seq(item: tuple[int, list[bytes]] | int) -> int:
    return item if isinstance(item, int) else item[0]


def context_plan(entries: Iterable[Entry]) -> list[ContextItem]:
    """What `_read.fold_context` keeps of a branch's messages and compactions, as message
    `seq`s and summaries instead of payloads (one small integer per message held)."""
    return [item for _, item in numbered_context_plan(entries)]


def numbered_context_plan(entries: Iterable[Entry]) -> list[tuple[int, ContextItem]]:
    """`context_plan` with the entry each item comes from: a message's own `seq`, or the `seq` of
    the compaction whose summary it is."""
    live: list[tuple[int, list[bytes]] | int] = []
    for entry in entries:
        if entry.kind == 'message':
            live.append(entry.seq)
        elif entry.kind == 'compaction':
            try:
                info = msgspec.json.decode(entry.payload, type=CompactionInfo)
            except msgspec.DecodeError as exc:
                raise CorruptEntryError(f'entry {entry.seq}: undecodable compaction payload ({exc})') from None
            live = fold_compaction(live, info, [(entry.seq, [bytes(raw) for raw in info.summary])], _item_seq)
    return [(item, item) if isinstance(item, int) else item for item in live]


def plan_items(txn: ReadTxn, plan: Sequence[ContextItem], start: int = 0) -> Iterator[list[bytes]]:
    """The message payloads each item of a context plan stands for, from item `start` on."""
    for index in range(start, len(plan)):
        item = plan[index]
        if isinstance(item, int):
            entry = engine.get_entry(txn, item)
            if entry is None:
                raise CorruptEntryError(f'entry {item} of the context is missing')
            yield [entry.payload]
        else:
            yield item


def plan_item_heads(
    txn: ReadTxn, plan: Sequence[ContextItem], start: int, payload_limit: int
) -> Iterator[list[tuple[bytes, int]]]:
    """`plan_items`, each payload cut to its first `payload_limit` bytes, with its full size."""
    for index in range(start, len(plan)):
        item = plan[index]
        if isinstance(item, int):
            head = engine.get_entry_head(txn, item, payload_limit)
            if head is None:
                raise CorruptEntryError(f'entry {item} of the context is missing')
            yield [(head[0].payload, head[1])]
        else:
            yield [(payload[:payload_limit], len(payload)) for payload in item]


def plan_payloads(txn: ReadTxn, plan: Sequence[ContextItem]) -> Iterator[bytes]:
    """The message payloads a context plan stands for, in order."""
    for payloads in plan_items(txn, plan):
        yield from payloads
