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
import warnings
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import CallToolsNode, ModelRequestNode
from pydantic_ai.capabilities import AbstractCapability, ReinjectSystemPrompt, durable_operation
from pydantic_ai.capabilities.abstract import (
    AgentNode,
    CapabilityOrdering,
    NodeResult,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import ModelRequest, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_ai.usage import RunUsage

from capability._checking import CHECKING, Asked, Checking
from capability._recorder import (
    EventLogPersistenceError,
    EventLogPersistenceWarning,
    OnError,
    RecentRuns,
    RunRecorder,
    WireEntry,
    describe,
    digest,
)
from capability._redaction import REDACTED_METADATA_KEY, Redaction, RedactionError, Redactor
from eventlog import Appended, EventLog, EventLogError, InvalidArgumentError, NewEntry
from eventlog.checkpoint import SignerSource, as_signer
from eventlog.log import EventLogBase

__all__ = [
    'REDACTED_METADATA_KEY',
    'EventLogPersistence',
    'EventLogPersistenceError',
    'EventLogPersistenceWarning',
    'OnError',
    'RedactionError',
    'Redactor',
]

_ACTIVE_RUN: ContextVar[str | None] = ContextVar('eventlog_persistence_active_run', default=None)
"""The run whose `wrap_run` encloses the current task: an agent run from inside another agent's
tool finds its parent here without the caller passing anything.

This stays a context variable although each run has its own recorder: the enclosing run may be
another agent's, recorded by another `EventLogPersistence`, and pydantic-ai hands a run nothing
that names the run whose tool started it; the task's context is what the two runs share."""

_RECORDERS: ContextVar[tuple[RunRecorder, ...]] = ContextVar('eventlog_persistence_recorders', default=())
"""The recorders of the runs whose `wrap_run` encloses the current task, innermost last: how another
capability of the same run (`AutoRecall`) records what it added to a request."""


def active_recorders(run_id: str | None) -> list[RunRecorder]:
    """The recorders of `run_id` active in this task: one per `EventLogPersistence` recording it."""
    if run_id is None:
        return []
    return [recorder for recorder in _RECORDERS.get() if recorder.run_id == run_id]


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
        checkpoint_every: Sign a checkpoint (`EventLogBase.checkpoint`, docs/audit.md) each time
            this many more runs recorded by this capability have ended (completed, failed or
            cancelled). Needs `signer` and a log built on `EventLogBase`.
        signer: The `eventlog.checkpoint.Signer` (or its PEM private key file) checkpoints are signed with.
        checkpoint_dir: Also write each checkpoint to `checkpoint-<last seq>.json` in this
            directory (keep it outside the store).
        redact: Applied to a copy of each message (and compaction summary) before it is
            appended; returns the message to store (replace card numbers, bearer tokens...). The
            run itself keeps the original. A stored message the redactor changed carries
            `metadata['eventlog_redacted']` naming it, and replay returns exactly the redacted
            message (docs/erasure.md). A redactor that raises fails the run (nothing unredacted is
            stored); it must be deterministic, as a threaded history is matched by its redacted bytes.
    """

    log: EventLog
    _: KW_ONLY
    agent_name: str | None = None
    metadata: Mapping[str, str] | None = None
    on_error: OnError = 'raise'
    redact: Redactor | None = None
    id: str | None = 'eventlog_persistence'
    """Stable, because durable engines find the capability's operations by it."""
    checkpoint_every: int | None = None
    signer: SignerSource | None = None
    checkpoint_dir: str | Path | None = None

    _ended_runs: list[int] = field(default_factory=lambda: [0], init=False, repr=False, compare=False)
    """Runs ended since the last checkpoint."""

    _recent: RecentRuns = field(default_factory=RecentRuns, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.on_error not in ('raise', 'warn'):
            raise ValueError(f"on_error must be 'raise' or 'warn', got {self.on_error!r}")
        every = self.checkpoint_every
        if every is not None:
            if not isinstance(every, int) or isinstance(every, bool) or every < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
                raise InvalidArgumentError(f'checkpoint_every must be a positive integer, got {every!r}')
            if self.signer is None:
                raise InvalidArgumentError('checkpoint_every needs a signer to sign the checkpoints with')
            if not isinstance(self.log, EventLogBase):
                kind = type(self.log).__name__
                raise InvalidArgumentError(f'checkpoint_every needs a log built on EventLogBase, not {kind}')
            self.signer = as_signer(self.signer)  # a bad key file fails here, not after the first runs
        elif self.signer is not None or self.checkpoint_dir is not None:
            raise InvalidArgumentError('signer and checkpoint_dir are used only with checkpoint_every')
        if self.redact is not None and not callable(self.redact):
            raise InvalidArgumentError(f'redact must be a callable taking and returning a message, not {self.redact!r}')

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not buildable from a spec: it needs a live log."""
        return None

    def get_ordering(self) -> CapabilityOrdering:
        """Inside `ReinjectSystemPrompt` (which the UI adapters add to every run): the request is
        recorded with the system prompt the model is sent, not as it was before the prompt went in."""
        return CapabilityOrdering(wrapped_by=[ReinjectSystemPrompt])

    def _new_recorder(self, ctx: RunContext[AgentDepsT]) -> RunRecorder:
        """The `RunRecorder` of the run `ctx` starts; the log and the memory of recent runs are shared.

        Made in `wrap_run` rather than in a copy of the capability returned by `for_run`: a copy
        would make pydantic-ai rebuild the agent's combined capability for every run."""
        run_id = ctx.run_id or ''
        agent_name = self.agent_name
        if agent_name is None and ctx.agent is not None:
            agent_name = ctx.agent.name
        recorder = RunRecorder(
            log=self.log,
            append=self._dispatch_append,
            on_error=self.on_error,
            recent=self._recent,
            run_id=run_id,
            conversation_id=ctx.conversation_id or run_id,
            agent_name=agent_name,
            metadata=self.metadata,
            parent_run_id=_ACTIVE_RUN.get(),
            redaction=Redaction(self.redact),
            owner=self,
        )
        checking = CHECKING.get()
        if checking is not None and not checking.durable:
            recorder.disabled = True  # re-executed against its recorded messages (`capability.rerun`)
        return recorder

    def _recording(self, ctx: RunContext[AgentDepsT]) -> RunRecorder:
        """This capability's recorder of the run `ctx` belongs to: the innermost one its `wrap_run`
        made in this task's context (pydantic-ai carries the context `wrap_run` set into the run's
        body and its tool calls)."""
        run_id = ctx.run_id or ''
        for recorder in reversed(_RECORDERS.get()):
            if recorder.owner is self and recorder.run_id == run_id:
                return recorder
        raise EventLogPersistenceError(
            f'an EventLogPersistence hook of run {run_id!r} ran outside the wrap_run of that run '
            f'(its recorder is not in this context)'
        )

    # --- run lifecycle -----------------------------------------------------------------------

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Mark this run as the active one (for nested runs) and record how it ends.

        The end is recorded here rather than in `after_run`/`on_run_error` because only
        `wrap_run` sees every ending, cancellation included, and the final result.
        """
        recorder = self._new_recorder(ctx)
        token = _ACTIVE_RUN.set(ctx.run_id)
        recorders = _RECORDERS.set((*_RECORDERS.get(), recorder))
        try:
            try:
                result = await handler()
            except BaseException as error:
                cancelled = isinstance(error, (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit))
                await recorder.fail(error, cancelled=cancelled, fallback=list(ctx.messages), usage=ctx.usage)
                if not cancelled:
                    await self._run_ended(failing=True)
                raise
            await recorder.finish(result.all_messages(), status='completed', error=None, usage=_result_usage(result))
            await self._run_ended(failing=False)
            return result
        finally:
            _RECORDERS.reset(recorders)
            _ACTIVE_RUN.reset(token)

    async def _run_ended(self, *, failing: bool) -> None:
        """Count an ended run and sign a checkpoint every `checkpoint_every` of them.

        A checkpoint that cannot be made fails the run with `EventLogPersistenceError` under
        `on_error='raise'` (unless the run is failing anyway: its own error is kept and this
        becomes a warning); under `'warn'` it is an `EventLogPersistenceWarning`.
        """
        every = self.checkpoint_every
        if every is None or self.signer is None or not isinstance(self.log, EventLogBase) or CHECKING.get():
            return
        self._ended_runs[0] += 1
        if self._ended_runs[0] < every:
            return
        self._ended_runs[0] = 0
        try:
            made = await self.log.checkpoint(self.signer)
            if self.checkpoint_dir is not None:
                await asyncio.to_thread(made.write, Path(self.checkpoint_dir) / f'checkpoint-{made.last_seq:012d}.json')
        except (EventLogError, OSError) as exc:
            message = f'the checkpoint after {every} runs could not be made: {exc}'
            if self.on_error == 'raise' and not failing:
                raise EventLogPersistenceError(message) from exc
            warnings.warn(message, EventLogPersistenceWarning, stacklevel=2)

    async def before_run(self, ctx: RunContext[AgentDepsT]) -> None:
        """Find what the handed-in history continues and prepare the `run_started` entry."""
        history = list(ctx.messages)
        resumed: ModelRequest | None = None
        if history and ctx.prompt is None and isinstance(last := history[-1], ModelRequest):
            # Resuming without a prompt: pydantic-ai sends (a copy of) the trailing request as this
            # run's own request, so it is recorded as this run's, not as inherited history (unless
            # it is a UI client's copy of a request the log holds: a regenerated answer).
            resumed = last
            history.pop()
        # Outside a durable run, the remembered branch is checked by the run's first write rather
        # than by a read of its own (`RunRecorder.unchecked`); a durable run keeps the read, so a
        # refused first write never adds a step to its journal.
        check_branch = not (isinstance(self.log, EventLogBase) and _unjournaled(self.id))
        await self._recording(ctx).start(history, check_branch=check_branch, resumed=resumed)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Append the request (and anything else new) before the model is called.

        A request pydantic-ai has not stamped with the run id yet (a resumed request: it is stamped,
        and given its instructions, after the request hooks) is not final; it is recorded with its
        response instead.
        """
        recorder = self._recording(ctx)
        live = ctx.messages
        if live and isinstance(live[-1], ModelRequest) and live[-1].run_id is None:
            await recorder.sync(live, upto=len(live) - 1)
            return request_context
        await recorder.sync(live)
        if live:
            recorder.note_sent(live[-1])
        return request_context

    async def after_node_run(
        self, ctx: RunContext[AgentDepsT], *, node: AgentNode[AgentDepsT], result: NodeResult[AgentDepsT]
    ) -> NodeResult[AgentDepsT]:
        """Append the response a `ModelRequestNode` produced (final only now), or the closing
        tool-return request of a `CallToolsNode` that ends the run."""
        if isinstance(node, ModelRequestNode):
            recorder = self._recording(ctx)
            recorder.check_sent()
            await recorder.sync(ctx.messages)
        elif isinstance(node, CallToolsNode):
            await self._recording(ctx).sync(ctx.messages)
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
        recorder = self._recording(ctx)
        key = recorder.tool_key(call.tool_call_id)
        await recorder.tool_effect(call.tool_call_id, tool_def.name, key, 'started')
        try:
            result = await handler(args)
        except BaseException as error:
            await recorder.tool_effect(call.tool_call_id, tool_def.name, key, 'failed', describe(error))
            raise
        await recorder.tool_effect(call.tool_call_id, tool_def.name, key, 'completed')
        return result

    # --- the one write -------------------------------------------------------------------------

    async def _dispatch_append(
        self, *, run_id: str, conversation_id: str, entries: list[WireEntry]
    ) -> list[tuple[int, str]]:
        """`_append`, through its durable operation when an engine may dispatch it, else directly.

        The decorator of a durable operation binds the call to the method's signature each time
        (tens of microseconds) only to find, outside a durable run, that it awaits the method
        itself; `_runs_inline` makes the same test first, and anything it cannot tell goes through
        the decorator.
        """
        if _runs_inline(self.id):
            return await self._write_entries(run_id=run_id, conversation_id=conversation_id, entries=entries)
        return await self._append(run_id=run_id, conversation_id=conversation_id, entries=entries)

    @durable_operation('append')
    async def _append(self, *, run_id: str, conversation_id: str, entries: list[WireEntry]) -> list[tuple[int, str]]:
        """The one write: a durable operation, so an engine journals it, and idempotent by key,
        so re-executing it after a crash appends nothing twice.

        Returns each entry's `seq` and, for messages, a digest of the payload the log holds (an
        earlier attempt's, when the step ran before); a journaled result keeps the digests of the
        attempt that wrote the entries.
        """
        return await self._write_entries(run_id=run_id, conversation_id=conversation_id, entries=entries)

    async def _write_entries(
        self, *, run_id: str, conversation_id: str, entries: list[WireEntry]
    ) -> list[tuple[int, str]]:
        """The body of `_append`: check mode answers from the recording, else one `append_many`."""
        checking = CHECKING.get()
        if checking is not None:  # a check re-executes the run from its journal: nothing is written
            return await _recorded_append(checking, run_id, entries)
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
            (seq, digest(held.get(index, e.payload)) if e.kind == 'message' else '')
            for index, (seq, e) in enumerate(zip(seqs, entries, strict=True))
        ]


async def _recorded_append(checking: Checking, run_id: str, entries: list[WireEntry]) -> list[tuple[int, str]]:
    """What an append outside the journal (the run's end, recorded after the durable run returned)
    returns in a check: the recorded entries' seqs and digests, all of them already in the log; an
    entry the recording lacks stops the check there."""
    held = {entry.idempotency_key: entry for entry in await checking.source.entries(run_id=run_id)}
    if any(e.key not in held for e in entries):
        raise checking.stop(Asked(checking.compared + 1, 'eventlog_persistence.append', entries), None)
    return [(held[e.key].seq, digest(held[e.key].payload) if e.kind == 'message' else '') for e in entries]


_UNKNOWN: Any = object()


def _ambient_run_context() -> Callable[[], object] | None:
    """pydantic-ai's reader of the ambient `RunContext` (the one its durable operations consult),
    or `None` where it is not found (then every append goes through the decorator)."""
    try:
        from pydantic_ai._run_context import get_current_run_context  # pyright: ignore[reportPrivateUsage]
    except ImportError:  # pragma: no cover - another pydantic-ai layout
        return None
    return get_current_run_context


_CURRENT_RUN_CONTEXT = _ambient_run_context()


def _runs_inline(capability_id: str | None) -> bool:
    """Whether `@durable_operation` would await the capability's `append` itself, as it does when
    no durability engine dispatches the operations of the current run.

    The same test as the decorator's (pydantic-ai 2.62 and later): the ambient `RunContext` has no
    dispatcher for (`capability_id`, 'append') among its `_durable_operations`. Outside a run, or
    when the context does not carry that attribute (another pydantic-ai), the answer is `False`
    and the call goes through the decorator, which decides.
    """
    if capability_id is None or _CURRENT_RUN_CONTEXT is None:
        return False
    ctx = _CURRENT_RUN_CONTEXT()
    if ctx is None:
        return False
    operations: Any = getattr(ctx, '_durable_operations', _UNKNOWN)
    if operations is _UNKNOWN:
        return False
    return operations is None or operations.get((capability_id, 'append')) is None


_unjournaled = _runs_inline
"""The same test, asked by `before_run` (a run whose appends no engine journals may check its
remembered branch with its first write): a name of its own, so that what counts the appends'
decisions (`_runs_inline`) counts only theirs."""


def _result_usage(result: AgentRunResult[Any]) -> RunUsage:
    """`result.usage`: a property in pydantic-ai 2.62 and later (calling it is deprecated), a method before."""
    usage: Any = result.usage
    return usage if isinstance(usage, RunUsage) else usage()
