"""`RunRecorder`: what one agent run has recorded in the event log, and the writes that record more.

`EventLogPersistence.wrap_run` creates one recorder per run; the capability's hooks say *when*
something is final and the recorder records it: it keeps the run's `Layout` (the live history
as recorded, each message with its anchor), turns `plan_sync`'s plans into entries, appends
them in one transaction per sync through the capability's durable `append` operation, and
moves the layout on once they are committed. Each entry to append travels with the live
message it records (`Outgoing`), so nothing is matched up by position afterwards.

The recorder dies with its run. What outlives it is `RecentRuns`: the layouts the last runs
left, so that a run threaded with `message_history=result.all_messages()` continues from them
without reading the log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal, Protocol

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from pydantic_ai.usage import RunUsage

from capability._equivalence import Canonical, canonical, same_message
from capability._persistence_sync import BranchMatch, Layout, SyncPlan, advance, match_branch, plan_sync
from capability._redaction import Redaction
from eventlog import (
    DurableError,
    Entry,
    EventLog,
    EventLogError,
    InvalidArgumentError,
    RecallInfo,
    RunLeaseError,
    compaction_entry,
    encode_message,
    recall_entry,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
    top_level_runs,
)

__all__ = [
    'EventLogPersistenceError',
    'EventLogPersistenceWarning',
    'OnError',
    'Outgoing',
    'RecentRuns',
    'RunRecorder',
    'WireEntry',
    'describe',
    'digest',
]

OnError = Literal['raise', 'warn']
"""What a run does when the log cannot be written: fail (`'raise'`) or warn once and go on (`'warn'`)."""

_CACHE_SIZE = 16
"""Finished runs whose layouts are remembered per capability."""

_CANDIDATE_RUNS = 4
"""Runs tried, newest first, when a handed-in history has to be matched against the log (those
its messages name; when they do not hold it exactly, this many of its conversation's latest)."""


class EventLogPersistenceError(EventLogError):
    """The event log could not record the run; with `on_error='raise'` the run fails with this."""


class EventLogPersistenceWarning(UserWarning):
    """The event log could not record (all of) a run and `on_error='warn'` let it continue."""


class _BranchGone(Exception):
    """The run's first write was refused because the remembered branch it continues is gone."""


@dataclass(slots=True)
class WireEntry:
    """One entry to append, in a form a durable engine can serialize (the run ids travel apart)."""

    kind: Literal['message', 'run_started', 'run_finished', 'compaction', 'tool_effect', 'recall']
    payload: bytes
    key: str
    parent: int | None = None
    inherited: bool = False


@dataclass(slots=True)
class Outgoing:
    """An entry to append, with the live message it records (`None` for entries of other kinds).

    Only `entry` crosses the durable boundary; `message` is what takes the recorded content when
    a step executed again finds other bytes in the log, and what joins the layout once committed.
    """

    entry: WireEntry
    message: ModelMessage | None = None


class Append(Protocol):
    """The capability's durable append operation: each entry's `seq`, and a digest of what the
    log holds for each `message` entry (`''` for the other kinds)."""

    async def __call__(
        self, *, run_id: str, conversation_id: str, entries: list[WireEntry]
    ) -> list[tuple[int, str]]: ...  # pragma: no cover - a protocol


@dataclass(slots=True)
class _Resumed:
    """A client's copy of a recorded request that a run resumes from (a regenerated answer)."""

    seq: int
    """The recorded request's entry: where the run branches off if its request is that one."""
    original: Canonical
    fallback: int | None
    """Where the run branches off otherwise: the tip of the history before the request."""


@dataclass(slots=True)
class _Remembered:
    layout: Layout
    last_payload: bytes


class RecentRuns:
    """The layouts the last finished runs left, by the run id their last message carries (an LRU).

    This is the one piece of recording that outlives a run: the next run, threaded with the
    history the finished one returned, would otherwise read the whole branch back from the log
    to find where it continues, a cost that grows with the conversation.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, _Remembered] = OrderedDict()

    def remember(self, layout: Layout, last_payload: bytes) -> None:
        """Keep `layout`, whose last message encodes to `last_payload`."""
        if not layout.messages or layout.tip is None:
            return
        run_id = getattr(layout.messages[-1], 'run_id', None)
        if not isinstance(run_id, str):
            return
        # The run that built `layout` is over and never touches it again, so it is kept as is.
        self._items[run_id] = _Remembered(layout, last_payload)
        self._items.move_to_end(run_id)
        while len(self._items) > _CACHE_SIZE:
            self._items.popitem(last=False)

    def recall(
        self, history: Sequence[ModelMessage], encode: Callable[[ModelMessage], bytes] = encode_message
    ) -> Layout | None:
        """A copy of the remembered layout `history` is exactly (the same message objects, the
        last one unchanged since it was recorded), else `None`."""
        run_id = getattr(history[-1], 'run_id', None)
        found = self._items.get(run_id) if isinstance(run_id, str) else None
        if found is None:
            return None
        layout = found.layout
        if (
            layout.messages[-1] is not history[-1]
            or len(layout.messages) != len(history)
            or layout.messages != (history if isinstance(history, list) else list(history))
            or encode(history[-1]) != found.last_payload
        ):
            return None
        return Layout(list(layout.messages), list(layout.anchors), set(layout.groups), layout.tip)


@dataclass(slots=True)
class RunRecorder:
    """Records one agent run: its `run_started` entry, its messages the moment the capability
    says they are final, its compactions, tool effects and end.

    Every write goes through `append`, the run capability's durable operation. A failing log
    raises `EventLogPersistenceError` (`on_error='raise'`) or warns once and turns the recorder
    off (`'warn'`).
    """

    log: EventLog
    append: Append
    on_error: OnError
    recent: RecentRuns
    run_id: str
    conversation_id: str
    agent_name: str | None = None
    metadata: Mapping[str, str] | None = None
    parent_run_id: str | None = None
    """The run whose tool started this one, if any."""
    redaction: Redaction = field(default_factory=Redaction)
    """Applied to every message before it is encoded for the log (`EventLogPersistence(redact=...)`)."""
    owner: object = None
    """The capability whose hooks drive this recorder (how they find it among a task's recorders)."""

    layout: Layout = field(default_factory=Layout)
    pending: list[Outgoing] = field(default_factory=list[Outgoing])
    """Written with the next transaction (the `run_started` entry goes with the first request)."""
    started: bool = False
    disabled: bool = False
    messages: int = 0
    compactions: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict[str, int])
    recalls: int = 0
    live: list[ModelMessage] | None = None
    """The live history as of the last sync: the run's own list, which hooks after the run lack."""
    sent: tuple[ModelMessage, bytes] | None = None
    """The request recorded before the model was called and its payload, to check it was sent unchanged."""
    last: Outgoing | None = None
    """The last message planned, to spare encoding it again."""
    unchecked: list[ModelMessage] | None = None
    """The handed-in history, while the remembered branch it continues was taken without reading
    the log (`start(check_branch=False)`): the run's first write checks the branch still exists
    (its `run_started` entry names the branch's tip as its parent, which the log verifies), and a
    write refused because that tip is gone matches this history against the log and writes again."""
    copies: dict[int, Canonical] = field(default_factory=dict[int, Canonical])
    """Positions of the layout holding a client's rebuilt copy of a recorded message (matched by
    `same_message`, not byte for byte), with the original: a hook that rewrites such a message
    into another copy of the original (a system prompt put back) rewrites nothing recorded."""
    resumed: _Resumed | None = None
    """The run resumes from a client's copy of a recorded request, decided when the request is final."""

    # --- the run's life ----------------------------------------------------------------------

    async def start(
        self, history: list[ModelMessage], *, check_branch: bool = True, resumed: ModelRequest | None = None
    ) -> None:
        """Find what the handed-in `history` continues, store what the log lacks of it, and
        prepare the `run_started` entry.

        A remembered branch is checked to still exist with a read, unless `check_branch` is false:
        then the run's first write checks it (`unchecked`). Only for runs no durable engine
        journals: a write refused and made again would add a step to the journal. `resumed` is the
        request the run resumes from (the history's last message, left out of `history`).
        """
        self.started = True
        layout, unseen = await self._resolve_history(history, check_branch=check_branch, resumed=resumed)
        self.layout = layout
        started = run_started_entry(
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            agent_name=self.agent_name,
            parent_run_id=self.parent_run_id,
            metadata=self.metadata,
            parent=layout.tip,
        )
        self.pending.append(Outgoing(WireEntry('run_started', started.payload, 'start', parent=layout.tip)))
        await self._store_unseen(layout, unseen)

    async def _store_unseen(self, layout: Layout, unseen: list[ModelMessage]) -> None:
        """Append the handed-in messages the log lacks (with the pending `run_started` entry)."""
        if not unseen:
            return
        items = [
            Outgoing(WireEntry('message', self.redaction.encode(m), f'inherited:{i}', inherited=True), m)
            for i, m in enumerate(unseen)
        ]
        seqs = await self._write(items)
        if seqs is not None:
            advance(layout, SyncPlan(new_messages=list(unseen)), unseen, compaction=None, anchors=seqs)

    async def sync(
        self,
        live: list[ModelMessage],
        *,
        upto: int | None = None,
        closing: WireEntry | None = None,
        unwinding: bool = False,
    ) -> None:
        """Append what `live[:upto]` has that the log does not, plus `closing`, in one transaction."""
        if not self.started:
            return
        self.live = live
        final = live if upto is None else live[:upto]
        if self.copies:
            self._keep_copies(final)
        plan = plan_sync(self.layout, final, allow_compaction=not unwinding)
        if self.resumed is not None and plan.new_messages and plan.summary is None:
            self._take_resumed(plan)
        items = self._plan_items(plan)
        if closing is not None:
            items.append(Outgoing(closing))
        if not items and not self.pending:
            return
        try:
            seqs = await self._write(items)
        except _BranchGone:
            # Nothing was written: plan again from the branch the history continues in the log.
            self._unplan(items)
            await self._rebase()
            await self.sync(live, upto=upto, closing=closing, unwinding=unwinding)
            return
        except EventLogPersistenceError:
            # The write's outcome is unknown (a commit whose answer was lost): the next sync, the
            # failing run's last record, plans the same messages under the same keys, so what did
            # commit is found by its key rather than appended again.
            self._unplan(items)
            raise
        if seqs is None or unwinding:
            return
        compaction = None
        anchors: list[int] = []
        for item, seq in zip(items, seqs, strict=True):
            if item.message is not None:
                anchors.append(seq)
            elif item.entry.kind == 'compaction':
                compaction = seq
        advance(self.layout, plan, final, compaction=compaction, anchors=anchors)
        if compaction is not None:
            self.copies.clear()  # positions moved

    def _keep_copies(self, final: list[ModelMessage]) -> None:
        """Take into the layout the messages of `final` that replaced a client's copy with another
        copy of the same recorded original (a hook rebuilt it: same position, same content)."""
        messages = self.layout.messages
        for position, original in self.copies.items():
            if position >= len(final) or position >= len(messages) or final[position] is messages[position]:
                continue
            if same_message(canonical(self.redaction.encode(final[position])), original):
                messages[position] = final[position]

    def _take_resumed(self, plan: SyncPlan) -> None:
        """The run's resumed request is final (first of `plan`'s new messages): if it is still the
        recorded request the client's copy matched, it stands for that entry and is not recorded
        again; otherwise the run branches off before it."""
        resumed = self.resumed
        self.resumed = None
        if resumed is None:  # pragma: no cover - checked by the caller
            return
        first = plan.new_messages[0]
        if isinstance(first, ModelRequest) and same_message(canonical(self.redaction.encode(first)), resumed.original):
            self.layout.messages.append(first)
            self.layout.anchors.append(resumed.seq)
            plan.new_messages.pop(0)
            return
        self.layout.tip = resumed.fallback
        for item in self.pending:
            if item.entry.kind == 'run_started':
                item.entry.parent = resumed.fallback

    def note_sent(self, request: ModelMessage) -> None:
        """`request`, just recorded, is what the model is about to be sent."""
        self.sent = (request, self._payload_of(request))

    def check_sent(self) -> None:
        """Warn when the request recorded before sending was changed afterwards (an upgrade of
        pydantic-ai that stamps requests later, or a hook that edits them after this one)."""
        sent = self.sent
        self.sent = None
        if sent is not None and self.redaction.encode(sent[0]) != sent[1]:
            warnings.warn(
                'a model request changed after EventLogPersistence recorded it in before_model_request; '
                'the log holds the request as it was then. List EventLogPersistence after capabilities '
                'that edit requests.',
                EventLogPersistenceWarning,
                stacklevel=2,
            )

    def tool_key(self, tool_call_id: str) -> str:
        """The key prefix of this occurrence of a tool call (a call id may be run more than once)."""
        occurrence = self.tool_calls.get(tool_call_id, 0)
        self.tool_calls[tool_call_id] = occurrence + 1
        return f'tool:{tool_call_id}:{occurrence}'

    async def tool_effect(
        self,
        tool_call_id: str,
        tool_name: str,
        key: str,
        status: Literal['started', 'completed', 'failed'],
        error: str | None = None,
    ) -> None:
        """Record that a tool call started, completed or failed."""
        entry = tool_effect_entry(
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            status=status,
            error=error,
        )
        items = [Outgoing(WireEntry('tool_effect', entry.payload, f'{key}:{status}'))]
        try:
            await self._write(items)
        except _BranchGone:  # the run's first write (a run resumed at its tool calls)
            await self._rebase()
            await self._write(items)

    def recall(self, info: RecallInfo) -> None:
        """Record what a recall capability added to the request about to be sent.

        The entry waits for the run's next write (the response, or the run's end if the model call
        fails), so it costs no commit of its own and lands in the same transaction as what the model
        answered; it follows the request, which was recorded before. A run that has not started
        recording writes nothing.
        """
        if not self.started or self.disabled:
            return
        entry = recall_entry(conversation_id=self.conversation_id, run_id=self.run_id, info=info)
        key = f'recall:{self.recalls}'
        self.recalls += 1
        self.pending.append(Outgoing(WireEntry('recall', entry.payload, key)))

    async def finish(
        self,
        live: list[ModelMessage],
        *,
        status: Literal['completed', 'failed', 'cancelled'],
        error: str | None,
        usage: RunUsage,
    ) -> None:
        """Record what `live` still adds and how the run ended; remember a completed run's layout."""
        if not self.started:
            return
        finished = run_finished_entry(
            conversation_id=self.conversation_id, run_id=self.run_id, status=status, error=error, usage=_usage(usage)
        )
        closing = WireEntry('run_finished', finished.payload, 'finish')
        await self.sync(live, closing=closing, unwinding=status != 'completed')
        if status == 'completed' and not self.disabled and self.layout.messages:
            self.recent.remember(self.layout, self._payload_of(self.layout.messages[-1]))

    async def fail(
        self, error: BaseException, *, cancelled: bool, fallback: list[ModelMessage], usage: RunUsage
    ) -> None:
        """Record what a failing run produced and how it ended, never hiding the run's own error.

        `fallback` is the live history to use when no sync has seen the run's own list yet.
        """
        if not self.started or self.disabled:
            return
        if isinstance(error, RunLeaseError):
            # Another execution holds the run (or took it over from this one, which then appends
            # nothing more): its end is that execution's to record.
            return
        live = self.live if self.live is not None else fallback
        try:
            await self.finish(live, status='cancelled' if cancelled else 'failed', error=describe(error), usage=usage)
        except EventLogPersistenceError as secondary:
            if secondary is not error:
                error.add_note(f'EventLogPersistence could not record the failure either: {secondary}')

    # --- writing -----------------------------------------------------------------------------

    def _plan_items(self, plan: SyncPlan) -> list[Outgoing]:
        items: list[Outgoing] = []
        if plan.summary is not None:
            entry = compaction_entry(
                conversation_id=self.conversation_id,
                run_id=self.run_id,
                replaced=plan.replaced,
                summary=[self.redaction.message(m) for m in plan.summary],
            )
            items.append(Outgoing(WireEntry('compaction', entry.payload, f'compaction:{self.compactions}')))
            self.compactions += 1
        for message in plan.new_messages:
            item = Outgoing(WireEntry('message', self.redaction.encode(message), f'msg:{self.messages}'), message)
            items.append(item)
            self.messages += 1
            self.last = item
        return items

    def _payload_of(self, message: ModelMessage) -> bytes:
        """`message` as pydantic-ai JSON, reusing the payload just recorded for it."""
        last = self.last
        if last is not None and last.message is message:
            return last.entry.payload
        return self.redaction.encode(message)

    async def _write(self, items: list[Outgoing]) -> list[int] | None:
        """Append the pending entries and `items` in one transaction; the `seq`s of `items`, or
        `None` if the log failed and `on_error='warn'` (the run then goes on unrecorded).

        A step executed again (a durable engine recovering a run) finds its entries already in
        the log, possibly with other bytes (a request rebuilt with a new timestamp, a tool that
        returned something else): the live message then takes the recorded content, so the run
        goes on from what the model was actually sent and its result still replays byte for byte.
        """
        if self.disabled:
            return None
        batch = [*self.pending, *items]
        skip = len(self.pending)
        try:
            appended = await self.append(
                run_id=self.run_id, conversation_id=self.conversation_id, entries=[item.entry for item in batch]
            )
            self.pending.clear()
            self.unchecked = None  # the run has started: its parent was an entry of the log
            for item, (seq, held) in zip(batch, appended, strict=True):
                if item.message is not None and held != digest(item.entry.payload):
                    self.last = None  # the message takes the recorded content
                    await self._adopt(item.message, seq)
        except DurableError:
            raise  # a durable run that cannot go on from its journal: not a failure to record
        except (EventLogError, OSError) as exc:
            if isinstance(exc, InvalidArgumentError) and await self._branch_gone():
                raise _BranchGone from None
            self._failed(exc)
            return None
        return [seq for seq, _ in appended[skip:]]

    async def _branch_gone(self) -> bool:
        """Whether a refused write was the run's first, taken from an unchecked remembered branch
        whose tip the log no longer holds (its conversation was deleted since)."""
        if self.unchecked is None:
            return False
        tip = next((o.entry.parent for o in self.pending if o.entry.kind == 'run_started'), None)
        if tip is None:
            return False
        try:
            return await self.log.get_entry(tip) is None
        except (EventLogError, OSError):
            return False  # the refusal is reported as it was

    def _unplan(self, items: list[Outgoing]) -> None:
        """Take back the counters `_plan_items` moved for `items`, which were not written."""
        for item in items:
            if item.message is not None and item.entry.kind == 'message':
                self.messages -= 1
            elif item.entry.kind == 'compaction':
                self.compactions -= 1
        self.last = None

    async def _rebase(self) -> None:
        """Match the unchecked history against the log (its remembered branch is gone), point the
        pending `run_started` entry at what it continues there, and store what the log lacks."""
        history = self.unchecked or []
        self.unchecked = None
        try:
            layout, unseen = await self._match_in_log(history) if history else (Layout(), [])
        except (EventLogError, OSError) as exc:
            self._failed(exc)
            layout, unseen = Layout(), []
        self.layout = layout
        # As in `start`: the inherited messages go with the `run_started` entry alone, anything
        # pending since (a recall record) after them.
        started = [item for item in self.pending if item.entry.kind == 'run_started']
        later = [item for item in self.pending if item.entry.kind != 'run_started']
        for item in started:
            item.entry.parent = layout.tip
        self.pending[:] = started
        try:
            await self._store_unseen(layout, unseen)
        finally:
            self.pending.extend(later)

    async def _adopt(self, message: ModelMessage, seq: int) -> None:
        """Give the live `message` the content of the `message` entry `seq` recorded for it."""
        entry = await self.log.get_entry(seq)
        if entry is None or entry.kind != 'message':
            raise EventLogPersistenceError(
                f'run {self.run_id!r} was recorded differently: entry {seq} is not the message it expects'
            )
        recorded = ModelMessagesTypeAdapter.validate_json(b'[' + entry.payload + b']')[0]
        if type(recorded) is not type(message):
            raise EventLogPersistenceError(
                f'run {self.run_id!r} diverged from its record: entry {seq} holds a {recorded.kind} '
                f'where the run now has a {message.kind}'
            )
        for f in fields(message):
            setattr(message, f.name, getattr(recorded, f.name))

    def _failed(self, exc: BaseException) -> None:
        message = f'the event log could not record run {self.run_id!r}: {exc}'
        if self.on_error == 'warn':
            self.disabled = True
            warnings.warn(f'{message}; the run goes on unrecorded', EventLogPersistenceWarning, stacklevel=3)
            return
        if isinstance(exc, EventLogPersistenceError):
            raise exc
        raise EventLogPersistenceError(message) from exc

    # --- threading -------------------------------------------------------------------------------

    async def _resolve_history(
        self, history: list[ModelMessage], *, check_branch: bool = True, resumed: ModelRequest | None = None
    ) -> tuple[Layout, list[ModelMessage]]:
        """The layout of the stored branch `history` continues, and the messages the log lacks."""
        if resumed is not None and resumed.run_id is not None:
            resumed = None  # pydantic-ai's own request (a run resumed after a failure), not a client's copy
        if not history:
            if resumed is None:
                return Layout(), []
            try:
                return await self._match_in_log(history, resumed)
            except (EventLogError, OSError) as exc:
                self._failed(exc)
                return Layout(), []
        recalled = self.recent.recall(history, self.redaction.encode)
        if recalled is not None and recalled.tip is not None and not check_branch:
            self.unchecked = history  # the first write checks the branch (`_branch_gone`)
            return recalled, []
        try:
            # One cheap read guards against a branch deleted since it was remembered.
            if recalled is not None and recalled.tip is not None and await self.log.get_entry(recalled.tip):
                return recalled, []
            return await self._match_in_log(history, resumed)
        except (EventLogError, OSError) as exc:
            self._failed(exc)
            return Layout(), []

    async def _match_in_log(
        self, history: list[ModelMessage], resumed: ModelRequest | None = None
    ) -> tuple[Layout, list[ModelMessage]]:
        """Match `history` against the log and keep the deepest match.

        First byte for byte, against the branches of the runs it names (newest first) and the
        latest top-level run of its conversation (a sub-agent run recorded under the
        conversation's id, `top_level_runs`, is tried only when `history` names it). When none
        holds all of it (a UI client's rebuilt copies), by `same_message`, against the branches
        of its own conversation's latest top-level runs. `resumed`
        (a client's copy of a request the run resumes from) stands for the message a fully
        matched branch continues with, if it is that message.
        """
        payloads = [self.redaction.encode(m) for m in history]
        candidates: list[str] = []
        for message in reversed(history):
            run_id = getattr(message, 'run_id', None)
            if isinstance(run_id, str) and run_id not in candidates:
                candidates.append(run_id)
                if len(candidates) >= _CANDIDATE_RUNS:
                    break
        latest = top_level_runs(await self.log.list_runs(conversation_id=self.conversation_id))
        if latest and latest[-1].run_id not in candidates:
            candidates.append(latest[-1].run_id)
        own: dict[str, list[Entry]] = {}
        matches: list[BranchMatch] = []
        for run_id in candidates:
            run = await self.log.get_run(run_id)
            if run is None:
                continue
            entries = await self.log.branch(run.last_seq)
            if run.conversation_id == self.conversation_id:
                own[run_id] = entries
            match = match_branch(entries, payloads)
            matches.append(match)
            if match.length == len(history) and resumed is None:
                break
        if not latest and max((m.length for m in matches), default=0) < len(history):
            fork = await self._fork_match(payloads)
            if fork is not None:
                matches.append(fork)
        exact = max((m.length for m in matches), default=0)
        copies = exact < len(history)
        if copies:
            matches = [m for m in matches if m.length == exact]
            targets = [canonical(p) for p in payloads]
            seen: dict[bytes, Canonical] = {}

            def same(target: Canonical, payload: bytes) -> bool:
                original = seen.get(payload)
                if original is None:
                    original = seen[payload] = canonical(payload)
                return same_message(target, original)

            recent = [r for r in reversed(latest) if r.parent_run_id is None][:_CANDIDATE_RUNS]
            for run in recent:
                entries = own.get(run.run_id)
                if entries is None:
                    entries = await self.log.branch(run.last_seq)
                match = match_branch(entries, targets, same)
                if match.length > exact:
                    matches.append(match)
        depth = max((m.length for m in matches), default=0)
        tied = [m for m in matches if m.length == depth]
        best = tied[0] if tied else None
        self.resumed = None
        if resumed is not None and depth == len(history):
            request = canonical(self.redaction.encode(resumed))
            for match in tied:
                following = match.following
                if following is not None and same_message(request, original := canonical(following.payload)):
                    best = match
                    self.resumed = _Resumed(following.seq, original, match.tip)
                    break
        if best is None or (best.length == 0 and self.resumed is None):
            return Layout(), history
        self.copies = (
            {i: canonical(best.payloads[i]) for i in range(best.length) if best.payloads[i] != payloads[i]}
            if copies
            else {}
        )
        tip = self.resumed.seq if self.resumed is not None else best.tip
        layout = Layout(history[: best.length], best.anchors, best.groups, tip)
        return layout, history[best.length :]

    async def _fork_match(self, payloads: list[bytes]) -> BranchMatch | None:
        """The match of a history against what a fork of this conversation inherited, when the
        conversation is a fork no run has continued yet (a fork a conversation store made of
        messages no run of the source names): the run then continues from the `forked_from`
        entry rather than storing the shared history again."""
        conv = await self.log.get_conversation(self.conversation_id)
        if conv is None or conv.forked_from is None:
            return None
        match = match_branch(await self.log.branch(conv.first_seq), payloads)
        if match.length == 0:
            return None
        if match.tip == conv.forked_from.seq:
            return dataclasses.replace(match, tip=conv.first_seq)
        return match


def digest(payload: bytes) -> str:
    """A short digest of a payload, to tell whether the log holds the same bytes."""
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def describe(error: BaseException) -> str:
    """An error as recorded: its type, and its message if it has one."""
    text = str(error)
    return f'{type(error).__name__}: {text}' if text else type(error).__name__


_USAGE_ALWAYS = frozenset({'requests', 'tool_calls', 'input_tokens', 'output_tokens'})
_USAGE_FIELDS: dict[type, tuple[str, ...]] = {}
"""The field names of each usage class seen, read once per process."""


def _usage(usage: RunUsage) -> dict[str, int]:
    """The run's integer usage counters (the four main ones always, the others when non-zero)."""
    names = _USAGE_FIELDS.get(type(usage))
    if names is None:
        names = _USAGE_FIELDS[type(usage)] = tuple(f.name for f in fields(usage))
    out: dict[str, int] = {}
    for name in names:
        value = getattr(usage, name)
        if isinstance(value, int) and not isinstance(value, bool) and (value or name in _USAGE_ALWAYS):
            out[name] = value
    return out
