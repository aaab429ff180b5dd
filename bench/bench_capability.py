"""Persistence overhead and store size: `EventLogPersistence` against the reference's `StepPersistence`.

A chat workload: one agent run per exchange, the history threaded through `message_history`,
realistic multi-session text from a seeded generator, the agent driven by a `FunctionModel`.
The same exchanges run with `EventLogPersistence` on an `LmdbEventLog` (synced commits) and with
the reference's `StepPersistence(store=SqliteStepStore(...))`, each interleaved exchange by
exchange with a twin agent without persistence (its baseline); the pairs run one after the
other, so the reference's heavy writes never queue in front of the event log's synced commits.

A third pair measures the floor any design with the same durability has on this machine: a
capability that does nothing but one synced LMDB commit of one small value at each of the three
points where something of a plain exchange becomes final (the request before it is sent, the
response once stamped, the run's end). The reference's overhead over that floor is the best
ratio any such store could reach here.

Overhead per run = (time with persistence - time without) for the same exchange, median over
the repetitions, then the median over a window of runs ending at each checkpoint (the last quarter
of the runs up to it), so the growth with the conversation's length is visible.

    .venv/bin/python bench/bench_capability.py            # checkpoints 100, 400, 1600 exchanges
    .venv/bin/python bench/bench_capability.py --quick    # checkpoints 25, 100, 400
    .venv/bin/python bench/bench_capability.py --quick --baseline main   # old and new side by side

Each repetition runs in a child process. With `--baseline REF` the packages of git ref `REF` are
exported and each repetition runs in two children, one per tree, driven in lock step: exchange
by exchange, each child runs it with the pair being measured, the first child alternating (the
reference is measured by this tree's child only). A last table compares the two trees'
overheads, each with the floor measured in its own child.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lmdb
from _baseline import HERE, LockStep, exported, load_average, serve  # first: puts the measured tree first on sys.path
from pydantic_ai import Agent, ModelRequestNode
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

import capability.persistence
from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog

TOPICS = {
    'travel': 'flight hotel itinerary passport layover museum train booking luggage beach ferry visa',
    'cooking': 'recipe oven garlic simmer dough basil sourdough knife pan roast marinade spice',
    'work': 'deadline meeting manager review roadmap budget release client invoice sprint report',
    'health': 'running knee physio sleep hydration protein stretch doctor marathon yoga recovery',
    'garden': 'tomatoes compost seedlings pruning aphids mulch irrigation greenhouse bulbs soil',
    'family': 'birthday cousin school holiday grandparents wedding moving recital dinner weekend',
}
COMMON = [
    'the',
    'a',
    'and',
    'to',
    'of',
    'in',
    'that',
    'it',
    'is',
    'was',
    'for',
    'on',
    'with',
    'as',
    'at',
    'this',
    'but',
    'they',
    'be',
    'have',
    'from',
    'or',
    'one',
    'had',
    'by',
    'word',
    'not',
    'what',
    'all',
    'were',
    'we',
    'when',
    'your',
    'can',
    'said',
    'there',
    'use',
    'an',
    'each',
    'which',
    'she',
    'do',
    'how',
    'their',
    'if',
    'will',
    'up',
    'other',
    'about',
    'out',
    'many',
    'then',
    'them',
    'these',
    'so',
    'some',
    'her',
    'would',
    'make',
    'like',
    'him',
    'into',
    'time',
    'has',
    'look',
    'two',
    'more',
    'write',
    'go',
]
NAMES = ['Ana', 'Bilal', 'Chen', 'Dara', 'Emeka', 'Farah', 'Goran', 'Hana', 'Ivo', 'Jun']


def sentence(rng: random.Random, topic: str, words: int) -> str:
    pool = TOPICS[topic].split()
    out: list[str] = []
    for _ in range(words):
        roll = rng.random()
        if roll < 0.25:
            out.append(rng.choice(pool))
        elif roll < 0.3:
            out.append(rng.choice(NAMES))
        elif roll < 0.33:
            out.append(str(rng.randint(2, 2030)))
        else:
            out.append(rng.choice(COMMON))
    text = ' '.join(out)
    return text[0].upper() + text[1:] + rng.choice(['.', '?', '!', '.'])


def exchanges(count: int, seed: int) -> list[tuple[str, str]]:
    """(user message, assistant reply) pairs in sessions of a few exchanges on one topic."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    topic = rng.choice(list(TOPICS))
    for index in range(count):
        if index % rng.randint(4, 12) == 0:
            topic = rng.choice(list(TOPICS))
        user = ' '.join(sentence(rng, topic, rng.randint(6, 22)) for _ in range(rng.randint(1, 3)))
        reply = ' '.join(sentence(rng, topic, rng.randint(8, 28)) for _ in range(rng.randint(2, 6)))
        out.append((user, reply))
    return out


@dataclass
class Mode:
    name: str
    agent: Agent[None, str]
    history: list[ModelMessage] | None = None
    times: list[list[float]] = field(default_factory=list[list[float]])
    """times[rep][exchange]"""
    sizes: dict[int, int] = field(default_factory=dict[int, int])
    """Bytes on disk at each checkpoint (last repetition)."""


@dataclass
class SyncedCommitFloor(AbstractCapability[Any]):
    """`EventLogPersistence`'s hooks, making one synced LMDB commit of one small value wherever it
    commits in a plain exchange: the floor of any store that makes each of them durable before
    going on. Without an environment the hooks do nothing."""

    env: lmdb.Environment | None = None

    def _commit(self) -> None:
        if self.env is not None:
            with self.env.begin(write=True) as txn:
                txn.put(b'%016d' % txn.stat()['entries'], b'x' * 64, append=True)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        result = await handler()
        self._commit()
        return result

    async def before_run(self, ctx: RunContext[Any]) -> None:
        return None

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        self._commit()
        return request_context

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        if isinstance(node, ModelRequestNode):
            self._commit()
        return result


def make_agent(replies: list[str], capabilities: list[AbstractCapability[Any]]) -> Agent[None, str]:
    position = {'i': 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(replies[position['i']])])

    agent = Agent(FunctionModel(model), capabilities=capabilities)
    agent.__dict__['_bench_position'] = position
    return agent


def disk_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_blocks * 512 for p in path.iterdir() if p.name != 'lock.mdb')
    return sum(p.stat().st_size for p in path.parent.glob(path.name + '*'))


async def child(rep: int, data: list[tuple[str, str]], checkpoints: list[int], with_reference: bool) -> None:
    """One repetition in a child process measuring its tree, driven by the parent (`LockStep`):
    the step `PAIR INDEX` runs exchange `INDEX` with both agents of the pair named `PAIR`
    (`eventlog`, `floor`, `reference`: each persistence with its own agent without persistence,
    interleaved exchange by exchange so both see the same machine state) and answers their
    seconds; at the end, the store sizes at each checkpoint."""
    replies = [reply for _, reply in data]
    with tempfile.TemporaryDirectory(prefix='bench-capability-') as tmp:
        workdir = Path(tmp)
        log = LmdbEventLog(workdir / f'log-{rep}')
        floor_env = lmdb.open(str(workdir / f'floor-{rep}'), map_size=64 << 20)  # synced commits: LMDB's default
        pairs = {
            'eventlog': [
                Mode('none', make_agent(replies, [])),
                Mode('eventlog', make_agent(replies, [EventLogPersistence(log)])),
            ],
            'floor': [
                Mode('none-3', make_agent(replies, [])),
                Mode('floor', make_agent(replies, [SyncedCommitFloor(floor_env)])),
            ],
        }
        ref_db = workdir / f'reference-{rep}.db'
        if with_reference:
            from pydantic_ai_harness.step_persistence import SqliteStepStore, StepPersistence

            reference = StepPersistence(store=SqliteStepStore(database=str(ref_db)))
            pairs['reference'] = [
                Mode('none-2', make_agent(replies, [])),
                Mode('reference', make_agent(replies, [reference])),
            ]
        json_sizes: dict[int, int] = {}

        async def step(line: str) -> dict[str, float]:
            name, index_text = line.split()
            index = int(index_text)
            pair = pairs[name]
            if index == 0:
                gc.collect()
            times: dict[str, float] = {}
            for mode in pair:
                mode.agent.__dict__['_bench_position']['i'] = index
                start = time.perf_counter()
                result = await mode.agent.run(
                    data[index][0], message_history=mode.history, conversation_id=f'bench-{rep}'
                )
                times[mode.name] = time.perf_counter() - start
                mode.history = result.all_messages()
            count = index + 1
            if count in checkpoints:
                json_sizes[count] = len(ModelMessagesTypeAdapter.dump_json(pair[0].history or []))
                if name == 'eventlog':
                    pair[1].sizes[count] = disk_bytes(log.path)
                elif name == 'reference':
                    pair[1].sizes[count] = disk_bytes(ref_db)
            return times

        def finish() -> dict[str, Any]:
            log.close()
            floor_env.close()
            return {
                'module': capability.persistence.__file__,
                'sizes': {mode.name: mode.sizes for pair in pairs.values() for mode in pair},
                'json_sizes': json_sizes,
            }

        await serve(step, finish)


def window(checkpoint: int) -> range:
    """The runs whose overhead stands for a checkpoint: the last quarter of the runs up to it."""
    return range(checkpoint - max(1, checkpoint // 4), checkpoint)


def fmt_ms(seconds: float) -> str:
    return f'{seconds * 1000:8.3f} ms'


def fmt_bytes(count: int) -> str:
    return f'{count / 1e6:9.2f} MB'


Results = dict[str, Any]
"""One repetition as a child reports it: `times[mode][exchange]`, `sizes[mode][checkpoint]`,
`json_sizes[checkpoint]` (JSON keys are strings)."""


def report(label: str, reps: list[Results], checkpoints: list[int]) -> dict[int, tuple[float, float, float | None]]:
    """Print one tree's table; return (eventlog overhead, floor overhead, reference overhead or
    None) per checkpoint, in seconds."""
    with_reference = 'reference' in reps[0]['times']
    names = list(reps[0]['times'])
    # per_run[mode][exchange] = median over repetitions
    per_run = {
        name: [statistics.median(rep['times'][name][x] for rep in reps) for x in range(checkpoints[-1])]
        for name in names
    }
    last = reps[-1]

    def overhead(name: str, base: str, span: range) -> float:
        return statistics.median(per_run[name][x] - per_run[base][x] for x in span)

    print(f'\n{label}')
    header = f'{"exchanges":>9} | {"run, no persistence":>19} | {"eventlog overhead":>17} | {"3-commit floor":>14} | '
    if with_reference:
        header += f'{"reference overhead":>18} | {"ratio":>7} | {"ceiling":>7} | '
    header += f'{"messages JSON":>13} | {"eventlog store":>14}'
    if with_reference:
        header += f' | {"reference store":>15}'
    print(header)
    print('-' * len(header))
    found: dict[int, tuple[float, float, float | None]] = {}
    for checkpoint in checkpoints:
        span = window(checkpoint)
        base = statistics.median(per_run['none'][x] for x in span)
        ours = overhead('eventlog', 'none', span)
        floor = overhead('floor', 'none-3', span)
        line = f'{checkpoint:>9} | {fmt_ms(base):>19} | {fmt_ms(ours):>17} | {fmt_ms(floor):>14} | '
        theirs = None
        if with_reference:
            theirs = overhead('reference', 'none-2', span)
            line += f'{fmt_ms(theirs):>18} | {theirs / ours:6.1f}x | {theirs / floor:6.1f}x | '
        json_size = last['json_sizes'][str(checkpoint)]
        our_size = last['sizes']['eventlog'][str(checkpoint)]
        line += f'{fmt_bytes(json_size):>13} | {fmt_bytes(our_size):>9} {our_size / json_size:4.1f}x'
        if with_reference:
            ref_size = last['sizes']['reference'][str(checkpoint)]
            line += f' | {fmt_bytes(ref_size):>9} {ref_size / json_size:5.1f}x'
        print(line)
        found[checkpoint] = (ours, floor, theirs)
    first, final = window(checkpoints[0]), window(checkpoints[-1])
    ours_growth = overhead('eventlog', 'none', final) / overhead('eventlog', 'none', first)
    print(f'eventlog overhead per run, last checkpoint / first: {ours_growth:.2f}x')
    if with_reference:
        ref_growth = overhead('reference', 'none-2', final) / overhead('reference', 'none-2', first)
        print(f'reference overhead per run, last checkpoint / first: {ref_growth:.2f}x')
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='checkpoints 25, 100, 400 instead of 100, 400, 1600')
    parser.add_argument('--reps', type=int, default=3, help='repetitions of the whole conversation (default 3)')
    parser.add_argument('--seed', type=int, default=42)
    parser.add_argument('--no-reference', action='store_true', help='skip the reference (pydantic-ai-harness)')
    parser.add_argument('--baseline', default='', help="git ref of the old way to measure side by side ('' for none)")
    parser.add_argument('--child', type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    checkpoints = [25, 100, 400] if args.quick else [100, 400, 1600]
    with_reference = not args.no_reference
    if with_reference:
        try:
            import pydantic_ai_harness  # noqa: F401  # pyright: ignore[reportUnusedImport]
        except ImportError:
            print('pydantic-ai-harness is not installed: measuring EventLogPersistence alone')
            with_reference = False
    data = exchanges(checkpoints[-1], args.seed)
    if args.child is not None:  # one repetition, in a child process measuring its tree
        asyncio.run(child(args.child, data, checkpoints, with_reference))
        return
    print(f'{checkpoints[-1]} exchanges, {args.reps} repetitions, seed {args.seed}')
    print(f'load average before: {load_average()}')
    script = Path(__file__).resolve()
    child_args = ['--seed', str(args.seed), *(['--quick'] if args.quick else [])]
    with exported(args.baseline) if args.baseline else contextlib.nullcontext(None) as old_tree:
        trees = {f'old ({args.baseline})': old_tree} if old_tree is not None else {}
        trees['new (this tree)'] = HERE
        # The reference does not depend on the tree: only this tree's child measures it.
        reference_in = {label: with_reference and tree == HERE for label, tree in trees.items()}
        results: dict[str, list[Results]] = {label: [] for label in trees}
        for rep in range(args.reps):
            started = time.perf_counter()
            children = LockStep(
                script,
                {label: tree for label, tree in trees.items() if tree is not None},
                [*child_args, '--child', str(rep)],
                extra={label: [] if reference_in[label] else ['--no-reference'] for label in trees},
            )
            times: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
            pairs = ['eventlog', 'floor', *(['reference'] if with_reference else [])]
            # The pairs one after the other (so the reference's heavy writes never sit in front of
            # the log's synced commits), each exchange by each tree in turn, the first alternating.
            for pair in pairs if rep % 2 == 0 else pairs[::-1]:
                for index in range(checkpoints[-1]):
                    order = list(trees) if (index + rep) % 2 == 0 else list(trees)[::-1]
                    for label in order:
                        if pair == 'reference' and not reference_in[label]:
                            continue
                        for name, seconds in children.step(label, f'{pair} {index}').items():
                            times[label].setdefault(name, []).append(seconds)
            for label, last in children.close().items():
                results[label].append({'times': times[label], 'sizes': last['sizes'], 'json_sizes': last['json_sizes']})
            print(
                f'  repetition {rep + 1}: {time.perf_counter() - started:.1f} s; load average {load_average()}',
                flush=True,
            )
    print(f'load average after: {load_average()}')
    found = {label: report(label, reps, checkpoints) for label, reps in results.items()}
    print(
        '\n3-commit floor: a capability doing nothing but one synced LMDB commit of one small value for the\n'
        "request, the response and the run's end; ceiling = reference overhead / floor, the best ratio a\n"
        'store that makes each of them durable before going on can reach on this machine.'
    )
    print('store sizes are bytes on disk (LMDB data file blocks; SQLite database and WAL files).')
    if len(found) == 2:
        (old_label, old), (new_label, new) = found.items()
        print(
            f'\n{"exchanges":>9} | {"old overhead":>12} | {"new overhead":>12} | {"new / old":>9} | {"old / floor":>11} | {"new / floor":>11}'
        )
        for checkpoint in checkpoints:
            (o, o_floor, _), (n, n_floor, _) = old[checkpoint], new[checkpoint]
            print(
                f'{checkpoint:>9} | {fmt_ms(o):>12} | {fmt_ms(n):>12} | {n / o:8.2f}x | {o / o_floor:10.2f}x | {n / n_floor:10.2f}x'
            )
        print(f'old = {old_label}, new = {new_label}; floor = the 3-commit floor measured in the same child')


if __name__ == '__main__':
    main()
