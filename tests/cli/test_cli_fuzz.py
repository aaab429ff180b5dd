"""Fuzzing a real store: bit flips, page-header damage and truncations on copies of it.

The oracle, for every damaged copy: a command that fails does so with a typed one-line error
(no traceback, no unhandled exception); and whenever any answer differs from the undamaged
store's, or reading crashes the storage engine, `verify` fails. (Damage that verify reports may
change what a command prints before verify is run: the commands do not re-verify what they read.)
`make test` runs a few dozen trials; `make test-long` (EVENTLOG_LONG=1) a few hundred. Every
trial is seeded, and a failure names its seed and its damage so that it can be replayed.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clitools import DETAIL, Store, build_store, invoke, open_log
from deepjson import NEEDLE, add_deep_conversations

TRIALS = 300 if os.environ.get('EVENTLOG_LONG') else 36
PAGE = 4096
_META = struct.Struct('<I I Q Q')  # magic, version, address, mapsize (after the 16-byte page header)
_LAST_PG_TXNID = struct.Struct('<Q Q')  # after the two 48-byte MDB_db records


def _live_last_page(data: bytes) -> int:
    """The last page in use, by the meta page with the larger transaction id."""
    best = (-1, 0)
    for page in (0, 1):
        base = page * PAGE + 16
        magic = _META.unpack_from(data, base)[0]
        if magic != 0xBEEFC0DE:
            continue
        last_pg, txnid = _LAST_PG_TXNID.unpack_from(data, base + _META.size + 96)
        best = max(best, (txnid, last_pg))
    assert best[0] >= 0, 'no valid meta page in the pristine store'
    return best[1]


@dataclass(frozen=True)
class Damage:
    """One way of damaging a copy, described well enough to replay it."""

    kind: str
    offset: int
    value: int

    def apply(self, data_file: Path) -> None:
        if self.kind == 'truncate':
            os.truncate(data_file, self.offset)
            return
        with open(data_file, 'r+b') as fh:
            fh.seek(self.offset)
            old = fh.read(1)[0]
            fh.seek(self.offset)
            fh.write(bytes([old ^ self.value if self.kind == 'bit' else self.value]))


def _damages(seed: int, used: int) -> Damage:
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.55:
        return Damage('bit', rng.randrange(used), 1 << rng.randrange(8))
    if roll < 0.92:
        page = rng.randrange(used // PAGE)
        field = rng.choice([0, 1, 10, 11, 12, 13, 14, 15])  # pgno, flags, lower, upper
        value = rng.randrange(256)
        return Damage('header', page * PAGE + field, value)
    return Damage('truncate', rng.randrange(used // PAGE) * PAGE + rng.choice([0, 0, 1234]), 0)


def _commands(store: Store) -> list[list[str]]:
    alpha_first, alpha_last, beta = store.alpha_runs[0], store.alpha_runs[-1], store.beta_runs[0]
    return [
        ['verify', '--json'],
        ['conversations'],
        ['runs'],
        ['info', 'alpha'],
        ['show', 'alpha'],
        ['show', '--run', alpha_last],
        ['replay', alpha_first, '--json'],
        ['replay', beta],
        ['context', 'alpha'],
        ['search', 'quokka staging bucket', '--conversation', 'alpha'],
        ['tail', '-n', '50'],
        ['stats'],
        ['export'],
        ['show', 'deep'],
        ['search', NEEDLE, '--all'],
    ]


class Worker:
    """The forking worker (`_fuzz_worker.py`), started once for the whole module."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, 'PYTHONPATH': str(root)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name('_fuzz_worker.py'))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
            env=env,
        )

    def run(self, store: Path, out: Path, commands: list[list[str]]) -> tuple[dict[str, int], list[dict[str, Any]]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out.unlink(missing_ok=True)
        self.proc.stdin.write(json.dumps({'store': str(store), 'out': str(out), 'commands': commands}) + '\n')
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        return answer, records

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope='module')
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = build_store(tmp_path_factory.mktemp('fuzz') / 'store.lmdb')
    log = open_log(store.path)
    try:  # a tool call nesting 600 levels deep (issue 42), recorded by a real agent
        asyncio.run(add_deep_conversations(log, huge=False))
    finally:
        log.close()
    assert invoke('reindex', store=store.path).exit_code == 0  # the persistent index is part of the store
    return store


@pytest.fixture(scope='module')
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.close()


@pytest.fixture(scope='module')
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every copy is made: one path for all, since some views print it (and pad to it)."""
    return tmp_path_factory.mktemp('work')


def _fresh_copy(pristine: Store, workdir: Path) -> Path:
    copy = workdir / 'store.lmdb'
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(pristine.path, copy)
    return copy


@pytest.fixture(scope='module')
def baseline(pristine: Store, worker: Worker, workdir: Path) -> list[dict[str, Any]]:
    copy = _fresh_copy(pristine, workdir)
    answer, records = worker.run(copy, workdir / 'out.jsonl', _commands(pristine))
    assert answer == {'exit': 0}
    assert [r['exit'] for r in records] == [0] * len(records) and len(records) == len(_commands(pristine))
    assert json.loads(records[0]['stdout'])['ok'] is True
    assert DETAIL.split()[4] in records[9]['stdout']  # the search finds the bucket on the pristine store
    # A second undamaged run answers identically: the commands are deterministic.
    copy = _fresh_copy(pristine, workdir)
    _, again = worker.run(copy, workdir / 'out.jsonl', _commands(pristine))
    assert [_answer(r) for r in again] == [_answer(r) for r in records]
    return records


_TIMING = re.compile(r'\(\d+(?:\.\d+)? ms\)')


def _answer(record: dict[str, Any]) -> tuple[int, str]:
    """A command's exit code and output, with the search timing (which varies) masked."""
    return record['exit'], _TIMING.sub('(? ms)', record['stdout'])


def _typed_failure(record: dict[str, Any]) -> bool:
    stderr: str = record['stderr']
    return (
        record['exit'] != 0
        and record['unhandled'] is None
        and stderr.startswith('eventlog: ')
        and stderr.count('\n') == 1
        and 'Traceback' not in stderr + record['stdout']
    )


@pytest.mark.parametrize('seed', range(TRIALS))
def test_damaged_store_answers_exactly_or_fails_typed_and_verify_sees_it(
    seed: int, pristine: Store, worker: Worker, baseline: list[dict[str, Any]], workdir: Path
) -> None:
    copy = _fresh_copy(pristine, workdir)
    data_file = copy / 'data.mdb'
    used = (_live_last_page(data_file.read_bytes()) + 1) * PAGE
    damage = _damages(seed, used)
    damage.apply(data_file)
    what = f'seed {seed}: {damage}'

    answer, records = worker.run(copy, workdir / 'out.jsonl', _commands(pristine))
    assert records, f'{what}: verify crashed the process ({answer})'
    verify = records[0]
    assert verify['exit'] == 0 or _typed_failure(verify) or verify['exit'] == 1, f'{what}: verify gave {verify}'
    verify_ok = verify['exit'] == 0 and json.loads(verify['stdout'])['ok'] is True

    differs_in: list[str] = []
    for record, expected in zip(records[1:], baseline[1:], strict=False):
        same = _answer(record) == _answer(expected)
        assert same or (record['exit'] == 0 and record['unhandled'] is None) or _typed_failure(record), (
            f'{what}: `eventlog {" ".join(record["args"])}` failed without a typed one-line error: '
            f'exit {record["exit"]}, unhandled {record["unhandled"]}, stderr {record["stderr"][:400]!r}'
        )
        if not same:
            differs_in.append(' '.join(record['args']))
    crashed = 'signal' in answer or len(records) < len(baseline)
    if crashed:
        name = signal.Signals(answer['signal']).name if 'signal' in answer else answer
        assert not verify_ok, (
            f'{what}: `eventlog {" ".join(baseline[len(records)]["args"])}` crashed ({name}) on a store verify passes'
        )
    if differs_in:
        assert not verify_ok, f'{what}: verify says ok, yet these answers differ from the undamaged store: {differs_in}'
