"""One process of the `EventLogDurability` kill-and-resume tests (run as a script by `test_durability_crash.py`).

Usage: _durable_worker.py WORKDIR MODE [NAMES] lmdb
       _durable_worker.py WORKDIR MODE [NAMES] postgres DSN SCHEMA

MODE is `start`, `resume` or `hold`; NAMES (comma separated, `-` for all of `SCENARIOS`) says
which scenarios this process runs, all at once.

`start` runs each scenario's agent (`EventLogPersistence` and `EventLogDurability` on one log)
under the run id `<name>-run`; each scenario stops at its own point (`in:<unit>`: while the unit
executes; `returned:<unit>`: the unit returned and its journal entry is about to be appended;
`journaled:<unit>`: just after that append committed), writes `hung-<name>` and sleeps until
the test kills the process with SIGKILL.

`resume` writes `interrupted.json` (the runs `list_runs(status='running')` gives), calls
`EventLogDurability.resume` for each scenario and writes `messages-<name>.json` (the result's
`all_messages()`) and `outcome-<name>.json` (output, or the error it raised).

`hold` is `resume`, but each scenario stops at its point again, like `start` (a process that
holds the runs' leases while the test starts another).

`pause` is `start`, but at its point a scenario waits until the file `go-<name>` exists (the
test stops the process with SIGSTOP meanwhile, then continues it), then goes on; it writes
`paused-<name>.json` (output, or the error the run raised).

Environment: `DURABLE_LEASE_SECONDS` (the lease's length, default 60), `DURABLE_LEASE_WAIT`
(`resume`'s `wait_for_lease`, default 0), `DURABLE_EXECUTOR` (the capability's `executor_id`,
default none), `DURABLE_PROJECTIONS_DIR` (PostgreSQL only: the handle's `projections_dir`).

Every unit execution (`model:<n>` for the n-th model request of the run, `tool:<key>` and
`flaky:<retry>` for the tools) is appended to `calls.txt` as `<mode> <name> <unit>`: the
model's and the tools' real side effects.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogDurability, EventLogPersistence
from eventlog import DurableStepInfo, EventLogError, LmdbEventLog, NewEntry
from eventlog.log import EventLogBase


class Answer(BaseModel):
    """The structured output of the `structured` scenarios."""

    text: str
    count: int


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str
    """`basic`: lookup(alpha), lookup(beta), then text. `parallel`: one response calling
    lookup(alpha) and lookup(beta), then text. `retry`: flaky() raises ModelRetry on its first
    call, succeeds on its second, then text. `structured`: lookup(alpha), then an `Answer`."""
    stop: str

    @property
    def run_id(self) -> str:
        return f'{self.name}-run'


SCENARIOS = [
    Scenario('basic-in-model-1', 'basic', 'in:model:1'),
    Scenario('basic-returned-model-1', 'basic', 'returned:model:1'),
    Scenario('basic-journaled-model-1', 'basic', 'journaled:model:1'),
    Scenario('basic-in-tool-alpha', 'basic', 'in:tool:alpha'),
    Scenario('basic-returned-tool-alpha', 'basic', 'returned:tool:alpha'),
    Scenario('basic-journaled-tool-alpha', 'basic', 'journaled:tool:alpha'),
    Scenario('basic-in-model-2', 'basic', 'in:model:2'),
    Scenario('basic-in-tool-beta', 'basic', 'in:tool:beta'),
    Scenario('basic-in-model-3', 'basic', 'in:model:3'),
    Scenario('basic-returned-model-3', 'basic', 'returned:model:3'),
    Scenario('parallel-in-tool-beta', 'parallel', 'in:tool:beta'),
    Scenario('parallel-returned-tool-alpha', 'parallel', 'returned:tool:alpha'),
    Scenario('retry-in-flaky-1', 'retry', 'in:flaky:1'),
    Scenario('retry-in-model-2', 'retry', 'in:model:2'),
    Scenario('structured-returned-model-2', 'structured', 'returned:model:2'),
]
BY_NAME = {s.name: s for s in SCENARIOS}
UNITS = {
    'basic': ['model:1', 'tool:alpha', 'model:2', 'tool:beta', 'model:3'],
    'parallel': ['model:1', 'tool:alpha', 'tool:beta', 'model:2'],
    'retry': ['model:1', 'flaky:0', 'model:2', 'flaky:1', 'model:3'],
    'structured': ['model:1', 'tool:alpha', 'model:2'],
}
"""Each kind's units, in the order a run executes them."""
ANSWER = 'alpha is 1 and beta is 2'
AGENT = 'durable_agent'


def prompt_for(scenario: Scenario) -> str:
    return f'{scenario.name}: look things up'


def scenario_of(messages: Sequence[ModelMessage]) -> Scenario:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    part = next(p for p in first.parts if isinstance(p, UserPromptPart))
    assert isinstance(part.content, str)
    return BY_NAME[part.content.split(':', 1)[0]]


def run_options(scenario: Scenario) -> dict[str, Any]:
    return {'output_type': Answer} if scenario.kind == 'structured' else {}


def open_log(args: Sequence[str]) -> type[EventLogBase]:
    if list(args[:1]) == ['lmdb']:
        return LmdbEventLog
    from eventlog.postgres_log import PostgresEventLog

    return PostgresEventLog


def main(workdir: Path, mode: str, names: str, store: Sequence[str]) -> None:
    chosen = SCENARIOS if names == '-' else [BY_NAME[n] for n in names.split(',')]
    current: dict[str, str] = {}
    """The unit each scenario executed last in this process (units run one at a time)."""

    def note(scenario: Scenario, unit: str) -> None:
        current[scenario.name] = unit
        with (workdir / 'calls.txt').open('a') as f:
            f.write(f'{mode} {scenario.name} {unit}\n')

    async def stop_here(scenario: Scenario, point: str) -> None:
        if mode in ('start', 'hold', 'pause') and scenario.stop == point and scenario in chosen:
            (workdir / f'hung-{scenario.name}').write_text(point)
            if mode == 'pause':
                go = workdir / f'go-{scenario.name}'
                await asyncio.to_thread(wait_for_file, go)
                return
            await asyncio.sleep(3600)  # the test kills the process while this sleeps

    base = open_log(store)

    class Stopping(base):  # type: ignore[valid-type,misc]
        """Stops a scenario just before, or just after, the journal entry of its unit is appended."""

        async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
            journaled = [
                (BY_NAME[e.run_id.removesuffix('-run')], e)
                for e in entries
                if e.kind == 'durable_step' and e.run_id and e.run_id.removesuffix('-run') in BY_NAME
            ]
            units: list[tuple[Scenario, str]] = []
            for scenario, entry in journaled:
                name = msgspec_step(entry).name
                if 'model.request' in name or 'call_tool' in name:
                    units.append((scenario, current[scenario.name]))
            for scenario, unit in units:
                await stop_here(scenario, f'returned:{unit}')
            seqs = await super().append_many(entries)
            for scenario, unit in units:
                await stop_here(scenario, f'journaled:{unit}')
            return seqs

    if store[0] == 'lmdb':
        log = Stopping(workdir / 'log.lmdb')
    else:
        log = Stopping(store[1], schema=store[2], projections_dir=os.environ.get('DURABLE_PROJECTIONS_DIR'))

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        scenario = scenario_of(messages)
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        note(scenario, f'model:{step}')
        await stop_here(scenario, f'in:model:{step}')
        if scenario.kind == 'basic' and step <= 2:
            key = ['alpha', 'beta'][step - 1]
            return ModelResponse(parts=[ToolCallPart('lookup', {'key': key}, tool_call_id=f'call-{step}')])
        if scenario.kind == 'parallel' and step == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id='call-a'),
                    ToolCallPart('lookup', {'key': 'beta'}, tool_call_id='call-b'),
                ]
            )
        if scenario.kind == 'retry' and step <= 2:
            return ModelResponse(parts=[ToolCallPart('flaky', {}, tool_call_id=f'call-{step}')])
        if scenario.kind == 'structured':
            if step == 1:
                return ModelResponse(parts=[ToolCallPart('lookup', {'key': 'alpha'}, tool_call_id='call-1')])
            return ModelResponse(
                parts=[ToolCallPart(info.output_tools[0].name, {'text': ANSWER, 'count': 2}, tool_call_id='out')]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    async def lookup(ctx: RunContext[str], key: str) -> str:
        """Look a key up."""
        scenario = BY_NAME[ctx.deps]
        note(scenario, f'tool:{key}')
        await stop_here(scenario, f'in:tool:{key}')
        return f'{key} is {["alpha", "beta"].index(key) + 1}'

    async def flaky(ctx: RunContext[str]) -> str:
        """Fails once, then works."""
        scenario = BY_NAME[ctx.deps]
        note(scenario, f'flaky:{ctx.retry}')
        await stop_here(scenario, f'in:flaky:{ctx.retry}')
        if ctx.retry == 0:
            raise ModelRetry('try again')
        return 'worked'

    durability = EventLogDurability(
        log,
        lease_seconds=float(os.environ.get('DURABLE_LEASE_SECONDS', '60')),
        executor_id=os.environ.get('DURABLE_EXECUTOR') or None,
    )
    agent = Agent(
        FunctionModel(model),
        name=AGENT,
        deps_type=str,
        tools=[lookup, flaky],
        capabilities=[EventLogPersistence(log), durability],
    )

    async def start(scenario: Scenario) -> None:
        await agent.run(
            prompt_for(scenario),
            deps=scenario.name,
            run_id=scenario.run_id,
            conversation_id=f'{scenario.name}-conversation',
            **run_options(scenario),
        )
        raise AssertionError(f'{scenario.name} finished instead of stopping at {scenario.stop}')

    async def resume(scenario: Scenario) -> None:
        outcome: dict[str, Any]
        try:
            wait = os.environ.get('DURABLE_LEASE_WAIT')
            options = (
                run_options(scenario) if wait is None else {**run_options(scenario), 'wait_for_lease': float(wait)}
            )
            result = await durability.resume(agent, scenario.run_id, deps=scenario.name, **options)
        except EventLogError as error:
            outcome = {'error': type(error).__name__, 'message': str(error)}
        else:
            output = result.output.model_dump() if isinstance(result.output, Answer) else result.output
            outcome = {'output': output, 'run_id': result.run_id}
            (workdir / f'messages-{scenario.name}.json').write_bytes(
                ModelMessagesTypeAdapter.dump_json(result.all_messages())
            )
        (workdir / f'outcome-{scenario.name}.json').write_text(json.dumps(outcome))

    async def pause(scenario: Scenario) -> None:
        outcome: dict[str, Any]
        try:
            result = await agent.run(
                prompt_for(scenario),
                deps=scenario.name,
                run_id=scenario.run_id,
                conversation_id=f'{scenario.name}-conversation',
                **run_options(scenario),
            )
        except EventLogError as error:
            outcome = {'error': type(error).__name__, 'message': str(error)}
        else:
            outcome = {'output': str(result.output)}
        (workdir / f'paused-{scenario.name}.json').write_text(json.dumps(outcome))

    async def run() -> None:
        if mode == 'start':
            await asyncio.gather(*(start(s) for s in chosen))
        elif mode == 'pause':
            await asyncio.gather(*(pause(s) for s in chosen))
        else:
            if mode == 'resume':
                interrupted = [r.run_id for r in await log.list_runs(status='running')]
                (workdir / 'interrupted.json').write_text(json.dumps(interrupted))
            await asyncio.gather(*(resume(s) for s in chosen))
        log.close()

    asyncio.run(run())
    sys.stdout.flush()
    os._exit(0)


def wait_for_file(path: Path) -> None:
    """Return once `path` exists (the test creates it)."""
    while not path.exists():
        time.sleep(0.02)


def msgspec_step(entry: NewEntry) -> DurableStepInfo:
    import msgspec

    return msgspec.json.decode(entry.payload, type=DurableStepInfo)


if __name__ == '__main__':
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:])
