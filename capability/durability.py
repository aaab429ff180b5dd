"""`EventLogDurability`: a pydantic-ai durable-execution engine whose journal is the event log itself.

Every durable unit of a run (a model request, a tool call, a capability's `@durable_operation`,
`EventLogPersistence`'s appends included) gets the next step number of the run. Its result,
encoded with the engine's codec (`JSON_CODEC`), is appended to the log as a `durable_step` entry
of the run. When a run is executed again under the same `run_id` (after a crash, or through
`EventLogDurability.resume`), each unit the journal holds returns its recorded result without
executing, after checking it is the unit the journal holds at that step, with the same input
(the entry keeps a digest of it); the first unit the journal lacks runs live and the run goes on
from there.

`check` (`capability.rerun`) executes a recorded run again in check mode: every unit comes from
the journal after the same comparison, none executes (not even one the journal lacks: the check
stops there), no lease is taken and nothing is written.

Guarantees: a unit whose `durable_step` entry is committed never executes again; a unit that
was executing, or had returned but was not journaled yet, when the process died executes once
more. Tool calls of one model response run one after another inside a durable run, so the
step numbers are the same on every execution.

One execution at a time holds a run: its lease is a fencing token in the log's own store
(`EventLogBase.take_run_lease`, in the log's tables on every backend, never in a local
projection). Another execution that tries gets `RunLeaseError` until the lease lapses (it says
until when; `resume(..., wait_for_lease=...)` waits). The holder renews it every third of
`lease_seconds`, and every append of the run (its journal, `EventLogPersistence`'s messages, its
end) is made under the lease (`EventLogBase.run_lease_fence`): the transaction that writes it
checks the store still holds this execution's token. So a holder whose lease was taken over
(it stalled past its lease: stopped, paused, suspended) appends nothing more; its run raises
`RunLeaseError` without recording an end, and the new holder finishes the run. No process id or
host name is consulted: a holder that died is taken over once its lease lapses, or at once by
the same process restarted, when it names itself with an `executor_id`. Lapsing is by
wall clock, so holders' clocks must agree within a bound well below the lease; a holder whose
clock or pause breaks that is fenced, not trusted (a unit it was executing at the takeover may
execute in both, as one in flight when a process dies does).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from pydantic import TypeAdapter
from pydantic_ai import messages as _messages
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.capabilities.abstract import WrapRunHandler, leaf_capabilities
from pydantic_ai.capabilities.wrapper import WrapperCapability
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    BoundDurableOperation,
    CapabilityOperationId,
    CapabilityOperationParams,
    DurabilityEngineSpec,
    DurableOperation,
    DurableOperationId,
    DynamicToolsetCallToolParams,
    JournalCallableOperationBackend,
    ModelRequestParams,
    RoleBasedOperationConfig,
    ToolsetCallToolParams,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_core import PydanticSerializationError

from capability._checking import CHECKING, Asked, Checking
from eventlog import (
    DurableDeterminismError,
    DurableRunFailedError,
    DurableStepInfo,
    EventLog,
    InvalidArgumentError,
    NewEntry,
    RunLease,
    RunLeaseError,
    RunNotFound,
    RunRecord,
    durable_step_entry,
    run_finished_entry,
    run_started_entry,
)
from eventlog._checks import check_id
from eventlog.log import EventLogBase

if TYPE_CHECKING:
    from capability.rerun import RerunReport

__all__ = ['INPUT_STEP', 'EventLogDurability']

INPUT_STEP = 0
"""The step of a run's input record (its prompt, and its history when no `EventLogPersistence`
records the run); the run's units are numbered from 1."""

_INPUT_NAME = 'run_input'
_PERSISTENCE_APPEND = ('eventlog_persistence', 'append')
"""`EventLogPersistence`'s one write: idempotent by key, so its journal entry can wait for the next write."""

_PROMPT = TypeAdapter[str | Sequence[_messages.UserContent] | None](str | Sequence[_messages.UserContent] | None)
_step_decoder = msgspec.json.Decoder(DurableStepInfo)


class _RunInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The result of a run's input record (step 0)."""

    prompt: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b'null'))
    history: msgspec.Raw | None = None


_input_decoder = msgspec.json.Decoder(_RunInput)


@dataclass(eq=False)
class _Journal:
    """One execution of one run: what its journal holds, and the writes that extend it."""

    log: EventLog
    run_id: str
    conversation_id: str
    agent_name: str
    records_run: bool
    """No `EventLogPersistence` on this log records the run: the journal writes its start and end."""
    recorded: dict[int, DurableStepInfo]
    status: str | None
    """The run's status in the log when this execution began (`None`: not in the log)."""
    next_step: int = 1
    run_exists: bool = False
    pending: list[NewEntry] = field(default_factory=list[NewEntry])
    """Entries waiting for the run to exist (`EventLogPersistence` starts it with its first append)
    or for the next write (the journal entries of idempotent appends)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    lease: _LeaseHolder | None = None
    """The run's lease: once another process took it over, this execution writes nothing more."""
    checking: Checking | None = None
    """The check this execution is (`capability.rerun`): every unit comes from the journal, none runs."""

    async def check_lease(self) -> None:
        """Raise `RunLeaseError` if another process took the run's lease over (renewing it first
        when its renewal is due: a holder that was paused finds out before executing a unit)."""
        if self.lease is not None:
            await self.lease.confirm()

    def entry(self, step: int, name: str, result: bytes, inputs: dict[str, str] | None = None) -> NewEntry:
        return durable_step_entry(
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            step=step,
            name=name,
            result=result,
            inputs=inputs,
            idempotency_key=f'durable:{step}',
        )

    async def write(self, entries: list[NewEntry], *, defer: bool = False) -> None:
        """Append `entries` after the pending ones, in one transaction; `defer` keeps them for the next write."""
        async with self.lock:
            self.pending.extend(entries)
            if defer:
                return
            if self.lease is not None:
                self.lease.check()
            if not self.run_exists:
                if await self.log.get_run(self.run_id) is None:
                    if not self.records_run:
                        return  # EventLogPersistence's first append starts the run
                    started = run_started_entry(
                        conversation_id=self.conversation_id,
                        run_id=self.run_id,
                        agent_name=self.agent_name,
                        idempotency_key='start',
                    )
                    self.pending.insert(0, started)
                self.run_exists = True
            batch = list(self.pending)
            self.pending.clear()
            try:
                await self.log.append_many(batch)
            except InvalidArgumentError:
                run = await self.log.get_run(self.run_id)
                if run is None or run.status == 'running':
                    raise
                # The run has ended (re-executing a finished run): there is nothing left to journal.

    async def finish(self, status: Literal['completed', 'failed', 'cancelled'], error: str | None) -> None:
        """Record how a run the journal records itself ended."""
        entry = run_finished_entry(
            conversation_id=self.conversation_id,
            run_id=self.run_id,
            status=status,
            error=error,
            idempotency_key='finish',
        )
        await self.write([entry])


_CURRENT: ContextVar[_Journal | None] = ContextVar('eventlog_durability_journal', default=None)
"""The journal of the durable run the current task belongs to."""

_IN_STEP: ContextVar[bool] = ContextVar('eventlog_durability_in_step', default=False)
"""True inside a durable unit's body: anything durable it calls runs inline, inside the unit."""

_LEASE_WAIT: ContextVar[float] = ContextVar('eventlog_durability_lease_wait', default=0.0)
"""Seconds the run about to start waits for its lease (`EventLogDurability.resume`'s `wait_for_lease`)."""

_PARAMS: ContextVar[object] = ContextVar('eventlog_durability_params', default=None)
"""The parameters of the unit being dispatched, for the digest of its input."""


class _ParamsBound(BoundDurableOperation[Any, Any, Any]):
    """A bound operation that lets `_Backend.execute` see the unit's parameters."""

    def __init__(self, inner: BoundDurableOperation[Any, Any, Any]) -> None:
        self._inner = inner

    @property
    def operation(self) -> DurableOperation[Any, Any, Any]:
        return self._inner.operation

    async def __call__(self, params: Any, *, config: object | None = None) -> Any:
        token = _PARAMS.set(params)
        try:
            return await self._inner(params, config=config)
        finally:
            _PARAMS.reset(token)


class _Backend(JournalCallableOperationBackend[None]):
    """Runs each durable unit through the current run's journal."""

    def __init__(self, agent_name: str, default_model_id: str | None) -> None:
        super().__init__(
            agent_name=agent_name,
            default_model_id=default_model_id,
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )

    def bind(self, operation: DurableOperation[Any, Any, Any]) -> BoundDurableOperation[Any, Any, Any]:
        return _ParamsBound(super().bind(operation))

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        journal = _CURRENT.get()
        if journal is None or _IN_STEP.get():
            return await body()
        step = journal.next_step
        journal.next_step += 1
        held = journal.recorded.get(step)
        params = _PARAMS.get()
        inputs = _input_digests(operation_id, params)
        checking = journal.checking
        if checking is not None:  # a check (`capability.rerun`): nothing executes, nothing is written
            changed = _changed_parts(held, name, inputs) if held is not None else None
            if held is None or changed is not None:
                raise checking.stop(Asked(step, name, params, tuple(changed or ())), held)
            checking.compared += 1
            return msgspec.json.decode(held.result)
        if held is not None:
            changed = _changed_parts(held, name, inputs)
            if changed == []:
                raise DurableDeterminismError(journal.run_id, step, held.name, name)
            if changed:
                nouns = ' and '.join(_PART_NOUNS.get(part, part) for part in changed)
                raise DurableDeterminismError(journal.run_id, step, held.name, name, nouns)
            return msgspec.json.decode(held.result)
        await journal.check_lease()
        token = _IN_STEP.set(True)
        try:
            payload = await body()
        finally:
            _IN_STEP.reset(token)
        result = msgspec.json.encode(payload)
        idempotent = (
            isinstance(operation_id, CapabilityOperationId)
            and (operation_id.capability_id, operation_id.operation) == _PERSISTENCE_APPEND
        )
        await journal.write([journal.entry(step, name, result, inputs)], defer=idempotent)
        return payload


class EventLogDurability(BaseDurabilityCapability[AgentDepsT]):
    """Make an agent's runs durable with the event log as the journal: a run killed midway is
    executed again under its `run_id` and goes on from its first unjournaled unit.

    Every agent run with this capability is durable. Each model request, tool call and
    capability `@durable_operation` is a unit: its result is appended once, as a `durable_step`
    entry of the run, and a run executed again returns the journaled results instead of
    executing (no model request is sent again, no finished tool runs again), after checking the
    run asks for the same units with the same inputs (`DurableDeterminismError`). Resume an
    interrupted run with `agent.run(..., run_id=..., conversation_id=...)` or with `resume`,
    which reads the prompt and the conversation from the log; `log.list_runs(status='running')`
    lists the runs that need it. A completed run executed again replays entirely from the
    journal and returns its result.

    Use it with `EventLogPersistence(log)` on the same agent and log to record the messages too:
    one run, one set of entries. Without it, the capability records the run's start and end itself.

    Args:
        log: The event log that holds the journal (the same as `EventLogPersistence`'s, if any).
        models: Extra models by id that a run may switch to (as for every durable engine).
        event_stream_handler: Receives the run's events; model events are delivered live inside
            the model request unit.
        name: The name in the units' persisted names; defaults to the agent's `name`.
        lease_seconds: How long a run's lease lasts without renewal; the holder renews it every
            third of that. A run whose holder died is taken over once its lease lapses (by wall
            clock: holders' clocks must agree within a bound well below this).
        executor_id: This process's identity, kept across its restarts and used by no other live
            process (as DBOS's executor id): the runs a previous process of the same executor
            held are taken over at once instead of after their lease lapses (that process, if it
            still runs, is fenced). `None`: every execution waits for a lapsed lease.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name='EventLogDurability',
        durable_unit_noun='step',
        durable_unit_plural='steps',
        durable_container_noun='run',
        codec=JSON_CODEC,
        unsupported_runtime_toolset_kinds=frozenset({'function', 'mcp', 'dynamic'}),
        wrapped_toolset_kinds=frozenset({'function', 'mcp', 'dynamic'}),
        toolset_lifecycles={'function': 'enter-always', 'mcp': 'enter-in-durable-unit', 'dynamic': 'enter-never'},
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
        sequential_tools_in_durable_context=True,
        tool_config_key=None,
    )
    """JSON results, steps named by pydantic-ai's journal convention, tool calls of one response run in
    turn (so step numbers never depend on timing), per-run toolsets refused inside a durable run."""

    def __init__(
        self,
        log: EventLog,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
        lease_seconds: float = 60.0,
        executor_id: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        if not lease_seconds > 0:
            raise InvalidArgumentError(f'lease_seconds must be positive, got {lease_seconds!r}')
        if executor_id is not None:
            check_id(executor_id, 'executor_id')
        self.log: EventLog = log
        """The log that holds the journal."""
        self.lease_seconds: float = float(lease_seconds)
        """How long a run's lease lasts without renewal."""
        self.executor_id: str | None = executor_id
        """The process identity that takes over its own runs' leases at once after a restart, if any."""
        self._backend: _Backend | None = None
        self._records_runs = True

    # --- binding ---------------------------------------------------------------------------

    def _bind_to_agent(self, agent: AbstractAgent[AgentDepsT, Any]) -> None:
        from capability.persistence import EventLogPersistence

        self._backend = _Backend(self.name, self.default_model_id)
        self._records_runs = True
        for capability in leaf_capabilities(agent.root_capability):
            while isinstance(capability, WrapperCapability):
                capability = capability.wrapped
            if isinstance(capability, EventLogPersistence) and capability.log is self.log:
                self._records_runs = False
        super()._bind_to_agent(agent)

    def get_durable_operation_backend(self) -> _Backend:
        """The backend that runs each unit through the current run's journal."""
        if self._backend is None:
            raise InvalidArgumentError('EventLogDurability is used before it was bound to an agent')
        return self._backend

    @property
    def in_durable_context(self) -> bool:
        """Inside a run of the agent, outside the body of a unit."""
        return _CURRENT.get() is not None and not _IN_STEP.get()

    # --- the run ---------------------------------------------------------------------------

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """Run under the run's lease with its journal, executing only what the journal lacks."""
        if _IN_STEP.get():
            return await handler()  # an agent run inside another run's unit is part of that unit
        run_id = ctx.run_id
        if not run_id:
            raise InvalidArgumentError('a durable run needs a run id')
        conversation_id = ctx.conversation_id or run_id
        checking = CHECKING.get()
        if checking is not None:
            if not checking.durable or _CURRENT.get() is not None:
                return await handler()  # a check against messages, or a run nested in the checked one
            return await self._check(ctx, handler, checking, run_id, conversation_id)
        lease = _LeaseHolder(self.log, run_id, self.lease_seconds, self.executor_id)
        await lease.acquire(_LEASE_WAIT.get())
        try:
            with lease.fence():
                return await self._execute(ctx, handler, run_id, conversation_id, lease)
        finally:
            await lease.release()

    async def _execute(
        self,
        ctx: RunContext[AgentDepsT],
        handler: WrapRunHandler,
        run_id: str,
        conversation_id: str,
        lease: _LeaseHolder,
    ) -> AgentRunResult[Any]:
        """The run under its lease: every append made here is fenced by it."""
        journal = await self._open(run_id, conversation_id)
        journal.lease = lease
        if journal.status in ('failed', 'cancelled'):
            raise DurableRunFailedError(f'run {run_id!r} ended {journal.status}; it is not executed again')
        if INPUT_STEP not in journal.recorded:
            await journal.write([journal.entry(INPUT_STEP, _INPUT_NAME, self._input(ctx, journal))])
        token = _CURRENT.set(journal)
        try:
            result = await super().wrap_run(ctx, handler=handler)
        except BaseException as error:
            # A holder whose lease was taken over records no end: the run is the new holder's.
            # (Had it not noticed yet, the fenced append of the end would fail and write nothing.)
            if journal.records_run and journal.status != 'completed' and lease.lost is None:
                cancelled = isinstance(error, (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit))
                await _quietly(journal.finish('cancelled' if cancelled else 'failed', _describe(error)))
            raise
        finally:
            _CURRENT.reset(token)
        if journal.records_run:
            await journal.finish('completed', None)
        else:
            await journal.write([])  # what waited for the next write
        return result

    async def _check(
        self,
        ctx: RunContext[AgentDepsT],
        handler: WrapRunHandler,
        checking: Checking,
        run_id: str,
        conversation_id: str,
    ) -> AgentRunResult[Any]:
        """Re-execute the run against its journal in `checking.source`: no lease, no unit
        executed, nothing written; the first unit the journal does not hold stops the run."""
        journal = await self._open(run_id, conversation_id, log=checking.source)
        journal.checking = checking
        token = _CURRENT.set(journal)
        try:
            result = await super().wrap_run(ctx, handler=handler)
        finally:
            _CURRENT.reset(token)
        left = sorted(step for step in journal.recorded if step >= journal.next_step)
        if left:  # the run now ends before the journal does
            raise checking.stop(Asked(journal.next_step, '', None), journal.recorded[left[0]])
        return result

    async def _open(self, run_id: str, conversation_id: str, *, log: EventLog | None = None) -> _Journal:
        log = self.log if log is None else log
        run = await log.get_run(run_id)
        recorded: dict[int, DurableStepInfo] = {}
        if run is not None:
            if run.conversation_id != conversation_id:
                raise InvalidArgumentError(
                    f'run {run_id!r} belongs to conversation {run.conversation_id!r}, not {conversation_id!r}'
                )
            for entry in await log.entries(run_id=run_id, kinds=['durable_step']):
                if entry.erased:
                    raise DurableRunFailedError(f'the journal of run {run_id!r} was erased; it is not executed again')
                info = _step_decoder.decode(entry.payload)
                recorded[info.step] = info
        return _Journal(
            log=log,
            run_id=run_id,
            conversation_id=conversation_id,
            agent_name=self.name,
            records_run=self._records_runs,
            recorded=recorded,
            status=None if run is None else run.status,
            run_exists=run is not None,
        )

    def _input(self, ctx: RunContext[AgentDepsT], journal: _Journal) -> bytes:
        prompt = msgspec.Raw(_PROMPT.dump_json(ctx.prompt))
        history = None
        if journal.records_run and ctx.messages:
            history = msgspec.Raw(ModelMessagesTypeAdapter.dump_json(list(ctx.messages)))
        return msgspec.json.encode(_RunInput(prompt=prompt, history=history))

    # --- resuming --------------------------------------------------------------------------

    async def resume(
        self,
        agent: AbstractAgent[AgentDepsT, Any],
        run_id: str,
        *,
        deps: AgentDepsT = None,
        wait_for_lease: float = 0.0,
        **options: Any,
    ) -> AgentRunResult[Any]:
        """Execute run `run_id` again with the prompt, history and conversation the log holds for it.

        Units the journal holds are not executed again; the run goes on live from the first one
        it lacks. A completed run replays from its journal alone and returns its result. Other
        keyword arguments go to `agent.run` (`model_settings`, `usage_limits`, ...).

        A run whose holder crashed stays leased until its lease lapses (at most `lease_seconds`
        after its last renewal), unless that holder was a process of this `executor_id`; with
        `wait_for_lease`, this waits up to that many seconds for the lease to be free before giving up.

        Raises `RunNotFound` (no such run), `DurableRunFailedError` (the run failed or was
        cancelled), `RunLeaseError` (another process holds the run's lease: its `held_until`
        says until when) and `DurableDeterminismError` (the agent asks for other units than the
        journal holds, or sends them other inputs).
        """
        if not wait_for_lease >= 0:
            raise InvalidArgumentError(f'wait_for_lease must be zero or more seconds, got {wait_for_lease!r}')
        run = await self.log.get_run(run_id)
        if run is None:
            raise RunNotFound(f'no run {run_id!r} in this log')
        if run.status in ('failed', 'cancelled'):
            raise DurableRunFailedError(f'run {run_id!r} ended {run.status}; it is not executed again')
        prompt, history = await recorded_input(self.log, run)
        token = _LEASE_WAIT.set(float(wait_for_lease))
        try:
            return await agent.run(
                prompt,
                message_history=history or None,
                deps=deps,
                run_id=run_id,
                conversation_id=run.conversation_id,
                **options,
            )
        finally:
            _LEASE_WAIT.reset(token)

    async def check(
        self, agent: AbstractAgent[AgentDepsT, Any], run_id: str, *, deps: AgentDepsT = None, **options: Any
    ) -> RerunReport:
        """Does run `run_id` of this capability's log reproduce with `agent` today? `capability.rerun.check`
        on `self.log`: the run is executed again hermetically (nothing executes, nothing is written)
        and compared unit by unit with its journal (docs/durability.md, "Does this run reproduce?")."""
        from capability.rerun import check

        return await check(agent, run_id, log=self.log, deps=deps, **options)


async def recorded_input(
    log: EventLog, run: RunRecord
) -> tuple[str | Sequence[_messages.UserContent] | None, list[ModelMessage]]:
    """The run's prompt and the history it continued, from its input record or its messages."""
    found = await log.entries(run_id=run.run_id, kinds=['durable_step'], limit=1)
    if found and found[0].erased:
        raise DurableRunFailedError(f'the journal of run {run.run_id!r} was erased; it is not executed again')
    info = _step_decoder.decode(found[0].payload) if found else None
    history: list[ModelMessage] = []
    if run.branch_parent is not None:
        branch = await log.branch(run.branch_parent)
        history = [entry.message() for entry in branch if entry.kind == 'message']
    if info is not None and info.step == INPUT_STEP:
        recorded = _input_decoder.decode(info.result)
        if recorded.history is not None:
            history = ModelMessagesTypeAdapter.validate_json(bytes(recorded.history))
        return _PROMPT.validate_json(bytes(recorded.prompt)), history
    # Killed before the input record was written: the run's first request holds the prompt.
    own = [entry for entry in await log.entries(run_id=run.run_id, kinds=['message']) if not entry.inherited]
    first = own[0].message() if own else None
    if isinstance(first, ModelRequest):
        parts = [part for part in first.parts if isinstance(part, UserPromptPart)]
        if len(parts) == 1:
            return parts[0].content, history
    raise DurableRunFailedError(f'run {run.run_id!r} has no recorded prompt to execute it with')


_EXECUTING: set[tuple[str, str]] = set()
"""(executor id, run id) of the runs executing in this process under an executor id: another
execution of the same run in this process is refused rather than taking the lease over."""


class _LeaseHolder:
    """The lease of one run, held by this execution while it runs (`EventLogBase.take_run_lease`)."""

    def __init__(self, log: EventLog, run_id: str, seconds: float, executor: str | None = None) -> None:
        self.log = log if isinstance(log, EventLogBase) else None
        self.run_id = run_id
        self.seconds = seconds
        self.executor = executor
        self.here: tuple[str, str] | None = None
        """This run's place in `_EXECUTING` while this execution holds it."""
        self.owner = uuid.uuid4().hex
        self.lease: RunLease | None = None
        self.confirmed = 0.0
        """`time.monotonic()` when the store last confirmed the lease (taken or renewed)."""
        self.renewer: asyncio.Task[None] | None = None
        self.lost: str | None = None
        """Why the lease is no longer this execution's (another process took it over after it lapsed)."""

    async def acquire(self, wait: float) -> None:
        """Take the lease, waiting up to `wait` seconds for it to be free."""
        log = self.log
        if log is None:
            return  # a log without a store of its own: no lease
        deadline = time.monotonic() + wait
        if self.executor is not None:
            here = (self.executor, self.run_id)
            if here in _EXECUTING:
                raise RunLeaseError(
                    f'run {self.run_id!r} is being executed in this process already (executor '
                    f'{self.executor!r}); only one execution of a run at a time',
                    run_id=self.run_id,
                )
            _EXECUTING.add(here)
            self.here = here
        try:
            while True:
                try:
                    self.lease = await log.take_run_lease(self.run_id, self.owner, self.seconds, executor=self.executor)
                    break
                except RunLeaseError as error:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise
                    now = log.lease_clock()
                    until = error.held_until.timestamp() - now if error.held_until is not None else 0.0
                    await asyncio.sleep(min(left, max(until, 0.0) + 0.05, self.seconds / 3))
        except BaseException:
            self._leave()
            raise
        self.confirmed = time.monotonic()
        self.renewer = asyncio.create_task(self._renew())

    @contextmanager
    def fence(self) -> Generator[None]:
        """Make every append to the log in this block checked against the lease, in its own transaction."""
        if self.log is None or self.lease is None:
            yield
            return
        with self.log.run_lease_fence(self.lease):
            yield

    def check(self) -> None:
        """Raise `RunLeaseError` if the lease is known to be lost."""
        if self.lost is not None:
            raise RunLeaseError(self.lost, run_id=self.run_id)

    async def confirm(self) -> None:
        """`check`, renewing the lease first when its renewal is due (it did not happen: the
        process was paused, or the store was unreachable)."""
        self.check()
        if self.lease is not None and time.monotonic() - self.confirmed > self.seconds / 3:
            await self._renew_once()
            self.check()

    async def _renew_once(self) -> None:
        log, lease = self.log, self.lease
        assert log is not None
        assert lease is not None
        try:
            self.lease = await log.renew_run_lease(lease, self.seconds)
        except RunLeaseError as error:  # taken over after it lapsed (or released by the new holder)
            self.lost = str(error)
            return
        self.confirmed = time.monotonic()

    async def _renew(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self.seconds / 3)
            try:
                await self._renew_once()
            except Exception:  # the store failed: the run's own writes will say, the next renewal may work
                continue

    def _leave(self) -> None:
        """This execution no longer runs the run in this process (`_EXECUTING`)."""
        if self.here is not None:
            _EXECUTING.discard(self.here)
            self.here = None

    async def release(self) -> None:
        self._leave()
        if self.renewer is not None:
            self.renewer.cancel()
            self.renewer = None
        if self.log is None or self.lease is None or self.lost is not None:
            return
        await asyncio.shield(self.log.release_run_lease(self.lease))


_VOLATILE = 'timestamp'
"""The one field of pydantic-ai messages left out of input digests: a request, its user prompt,
its tool returns and retry prompts are rebuilt with the current time on every execution. Every
other field is reproduced exactly: the responses (and the tool call ids and arguments in them)
come from the journal, run and conversation ids are the run's own, and the prompt and history
come from the caller or the log."""

_PART_NOUNS = {
    'messages': 'messages',
    'model_settings': 'model settings',
    'args': 'arguments',
    'entries': 'entries to record',
}
"""How `DurableDeterminismError` names each part of a unit's input."""


def _input_digests(operation_id: DurableOperationId, params: object) -> dict[str, str] | None:
    """Digests of a unit's input by part, or `None` for a unit compared by name alone.

    Model requests: the messages sent (without `_VOLATILE`) and the model settings; tool calls:
    the arguments (the tool is in the unit's name); capability operations: their arguments
    (`EventLogPersistence`'s append: the entries it records, messages without `_VOLATILE`).
    Each part is reduced to JSON by the engine's codec and encoded with sorted keys.
    """
    try:
        if isinstance(params, ModelRequestParams):
            messages = JSON_CODEC.dump(list[ModelMessage], params.messages)
            settings = JSON_CODEC.dump(dict[str, Any] | None, params.model_settings)
            return {'messages': _digest(_without_volatile(messages)), 'model_settings': _digest(settings)}
        if isinstance(params, ToolsetCallToolParams | DynamicToolsetCallToolParams):
            return {'args': _digest(JSON_CODEC.dump(dict[str, Any], params.tool_args))}
        if isinstance(params, CapabilityOperationParams):
            if (
                isinstance(operation_id, CapabilityOperationId)
                and (operation_id.capability_id, operation_id.operation) == _PERSISTENCE_APPEND
            ):
                return {'entries': _digest(_persistence_entries(params.arguments))}
            return {'args': _digest(JSON_CODEC.dump(dict[str, Any], params.arguments))}
    except PydanticSerializationError:  # an input the codec cannot encode: the unit is compared by name alone
        return None
    return None


def _changed_parts(held: DurableStepInfo, name: str, inputs: dict[str, str] | None) -> list[str] | None:
    """How a unit asked for differs from the journal's at its step: `None` when it is the same
    unit with the same input, `[]` when it is another unit (another name), else the parts of its
    input whose digests differ (an entry or a unit without digests is compared by name alone)."""
    if _unit_kind(held.name) != _unit_kind(name):
        return []
    if held.inputs is None or inputs is None:
        return None
    changed = [part for part, digest in inputs.items() if held.inputs.get(part) != digest]
    return changed or None


def _digest(value: object) -> str:
    return hashlib.sha256(msgspec.json.encode(value, order='sorted')).hexdigest()


def _without_volatile(messages: Any) -> Any:
    """JSON messages (as the codec dumps them) without the `_VOLATILE` field of each message and part."""
    for message in messages:
        message.pop(_VOLATILE, None)
        for part in message.get('parts', ()):
            part.pop(_VOLATILE, None)
    return messages


def _persistence_entries(arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of one `EventLogPersistence` append as JSON, messages without `_VOLATILE`."""
    out: list[dict[str, Any]] = []
    for wire in arguments['entries']:
        payload: Any = msgspec.json.decode(wire.payload)
        if wire.kind == 'message':
            payload = _without_volatile([payload])[0]
        elif wire.kind == 'compaction':
            payload['summary'] = _without_volatile(payload.get('summary', []))
        out.append(
            {'kind': wire.kind, 'key': wire.key, 'parent': wire.parent, 'inherited': wire.inherited, 'payload': payload}
        )
    return out


def _unit_kind(name: str) -> str:
    """A unit's name for the determinism check: a streamed model request and a plain one are the
    same unit (both journal the model's response), so a streamed run resumes with `agent.run`."""
    return name.replace('__model.request_stream', '__model.request', 1)


async def _quietly(work: Awaitable[None]) -> None:
    """Record a failing run's end without hiding the run's own error."""
    try:
        await work
    except Exception:  # the run's own error is the one raised
        return


def _describe(error: BaseException) -> str:
    text = str(error)
    return f'{type(error).__name__}: {text}' if text else type(error).__name__
