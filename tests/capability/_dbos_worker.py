"""One process of the DBOS kill-and-recover test (run as a script by `test_dbos_recovery.py`).

Usage: _dbos_worker.py WORKDIR start|recover lmdb
       _dbos_worker.py WORKDIR start|recover postgres DSN SCHEMA

WORKDIR holds the files written here for the test. With `lmdb` it also holds what both
processes share: the event log (`log.lmdb`) and the DBOS system database (`dbos.sqlite`). With
`postgres` both live in the one PostgreSQL database DSN names: the log is a `PostgresEventLog`
in schema SCHEMA and the DBOS system tables are in schema `<SCHEMA>_dbos` (`dbos_schema`).

`start` launches DBOS and starts one workflow per scenario of `SCENARIOS`, all at once. Each
scenario stops at its own point: in the model or the tool of a given step, or just after the
log committed a given append (before DBOS could record that append's step). There it writes
`hung-<scenario>` and sleeps until the test kills the process with SIGKILL.

`recover` only launches DBOS, which finds the pending workflows and runs them again; it waits
for each one and writes `messages-<scenario>.json` (the recovered run's `all_messages()` as
pydantic-ai serializes them) and `outcome-<scenario>.json` (ids, output, status, DBOS steps).

Every model call and tool execution in either process is appended to `calls.txt`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec.dbos import DBOSDurability
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

from capability import EventLogPersistence
from eventlog import LmdbEventLog, NewEntry
from eventlog.log import EventLogBase


@dataclass(frozen=True)
class Scenario:
    name: str
    """Also the DBOS workflow id, and the first word of the prompt."""
    variant: str
    """`durable`: an agent with a `DBOSDurability` capability, run in a workflow of ours.
    `wrapper`: the deprecated `DBOSAgent` wrapper (its own `<name>.run` workflow), given
    `run_id` and `conversation_id`. `wrapper-no-ids`: `DBOSAgent` given neither."""
    stop: str
    """`model:<step>`, `tool:<step>` or `append:<n>` (after the n-th committed append of the run)."""

    @property
    def run_id(self) -> str | None:
        return f'{self.name}-run' if self.variant == 'wrapper' else None

    @property
    def conversation_id(self) -> str | None:
        return f'{self.name}-conversation' if self.variant == 'wrapper' else None


SCENARIOS = [
    Scenario('durable-model-1', 'durable', 'model:1'),
    Scenario('durable-tool-1', 'durable', 'tool:1'),
    Scenario('durable-append-5', 'durable', 'append:5'),
    Scenario('durable-model-3', 'durable', 'model:3'),
    Scenario('wrapper-tool-2', 'wrapper', 'tool:2'),
    Scenario('wrapper-model-3', 'wrapper', 'model:3'),
    Scenario('wrapper-no-ids-model-3', 'wrapper-no-ids', 'model:3'),
]
BY_NAME = {s.name: s for s in SCENARIOS}
KEYS = ['alpha', 'beta']
"""Model step n calls `lookup` on KEYS[n - 1]; the step after the last key answers in text."""
ANSWER = 'alpha is 1 and beta is 2'
DURABLE_AGENT = 'durable_agent'
WRAPPED_AGENT = 'wrapped_agent'


def prompt_for(scenario: Scenario) -> str:
    return f'{scenario.name}: look up {" and ".join(KEYS)}'


def scenario_of_messages(messages: Sequence[ModelMessage]) -> Scenario:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    part = first.parts[0]
    assert isinstance(part, UserPromptPart) and isinstance(part.content, str)
    return BY_NAME[part.content.split(':', 1)[0]]


def dbos_schema(schema: str) -> str:
    """The schema of the DBOS system tables next to the log in schema `schema`."""
    return f'{schema}_dbos'


@dataclass(frozen=True)
class Store:
    """Where the log and the DBOS system database live."""

    backend: str
    """`lmdb` (an LMDB log and a SQLite system database, both in the work directory) or
    `postgres` (a `PostgresEventLog` and the DBOS system tables in one PostgreSQL database)."""
    dsn: str = ''
    schema: str = ''

    @classmethod
    def from_args(cls, args: Sequence[str]) -> Store:
        if list(args[:1]) == ['lmdb'] and len(args) == 1:
            return cls('lmdb')
        if list(args[:1]) == ['postgres'] and len(args) == 3:
            return cls('postgres', args[1], args[2])
        raise SystemExit(f'expected `lmdb` or `postgres DSN SCHEMA`, got {list(args)}')

    def args(self) -> list[str]:
        return [self.backend] if self.backend == 'lmdb' else [self.backend, self.dsn, self.schema]


def main(workdir: Path, mode: str, store: Store) -> None:
    def note(scenario: Scenario, what: str) -> None:
        with (workdir / 'calls.txt').open('a') as f:
            f.write(f'{mode} {scenario.name} {what}\n')

    async def stop_here(scenario: Scenario, point: str) -> None:
        if mode == 'start' and scenario.stop == point:
            (workdir / f'hung-{scenario.name}').write_text(point)
            await asyncio.sleep(3600)  # the test kills the process while this sleeps

    class Stopping(EventLogBase):
        """Stops a scenario right after the real log under it (next in the MRO) committed an append."""

        appends: Counter[str]

        async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
            seqs = await super().append_many(entries)
            run_id = entries[0].run_id or ''
            self.appends[run_id] += 1
            name = run_id.split(':', 1)[0].removesuffix('-run')
            if name in BY_NAME:
                await stop_here(BY_NAME[name], f'append:{self.appends[run_id]}')
            return seqs

    log: Stopping
    if store.backend == 'lmdb':

        class StoppingLmdb(Stopping, LmdbEventLog):
            pass

        log = StoppingLmdb(workdir / 'log.lmdb')
        system_database_url = f'sqlite:///{workdir / "dbos.sqlite"}'
    else:
        from eventlog.postgres_log import PostgresEventLog

        class StoppingPostgres(Stopping, PostgresEventLog):
            pass

        log = StoppingPostgres(store.dsn, schema=store.schema)
        system_database_url = store.dsn
    log.appends = Counter()

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        scenario = scenario_of_messages(messages)
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        note(scenario, f'model:{step}')
        await stop_here(scenario, f'model:{step}')
        if step <= len(KEYS):
            return ModelResponse(parts=[ToolCallPart('lookup', {'key': KEYS[step - 1]}, tool_call_id=f'call-{step}')])
        return ModelResponse(parts=[TextPart(ANSWER)])

    async def lookup(ctx: RunContext[str], key: str) -> str:
        """Look a key up."""
        scenario = BY_NAME[ctx.deps]
        step = 1 + KEYS.index(key)
        note(scenario, f'tool:{step}')
        await stop_here(scenario, f'tool:{step}')
        return f'{key} is {step}'

    durable_agent = Agent(
        FunctionModel(model),
        name=DURABLE_AGENT,
        deps_type=str,
        tools=[lookup],
        capabilities=[EventLogPersistence(log), DBOSDurability()],
    )
    plain_agent = Agent(
        FunctionModel(model), name=WRAPPED_AGENT, deps_type=str, tools=[lookup], capabilities=[EventLogPersistence(log)]
    )

    config: DBOSConfig = {
        'name': 'eventlog-recovery',
        'system_database_url': system_database_url,
        'application_version': 'eventlog-recovery-test',
        'log_level': 'WARNING',
    }
    if store.backend == 'postgres':
        config['dbos_system_schema'] = dbos_schema(store.schema)
    DBOS(config=config)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # `DBOSAgent` is deprecated in favour of `DBOSDurability`
        from pydantic_ai.durable_exec.dbos import DBOSAgent

        wrapped_agent: Any = DBOSAgent(plain_agent)

    @DBOS.workflow(name=f'{DURABLE_AGENT}.test_run')
    async def durable_workflow(prompt: str, scenario_name: str) -> Any:
        return await durable_agent.run(prompt, deps=scenario_name)

    async def start(scenario: Scenario) -> None:
        with SetWorkflowID(scenario.name):
            if scenario.variant == 'durable':
                await durable_workflow(prompt_for(scenario), scenario.name)
            else:
                await wrapped_agent.run(
                    prompt_for(scenario),
                    deps=scenario.name,
                    run_id=scenario.run_id,
                    conversation_id=scenario.conversation_id,
                )
        raise AssertionError(f'{scenario.name} finished instead of stopping at {scenario.stop}')

    async def collect(scenario: Scenario) -> None:
        handle = await DBOS.retrieve_workflow_async(scenario.name)
        result = await handle.get_result()
        status = await DBOS.get_workflow_status_async(scenario.name)
        steps = await DBOS.list_workflow_steps_async(scenario.name, load_output=False)
        (workdir / f'messages-{scenario.name}.json').write_bytes(
            ModelMessagesTypeAdapter.dump_json(result.all_messages())
        )
        outcome = {
            'run_id': result.run_id,
            'conversation_id': result.conversation_id,
            'output': result.output,
            'status': status.status if status is not None else None,
            'steps': [step['function_name'] for step in steps],
        }
        (workdir / f'outcome-{scenario.name}.json').write_text(json.dumps(outcome))

    async def run() -> None:
        DBOS.launch()
        if mode == 'start':
            await asyncio.gather(*(start(s) for s in SCENARIOS))
        else:
            await asyncio.gather(*(collect(s) for s in SCENARIOS))
        log.close()

    asyncio.run(run())
    sys.stdout.flush()
    os._exit(0)  # DBOS's background threads are not ours to wait for


if __name__ == '__main__':
    main(Path(sys.argv[1]), sys.argv[2], Store.from_args(sys.argv[3:]))
