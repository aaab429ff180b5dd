"""Durability overhead: `EventLogDurability` against `DBOSDurability` (SQLite system database) and no durability.

Every agent carries `EventLogPersistence` on an `LmdbEventLog` (synced commits), so the three
configurations record the same messages and differ only in what makes the run durable:

- `none`: no durability;
- `eventlog`: `EventLogDurability` on the same log (the journal is `durable_step` entries);
- `dbos`: `DBOSDurability`, each run inside a `@DBOS.workflow` with a SQLite system database.

Each exchange is one agent run driven by a `FunctionModel`: a model request that calls one tool,
the tool, and a model request that answers (three model/tool units). The configurations run
interleaved, exchange by exchange, in rotating order, each against its own store, so they
share the machine's state. Overhead per run = median over the exchanges of (time with the
durability - time without it) for the same exchange; per unit = that divided by three.

Resume: a run of `--resume-calls` tool calls is interrupted in-process at its `--resume-at`-th
journaled unit (the log stops taking writes, as a killed process would), then resumed with
`EventLogDurability.resume`; its time is set against running the same run from the start.

    .venv/bin/python bench/bench_durable.py                 # 100 exchanges, resume at unit 50
    .venv/bin/python bench/bench_durable.py --exchanges 30  # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogDurability, EventLogPersistence
from eventlog import LmdbEventLog, NewEntry

CONFIGS = ('none', 'eventlog', 'dbos')


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls `lookup` until the prompt's number of calls is reached, then answers."""
    done = sum(isinstance(m, ModelResponse) for m in messages)
    first = messages[0].parts[0]
    wanted = int(str(getattr(first, 'content', '1 call')).split(' ', 1)[0])
    if done < wanted:
        return ModelResponse(parts=[ToolCallPart('lookup', {'key': f'k{done}'}, tool_call_id=f'call-{done}')])
    return ModelResponse(parts=[TextPart(f'looked up {wanted} keys')])


def lookup(key: str) -> str:
    """Look a key up."""
    return f'value of {key}'


def make_agent(log: Any, name: str, durability: Any | None) -> Agent[None, str]:
    capabilities: list[Any] = [EventLogPersistence(log)]
    if durability is not None:
        capabilities.append(durability)
    return Agent(FunctionModel(model), name=name, tools=[lookup], capabilities=capabilities)


class Died(BaseException):
    """The process "died": the log takes no more writes."""


class Stopping(LmdbEventLog):
    """An LMDB log that stops taking writes once `stop_after` journal entries were appended."""

    stop_after: int | None = None
    journaled = 0

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        if self.stop_after is not None:
            if self.journaled >= self.stop_after:
                raise Died
            self.journaled += sum(e.kind == 'durable_step' and e.idempotency_key != 'durable:0' for e in entries)
        return await super().append_many(entries)


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def overhead(workdir: Path, exchanges: int) -> dict[str, list[float]]:
    """Each configuration's time per exchange, interleaved."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    logs = {config: LmdbEventLog(workdir / f'{config}.lmdb') for config in CONFIGS}
    agents = {
        'none': make_agent(logs['none'], 'plain', None),
        'eventlog': make_agent(logs['eventlog'], 'journaled', EventLogDurability(logs['eventlog'])),
        'dbos': make_agent(logs['dbos'], 'dbos_agent', DBOSDurability()),
    }
    config: DBOSConfig = {
        'name': 'bench-durable',
        'system_database_url': f'sqlite:///{workdir / "dbos.sqlite"}',
        'application_version': 'bench-durable',
        'log_level': 'WARNING',
    }
    DBOS(config=config)
    dbos_agent = agents['dbos']

    @DBOS.workflow(name='bench_durable.run')
    async def workflow(prompt: str, run_id: str) -> str:
        return (await dbos_agent.run(prompt, run_id=run_id, conversation_id=run_id)).output

    DBOS.launch()

    async def run(config: str, index: int) -> None:
        run_id = f'{config}-{index}'
        if config == 'dbos':
            with SetWorkflowID(run_id):
                await workflow('1 call', run_id)
        else:
            await agents[config].run('1 call', run_id=run_id, conversation_id=run_id)

    times: dict[str, list[float]] = {config: [] for config in CONFIGS}
    for config in CONFIGS:  # warm up each path (imports, adapters, first commits)
        for i in range(3):
            await run(config, -1 - i)
    gc.collect()
    gc.disable()
    try:
        for index in range(exchanges):
            order = CONFIGS[index % 3 :] + CONFIGS[: index % 3]
            for config in order:
                times[config].append(await timed(lambda c=config, i=index: run(c, i)))
    finally:
        gc.enable()
    for log in logs.values():
        report = await log.verify()
        assert report.ok, report.problems
        log.close()
    return times


async def resume_time(workdir: Path, calls: int, at: int) -> tuple[float, float, float, int]:
    """Time to resume a run interrupted at its `at`-th journaled unit, to run it from the start,
    and to execute the finished run again (every unit replayed from the journal)."""
    full_log = LmdbEventLog(workdir / 'full.lmdb')
    durable = EventLogDurability(full_log)
    full = make_agent(full_log, 'long', durable)
    from_start = await timed(lambda: full.run(f'{calls} calls', run_id='long', conversation_id='long'))
    replay = await timed(lambda: durable.resume(full, 'long'))
    full_log.close()

    log = Stopping(workdir / 'resume.lmdb')
    log.stop_after = at
    agent = make_agent(log, 'long', EventLogDurability(log))
    try:
        await agent.run(f'{calls} calls', run_id='long', conversation_id='long')
    except (Died, BaseExceptionGroup):
        pass
    else:
        raise AssertionError('the run was not interrupted')
    log.stop_after = None
    durability = EventLogDurability(log)
    agent = make_agent(log, 'long', durability)
    resumed = await timed(lambda: durability.resume(agent, 'long'))
    journaled = len(await log.entries(run_id='long', kinds=['durable_step']))
    report = await log.verify()
    assert report.ok, report.problems
    log.close()
    return resumed, from_start, replay, journaled


def ms(seconds: float) -> str:
    return f'{seconds * 1000:.2f} ms'


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--exchanges', type=int, default=100)
    parser.add_argument('--resume-calls', type=int, default=30, help='tool calls of the interrupted run')
    parser.add_argument('--resume-at', type=int, default=50, help='the journaled unit it is interrupted at')
    args = parser.parse_args()
    warnings.simplefilter('ignore')
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        times = await overhead(workdir, args.exchanges)
        resumed, from_start, replay, journaled = await resume_time(workdir, args.resume_calls, args.resume_at)
        from dbos import DBOS

        DBOS.destroy()
    base = times['none']
    print(f'{args.exchanges} exchanges, one tool call each (3 model/tool units per run), LMDB log, synced commits')
    print(f'  no durability:        {ms(statistics.median(base))} per run (median)')
    over: dict[str, float] = {}
    for config in ('eventlog', 'dbos'):
        diffs = [t - b for t, b in zip(times[config], base, strict=True)]
        over[config] = statistics.median(diffs)
        print(
            f'  {config + ":":<21} {ms(statistics.median(times[config]))} per run, overhead '
            f'{ms(over[config])} per run, {ms(over[config] / 3)} per unit'
        )
    print(f'  ratio EventLogDurability / DBOSDurability overhead per run: {over["eventlog"] / over["dbos"]:.2f}')
    print(
        f'resume: a run of {args.resume_calls} tool calls interrupted at journaled unit {args.resume_at} '
        f'resumes in {ms(resumed)}; the whole run from the start takes {ms(from_start)} '
        f'(ratio {resumed / from_start:.2f}; {journaled} journal entries in the end)'
    )
    print(f'replay: executing the finished run again (all {journaled} units from the journal) takes {ms(replay)}')


if __name__ == '__main__':
    asyncio.run(main())
