"""Where `EventLogPersistence`'s CPU per agent run goes, hook by hook and piece by piece.

FunctionModel agents with and without `EventLogPersistence` (`LmdbEventLog(sync=False)`) run the
same exchanges in turn, one run per exchange, history threaded. The thread CPU time of each run
gives the overhead per run (with minus without, mean over the runs after the first `--skip`);
timers around the capability's hooks and the pieces under them split it:

- the hooks: `before_run` (finding what the handed-in history continues), `before_model_request`
  (the request), `after_node_run` (the response), `finish` (the run's end, from `wrap_run`), and
  in a tool exchange the `started` and `completed` records around each tool call (`tool effects`:
  `wrap_tool_execute` without the tool's own execution, which it wraps);
- under them: `append_many` (each write transaction, whole), of which `engine`
  (`append_entries`) and `identity check` (the `stat` of `data.mdb`); `encode` (each message
  encoded, including the re-encodings that check a message was not changed after it was
  recorded); `get_entry` (the read that checks a remembered branch still exists).

What the hooks do not cover (pydantic-ai's own work running slower beside ours, `wrap_run`'s
bookkeeping) is the overhead minus the hooks. Each timer is one `time.thread_time` call on entry
and exit (about a microsecond). Every piece runs cold inside agent runs: `bench_append_path.py`
shows the same transaction three to four times cheaper in a tight loop.

With `--baseline REF` the packages of git ref `REF` are exported (`bench/_baseline.py`) and the
measurement runs in child processes, one per tree, the old tree then this one, `--rounds` times:
in turn, not in lock step, so the two trees' figures differ by the machine's drift as well
(`bench_commit_cost.py --baseline` is the side-by-side comparison).

    .venv/bin/python bench/bench_run_split.py                   # a plain exchange, 400 runs
    .venv/bin/python bench/bench_run_split.py --tool            # one tool call, then the answer
    .venv/bin/python bench/bench_run_split.py --baseline main   # main's packages, then this tree's, twice
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import HERE, TREE_VARIABLE, export, load_average, measured_tree
from bench_capability import exchanges, make_agent
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import capability._recorder as recorder_module
import capability._redaction as redaction_module
import capability.persistence as persistence_module
import eventlog.lmdb_log as lmdb_log
import eventlog.log as log_module
from eventlog import LmdbEventLog

ROWS = (
    'hook before_run',
    'hook before_model_request',
    'hook after_node_run',
    'tool effects',
    'finish (in wrap_run)',
    'append_many',
    'engine',
    'identity check',
    'encode',
    'get_entry',
)


class Timers:
    """Thread-CPU timers wrapped around methods, counted only while `on`."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.on = False

    def wrap(self, owner: Any, name: str, row: str) -> None:
        original = getattr(owner, name)
        timers = self
        if asyncio.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                start = time.thread_time()
                try:
                    return await original(*args, **kwargs)
                finally:
                    if timers.on:
                        timers.seconds[row] += time.thread_time() - start

            setattr(owner, name, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                start = time.thread_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    if timers.on:
                        timers.seconds[row] += time.thread_time() - start

            setattr(owner, name, timed)


def install(timers: Timers) -> None:
    persistence = persistence_module.EventLogPersistence
    timers.wrap(persistence, 'before_run', 'hook before_run')
    timers.wrap(persistence, 'before_model_request', 'hook before_model_request')
    timers.wrap(persistence, 'after_node_run', 'hook after_node_run')
    timers.wrap(recorder_module.RunRecorder, 'tool_effect', 'tool effects')
    timers.wrap(recorder_module.RunRecorder, 'finish', 'finish (in wrap_run)')
    timers.wrap(log_module.EventLogBase, 'append_many', 'append_many')
    timers.wrap(log_module.EventLogBase, 'get_entry', 'get_entry')
    timers.wrap(log_module.engine, 'append_entries', 'engine')
    timers.wrap(lmdb_log._SharedEnv, 'check_identity', 'identity check')  # pyright: ignore[reportPrivateUsage]
    timers.wrap(redaction_module.Redaction, 'encode', 'encode')


def tool_agent(capabilities: list[Any]) -> Agent[None, str]:
    """One tool call, then an answer quoting the tool's return."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(f'The forecast says {last.parts[0].content}.')])
        return ModelResponse(parts=[ToolCallPart('forecast', {'city': 'Lisbon', 'days': 2})])

    agent = Agent(FunctionModel(model), capabilities=capabilities)

    @agent.tool_plain
    def forecast(city: str, days: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'sun in {city} for {days} days'

    return agent


async def measure(count: int, skip: int, tool: bool) -> None:
    timers = Timers()
    install(timers)
    data = exchanges(count, 1)
    replies = [reply for _, reply in data]
    with tempfile.TemporaryDirectory(prefix='bench-run-split-') as tmp:
        log = LmdbEventLog(Path(tmp) / 'store', sync=False)
        make: Callable[[list[Any]], Agent[None, str]] = tool_agent if tool else (lambda caps: make_agent(replies, caps))
        agents = {'none': make([]), 'eventlog': make([persistence_module.EventLogPersistence(log)])}
        history: dict[str, list[ModelMessage] | None] = dict.fromkeys(agents)
        cpu: dict[str, list[float]] = {name: [] for name in agents}
        for index, (user, _) in enumerate(data):
            order = list(agents) if index % 2 == 0 else list(reversed(agents))
            for name in order:
                agent = agents[name]
                if not tool:
                    agent.__dict__['_bench_position']['i'] = index
                timers.on = name == 'eventlog' and index >= skip
                start = time.thread_time()
                result = await agent.run(user, message_history=history[name])
                cpu[name].append(time.thread_time() - start)
                timers.on = False
                history[name] = result.all_messages()
        log.close()
    runs = count - skip
    none = statistics.mean(cpu['none'][skip:])
    ours = statistics.mean(cpu['eventlog'][skip:])
    writes = 7 if tool else 3
    print(f'{"tool" if tool else "plain"} exchange, {runs} runs measured; load average {load_average()}')
    print(f'thread CPU per run: without {none * 1e3:.3f} ms, with EventLogPersistence {ours * 1e3:.3f} ms')
    print(
        f'overhead per run {(ours - none) * 1e3:.3f} ms = {(ours - none) / writes * 1e3:.3f} ms per write transaction'
    )
    hooks = 0.0
    for row in ROWS:
        seconds = timers.seconds.get(row, 0.0)
        if row.startswith(('hook', 'finish', 'tool')):
            hooks += seconds
        print(f'  {row:28s} {seconds / runs * 1e6:8.1f} us per run')
    print(f'  {"outside the hooks":28s} {((ours - none) * runs - hooks) / runs * 1e6:8.1f} us per run')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--exchanges', type=int, default=400)
    parser.add_argument('--skip', type=int, default=50, help='first runs left out (warm-up)')
    parser.add_argument(
        '--tool', action='store_true', help='a tool exchange (7 write transactions) instead of a plain one'
    )
    parser.add_argument('--baseline', default='', help='git ref of another tree to measure in turn with this one')
    parser.add_argument('--rounds', type=int, default=2, help='with --baseline: how many times each tree runs')
    args = parser.parse_args()
    if not args.baseline:
        print(f'load average before: {load_average()}; measuring the packages of {measured_tree()}')
        asyncio.run(measure(args.exchanges, args.skip, args.tool))
        return
    child = [sys.executable, __file__, '--exchanges', str(args.exchanges), '--skip', str(args.skip)]
    if args.tool:
        child.append('--tool')
    with tempfile.TemporaryDirectory(prefix='bench-run-split-tree-') as tmp:
        old = export(args.baseline, Path(tmp))
        for round_ in range(1, args.rounds + 1):
            for label, tree in ((f'old ({args.baseline})', old), ('new (this tree)', HERE)):
                print(f'\n== round {round_}: {label}', flush=True)
                subprocess.run(child, env={**os.environ, TREE_VARIABLE: str(tree)}, check=True)


if __name__ == '__main__':
    main()
