"""`plan_sync`, `advance` and `match_branch` called directly, against their specifications.

A history evolves the way agent runs make it evolve (it grows; a compaction summarises, slides,
drops, rewrites, reorders or repeats messages; a hook rebuilds a message as an equal copy). After each step the
plan is appended to a real log exactly as `EventLogPersistence` appends it, and:

- the log's own fold of the branch reproduces the live history byte for byte;
- planning again after applying a plan plans nothing;
- a history that only grew is planned as exactly its new suffix, with no compaction;
- a recorded message the history lost (not even an equal copy is left) is recognised as a
  compaction that replaces it;
- without compactions allowed, only a suffix of the history is planned.

`match_branch` is then checked against the log: the whole history matches the branch at the
anchors and tip `advance` kept, and any handed-in history matches at the deepest point of the
branch whose folded context (read from the log by forking there) is a prefix of it.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from capability._persistence_sync import Layout, SyncPlan, advance, match_branch, plan_sync
from capability._recorder import RecentRuns
from eventlog import (
    Entry,
    InMemoryEventLog,
    NewEntry,
    compaction_entry,
    encode_message,
    message_entry,
    run_started_entry,
)

CONVERSATION = 'c'
RUN = 'r'
_AT = datetime(2026, 1, 1, tzinfo=UTC)

Op = Literal[
    'grow', 'summarize', 'slide', 'slide_copy', 'drop', 'rewrite', 'insert', 'copy', 'trim_end', 'swap', 'duplicate'
]
OPS: list[Op] = [
    'grow',
    'summarize',
    'slide',
    'slide_copy',
    'drop',
    'rewrite',
    'insert',
    'copy',
    'trim_end',
    'swap',
    'duplicate',
]


class _Messages:
    """New, distinct messages (requests and responses alternating, each with its own text)."""

    def __init__(self) -> None:
        self.count = 0

    def new(self) -> ModelMessage:
        self.count += 1
        text = f'message {self.count}'
        if self.count % 2:
            return ModelRequest(parts=[UserPromptPart(text, timestamp=_AT)])
        return ModelResponse(parts=[TextPart(text)], timestamp=_AT)


def payloads(messages: list[ModelMessage]) -> list[bytes]:
    return [encode_message(m) for m in messages]


def evolve(live: list[ModelMessage], op: Op, data: st.DataObject, new: _Messages) -> list[ModelMessage]:
    """The next live history after `op` (never empty)."""
    n = len(live)
    if op == 'grow' or n == 0:
        return [*live, *(new.new() for _ in range(data.draw(st.integers(1, 3))))]
    if op == 'summarize':  # the front rewritten into new messages (a summary, perhaps a re-added prompt)
        j = data.draw(st.integers(1, n))
        return [*(new.new() for _ in range(data.draw(st.integers(1, 2)))), *live[j:]]
    if op in ('slide', 'slide_copy') and n >= 3:  # the first message kept (or re-added), a window dropped
        j = data.draw(st.integers(2, n - 1))
        first = live[0] if op == 'slide' else copy.deepcopy(live[0])
        return [first, *live[j:]]
    if op == 'drop' and n >= 2:
        i = data.draw(st.integers(0, n - 1))
        return live[:i] + live[i + 1 :]
    if op == 'rewrite':
        i = data.draw(st.integers(0, n - 1))
        return [*live[:i], new.new(), *live[i + 1 :]]
    if op == 'insert':
        i = data.draw(st.integers(0, n - 1))
        return [*live[:i], new.new(), *live[i:]]
    if op == 'copy':  # a hook rebuilt a message unchanged
        i = data.draw(st.integers(0, n - 1))
        return [*live[:i], copy.deepcopy(live[i]), *live[i + 1 :]]
    if op == 'trim_end' and n >= 2:
        return live[:-1]
    if op == 'swap' and n >= 2:  # two messages trade places
        i, j = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True)))
        return [*live[:i], live[j], *live[i + 1 : j], live[i], *live[j + 1 :]]
    if op == 'duplicate':  # the same message object twice
        i = data.draw(st.integers(0, n - 1))
        j = data.draw(st.integers(0, n))
        return [*live[:j], live[i], *live[j:]]
    return list(live)


@dataclass
class Recording:
    """A run recorded into a real log step by step, as the capability records it."""

    log: InMemoryEventLog = field(default_factory=InMemoryEventLog)
    layout: Layout = field(default_factory=Layout)
    started: bool = False

    async def apply(self, plan: SyncPlan, live: list[ModelMessage]) -> None:
        """Append `plan`'s entries in one transaction, then move the layout on."""
        batch: list[NewEntry] = []
        if not self.started:
            batch.append(run_started_entry(conversation_id=CONVERSATION, run_id=RUN))
            self.started = True
        if plan.summary is not None:
            batch.append(
                compaction_entry(conversation_id=CONVERSATION, run_id=RUN, replaced=plan.replaced, summary=plan.summary)
            )
        batch.extend(message_entry(m, conversation_id=CONVERSATION, run_id=RUN) for m in plan.new_messages)
        seqs = await self.log.append_many(batch)
        ours = seqs[len(seqs) - (plan.summary is not None) - len(plan.new_messages) :]
        compaction = ours[0] if plan.summary is not None else None
        advance(self.layout, plan, live, compaction=compaction, anchors=ours[len(ours) - len(plan.new_messages) :])

    async def context(self) -> list[bytes]:
        return payloads(await self.log.context(CONVERSATION))

    async def branch(self) -> list[Entry]:
        run = await self.log.get_run(RUN)
        assert run is not None
        return await self.log.branch(run.last_seq)

    async def context_at(self, seq: int) -> list[bytes]:
        """The log's folded context of the branch at `seq` (a fork there starts from it)."""
        forked = await self.log.fork(CONVERSATION, at_seq=seq)
        return payloads(await self.log.context(forked))


def check_plan(layout: Layout, live: list[ModelMessage], plan: SyncPlan, op: Op | None) -> None:
    """What a plan must say before it is applied."""
    recorded = layout.messages
    if len(live) >= len(recorded) and all(a is b for a, b in zip(live, recorded, strict=False)):
        # Only grew: exactly the new suffix, no compaction.
        assert plan.summary is None
        assert [id(m) for m in plan.new_messages] == [id(m) for m in live[len(recorded) :]]
    lost = [s for s, r in enumerate(recorded) if all(m is not r and m != r for m in live)]
    if lost:
        assert plan.summary is not None, f'{op}: lost {lost} but no compaction planned'
        assert {layout.anchors[s] for s in lost} <= set(plan.replaced)
    # The new messages are the end of the live history, after everything the plan keeps.
    if plan.new_messages:
        assert live[len(live) - len(plan.new_messages) :] == plan.new_messages
    if plan.summary is not None:
        assert live[: len(plan.summary)] == plan.summary
        assert len(plan.summary) + len(plan.kept) + len(plan.new_messages) == len(live)
    unwinding = plan_sync(layout, live, allow_compaction=False)
    assert unwinding.summary is None
    assert live[len(live) - len(unwinding.new_messages) :] == unwinding.new_messages


async def record(ops: list[Op], data: st.DataObject) -> tuple[Recording, list[ModelMessage], list[list[bytes]]]:
    """Drive a history through `ops`, checking each plan; the recording, the last history and
    every history the log was brought to."""
    new = _Messages()
    recording = Recording()
    live: list[ModelMessage] = []
    seen: list[list[bytes]] = []
    steps: list[Op] = ['grow', *ops]
    for op in steps:
        live = evolve(live, op, data, new)
        plan = plan_sync(recording.layout, live)
        check_plan(recording.layout, live, plan, op)
        await recording.apply(plan, live)
        assert await recording.context() == payloads(live), f'after {op}: the fold differs from the live history'
        assert recording.layout.messages == live
        again = plan_sync(recording.layout, live)
        assert again.new_messages == [] and again.summary is None, f'after {op}: planned again: {again}'
        seen.append(payloads(live))
    return recording, live, seen


_SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@_SETTINGS
@given(ops=st.lists(st.sampled_from(OPS), max_size=8), data=st.data())
def test_a_synced_log_folds_to_the_live_history(ops: list[Op], data: st.DataObject) -> None:
    asyncio.run(record(ops, data))


@_SETTINGS
@given(ops=st.lists(st.sampled_from(OPS), max_size=6), data=st.data())
def test_the_whole_history_matches_where_the_layout_says(ops: list[Op], data: st.DataObject) -> None:
    async def scenario() -> None:
        recording, live, _ = await record(ops, data)
        match = match_branch(await recording.branch(), payloads(live))
        layout = recording.layout
        assert (match.length, match.tip, match.anchors, match.groups) == (
            len(live),
            layout.tip,
            layout.anchors,
            layout.groups,
        )

    asyncio.run(scenario())


def _shaping(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.kind in ('message', 'compaction')]


@_SETTINGS
@given(ops=st.lists(st.sampled_from(OPS), max_size=6), data=st.data())
def test_a_handed_in_history_matches_at_the_deepest_prefix(ops: list[Op], data: st.DataObject) -> None:
    async def scenario() -> None:
        recording, _, seen = await record(ops, data)
        entries = await recording.branch()
        contexts = [(e.seq, await recording.context_at(e.seq)) for e in _shaping(entries)]
        # A history handed in: one the log went through, cut short, perhaps one message changed,
        # perhaps continued with messages the log never saw.
        target = list(data.draw(st.sampled_from(seen)))
        target = target[: data.draw(st.integers(0, len(target)))]
        if target and data.draw(st.booleans()):
            target[data.draw(st.integers(0, len(target) - 1))] = b'{"changed":true}'
        target += [b'{"unseen":%d}' % i for i in range(data.draw(st.integers(0, 2)))]

        match = match_branch(entries, target)

        best_length, best_tip = 0, None
        for seq, context in contexts:
            if context and context == target[: len(context)] and len(context) >= best_length:
                best_length, best_tip = len(context), seq
        assert (match.length, match.tip) == (best_length, best_tip)
        if best_tip is not None:
            assert target[: match.length] == await recording.context_at(best_tip)
            assert len(match.anchors) == match.length
        else:
            assert (match.anchors, match.groups) == ([], set())

    asyncio.run(scenario())


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 12), data=st.data())
def test_a_diverging_history_branches_at_the_first_differing_message(length: int, data: st.DataObject) -> None:
    """Without compactions: the match ends right before the first message that differs."""

    async def scenario() -> None:
        new = _Messages()
        recording = Recording()
        live = [new.new() for _ in range(length)]
        await recording.apply(plan_sync(recording.layout, live), live)
        first_different = data.draw(st.integers(0, length))
        target = [*payloads(live)[:first_different], b'{"other":1}', *payloads(live)[first_different + 1 :]]

        match = match_branch(await recording.branch(), target)

        assert match.length == first_different
        assert match.tip == (recording.layout.anchors[first_different - 1] if first_different else None)
        assert match.anchors == recording.layout.anchors[:first_different]
        assert match.groups == set()

    asyncio.run(scenario())


def test_a_summary_replacing_the_front_is_recognised_as_a_compaction() -> None:
    """The shape `SummarizingCompaction` leaves: a new first message, the rest kept, one more."""

    async def scenario() -> None:
        new = _Messages()
        recording = Recording()
        live = [new.new() for _ in range(6)]
        await recording.apply(plan_sync(recording.layout, live), live)
        anchors = list(recording.layout.anchors)
        summary, extra = new.new(), new.new()
        compacted = [summary, *live[4:], extra]

        plan = plan_sync(recording.layout, compacted)

        assert plan == SyncPlan(new_messages=[extra], summary=[summary], replaced=anchors[:4], kept=anchors[4:])
        await recording.apply(plan, compacted)
        assert await recording.context() == payloads(compacted)
        assert len(await recording.log.transcript(CONVERSATION)) == 7  # every original kept

    asyncio.run(scenario())


@pytest.mark.parametrize('allow_compaction', [True, False])
def test_an_unchanged_history_plans_nothing(allow_compaction: bool) -> None:
    new = _Messages()
    live = [new.new() for _ in range(3)]
    layout = Layout(list(live), [1, 2, 3], set(), 3)
    rebuilt: list[Any] = [live[0], copy.deepcopy(live[1]), live[2]]
    assert plan_sync(layout, live, allow_compaction=allow_compaction) == SyncPlan(new_messages=[])
    assert plan_sync(layout, rebuilt, allow_compaction=allow_compaction) == SyncPlan(new_messages=[])


@pytest.mark.parametrize('first', ['kept', 'equal copy'])
def test_a_sliding_window_stores_no_message_again(first: str) -> None:
    """The shape `SlidingWindowCompaction` leaves: the first prompt (the same object, or rebuilt
    as an equal copy), a window dropped, the rest kept. The first prompt is recognised as the
    recorded one, so the compaction only drops the window."""
    new = _Messages()
    live = [new.new() for _ in range(6)]
    layout = Layout(list(live), [1, 2, 3, 4, 5, 6], set(), 6)
    extra = new.new()
    head = live[0] if first == 'kept' else copy.deepcopy(live[0])
    plan = plan_sync(layout, [head, *live[3:], extra])
    assert plan == SyncPlan(new_messages=[extra], summary=[], replaced=[2, 3], kept=[1, 4, 5, 6])


def test_a_message_both_in_the_summary_and_after_it_is_not_kept_twice() -> None:
    """Regression (found by the properties): a history holding one message object twice, then
    rewritten so that one occurrence falls in the summary and the other after it. The message is
    replaced by the summary, so it cannot also be kept: the summary must reach past it."""

    async def scenario() -> None:
        new = _Messages()
        recording = Recording()
        first = new.new()
        live: list[ModelMessage] = [first]
        await recording.apply(plan_sync(recording.layout, live), live)
        live = [first, first]  # a processor re-adding the first message to a short window
        await recording.apply(plan_sync(recording.layout, live), live)
        inserted = new.new()
        live = [first, inserted, first]

        plan = plan_sync(recording.layout, live)

        assert plan.summary == live and plan.kept == [] and plan.new_messages == []
        assert set(plan.replaced) == set(recording.layout.anchors)
        await recording.apply(plan, live)
        assert await recording.context() == payloads(live)

    asyncio.run(scenario())


def test_a_history_other_than_the_remembered_one_is_not_recalled() -> None:
    """A finished run's layout is recalled for a history of the same messages (the last one the
    very object recorded, unchanged since), and for nothing else."""
    new = _Messages()
    messages = [new.new() for _ in range(4)]
    for message in messages:
        message.run_id = 'finished-run'
    recent = RecentRuns()
    recent.remember(Layout(list(messages), [1, 2, 3, 4], set(), 4), encode_message(messages[-1]))
    recalled = recent.recall(list(messages))
    assert recalled is not None and recalled.messages == messages and recalled.anchors == [1, 2, 3, 4]
    assert recent.recall([*messages[:2], copy.deepcopy(messages[2]), messages[3]]) is not None  # an equal copy
    assert recent.recall([*messages[:3], copy.deepcopy(messages[3])]) is None  # the last one is another object
    assert recent.recall([messages[0], new.new(), *messages[2:]]) is None  # another message inside
    assert recent.recall(messages[1:]) is None  # shorter
    messages[-1].parts.append(TextPart('edited after it was recorded'))
    assert recent.recall(list(messages)) is None
