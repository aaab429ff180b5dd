"""Does this run reproduce? Re-execute a recorded run with today's agent against its recording.

`check(agent, run_id, log=log)` runs `agent` again on the run's prompt and history, hermetically:
no model request is sent and no tool function runs. Every model response and tool result comes
from the recording, and what the agent asks for now is compared, unit by unit, with what it asked
for then. The report names the first unit where they differ, with both sides.

- A run with a durable journal (`EventLogDurability`), checked with an agent that has an
  `EventLogDurability`: the journal's own re-execution serves each unit (its name and the digests
  of its input checked exactly as `resume` checks them), but in check mode no unit executes, no
  lease is taken and nothing is written. The units are the journal's steps: model requests, tool
  calls, `EventLogPersistence`'s appends, capability operations.
- A run recorded by `EventLogPersistence` alone: a replaying model answers each request with the
  run's next recorded `ModelResponse` and a replaying tool step returns each call's recorded
  `ToolReturnPart` (or raises its `ModelRetry` again); `EventLogPersistence` records nothing.
  The units are the model requests (the requests sent, timestamps aside, against the recorded
  ones) and the tool calls (tool and call, in the order of the run's `tool_effect` entries).

Nothing is written to `log` or to any log the agent's capabilities hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import msgspec
from pydantic_ai import ModelRetry
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import ValidatedToolArgs, WrapToolExecuteHandler, leaf_capabilities
from pydantic_ai.capabilities.wrapper import WrapperCapability
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    CapabilityOperationParams,
    DynamicToolsetCallToolParams,
    ModelRequestParams,
    ToolsetCallToolParams,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext, ToolDefinition

from capability._checking import CHECKING, Asked, Checking, CheckStop
from capability.durability import EventLogDurability, recorded_input
from eventlog import (
    DurableStepInfo,
    Entry,
    EventLog,
    EventLogError,
    InvalidArgumentError,
    RunNotFound,
    RunRecord,
    ToolEffectInfo,
)
from eventlog.nesting import DEPTH_LIMIT

__all__ = ['Divergence', 'RerunReport', 'UnitView', 'check']

UnitKind = Literal['model request', 'tool call', 'record', 'operation', 'end']
"""What a unit is: a model request, a tool call, an `EventLogPersistence` append (`record`), another
capability operation, or `end` (no unit: the run ends there)."""

_DETAIL_SHOWN = 600
"""Characters of a unit's input the rendering shows per side."""


class UnitView(msgspec.Struct, frozen=True, kw_only=True):
    """One side of a divergence: a unit as recorded, or as the agent asks for it now."""

    kind: UnitKind
    name: str
    """The unit's name: the journal's (`support__model.request`), or the tool's for a tool call."""
    detail: str = ''
    """Its input as JSON (the newest request, the tool's arguments, the entries to record), or why it is not known."""


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The first unit where the agent now asks for something else than the recorded run did."""

    unit: int
    """Its position in the run, from 1 (the journal's step for a durable run)."""
    recorded: UnitView
    current: UnitView
    reason: str


class RerunReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of `check`: whether re-executing the run asks for exactly the recorded units."""

    run_id: str
    against: Literal['journal', 'messages']
    """What the run was compared with: its durable journal, or its recorded messages."""
    reproduces: bool
    units_compared: int
    """Units found identical to the recording before the first divergence (or in all)."""
    first_divergence: Divergence | None = None
    note: str | None = None
    """What limited the comparison (a recording that ends before the run did: a failed or unfinished run)."""

    def render(self) -> str:
        """The report as lines of text for a person."""
        source = 'its durable journal' if self.against == 'journal' else 'its recorded messages'
        divergence = self.first_divergence
        units = f'{self.units_compared} unit' + ('' if self.units_compared == 1 else 's')
        if divergence is None:
            lines = [f'run {self.run_id} reproduces: {units} compared with {source}, all identical']
        else:
            kind = divergence.recorded.kind if divergence.recorded.kind != 'end' else divergence.current.kind
            lines = [
                f'run {self.run_id} diverges at unit {divergence.unit} ({kind}), '
                f'after {units} found identical (compared with {source})',
                f'  {divergence.reason}',
                *_side('recorded', divergence.recorded),
                *_side('now', divergence.current),
            ]
        if self.note:
            lines.append(f'  note: {self.note}')
        return '\n'.join(lines)


def _side(label: str, view: UnitView) -> list[str]:
    head = f'  {label + ":":<9} {view.kind} {view.name}'.rstrip()
    if not view.detail:
        return [head]
    detail = view.detail if len(view.detail) <= _DETAIL_SHOWN else view.detail[:_DETAIL_SHOWN] + ' ...'
    return [head, f'            {detail}']


async def check(
    agent: AbstractAgent[Any, Any],
    run_id: str,
    *,
    log: EventLog,
    deps: Any = None,
    **options: Any,
) -> RerunReport:
    """Re-execute run `run_id` of `log` with `agent` against the run's recording, and report whether it reproduces.

    No model request is sent, no tool function runs and nothing is written. The run is compared
    with its durable journal when it has one and `agent` has an `EventLogDurability`, else with
    its recorded messages. `deps` and other keyword arguments go to `agent.run` (give the ones
    the run was made with: `output_type`, `model_settings`...).

    Raises `RunNotFound` (no such run), `InvalidArgumentError` (the run has nothing to compare
    with: no messages, and no journal the agent can use) and `DurableRunFailedError` (the run's
    journal was erased, or it has no recorded prompt).
    """
    run = await log.get_run(run_id)
    if run is None:
        raise RunNotFound(f'no run {run_id!r} in this log')
    journaled = bool(await log.entries(run_id=run_id, kinds=['durable_step'], limit=1))
    messages = await log.entries(run_id=run_id, kinds=['message'])
    durable = journaled and _has_durability(agent)
    if not durable and not messages:
        if journaled:
            raise InvalidArgumentError(
                f'run {run_id!r} has a durable journal and no messages: '
                'check it with an agent that has EventLogDurability'
            )
        raise InvalidArgumentError(f'run {run_id!r} recorded no messages and no durable journal to compare with')
    prompt, history = await recorded_input(log, run)
    checking = Checking(source=log, durable=durable)
    replay = None if durable else await _Replay.load(log, run, messages, history)
    token = CHECKING.set(checking)
    try:
        run_options = dict(options)
        if replay is not None:
            run_options['model'] = FunctionModel(replay.respond, model_name='eventlog-rerun')
            run_options['capabilities'] = [*run_options.get('capabilities', ()), _RecordedTools(replay)]
        await agent.run(
            prompt,
            message_history=history or None,
            deps=deps,
            run_id=run_id,
            conversation_id=run.conversation_id,
            **run_options,
        )
        if replay is not None:
            replay.finished()
    except BaseException as error:
        stopped = checking.stopped is not None or (replay is not None and replay.divergence is not None)
        if not stopped:
            if not isinstance(error, Exception) or isinstance(error, EventLogError):
                raise  # an interruption, or the log failing: not something the run now does differently
            failure = UnitView(kind='end', name='', detail=f'{type(error).__name__}: {error}')
            if replay is not None:
                replay.diverge(replay.view_next(), failure, 'the re-execution raised an error the recorded run did not')
            else:
                checking.extra['failure'] = failure
    finally:
        CHECKING.reset(token)
    if replay is not None:
        return replay.report(run)
    return await _journal_report(log, run, checking)


def _has_durability(agent: AbstractAgent[Any, Any]) -> bool:
    root: AbstractCapability[Any] | None = getattr(agent, 'root_capability', None)
    if root is None:
        return False
    for capability in leaf_capabilities(root):
        while isinstance(capability, WrapperCapability):
            capability = capability.wrapped
        if isinstance(capability, EventLogDurability):
            return True
    return False


# --- comparing with the durable journal ----------------------------------------------------------


async def _journal_report(log: EventLog, run: RunRecord, checking: Checking) -> RerunReport:
    """The report of a check against the run's journal, from where the journal's re-execution stopped."""
    compared = checking.compared
    failure = checking.extra.get('failure')
    asked, held = checking.stopped, checking.held
    if asked is None:
        if isinstance(failure, UnitView):
            end = UnitView(kind='end', name='', detail='(the recorded run went on)')
            divergence = Divergence(
                unit=compared + 1, recorded=end, current=failure, reason='the re-execution raised an error'
            )
            return RerunReport(
                run_id=run.run_id,
                against='journal',
                reproduces=False,
                units_compared=compared,
                first_divergence=divergence,
            )
        return RerunReport(run_id=run.run_id, against='journal', reproduces=True, units_compared=compared)
    recorded = _Recorded(log, run)
    current, current_value = _asked_view(asked)
    if held is None:
        if run.status != 'completed':
            ended = f'the journal ends after unit {asked.step - 1} (the run is {run.status})'
            note = f'{ended}; what follows cannot be compared'
            return RerunReport(
                run_id=run.run_id, against='journal', reproduces=True, units_compared=compared, note=note
            )
        end = UnitView(kind='end', name='', detail='(the recorded run ended here)')
        divergence = Divergence(
            unit=asked.step, recorded=end, current=current, reason='the run now asks for a unit after its recorded end'
        )
    else:
        held_view, held_value = await recorded.view(held)
        if not asked.name:
            end = UnitView(kind='end', name='', detail='(the run now ends here)')
            reason = 'the run now ends before this unit of the recording'
            divergence = Divergence(unit=held.step, recorded=held_view, current=end, reason=reason)
        elif not asked.changed:
            reason = (
                f'the run now asks for {current.kind} {current.name!r} '
                f'where the recording has {held_view.kind} {held_view.name!r}'
            )
            divergence = Divergence(unit=asked.step, recorded=held_view, current=current, reason=reason)
        else:
            nouns = ' and '.join(_CHANGED_NOUNS.get(part, part) for part in asked.changed)
            reason = f'the same unit with another input: its {nouns} differ'
            if current.kind == 'record' and held_value is not None:
                recorded_what, current_what = _entries_summary(held_value), _entries_summary(current_value)
                if recorded_what != current_what:
                    reason = f'the run now records {current_what} where the recording has {recorded_what}'
                else:
                    reason = f'the entries to record differ ({recorded_what})'
            where = _first_difference(held_value, current_value) if held_value is not None else None
            if where is not None:
                reason += f' (first at {where})'
            divergence = Divergence(unit=asked.step, recorded=held_view, current=current, reason=reason)
    return RerunReport(
        run_id=run.run_id, against='journal', reproduces=False, units_compared=compared, first_divergence=divergence
    )


_CHANGED_NOUNS = {
    'messages': 'messages',
    'model_settings': 'model settings',
    'args': 'arguments',
    'entries': 'entries to record',
}


def _entries_summary(entries: Any) -> str:
    """What `EventLogPersistence` entries (as `_wire` gives them) record, in a few words."""
    words: list[str] = []
    listed: list[Any] = cast('list[Any]', entries) if isinstance(entries, list) else []
    for item in listed:
        entry: dict[str, Any] = item
        payload: dict[str, Any] = entry.get('payload') or {}
        kind = entry.get('kind')
        if kind == 'message':
            words.append(f'{payload.get("kind", "message")} {entry.get("key")}')
        elif kind == 'tool_effect':
            words.append(
                f'tool call {payload.get("tool_name")!r} {payload.get("status")} ({payload.get("tool_call_id")})'
            )
        elif kind in ('run_started', 'run_finished'):
            words.append("the run's start" if kind == 'run_started' else "the run's end")
        else:
            words.append(str(kind))
    return ', '.join(words) or 'nothing'


def _kind_of(name: str) -> UnitKind:
    if '__model.request' in name:
        return 'model request'
    if '.call_tool:' in name:
        return 'tool call'
    if name.endswith('eventlog_persistence.append'):
        return 'record'
    return 'operation'


def _asked_view(asked: Asked) -> tuple[UnitView, Any]:
    """A unit as asked for now, and its input as JSON for the comparison."""
    params = asked.params
    kind = _kind_of(asked.name)
    value: Any = None
    try:
        if isinstance(params, list):  # the entries of an append outside the journal (`EventLogPersistence`)
            value = [_wire(wire) for wire in params]  # pyright: ignore[reportUnknownVariableType]
            return UnitView(kind=kind, name=asked.name, detail=_json(value)), value
        if isinstance(params, ModelRequestParams):
            value = {
                'messages': _plain(params.messages),
                'model_settings': JSON_CODEC.dump(dict[str, Any] | None, params.model_settings),
            }
            newest = value['messages'][-1] if value['messages'] else None
            return UnitView(kind=kind, name=asked.name, detail=_json(newest)), value
        if isinstance(params, ToolsetCallToolParams | DynamicToolsetCallToolParams):
            value = JSON_CODEC.dump(dict[str, Any], params.tool_args)
            return UnitView(kind=kind, name=params.name, detail=_json(value)), value
        if isinstance(params, CapabilityOperationParams):
            if kind == 'record':
                value = [_wire(wire) for wire in params.arguments['entries']]
            else:
                value = JSON_CODEC.dump(dict[str, Any], params.arguments)
            return UnitView(kind=kind, name=asked.name, detail=_json(value)), value
    except Exception:  # an input the codec cannot encode: shown by name alone
        return UnitView(kind=kind, name=asked.name), None
    return UnitView(kind=kind, name=asked.name), None


def _wire(wire: Any) -> dict[str, Any]:
    payload: Any = msgspec.json.decode(wire.payload)
    if wire.kind == 'message':
        payload = _without_timestamps(payload)
    return {'kind': wire.kind, 'key': wire.key, 'payload': payload}


@dataclass
class _Recorded:
    """What the log holds of the checked run, to show a journal unit's recorded input."""

    log: EventLog
    run: RunRecord
    _steps: dict[int, DurableStepInfo] | None = None

    async def steps(self) -> dict[int, DurableStepInfo]:
        if self._steps is None:
            decoder = msgspec.json.Decoder(DurableStepInfo)
            found = await self.log.entries(run_id=self.run.run_id, kinds=['durable_step'])
            self._steps = {info.step: info for info in (decoder.decode(entry.payload) for entry in found)}
        return self._steps

    async def view(self, held: DurableStepInfo) -> tuple[UnitView, Any]:
        """The journal's unit at its step, with its input where the log holds it (the journal keeps digests only)."""
        kind = _kind_of(held.name)
        unknown = '(the journal keeps a digest of this input, and the log does not hold it)'
        if kind == 'record':
            value = await self._recorded_entries(held)
            if value is not None:
                return UnitView(kind=kind, name=held.name, detail=_json(value)), value
        elif kind == 'tool call':
            call = (await self._tool_calls()).get(held.step)
            tool = held.name.rsplit(':', 1)[-1]
            if call is not None:
                args = call.args_as_dict()
                shown = f'{_json(args)} (as the model sent them; the tool received them validated)'
                return UnitView(kind=kind, name=tool, detail=shown), args
            return UnitView(kind=kind, name=tool, detail=unknown), None
        elif kind == 'model request':
            value = await self._request_messages(held)
            if value is not None:
                return UnitView(kind=kind, name=held.name, detail=_json(value['messages'][-1])), value
        return UnitView(kind=kind, name=held.name, detail=unknown), None

    async def _recorded_entries(self, held: DurableStepInfo) -> list[dict[str, Any]] | None:
        """The entries an `EventLogPersistence` append recorded: its journaled result names their seqs."""
        try:
            result: Any = msgspec.json.decode(held.result)
            seqs = [int(pair[0]) for pair in result['value']]
        except (msgspec.DecodeError, KeyError, TypeError, ValueError, IndexError):
            return None
        out: list[dict[str, Any]] = []
        for seq in seqs:
            entry = await self.log.get_entry(seq)
            if entry is None:
                return None
            payload: Any = msgspec.json.decode(entry.payload)
            if entry.kind == 'message':
                payload = _without_timestamps(payload)
            out.append({'kind': entry.kind, 'key': entry.idempotency_key, 'payload': payload})
        return out

    async def _tool_calls(self) -> dict[int, ToolCallPart]:
        """Each tool call step's call, from the model response journaled before it."""
        pending: list[ToolCallPart] = []
        calls: dict[int, ToolCallPart] = {}
        steps = await self.steps()
        for step in sorted(steps):
            info = steps[step]
            kind = _kind_of(info.name)
            if kind == 'model request':
                response = _response_of(info)
                pending = [] if response is None else [p for p in response.parts if isinstance(p, ToolCallPart)]
            elif kind == 'tool call':
                tool = info.name.rsplit(':', 1)[-1]
                match = next((call for call in pending if call.tool_name == tool), None)
                if match is not None:
                    pending.remove(match)
                    calls[step] = match
        return calls

    async def _request_messages(self, held: DurableStepInfo) -> dict[str, Any] | None:
        """The messages the recorded model request sent, when `EventLogPersistence` recorded the run's messages."""
        steps = await self.steps()
        index = sum(1 for step in steps if step < held.step and _kind_of(steps[step].name) == 'model request')
        messages = await self.log.run_messages(self.run.run_id)
        requests = [i for i, message in enumerate(messages) if isinstance(message, ModelRequest)]
        own = len([e for e in await self.log.entries(run_id=self.run.run_id, kinds=['message']) if not e.inherited])
        first_own = len(messages) - own
        requests = [i for i in requests if i >= first_own]
        if index >= len(requests):
            return None
        return {'messages': _plain(messages[: requests[index] + 1]), 'model_settings': None}


def _response_of(info: DurableStepInfo) -> ModelResponse | None:
    try:
        decoded = ModelMessagesTypeAdapter.validate_json(b'[' + info.result + b']')
    except ValueError:
        return None
    return decoded[0] if decoded and isinstance(decoded[0], ModelResponse) else None


# --- comparing with the recorded messages ---------------------------------------------------------


@dataclass
class _Replay:
    """A run re-executed against its recorded messages: the model's answers and the tools' results come from them."""

    run: RunRecord
    full: list[ModelMessage]
    """The recorded run's messages, its history first."""
    first_own: int
    responses: list[bytes]
    """The run's own responses as stored, decoded afresh for each answer."""
    tools: list[ToolEffectInfo]
    """The tool calls the run executed, in the order they started."""
    outcomes: dict[str, ToolReturnPart]
    calls: dict[str, ToolCallPart]
    requests_asked: int = 0
    tools_asked: int = 0
    compared: int = 0
    divergence: Divergence | None = None
    note: str | None = None
    current_requests: list[ModelRequest] = field(default_factory=list[ModelRequest])

    @classmethod
    async def load(
        cls, log: EventLog, run: RunRecord, messages: Sequence[Entry], history: list[ModelMessage]
    ) -> _Replay:
        own = [entry for entry in messages if not entry.inherited]
        inherited = [entry.message() for entry in messages if entry.inherited]
        full = [*history, *inherited, *(entry.message() for entry in own)]
        decoder = msgspec.json.Decoder(ToolEffectInfo)
        effects = [decoder.decode(e.payload) for e in await log.entries(run_id=run.run_id, kinds=['tool_effect'])]
        outcomes: dict[str, ToolReturnPart] = {}
        calls: dict[str, ToolCallPart] = {}
        for message in full[len(full) - len(own) :]:
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_call_id:
                    outcomes[part.tool_call_id] = part
                elif isinstance(part, ToolCallPart):
                    calls[part.tool_call_id] = part
        return cls(
            run=run,
            full=full,
            first_own=len(full) - len(own),
            responses=[e.payload for e in own if isinstance(e.message(), ModelResponse)],
            tools=[effect for effect in effects if effect.status == 'started'],
            outcomes=outcomes,
            calls=calls,
        )

    def _recorded_requests(self, upto: int) -> list[ModelRequest]:
        """The recorded requests up to the run's `upto`-th own request (from 1), history included."""
        out: list[ModelRequest] = []
        own = 0
        for index, message in enumerate(self.full):
            if isinstance(message, ModelRequest):
                if index >= self.first_own:
                    own += 1
                    if own > upto:
                        break
                out.append(message)
        return out

    def _tools_before(self, request: int) -> int:
        """How many recorded tool calls the run made before its `request`-th own request (from 1)."""
        called: set[str] = set()
        responses = 0
        for message in self.full[self.first_own :]:
            if isinstance(message, ModelResponse):
                if responses >= request - 1:
                    break
                responses += 1
                called.update(p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart))
        return sum(1 for tool in self.tools if tool.tool_call_id in called)

    def diverge(self, recorded: UnitView, current: UnitView, reason: str) -> CheckStop:
        """Keep the first divergence; the caller raises what this returns."""
        if self.divergence is None:
            self.divergence = Divergence(unit=self.compared + 1, recorded=recorded, current=current, reason=reason)
        return CheckStop(reason)

    def view_next(self) -> UnitView:
        """The recording's next unit after those asked so far."""
        if self.tools_asked < self._tools_before(self.requests_asked + 1):
            return self._tool_view(self.tools[self.tools_asked])
        if self.requests_asked < len(self.responses):
            recorded = self._recorded_requests(self.requests_asked + 1)
            return UnitView(kind='model request', name='', detail=_json(_plain(recorded[-1:])))
        return UnitView(kind='end', name='', detail='(the recorded run ended here)')

    def _tool_view(self, effect: ToolEffectInfo) -> UnitView:
        call = self.calls.get(effect.tool_call_id)
        args = _json(call.args_as_dict()) if call is not None else ''
        return UnitView(kind='tool call', name=effect.tool_name, detail=args)

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """The replaying model: compare the request with the recorded one, answer with the recorded response."""
        del info
        current = [message for message in messages if isinstance(message, ModelRequest)]
        now = UnitView(kind='model request', name='', detail=_json(_plain(current[-1:])))
        if self.tools_asked < self._tools_before(self.requests_asked + 1):
            missing = self.tools[self.tools_asked]
            reason = (
                f'the run now sends the next model request without calling '
                f'{missing.tool_name!r} ({missing.tool_call_id})'
            )
            raise self.diverge(self._tool_view(missing), now, reason)
        if self.requests_asked >= len(self.responses):
            end = UnitView(kind='end', name='', detail='(the recorded run ended here)')
            raise self.diverge(end, now, 'the run now sends a model request after its recorded end')
        self.requests_asked += 1
        recorded = self._recorded_requests(self.requests_asked)
        recorded_value, current_value = _plain(recorded), _plain(current)
        if recorded_value != current_value:
            where = _first_difference(recorded_value, current_value)
            view = UnitView(kind='model request', name='', detail=_json(recorded_value[-1:]))
            raise self.diverge(view, now, f'the model request differs (first at messages{where})')
        self.compared += 1
        response = ModelMessagesTypeAdapter.validate_json(b'[' + self.responses[self.requests_asked - 1] + b']')[0]
        assert isinstance(response, ModelResponse)
        return response

    def tool(self, call: ToolCallPart, args: ValidatedToolArgs) -> Any:
        """The replaying tool step: the recorded result of the call, if the recording ran it at this point."""
        now = UnitView(kind='tool call', name=call.tool_name, detail=_json(_tool_args(args)))
        expected = self.tools[self.tools_asked] if self.tools_asked < len(self.tools) else None
        if expected is None:
            end = self.view_next()
            raise self.diverge(end, now, f'the run now calls {call.tool_name!r} where the recording did not')
        if (expected.tool_call_id, expected.tool_name) != (call.tool_call_id, call.tool_name):
            reason = (
                f'the run now calls {call.tool_name!r} ({call.tool_call_id}) where the recording called '
                f'{expected.tool_name!r} ({expected.tool_call_id})'
            )
            raise self.diverge(self._tool_view(expected), now, reason)
        outcome = self.outcomes.get(call.tool_call_id)
        if outcome is None:
            self.note = f'the recording ends during tool call {call.tool_name!r} (the run is {self.run.status})'
            raise self.diverge(self._tool_view(expected), now, 'the recording holds no result for this call')
        self.tools_asked += 1
        self.compared += 1
        if outcome.outcome == 'retried':  # the tool asked the model to retry: it does again
            content: Any = outcome.content
            raise ModelRetry(content if isinstance(content, str) else _json(content))
        return outcome.content

    def finished(self) -> None:
        """The run ended: it must have asked for every unit the recording holds."""
        if self.requests_asked < len(self.responses) or self.tools_asked < len(self.tools):
            raise self.diverge(
                self.view_next(),
                UnitView(kind='end', name='', detail='(the run now ends here)'),
                'the run now ends before this unit of the recording',
            )

    def report(self, run: RunRecord) -> RerunReport:
        divergence = self.divergence
        note = self.note
        if divergence is not None and note is not None and run.status != 'completed':
            divergence = None  # the recording stops there: nothing after it can be compared
        return RerunReport(
            run_id=run.run_id,
            against='messages',
            reproduces=divergence is None,
            units_compared=self.compared,
            first_divergence=divergence,
            note=note,
        )


@dataclass
class _RecordedTools(AbstractCapability[Any]):
    """Answers every tool call from the recording (`_Replay.tool`): no tool function runs."""

    replay: _Replay

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Return the call's recorded result without calling `handler`."""
        del ctx, tool_def, handler
        return self.replay.tool(call, args)


# --- shared pieces ---------------------------------------------------------------------------------


def _tool_args(args: ValidatedToolArgs) -> Any:
    try:
        return JSON_CODEC.dump(Any, args)
    except Exception:
        return repr(args)


def _plain(messages: Sequence[ModelMessage]) -> list[Any]:
    """Messages as JSON without their timestamps (the one field rebuilt on every execution)."""
    return _without_timestamps(json.loads(ModelMessagesTypeAdapter.dump_json(list(messages))))


def _without_timestamps(value: Any, room: int = DEPTH_LIMIT) -> Any:
    """`value` without `timestamp` keys, down to `room` levels (a message's own lie a few levels
    down; deeper is tool data, left as it is, so the walk stays bounded however deep that nests)."""
    if room <= 0:
        return value
    if isinstance(value, dict):
        return {k: _without_timestamps(v, room - 1) for k, v in value.items() if k != 'timestamp'}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [_without_timestamps(v, room - 1) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _first_difference(recorded: Any, current: Any, path: str = '', room: int = DEPTH_LIMIT) -> str | None:
    """Where two JSON values first differ (`[0].instructions: 'a' -> 'b'`), or None when equal;
    below `room` levels a difference is placed at the level above (the walk stays bounded)."""
    if room <= 0:
        return None if recorded == current else f'{path}: {_short(recorded)} -> {_short(current)}'
    if isinstance(recorded, dict) and isinstance(current, dict):
        before, now = cast('dict[str, Any]', recorded), cast('dict[str, Any]', current)
        for key in sorted(set(before) | set(now)):
            if key not in before:
                return f'{path}.{key}: (absent) -> {_short(now[key])}'
            if key not in now:
                return f'{path}.{key}: {_short(before[key])} -> (absent)'
            found = _first_difference(before[key], now[key], f'{path}.{key}', room - 1)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(current, list):
        earlier, later = cast('list[Any]', recorded), cast('list[Any]', current)
        for index, (a, b) in enumerate(zip(earlier, later, strict=False)):
            found = _first_difference(a, b, f'{path}[{index}]', room - 1)
            if found is not None:
                return found
        if len(earlier) != len(later):
            return f'{path}: {len(earlier)} items -> {len(later)}'
        return None
    if recorded != current:
        return f'{path}: {_short(recorded)} -> {_short(current)}'
    return None


def _short(value: Any) -> str:
    text = _json(value)
    return text if len(text) <= 80 else text[:77] + '...'
