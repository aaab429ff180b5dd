"""The shape of a conversation as every view shows it: its main line, the branches it took, the
branches it left, and the sub-agent runs started inside its runs' tool calls.

A conversation's runs are read from their records (`EventLogBase.list_runs`), with a few short
reads per run (the entry a run continues from, a run's first message); messages are not read,
except the first two of each branch, which are compared to tell a regenerated turn from an
edited one. `conversation_outline` returns an `Outline`: the marks to print before given entries
(`Mark`), and how deep each run is nested. `eventlog show`, `show --run`, `replay` and the web
viewer's conversation and run pages all take their marks from here, and their wording from
`Mark.text`, so they cannot disagree.

- A **branch**: a run of the conversation's own (not a sub-agent) whose branch point (its
  `run_started` entry's `parent`) is not the tip of the line the conversation was on, the tip of
  the latest earlier run with messages. It is `regenerated` when its first message asks what the
  first message it replaces asked (the same parts), or both are answers (the branch continues from
  the request itself), `edited` otherwise, `branched` when there is
  nothing to compare (no message of the old line follows the branch point). Its mark goes before
  its first message.
- A **branch left**: the old line's first message after the point where the branch turned away;
  its mark goes before that message and names the run that went on elsewhere.
- A **sub-agent** run: one whose `parent_run_id` is a run of the same conversation. Its messages
  are nested one level under its parent's (two under a sub-agent's), never part of the main line,
  and its mark, before its first message, names the parent's tool call it ran in: the call whose
  `tool_effect` `started` entry came last before the sub-agent started and had not ended then.
- A **fork**: a conversation whose history starts with a `forked_from` entry (`fork_mark`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from eventlog.entries import RunRecord
from eventlog_cli.entries import PAYLOAD_LIMIT, MessageView, payload_view

if TYPE_CHECKING:
    from eventlog.entries import ConversationRecord
    from eventlog.log import EventLogBase

__all__ = ['MARK_KINDS', 'Mark', 'MarkKind', 'Outline', 'conversation_outline', 'fork_mark']

MarkKind = Literal['branch', 'left', 'sub-agent', 'fork']
"""What a `Mark` says: a branch starts, a branch was left, a sub-agent run starts, a fork."""

MARK_KINDS: tuple[MarkKind, ...] = ('branch', 'left', 'sub-agent', 'fork')
"""Every `MarkKind`."""

_LINE_KINDS = ('message', 'compaction')
"""The entries that make a conversation's line: a run's tip is the last of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """A note a view prints before an entry: where a branch starts or was left, where a sub-agent
    run starts, or (before the history) that the conversation is a fork."""

    kind: MarkKind
    """What it says (`MarkKind`)."""
    run_id: str | None = None
    """The branching run (`branch`, `left`: the run that went on elsewhere) or the sub-agent run."""
    at: int | None = None
    """`branch`, `left`: the entry the branch continues from (`None`: from the start, no history);
    `sub-agent`: the `tool_effect` entry that started the tool call it ran in; `fork`: the fork point."""
    how: str = ''
    """`branch`, `left`: `regenerated`, `edited` or `branched`; `sub-agent`: the tool's name (empty
    when no open tool call was found); `fork`: the conversation forked from."""
    call_id: str | None = None
    """`sub-agent`: the tool call id."""
    agent: str | None = None
    """`sub-agent`: the sub-agent's name."""
    status: str = ''
    """`sub-agent`: how the run ended (`completed`, `failed`, ...)."""
    left: int | None = None
    """`branch`: the first entry of the branch it leaves, if any."""

    def text(self) -> str:
        """The mark as one line, ids whole: every view prints this wording (escaped by the view)."""
        origin = 'the start' if self.at is None else f'entry #{self.at}'
        if self.kind == 'branch':
            leaves = f'; the branch from #{self.left} on is left' if self.left is not None else ''
            return f'↳ branch from {origin}: {self.how}, run {self.run_id}{leaves}'
        if self.kind == 'left':
            return f'↰ branch left: run {self.run_id} went on from {origin} instead ({self.how})'
        if self.kind == 'fork':
            return f'⑂ forked from {self.how} at entry #{self.at}'
        agent = f' (agent {self.agent})' if self.agent else ''
        where = f'inside tool call {self.how}' if self.how else 'inside a tool call'
        call = f' (call {self.call_id})' if self.call_id else ''
        ended = '' if self.status == 'completed' else f', {self.status}'
        return f'↳ sub-agent run {self.run_id}{agent} {where}{call}{ended}'

    def json(self) -> dict[str, Any]:
        """The mark as JSON data (`replay --json`'s `branch`)."""
        data: dict[str, Any] = {'kind': self.kind, 'run_id': self.run_id, 'at': self.at, 'how': self.how}
        if self.kind == 'branch':
            data['left'] = self.left
        if self.kind == 'sub-agent':
            data.update(call_id=self.call_id, agent=self.agent, status=self.status)
        return data


@dataclass(slots=True)
class Outline:
    """A conversation's marks and nesting (see the module)."""

    marks: dict[int, list[Mark]] = field(default_factory=dict[int, list[Mark]])
    """The marks to print before each entry, by the entry's `seq`."""
    depth: dict[str, int] = field(default_factory=dict[str, int])
    """How deep each sub-agent run is nested (1 under a run of the conversation's own); other runs
    are at depth 0 and not listed."""
    branches: dict[str, Mark] = field(default_factory=dict[str, Mark])
    """The `branch` mark of each run that branched, by run id."""
    sub_agents: dict[str, Mark] = field(default_factory=dict[str, Mark])
    """The `sub-agent` mark of each sub-agent run, by run id."""

    def before(self, seq: int) -> list[Mark]:
        """The marks to print before entry `seq`."""
        return self.marks.get(seq, [])

    def depth_of(self, run_id: str | None) -> int:
        """How deep the run `run_id` is nested (0: a run of the conversation's own, or none)."""
        return 0 if run_id is None else self.depth.get(run_id, 0)

    def add(self, seq: int, mark: Mark) -> None:
        """Print `mark` before entry `seq` (after the marks it has already)."""
        self.marks.setdefault(seq, []).append(mark)


def fork_mark(record: ConversationRecord) -> Mark | None:
    """The `fork` mark of a conversation that was forked, `None` for any other."""
    if record.forked_from is None:
        return None
    return Mark(kind='fork', at=record.forked_from.seq, how=record.forked_from.conversation_id)


class _Reader:
    """The short reads an outline takes, for one conversation."""

    def __init__(self, log: EventLogBase, conversation_id: str) -> None:
        self.log = log
        self.conversation_id = conversation_id

    async def owner(self, seq: int | None) -> str | None:
        """The run of this conversation entry `seq` belongs to (`None`: no entry, another
        conversation's, or no run's)."""
        if seq is None:
            return None
        found = await self.log.get_entry_head(seq, 0)
        if found is None or found[0].conversation_id != self.conversation_id:
            return None
        return found[0].run_id

    async def first_after(self, run_id: str, after: int) -> int | None:
        """The `seq` of the run's first message or compaction after entry `after`."""
        found = await self.log.entry_heads(run_id=run_id, kinds=_LINE_KINDS, after_seq=after, limit=1, payload_limit=0)
        return found[0][0].seq if found else None

    async def same_turn(self, old: int | None, new: int | None) -> str:
        """`regenerated` when the messages `old` and `new` are requests with the same parts, or
        both responses (a new answer to the request the branch continues from), `edited` when they
        differ, `branched` when either is missing or too large to compare."""
        if old is None or new is None:
            return 'branched'
        views: list[MessageView] = []
        for seq in (old, new):
            found = await self.log.get_entry_head(seq, PAYLOAD_LIMIT)
            if found is None or found[1] > PAYLOAD_LIMIT or found[0].kind != 'message' or found[0].erased:
                return 'branched'
            try:
                views.append(payload_view(found[0].payload))
            except ValueError:
                return 'branched'
        first, second = views
        same = first.role == second.role == 'response' or (
            first.role == second.role == 'request' and first.lines() == second.lines()
        )
        return 'regenerated' if same else 'edited'

    async def tool_calls(self, parent: RunRecord) -> list[tuple[int, str, str, str]]:
        """The parent run's `tool_effect` entries: `(seq, status, tool call id, tool name)`."""
        from eventlog_cli._render import tool_effect

        found = await self.log.entry_heads(
            run_id=parent.run_id, kinds=['tool_effect'], after_seq=parent.start_seq, payload_limit=PAYLOAD_LIMIT
        )
        effects: list[tuple[int, str, str, str]] = []
        for entry, _ in found:
            effect = tool_effect(entry)
            if effect is not None:
                effects.append((entry.seq, effect.status, effect.tool_call_id, effect.tool_name))
        return effects


def _open_call(effects: Sequence[tuple[int, str, str, str]], before: int) -> tuple[int, str, str] | None:
    """The tool call started last before entry `before` that had not ended by then."""
    open_calls: dict[str, tuple[int, str, str]] = {}
    for seq, status, call_id, name in effects:
        if seq > before:
            break
        if status == 'started':
            open_calls[call_id] = (seq, call_id, name)
        else:
            open_calls.pop(call_id, None)
    return max(open_calls.values(), default=None)


async def conversation_outline(
    log: EventLogBase, conversation_id: str, runs: Sequence[RunRecord] | None = None
) -> Outline:
    """The marks and nesting of a conversation (`runs`: its run records in start order, when the
    caller has read them already)."""
    if runs is None:
        runs = await log.list_runs(conversation_id=conversation_id)
    reader = _Reader(log, conversation_id)
    outline = Outline()
    by_id = {run.run_id: run for run in runs}
    await _nest(reader, outline, runs, by_id)
    own = [run for run in runs if run.run_id not in outline.depth and run.message_count > 0]
    chain: list[RunRecord] = []
    for run in own:
        first = await reader.first_after(run.run_id, run.start_seq)
        if first is None:
            continue
        point = run.branch_parent
        owner = await reader.owner(point)
        if not chain or (
            owner is not None
            and owner == chain[-1].run_id
            and point is not None
            and await reader.first_after(owner, point) is None
        ):
            chain.append(run)
            continue
        # A branch: find where it leaves the line (the deepest entry the two share), walking back
        # through the runs the branch continues, and the line's first message after that point.
        path = [run]
        index: int | None = None
        steps = 0
        while owner is not None and steps <= len(runs):
            steps += 1
            index = next((i for i, r in enumerate(chain) if r.run_id == owner), None)
            if index is not None:
                break
            earlier = by_id.get(owner)
            if earlier is None:
                break
            if earlier.run_id not in outline.depth:
                path.append(earlier)
            point = earlier.branch_parent
            owner = await reader.owner(point)
        if index is None:
            left = await reader.first_after(chain[0].run_id, chain[0].start_seq)
        else:
            assert point is not None  # an owner was found, so there is a point
            left = await reader.first_after(chain[index].run_id, point)
            if left is None and index + 1 < len(chain):
                left = await reader.first_after(chain[index + 1].run_id, chain[index + 1].start_seq)
        how = await reader.same_turn(left, first)
        mark = Mark(kind='branch', run_id=run.run_id, at=run.branch_parent, how=how, left=left)
        outline.branches[run.run_id] = mark
        outline.add(first, mark)
        if left is not None:
            outline.add(left, Mark(kind='left', run_id=run.run_id, at=run.branch_parent, how=how))
        chain = chain[: 0 if index is None else index + 1] + path[::-1]
    return outline


async def _nest(reader: _Reader, outline: Outline, runs: Sequence[RunRecord], by_id: dict[str, RunRecord]) -> None:
    """Record each sub-agent run's depth and its mark (before its first message)."""
    effects: dict[str, list[tuple[int, str, str, str]]] = {}
    for run in runs:
        parent = by_id.get(run.parent_run_id or '')
        if parent is None or parent.start_seq > run.start_seq:
            continue
        outline.depth[run.run_id] = outline.depth_of(parent.run_id) + 1
        if parent.run_id not in effects:
            effects[parent.run_id] = await reader.tool_calls(parent)
        call = _open_call(effects[parent.run_id], run.start_seq)
        mark = Mark(
            kind='sub-agent',
            run_id=run.run_id,
            at=None if call is None else call[0],
            how='' if call is None else call[2],
            call_id=None if call is None else call[1],
            agent=run.agent_name,
            status=run.status,
        )
        outline.sub_agents[run.run_id] = mark
        first = await reader.first_after(run.run_id, run.start_seq)
        if first is not None:
            outline.add(first, mark)
