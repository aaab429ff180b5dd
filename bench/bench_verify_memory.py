"""Peak memory and time of `verify` on a big store: the log's, the search index's, and the viewer's.

Builds (once: it is cached under `--cache`) an LMDB store of `--messages` messages (200,000 by
default, `--quick` 20,000) in 100 conversations of runs of 100 messages, seeded text of 8 to 40
words from a vocabulary of 3,000 plus a unique token per message, with its search index built.
Then, each in a fresh subprocess, it measures (a) `log.verify()`, (b) `LmdbIndex.verify()` and
(c) the viewer's `read_verify` (both, as `/stats` and `eventlog verify` run them): the child's
peak RSS (`getrusage(RUSAGE_SELF).ru_maxrss`, which also counts the store's pages LMDB maps while
reading), its peak anonymous RSS (the heap, `RssAnon` sampled every 5 ms) and the wall time of
the call itself (imports and opening the store excluded). Each figure is the median of `--reps`
runs; the `import` row is a child that only opens the store.

The old way is measured side by side: `--baseline REF` (default `main`) is exported with
`git archive` into a temporary directory (`_baseline.exported`) and the same children run with
it first on `PYTHONPATH`; ratios are new / old. `--baseline ''` measures this tree only.
Usage: `python bench/bench_verify_memory.py [--quick] [--messages N] [--reps N] [--cache DIR]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import HERE, exported

_BUILD = """
import asyncio, random, sys
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry
from search.persistent_index import PersistentIndex as LmdbIndex

async def main(path, count):
    rng = random.Random(7)
    vocabulary = [''.join(rng.choices('abcdefghijklmnopqrstuvwxyz', k=rng.randint(3, 10))) for _ in range(3000)]
    log = LmdbEventLog(path, sync=False)
    try:
        made = 0
        run = 0
        while made < count:
            conversation = f'conv{run % 100}'
            run_id = f'run{run}'
            run += 1
            batch = [run_started_entry(conversation_id=conversation, run_id=run_id, agent_name='bench')]
            for _ in range(min(100, count - made)):
                text = ' '.join(rng.choices(vocabulary, k=rng.randint(8, 40))) + f' token{made}'
                if made % 2 == 0:
                    message = ModelRequest(parts=[UserPromptPart(content=text)])
                else:
                    message = ModelResponse(parts=[TextPart(content=text)])
                batch.append(message_entry(message, conversation_id=conversation, run_id=run_id))
                made += 1
            batch.append(run_finished_entry(conversation_id=conversation, run_id=run_id, status='completed'))
            await log.append_many(batch)
        LmdbIndex.for_log(log).catch_up()
    finally:
        log.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""

_CHILD = """
import asyncio, json, resource, sys, threading, time

def anon():
    with open('/proc/self/status') as lines:
        return int(next(line.split()[1] for line in lines if line.startswith('RssAnon:')))

peak = anon()

def sample():
    global peak
    while True:
        peak = max(peak, anon())
        time.sleep(0.005)

from eventlog import LmdbEventLog
from search.persistent_index import PersistentIndex as LmdbIndex
from eventlog_cli._views import read_verify

threading.Thread(target=sample, daemon=True).start()
mode, path = sys.argv[1], sys.argv[2]
log = LmdbEventLog(path)
began = time.perf_counter()
if mode == 'log.verify':
    ok = asyncio.run(log.verify()).ok
elif mode == 'index.verify':
    ok = LmdbIndex.open_existing(log).verify() == []
elif mode == 'read_verify':
    ok = asyncio.run(read_verify(log))[0].ok
else:
    ok = True
seconds = time.perf_counter() - began
log.close()
peak = max(peak, anon())
print(json.dumps({'ok': ok, 'seconds': seconds, 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  'anon_kb': peak}))
"""

MODES = ('import', 'log.verify', 'index.verify', 'read_verify')


def _env(pythonpath: Path) -> dict[str, str]:
    return {**os.environ, 'PYTHONPATH': str(pythonpath), 'EVENTLOG_STORE': ''}


def _build(store: Path, count: int) -> None:
    if (store / 'built').exists():
        print(f'reusing {store}')
        return
    print(f'building {store} ({count:,} messages, with its search index) ...', flush=True)
    began = time.perf_counter()
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, '-c', _BUILD, str(store), str(count)], env=_env(HERE), check=True)
    (store / 'built').write_text(str(count))
    size = (store / 'data.mdb').stat().st_size / 2**20
    print(f'  built in {time.perf_counter() - began:.0f} s, data.mdb {size:.0f} MB', flush=True)


def _measure(tree: Path, mode: str, store: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, '-c', _CHILD, mode, str(store)],
        env=_env(tree),
        cwd=tree,  # `python -c` puts the working directory first on sys.path, before PYTHONPATH
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f'{mode} under {tree} failed:\n{result.stderr[-2000:]}')
    found = json.loads(result.stdout.strip().splitlines()[-1])
    if not found['ok']:
        raise SystemExit(f'{mode} under {tree} found problems in the bench store')
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--messages', type=int, default=200_000)
    parser.add_argument('--quick', action='store_true', help='20,000 messages (unless --messages is given)')
    parser.add_argument('--reps', type=int, default=3)
    parser.add_argument('--cache', type=Path, default=Path(tempfile.gettempdir()) / 'eventlog-bench-verify')
    parser.add_argument('--modes', default=','.join(MODES), help=f'which of {",".join(MODES)} to run')
    parser.add_argument('--baseline', default='main', help="git ref of the old way ('' for none)")
    args = parser.parse_args()
    modes = [mode for mode in MODES if mode in args.modes.split(',')]
    count = 20_000 if args.quick and args.messages == 200_000 else args.messages
    store = args.cache / f'store-{count}'
    _build(store, count)
    with exported(args.baseline) if args.baseline else contextlib.nullcontext(None) as old_tree:
        trees: dict[str, Path] = {}
        if old_tree is not None:
            trees[f'old ({args.baseline})'] = old_tree
        trees['new (this tree)'] = HERE
        results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        load_before = os.getloadavg()
        for rep in range(args.reps):
            for mode in modes:
                for label, tree in trees.items():
                    found = _measure(tree, mode, store)
                    run = (found['seconds'], found['maxrss_kb'] / 1024, found['anon_kb'] / 1024)
                    results.setdefault((label, mode), []).append(run)
            print(f'  rep {rep + 1}/{args.reps} done', flush=True)
        load_after = os.getloadavg()
    print(
        f'\n{count:,} messages, median of {args.reps} runs; load average {load_before[0]:.2f} before, '
        f'{load_after[0]:.2f} after ({os.cpu_count()} cores)'
    )
    print(f'{"":16} {"":16} {"seconds":>9} {"peak RSS MB":>12} {"peak heap MB":>13}')
    medians: dict[tuple[str, str], tuple[float, float, float]] = {}
    for mode in modes:
        for label in trees:
            runs = results[label, mode]
            seconds, rss, anon = (statistics.median(run[i] for run in runs) for i in range(3))
            medians[label, mode] = (seconds, rss, anon)
            print(f'{mode:16} {label:16} {seconds:9.2f} {rss:12.1f} {anon:13.1f}')
        if len(trees) == 2:
            old, new = (medians[label, mode] for label in trees)
            ratios = (f'{n / o:.2f}' if o else 'n/a' for n, o in zip(new, old, strict=True))
            print(f'{mode:16} {"new / old":16} {"{:>9} {:>12} {:>13}".format(*ratios)}')


if __name__ == '__main__':
    main()
