"""The bookkeeping behind `EventLogPersistence`: what in a run's live history is new, and what a
compaction replaced.

A run's live history (`RunContext.messages`) only grows, except when a compaction or a history
processor rewrites it in place. `Layout` mirrors the live history as last recorded, with the log
entry each message stands for (its *anchor*: the `seq` of its `message` entry, or of the
`compaction` entry whose summary holds it). `plan_sync` compares a newer live history with the
layout and says what to append: nothing, new messages at the end, and/or one `compaction` entry
whose summary is the rewritten front of the history. `match_branch` finds how much of a handed-in
history a stored branch already holds, so a threaded run stores a reference instead of a copy.

Everything here is pure and synchronous; the capability does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from pydantic_ai.messages import ModelMessage

from eventlog import CompactionInfo, Entry
from eventlog.entries import fold_compaction

__all__ = ['BranchMatch', 'Layout', 'Same', 'SyncPlan', 'advance', 'match_branch', 'plan_sync']

_compaction_decoder = msgspec.json.Decoder(CompactionInfo)


@dataclass(slots=True)
class Layout:
    """The live history as last recorded, message by message, with each message's anchor."""

    messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    anchors: list[int] = field(default_factory=list[int])
    """Parallel to `messages`: the `seq` of the entry each message stands for."""
    groups: set[int] = field(default_factory=set[int])
    """Anchors that are `compaction` entries (several messages may share one)."""
    tip: int | None = None
    """The last entry that shaped this history: where a run continuing from it branches off."""


@dataclass(slots=True)
class SyncPlan:
    """What to append so the log catches up with a live history."""

    new_messages: list[ModelMessage]
    """Messages at the end of the live history the log does not hold yet, in order."""
    summary: list[ModelMessage] | None = None
    """When not `None`: a compaction rewrote the front of the history into these messages..."""
    replaced: list[int] = field(default_factory=list[int])
    """...standing in for these anchors (message or earlier compaction entries)."""
    kept: list[int] = field(default_factory=list[int])
    """Anchors of the recorded messages that follow the summary, in live order."""


def plan_sync(layout: Layout, live: Sequence[ModelMessage], *, allow_compaction: bool = True) -> SyncPlan:
    """Compare `live` with `layout` and say what to append.

    The common case (the history only grew) costs one list comparison, which CPython does by
    identity first. Anything else goes through the slow path, which finds the messages a
    compaction dropped or rewrote. With `allow_compaction=False` (a failing run, where
    pydantic-ai tidies the history while unwinding) only new trailing messages are reported.
    """
    recorded = layout.messages
    n = len(recorded)
    head = live[:n]
    if len(live) >= n and (head if isinstance(head, list) else list(head)) == recorded:  # identity first, in C
        return SyncPlan(new_messages=list(live[n:]))
    position = {id(message): index for index, message in enumerate(recorded)}
    at: list[int] = []
    for message in live:
        s = position.get(id(message), -1)
        if s < 0:
            # An equal copy of the next recorded message (a hook rebuilt it unchanged) is that message.
            expected = (at[-1] if at and at[-1] >= 0 else -1) + 1
            if expected < n and recorded[expected] == message:
                s = expected
        at.append(s)
    last_known = max((i for i, s in enumerate(at) if s >= 0), default=-1)
    if last_known < 0:
        # Nothing recorded survived: only the newest message can be an original of this step.
        last_known = len(live) - 2
    new_messages = list(live[last_known + 1 :])
    if not allow_compaction:
        return SyncPlan(new_messages=new_messages)
    front = at[: last_known + 1]
    present = {s for s in front if s >= 0}
    removed = {s for s in range(n) if s not in present}
    k = 1 + max((i for i, s in enumerate(front) if s < 0), default=-1)
    while True:
        need = _required_summary_length(layout, front, removed, k)
        if need == k:
            break
        k = need
    replaced_positions = removed | {s for s in front[:k] if s >= 0}
    if k == 0 and not replaced_positions:
        return SyncPlan(new_messages=new_messages)
    replaced = sorted({layout.anchors[s] for s in replaced_positions})
    kept = [layout.anchors[s] for s in front[k:]]
    return SyncPlan(new_messages=new_messages, summary=list(live[:k]), replaced=replaced, kept=kept)


def _required_summary_length(layout: Layout, front: list[int], removed: set[int], k: int) -> int:
    """How long the summary (a prefix of the live history) must be for the log's fold to
    reproduce the live history exactly, given that it is at least `k`.

    The log folds a compaction by dropping what it replaced and putting the summary where the
    first replaced message was, so: recorded messages after the summary must keep their recorded
    order, all come after the first replaced one and not be replaced themselves; a compaction
    group is kept or replaced as a whole, complete and in order; and a summary must replace
    something to have a position.
    """
    anchors = layout.anchors
    replaced = removed | {s for s in front[:k] if s >= 0}
    replaced_groups = {anchors[s] for s in replaced if anchors[s] in layout.groups}
    need = k
    if k > 0 and not replaced:
        return k + 1  # front[k] is recorded (the last message of `front` is), so this terminates
    first_replaced = min(replaced) if replaced else -1
    previous = -1
    for i in range(k, len(front)):
        s = front[i]
        anchor = anchors[s]
        # A recorded message also in the summary (a history holding one message object twice)
        # is replaced, so it cannot be kept as well.
        if anchor in replaced_groups or s in replaced or s <= previous or (k > 0 and s < first_replaced):
            need = i + 1
        previous = max(previous, s)
    if need != k:
        return need
    # Groups kept whole must appear exactly as recorded.
    i = k
    while i < len(front):
        anchor = anchors[front[i]]
        if anchor not in layout.groups:
            i += 1
            continue
        members = [s for s, a in enumerate(anchors) if a == anchor]
        if front[i : i + len(members)] != members:
            return 1 + max(j for j in range(i, len(front)) if anchors[front[j]] == anchor)
        i += len(members)
    return need


def advance(
    layout: Layout, plan: SyncPlan, live: Sequence[ModelMessage], *, compaction: int | None, anchors: Sequence[int]
) -> None:
    """Move `layout` on to `live` once `plan`'s entries are committed.

    `compaction` is the `seq` of the plan's `compaction` entry (when it has a summary) and
    `anchors` the `seq`s of its new messages, in order.
    """
    if plan.summary is not None and compaction is not None:
        layout.groups.add(compaction)
        layout.anchors = [compaction] * len(plan.summary) + plan.kept + list(anchors)
        layout.tip = compaction
        layout.messages = list(live)
    else:
        layout.anchors.extend(anchors)
        layout.messages.extend(plan.new_messages)
    if anchors:
        layout.tip = anchors[-1]


@dataclass(slots=True)
class BranchMatch:
    """How much of a handed-in history a stored branch holds."""

    length: int
    """How many leading messages of the history the branch's context reproduces exactly."""
    tip: int | None
    """The entry to branch from (`None` when nothing matched)."""
    anchors: list[int]
    groups: set[int]
    payloads: list[bytes] = field(default_factory=list[bytes])
    """Parallel to `anchors`: the stored message each position of the match stands for."""
    following: Entry | None = None
    """The branch's next `message` entry after the matched point, when no compaction comes
    before it (what the history would continue with on this branch)."""


Same = Callable[[Any, bytes], bool]
"""Whether an item of a handed-in history is a stored message payload."""


def match_branch(entries: Sequence[Entry], target: Sequence[Any], same: Same | None = None) -> BranchMatch:
    """The deepest point of a stored branch whose context is a prefix of `target`.

    `entries` is a branch, oldest first (`EventLog.branch`); `target` the handed-in history as
    pydantic-ai JSON, one item per message, compared with the stored payloads byte for byte, or
    items of any form compared with `same(item, payload)`. The branch's context is replayed entry
    by entry, folding compactions in as the log does, and the last point where it is a prefix of
    `target` wins.
    """
    live: list[tuple[int, bytes]] = []
    groups: set[int] = set()
    matched = 0
    best_length, best_tip, best_index = 0, None, -1
    for index, entry in enumerate(entries):
        if entry.kind == 'message':
            live.append((entry.seq, entry.payload))
            if (
                matched == len(live) - 1
                and matched < len(target)
                and (target[matched] == entry.payload if same is None else same(target[matched], entry.payload))
            ):
                matched += 1
        elif entry.kind == 'compaction':
            live = _fold(live, entry)
            groups.add(entry.seq)
            matched = _common_prefix(live, target, same)
        else:
            continue
        if matched == len(live) and live and len(live) >= best_length:
            best_length, best_tip, best_index = len(live), entry.seq, index
    following = _following(entries, best_index)
    if best_tip is None:
        return BranchMatch(length=0, tip=None, anchors=[], groups=set(), following=following)
    live = []
    groups = set()
    for entry in entries[: best_index + 1]:
        if entry.kind == 'message':
            live.append((entry.seq, entry.payload))
        elif entry.kind == 'compaction':
            live = _fold(live, entry)
            groups.add(entry.seq)
    return BranchMatch(
        length=best_length,
        tip=best_tip,
        anchors=[a for a, _ in live],
        groups=groups,
        payloads=[p for _, p in live],
        following=following,
    )


def _following(entries: Sequence[Entry], index: int) -> Entry | None:
    for entry in entries[index + 1 :]:
        if entry.kind == 'message':
            return entry
        if entry.kind == 'compaction':
            return None
    return None


def _fold(live: list[tuple[int, bytes]], entry: Entry) -> list[tuple[int, bytes]]:
    """Apply one `compaction` entry to a context, exactly as the log's own fold does."""
    info = _compaction_decoder.decode(entry.payload)
    return fold_compaction(live, info, [(entry.seq, bytes(raw)) for raw in info.summary], _anchor)


def _anchor(item: tuple[int, bytes]) -> int:
    return item[0]


def _common_prefix(live: list[tuple[int, bytes]], target: Sequence[Any], same: Same | None) -> int:
    count = 0
    for (_, payload), wanted in zip(live, target, strict=False):
        if (payload != wanted) if same is None else not same(wanted, payload):
            break
        count += 1
    return count
