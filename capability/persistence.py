"""`EventLogPersistence`: a pydantic-ai capability that appends every run to an event log as it happens.

Each message is appended once, at the moment pydantic-ai has made it final, so the log replays
a run byte for byte (`run_messages(run_id)` == `result.all_messages()`) and a process killed
mid-run loses at most the step in flight. Where each message becomes final was measured on
pydantic-ai-slim 2.62 and is pinned by the tests (`tests/capability/test_persistence.py`):

- `before_model_request`: the request at the end of `RunContext.messages` is final; it is
  appended before the model sees it.
- `after_node_run` of a `ModelRequestNode`: the response is final (it is stamped after
  `after_model_request`, so that hook is too early).
- `after_node_run` of a `CallToolsNode` that ends the run: the closing tool-return request is final.
- the end of `wrap_run`: `result.all_messages()` holds what no node boundary showed, such as the
  last response of `run_stream`.

A run threaded with `message_history` stores only what it adds: its `run_started` entry points
at the stored branch the history continues. A compaction that rewrites the live history is
recorded as a `compaction` entry, never as originals.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any, Literal

from pydantic_ai import CallToolsNode, ModelRequestNode
from pydantic_ai.capabilities import AbstractCapability, durable_operation
from pydantic_ai.capabilities.abstract import (
    AgentNode,
    NodeResult,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_ai.usage import RunUsage

from capability._persistence_sync import Layout, SyncPlan, match_branch, plan_sync
from eventlog import (
    Appended,
    EventLog,
    EventLogError,
    NewEntry,
    compaction_entry,
    encode_message,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
)

__all__ = ['EventLogPersistence', 'EventLogPersistenceError', 'EventLogPersistenceWarning', 'OnError']

OnError = Literal['raise', 'warn']
"""What a run does when the log cannot be written: fail (`'raise'`) or warn once and go on (`'warn'`)."""

_ACTIVE_RUN: ContextVar[str | None] = ContextVar('eventlog_persistence_active_run', default=None)
"""The run whose `wrap_run` encloses the current task: an agent run from inside another agent's
tool finds its parent here without the caller passing anything."""

_CACHE_SIZE = 16
"""Recently recorded histories remembered per capability, so the next run threaded from one of
them finds its branch without reading the log."""

_CANDIDATE_RUNS = 4
"""Runs tried, newest first, when a handed-in history has to be matched against the log."""


class EventLogPersistenceError(EventLogError):
    """The event log could not record the run; with `on_error='raise'` the run fails with this."""


class EventLogPersistenceWarning(UserWarning):
    """The event log could not record (all of) a run and `on_error='warn'` let it continue."""


@dataclass(slots=True)
class WireEntry:
    """One entry to append, in a form a durable engine can serialize (the run ids travel apart)."""

    kind: Literal['message', 'run_started', 'run_finished', 'compaction', 'tool_effect']
    payload: bytes
    key: str
    parent: int | None = None
    inherited: bool = False


@dataclass(slots=True)
class _Remembered:
    layout: Layout
    last_payload: bytes


class _History:
    """Recently recorded live histories by the identity of their last message (an LRU)."""

    def __init__(self) -> None:
        self._items: OrderedDict[int, _Remembered] = OrderedDict()

    def remember(self, layout: Layout, last_payload: bytes | None = None) -> None:
        """Keep `layout` (its last message encodes to `last_payload`, when known)."""
        if not layout.messages or layout.tip is None:
            return
        last = layout.messages[-1]
        # The run that built `layout` is over and never touches it again, so it is kept as is.
        payload = last_payload if last_payload is not None else encode_message(last)
        self._items[id(last)] = _Remembered(layout, payload)
        self._items.move_to_end(id(last))
        while len(self._items) > _CACHE_SIZE:
            self._items.popitem(last=False)

    def recall(self, history: Sequence[ModelMessage]) -> Layout | None:
        """The layout of `history` if it is exactly a history recorded here (same objects, unchanged)."""
        found = self._items.get(id(history[-1]))
        if found is None:
            return None
        layout = found.layout
        if (
            layout.messages[-1] is not history[-1]
            or len(layout.messages) != len(history)
            or layout.messages != (history if isinstance(history, list) else list(history))
            or encode_message(history[-1]) != found.last_payload
        ):
            return None
        return Layout(list(layout.messages), list(layout.anchors), set(layout.groups), layout.tip)


@dataclass(slots=True)
class _RunState:
    """What one run has recorded so far; lives on the capability instance `for_run` returns."""

    layout: Layout = field(default_factory=Layout)
    pending: list[WireEntry] = field(default_factory=list[WireEntry])
    started: bool = False
    disabled: bool = False
    run_id: str = ''
    conversation_id: str = ''
    parent_run_id: str | None = None
    messages: int = 0
    compactions: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict[str, int])
    live: list[ModelMessage] | None = None
    sent: tuple[ModelMessage, bytes] | None = None
    encoded: tuple[ModelMessage, bytes] | None = None
    """The last message recorded by this run and its payload, to spare encoding it again."""


@dataclass
class EventLogPersistence(AbstractCapability[AgentDepsT]):
    """Append every message of every run to an event log the moment it is final.

    Also records each run's life (`run_started` with the run and conversation ids pydantic-ai
    assigned, the agent's name, `metadata` and the enclosing agent run if any; `run_finished`
    as completed, failed or cancelled, with the token usage) and a `tool_effect` entry before
    and after every tool call, so that after a crash an application can tell which calls may
    have had side effects.

    Every append carries a deterministic idempotency key and goes through a durable operation,
    so a durable engine that re-executes a step appends nothing twice.

    Args:
        log: The event log to append to.
        agent_name: Recorded on each run; defaults to the agent's `name`.
        metadata: Recorded on each run's `run_started` entry.
        on_error: `'raise'` (default) fails the run with `EventLogPersistenceError` when the log
            cannot be written; `'warn'` emits one `EventLogPersistenceWarning` per run and lets
            the run go on unrecorded from that point.
    """

    log: EventLog
    _: KW_ONLY
    agent_name: str | None = None
    metadata: Mapping[str, str] | None = None
    on_error: OnError = 'raise'
    id: str | None = 'eventlog_persistence'
    """Stable, because durable engines find the capability's operations by it."""

    _recent: _History = field(default_factory=_History, init=False, repr=False, compare=False)
    _state: _RunState = field(default_factory=_RunState, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.on_error not in ('raise', 'warn'):
            raise ValueError(f"on_error must be 'raise' or 'warn', got {self.on_error!r}")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not buildable from a spec: it needs a live log."""
        return None

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with fresh per-run state that shares the log and the recent-history memory."""
        run = copy.copy(self)
        run._state = _RunState()
        return run

    # --- run lifecycle -----------------------------------------------------------------------

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Mark this run as the active one (for nested runs) and record how it ends.

        The end is recorded here rather than in `after_run`/`on_run_error` because only
        `wrap_run` sees every ending, cancellation included, and the final result.
        """
        state = self._state
        state.parent_run_id = _ACTIVE_RUN.get()
        token = _ACTIVE_RUN.set(ctx.run_id)
        try:
            try:
                result = await handler()
            except BaseException as error:
                await self._record_failure(ctx, error)
                raise
            await self._finish(ctx, result.all_messages(), status='completed', error=None, usage=_result_usage(result))
            return result
        finally:
            _ACTIVE_RUN.reset(token)

    async def before_run(self, ctx: RunContext[AgentDepsT]) -> None:
        """Find what the handed-in history continues and prepare the `run_started` entry."""
        state = self._state
        state.run_id = ctx.run_id or ''
        state.conversation_id = ctx.conversation_id or state.run_id
        state.started = True
        history = list(ctx.messages)
        if history and ctx.prompt is None and isinstance(history[-1], ModelRequest):
            # Resuming without a prompt: pydantic-ai sends (a copy of) the trailing request as this
            # run's own request, so it is recorded as this run's, not as inherited history.
            history = history[:-1]
        layout, unseen = await self._resolve_history(history)
        state.layout = layout
        agent_name = self.agent_name
        if agent_name is None and ctx.agent is not None:
            agent_name = ctx.agent.name
        started = run_started_entry(
            conversation_id=state.conversation_id,
            run_id=state.run_id,
            agent_name=agent_name,
            parent_run_id=state.parent_run_id,
            metadata=self.metadata,
            parent=layout.tip,
        )
        state.pending.append(WireEntry('run_started', started.payload, 'start', parent=layout.tip))
        if unseen:
            wire = [
                WireEntry('message', encode_message(m), f'inherited:{i}', inherited=True) for i, m in enumerate(unseen)
            ]
            seqs = await self._write(wire, list(unseen))
            if seqs is not None:
                layout.messages.extend(unseen)
                layout.anchors.extend(seqs[-len(unseen) :])
                layout.tip = seqs[-1]

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Append the request (and anything else new) before the model is called.

        A request pydantic-ai has not stamped with the run id yet (a resumed request: it is stamped,
        and given its instructions, after the request hooks) is not final; it is recorded with its
        response instead.
        """
        state = self._state
        live = ctx.messages
        if live and isinstance(live[-1], ModelRequest) and live[-1].run_id is None:
            await self._sync(live, upto=len(live) - 1)
            return request_context
        await self._sync(live)
        if live:
            state.sent = (live[-1], self._payload_of(live[-1]))
        return request_context

    async def after_node_run(
        self, ctx: RunContext[AgentDepsT], *, node: AgentNode[AgentDepsT], result: NodeResult[AgentDepsT]
    ) -> NodeResult[AgentDepsT]:
        """Append the response a `ModelRequestNode` produced (final only now), or the closing
        tool-return request of a `CallToolsNode` that ends the run."""
        if isinstance(node, ModelRequestNode):
            self._check_sent()
            await self._sync(ctx.messages)
        elif isinstance(node, CallToolsNode):
            await self._sync(ctx.messages)
        return result

    async def wrap_tool_execute(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Record `started` before the tool runs and `completed`/`failed` after, whatever it raises."""
        state = self._state
        occurrence = state.tool_calls.get(call.tool_call_id, 0)
        state.tool_calls[call.tool_call_id] = occurrence + 1
        key = f'tool:{call.tool_call_id}:{occurrence}'
        await self._tool_effect(call, tool_def, key, 'started', None)
        try:
            result = await handler(args)
        except BaseException as error:
            await self._tool_effect(call, tool_def, key, 'failed', _describe(error))
            raise
        await self._tool_effect(call, tool_def, key, 'completed', None)
        return result

    # --- recording ---------------------------------------------------------------------------

    async def _tool_effect(
        self,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        key: str,
        status: Literal['started', 'completed', 'failed'],
        error: str | None,
    ) -> None:
        state = self._state
        entry = tool_effect_entry(
            conversation_id=state.conversation_id,
            run_id=state.run_id,
            tool_call_id=call.tool_call_id,
            tool_name=tool_def.name,
            status=status,
            error=error,
        )
        await self._write([WireEntry('tool_effect', entry.payload, f'{key}:{status}')])

    async def _sync(
        self,
        live: list[ModelMessage],
        *,
        upto: int | None = None,
        closing: WireEntry | None = None,
        unwinding: bool = False,
    ) -> None:
        """Append what `live[:upto]` has that the log does not, plus `closing`, in one transaction."""
        state = self._state
        if not state.started:
            return
        state.live = live
        final = live if upto is None else live[:upto]
        plan = plan_sync(state.layout, final, allow_compaction=not unwinding)
        wire = self._plan_entries(plan)
        if closing is not None:
            wire.append(closing)
        if not wire and not state.pending:
            return
        offset = len(wire) - len(plan.new_messages) - (closing is not None)
        aligned: list[ModelMessage | None] = [None] * offset + list(plan.new_messages)
        seqs = await self._write(wire, aligned)
        if seqs is None or unwinding:
            return
        first = len(seqs) - len(wire)
        self._advance(plan, final, seqs[first : len(seqs) - (closing is not None)])

    def _plan_entries(self, plan: SyncPlan) -> list[WireEntry]:
        state = self._state
        wire: list[WireEntry] = []
        if plan.summary is not None:
            entry = compaction_entry(
                conversation_id=state.conversation_id, run_id=state.run_id, replaced=plan.replaced, summary=plan.summary
            )
            wire.append(WireEntry('compaction', entry.payload, f'compaction:{state.compactions}'))
            state.compactions += 1
        for message in plan.new_messages:
            payload = encode_message(message)
            wire.append(WireEntry('message', payload, f'msg:{state.messages}'))
            state.messages += 1
            state.encoded = (message, payload)
        return wire

    def _payload_of(self, message: ModelMessage) -> bytes:
        """`message` as pydantic-ai JSON, reusing the payload just recorded for it."""
        encoded = self._state.encoded
        if encoded is not None and encoded[0] is message:
            return encoded[1]
        return encode_message(message)

    def _advance(self, plan: SyncPlan, live: list[ModelMessage], seqs: list[int]) -> None:
        """Update the layout once the plan's entries are committed (`seqs` are theirs, in order)."""
        layout = self._state.layout
        new_count = len(plan.new_messages)
        new_anchors = seqs[len(seqs) - new_count :] if new_count else []
        if plan.summary is not None:
            compaction_seq = seqs[0]
            layout.groups.add(compaction_seq)
            layout.anchors = [compaction_seq] * len(plan.summary) + plan.kept + new_anchors
            layout.tip = compaction_seq
            layout.messages = list(live)
        else:
            layout.anchors.extend(new_anchors)
            layout.messages.extend(plan.new_messages)
        if new_anchors:
            layout.tip = new_anchors[-1]

    def _check_sent(self) -> None:
        """Warn when the request recorded before sending was changed afterwards (an upgrade of
        pydantic-ai that stamps requests later, or a hook that edits them after this one)."""
        sent = self._state.sent
        self._state.sent = None
        if sent is not None and encode_message(sent[0]) != sent[1]:
            warnings.warn(
                'a model request changed after EventLogPersistence recorded it in before_model_request; '
                'the log holds the request as it was then. List EventLogPersistence after capabilities '
                'that edit requests.',
                EventLogPersistenceWarning,
                stacklevel=2,
            )

    async def _finish(
        self,
        ctx: RunContext[AgentDepsT],
        live: list[ModelMessage],
        *,
        status: Literal['completed', 'failed', 'cancelled'],
        error: str | None,
        usage: RunUsage,
    ) -> None:
        state = self._state
        if not state.started:
            return
        finished = run_finished_entry(
            conversation_id=state.conversation_id, run_id=state.run_id, status=status, error=error, usage=_usage(usage)
        )
        closing = WireEntry('run_finished', finished.payload, 'finish')
        await self._sync(live, closing=closing, unwinding=status != 'completed')
        if status == 'completed' and not state.disabled:
            last = state.layout.messages[-1] if state.layout.messages else None
            self._recent.remember(state.layout, None if last is None else self._payload_of(last))

    async def _record_failure(self, ctx: RunContext[AgentDepsT], error: BaseException) -> None:
        """Record what a failing run produced and how it ended, never hiding the run's own error."""
        state = self._state
        if not state.started or state.disabled:
            return
        cancelled = isinstance(error, (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit))
        live = state.live if state.live is not None else list(ctx.messages)
        try:
            await self._finish(
                ctx,
                live,
                status='cancelled' if cancelled else 'failed',
                error=_describe(error),
                usage=ctx.usage,
            )
        except EventLogPersistenceError as secondary:
            if secondary is not error:
                error.add_note(f'EventLogPersistence could not record the failure either: {secondary}')

    async def _write(self, entries: list[WireEntry], messages: Sequence[ModelMessage | None] = ()) -> list[int] | None:
        """Append pending and `entries` in one transaction; `None` if the log failed and
        `on_error='warn'` (the run then goes on unrecorded).

        `messages[i]`, when given, is the live message `entries[i]` records. A step executed
        again (a durable engine recovering a run) finds its entries already in the log, possibly
        with other bytes (a request rebuilt with a new timestamp, a tool that returned something
        else): the live message then takes the recorded content, so the run goes on from what
        the model was actually sent and its result still replays byte for byte.
        """
        state = self._state
        if state.disabled:
            return None
        batch = [*state.pending, *entries]
        try:
            appended = await self._append(run_id=state.run_id, conversation_id=state.conversation_id, entries=batch)
            skip = len(state.pending)
            state.pending.clear()
            for index, message in enumerate(messages):
                seq, digest = appended[skip + index]
                if message is not None and digest != _digest(entries[index].payload):
                    state.encoded = None  # the message takes the recorded content
                    await self._adopt(message, seq)
        except (EventLogError, OSError) as exc:
            self._failed(exc)
            return None
        return [seq for seq, _ in appended]

    async def _adopt(self, message: ModelMessage, seq: int) -> None:
        """Give the live `message` the content of the `message` entry `seq` recorded for it."""
        entry = await self.log.get_entry(seq)
        if entry is None or entry.kind != 'message':
            raise EventLogPersistenceError(
                f'run {self._state.run_id!r} was recorded differently: entry {seq} is not the message it expects'
            )
        recorded = ModelMessagesTypeAdapter.validate_json(b'[' + entry.payload + b']')[0]
        if type(recorded) is not type(message):
            raise EventLogPersistenceError(
                f'run {self._state.run_id!r} diverged from its record: entry {seq} holds a {recorded.kind} '
                f'where the run now has a {message.kind}'
            )
        for f in fields(message):
            setattr(message, f.name, getattr(recorded, f.name))

    def _failed(self, exc: BaseException) -> None:
        state = self._state
        message = f'the event log could not record run {state.run_id!r}: {exc}'
        if self.on_error == 'warn':
            state.disabled = True
            warnings.warn(f'{message}; the run goes on unrecorded', EventLogPersistenceWarning, stacklevel=3)
            return
        if isinstance(exc, EventLogPersistenceError):
            raise exc
        raise EventLogPersistenceError(message) from exc

    @durable_operation('append')
    async def _append(self, *, run_id: str, conversation_id: str, entries: list[WireEntry]) -> list[tuple[int, str]]:
        """The one write: a durable operation, so an engine journals it, and idempotent by key,
        so re-executing it after a crash appends nothing twice.

        Returns each entry's `seq` and, for messages, a digest of the payload the log holds (an
        earlier attempt's, when the step ran before); a journaled result keeps the digests of the
        attempt that wrote the entries.
        """
        batch = [
            NewEntry(
                conversation_id=conversation_id,
                run_id=run_id,
                kind=e.kind,
                payload=e.payload,
                parent=e.parent,
                idempotency_key=e.key,
                inherited=e.inherited,
                prevalidated=e.kind == 'message',
            )
            for e in entries
        ]
        seqs = await self.log.append_many(batch)
        # A log that does not report repeats (not an `Appended`): what was offered counts as held.
        held = seqs.recorded if isinstance(seqs, Appended) else {}
        return [
            (seq, _digest(held.get(index, e.payload)) if e.kind == 'message' else '')
            for index, (seq, e) in enumerate(zip(seqs, entries, strict=True))
        ]

    # --- threading -------------------------------------------------------------------------------

    async def _resolve_history(self, history: list[ModelMessage]) -> tuple[Layout, list[ModelMessage]]:
        """The layout of the stored branch `history` continues, and the messages the log lacks."""
        if not history:
            return Layout(), []
        recalled = self._recent.recall(history)
        try:
            # One cheap read guards against a branch deleted since it was remembered.
            if recalled is not None and recalled.tip is not None and await self.log.get_entry(recalled.tip):
                return recalled, []
            return await self._match_in_log(history)
        except (EventLogError, OSError) as exc:
            self._failed(exc)
            return Layout(), []

    async def _match_in_log(self, history: list[ModelMessage]) -> tuple[Layout, list[ModelMessage]]:
        """Match `history` against the branches of the runs it names (newest first) and the
        latest run of its conversation; keep the deepest exact match."""
        payloads = [encode_message(m) for m in history]
        candidates: list[str] = []
        for message in reversed(history):
            run_id = getattr(message, 'run_id', None)
            if isinstance(run_id, str) and run_id not in candidates:
                candidates.append(run_id)
                if len(candidates) >= _CANDIDATE_RUNS:
                    break
        latest = await self.log.list_runs(conversation_id=self._state.conversation_id)
        if latest and latest[-1].run_id not in candidates:
            candidates.append(latest[-1].run_id)
        best = None
        for run_id in candidates:
            run = await self.log.get_run(run_id)
            if run is None:
                continue
            match = match_branch(await self.log.branch(run.last_seq), payloads)
            if best is None or match.length > best.length:
                best = match
            if match.length == len(history):
                break
        if best is None or best.length == 0:
            return Layout(), history
        layout = Layout(history[: best.length], best.anchors, best.groups, best.tip)
        return layout, history[best.length :]


def _result_usage(result: AgentRunResult[Any]) -> RunUsage:
    """`result.usage`: a property in pydantic-ai 2.62 and later (calling it is deprecated), a method before."""
    usage: Any = result.usage
    return usage if isinstance(usage, RunUsage) else usage()


def _digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def _describe(error: BaseException) -> str:
    text = str(error)
    return f'{type(error).__name__}: {text}' if text else type(error).__name__


_USAGE_ALWAYS = frozenset({'requests', 'tool_calls', 'input_tokens', 'output_tokens'})


def _usage(usage: RunUsage) -> dict[str, int]:
    """The run's integer usage counters (the four main ones always, the others when non-zero)."""
    out: dict[str, int] = {}
    for f in fields(usage):
        value = getattr(usage, f.name)
        if isinstance(value, int) and not isinstance(value, bool) and (value or f.name in _USAGE_ALWAYS):
            out[f.name] = value
    return out
