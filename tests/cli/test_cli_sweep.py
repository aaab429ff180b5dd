"""The sweep: every command, fed hostile stores, connection strings and key files, either works
or ends with one line on stderr (`eventlog: ...`) and a non-zero status: never a traceback,
never an unhandled exception, never a password.

The damaged stores are those of the fuzz test (`test_cli_fuzz._damages`: bit flips, page
headers, truncations), here with every command that takes a store, the writing ones too; each
trial runs in a forked child (`_fuzz_worker.py`) so that a native crash is seen, not suffered.
`SWEEP_COUNTS` collects how many runs each kind of input made (printed with `-s`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import Store, build_store, invoke
from test_cli_fuzz import PAGE, Worker, _damages, _live_last_page  # pyright: ignore[reportPrivateUsage]

SECRET = 'Sw33p-sekrit'

DSNS = [
    f'postgresql://app:{SECRET}@[::1:5432/db',
    f'postgresql://app:{SECRET}@[::1:5432/db#eventlog',
    f'postgresql://app:{SECRET}@[::1]:99999/db',
    f'postgresql://app:{SECRET}@host:notaport/db',
    f'postgresql://app:{SECRET}@host:-1/db#x',
    f'postgresql://app:{SECRET}@host/db?bogus_option=1',
    f'postgresql://app:{SECRET}@host/db?schema=x',
    f'postgresql://app:{SECRET}@host/db#Not-A-Schema',
    f'postgresql://app:{SECRET}@host/db#pg_reserved',
    f'postgresql://app:{SECRET}@host/db#',
    f'postgresql://app:{SECRET}@host/db\x00nul',
    f'postgresql://app:{SECRET}@127.0.0.1:1/db',
    f'postgres://app:{SECRET}@' + 'h' * 3000 + '/db',
    f'postgresql://app:{SECRET}@host/db%ZZ',
]
"""Connection strings none of which can be opened: each refused in one line."""

SWEEP_COUNTS: dict[str, int] = {}


def _store_commands(key: Path, out: Path, export: Path) -> list[list[str]]:
    """Every command that takes a store (`serve` and `demo` only where they must fail)."""
    return [
        ['verify', '--json'],
        ['conversations', '--include-archived'],
        ['conversations', '--json'],
        ['runs'],
        ['runs', 'alpha', '--json'],
        ['info', 'alpha'],
        ['show', 'alpha'],
        ['show', 'alpha', '--json'],
        ['replay', '--last'],
        ['context', 'alpha'],
        ['search', 'quokka staging bucket'],
        ['tail', '-n', '20'],
        ['stats', '--json'],
        ['export', '-o', str(out)],
        ['export', '--signed', '-k', str(key), '-o', str(out)],
        ['checkpoint', '-k', str(key), '-o', str(out), '--force'],
        ['verify', '-c', str(out), '-p', f'{key}.pub'],
        ['retain', '--max-age', '1s', '--dry-run'],
        ['title', 'alpha', 'New title'],
        ['archive', 'beta'],
        ['unarchive', 'beta'],
        ['fork', 'alpha'],
        ['reindex'],
        ['erase', 'beta', '--yes'],
        ['retain', '--max-age', '3650d'],
        ['delete', 'beta', '--yes'],
        ['compact'],
        ['import', str(export)],
    ]


def _one_line(result: Any, what: str) -> None:
    unhandled = result.exception if not isinstance(result.exception, SystemExit) else None
    assert unhandled is None, f'{what}: unhandled {type(unhandled).__name__}: {unhandled}'
    assert result.exit_code != 0, f'{what}: exit 0'
    assert result.stderr.startswith('eventlog: ') and result.stderr.count('\n') == 1, f'{what}: {result.stderr!r}'
    assert 'Traceback' not in result.stdout + result.stderr, what
    assert SECRET not in result.stdout + result.stderr, what


@pytest.fixture(scope='module')
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = build_store(tmp_path_factory.mktemp('sweep') / 'store.lmdb')
    assert invoke('reindex', store=store.path).exit_code == 0
    return store


@pytest.fixture(scope='module')
def keyed(pristine: Store) -> tuple[Path, Path, Path]:
    """A key pair, a checkpoint and an export of the pristine store."""
    root = pristine.path.parent
    key, out, export = root / 'signing.key', root / 'cp.json', root / 'store.jsonl'
    assert invoke('keygen', '-o', str(key)).exit_code == 0
    assert invoke('checkpoint', '-k', str(key), '-o', str(out), store=pristine.path).exit_code == 0
    assert invoke('export', '-o', str(export), store=pristine.path).exit_code == 0
    return key, out, export


def test_every_command_refuses_every_malformed_dsn_in_one_line(keyed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    key, _, export = keyed
    commands = [*_store_commands(key, tmp_path / 'out.json', export), ['serve', '--port', '0'], ['demo']]
    for dsn in DSNS:
        for args in commands:
            result = invoke(*args, '--store', dsn, env={'COLUMNS': '200'})
            _one_line(result, f'{args} on {dsn[:60]!r}')
            SWEEP_COUNTS['dsn'] = SWEEP_COUNTS.get('dsn', 0) + 1
    assert SWEEP_COUNTS['dsn'] == len(DSNS) * len(commands)


@pytest.fixture
def hostile_keys(tmp_path: Path, keyed: tuple[Path, Path, Path]) -> list[Path]:
    """Files that are not a usable signing key, each in its own way."""
    key = keyed[0]
    sparse = tmp_path / 'sparse.key'
    with sparse.open('wb') as fh:
        fh.truncate(1 << 30)
    open_key = tmp_path / 'open.key'
    shutil.copy(key, open_key)
    open_key.chmod(0o644)
    garbage = tmp_path / 'garbage.key'
    garbage.write_bytes(os.urandom(3000))
    armored = tmp_path / 'armored.key'
    armored.write_bytes(b'-----BEGIN PRIVATE KEY-----\n\x00\xff not base64 \n-----END PRIVATE KEY-----\n')
    cut = tmp_path / 'cut.key'
    cut.write_bytes(key.read_bytes()[:60])
    empty = tmp_path / 'empty.key'
    empty.write_bytes(b'')
    for path in (sparse, garbage, armored, cut, empty):
        path.chmod(0o600)
    return [
        Path('/dev/zero'),
        sparse,
        open_key,
        garbage,
        armored,
        cut,
        empty,
        tmp_path,
        tmp_path / 'absent.key',
        Path(f'{key}.pub'),
    ]


def test_every_key_taking_command_refuses_every_hostile_key_file_in_one_line(
    pristine: Store, keyed: tuple[Path, Path, Path], hostile_keys: list[Path], tmp_path: Path
) -> None:
    _, checkpoint, _ = keyed
    signed = tmp_path / 'signed.jsonl'
    assert invoke('export', '--signed', '-o', str(signed), store=pristine.path).exit_code == 0
    store = ['--store', str(pristine.path)]
    for bad in hostile_keys:
        out = tmp_path / 'out.json'
        commands = [
            ['checkpoint', '-k', str(bad), '-o', str(out), *store],
            ['export', '--signed', '-k', str(bad), '-o', str(out), *store],
        ]
        if bad.name not in ('signing.key.pub', 'open.key'):  # valid keys for checking signatures
            commands += [
                ['verify', '-c', str(checkpoint), '-p', str(bad), *store],
                ['verify-export', str(signed), '-p', str(bad)],
            ]
        for args in commands:
            result = invoke(*args, env={'COLUMNS': '200'})
            _one_line(result, f'{args[:1]} with {bad.name}')
            assert not out.exists(), args
            SWEEP_COUNTS['key'] = SWEEP_COUNTS.get('key', 0) + 1
    public = f'{keyed[0]}.pub'
    for bad in [p for p in hostile_keys if p.name != 'sparse.key']:  # the same files as checkpoints and exports
        for args in [
            ['verify', '-c', str(bad), '-p', public, *store],
            ['verify-export', str(bad), '-p', public],
            ['import', str(bad), '--store', str(tmp_path / 'imported.lmdb')],
        ]:
            _one_line(invoke(*args, env={'COLUMNS': '200'}), f'{args[:1]} {bad}')
            SWEEP_COUNTS['key'] += 1
    for target in [hostile_keys[0].parent / 'zero' / 'x', tmp_path, checkpoint]:  # keygen where it cannot write
        _one_line(invoke('keygen', '-o', str(target)), f'keygen -o {target}')
        SWEEP_COUNTS['key'] += 1


@pytest.fixture(scope='module', autouse=True)
def counts() -> Iterator[None]:
    yield
    print(f'\nsweep runs: {SWEEP_COUNTS}')


@pytest.fixture(scope='module')
def worker() -> Iterator[Worker]:
    running = Worker()
    try:
        yield running
    finally:
        running.close()


DAMAGE_SEEDS = range(int(os.environ.get('EVENTLOG_SWEEP_SEEDS', '10')))


@pytest.mark.parametrize('seed', DAMAGE_SEEDS)
def test_every_command_on_a_damaged_store_works_or_fails_in_one_line(
    seed: int, pristine: Store, keyed: tuple[Path, Path, Path], worker: Worker, tmp_path: Path
) -> None:
    key, _, export = keyed
    copy = tmp_path / 'store.lmdb'
    shutil.copytree(pristine.path, copy)
    data_file = copy / 'data.mdb'
    damage = _damages(1000 + seed, (_live_last_page(data_file.read_bytes()) + 1) * PAGE)
    damage.apply(data_file)
    commands = _store_commands(key, tmp_path / 'out.json', export)
    answer, records = worker.run(copy, tmp_path / 'out.jsonl', commands)
    what = f'seed {1000 + seed}: {damage}'
    for record in records:
        SWEEP_COUNTS['damaged'] = SWEEP_COUNTS.get('damaged', 0) + 1
        if record['exit'] == 0 and record['unhandled'] is None:
            continue
        stderr: str = record['stderr']
        if record['args'][0] == 'verify' and record['exit'] == 1 and not stderr:
            continue  # the report of a broken store, on stdout
        assert record['unhandled'] is None, f'{what}: {record["args"]} unhandled {record["unhandled"]}: {stderr[-600:]}'
        assert stderr.startswith('eventlog: ') and stderr.count('\n') == 1, f'{what}: {record["args"]}: {stderr!r}'
    if len(records) < len(commands):  # a native crash: the launcher reports it in one line (test_cli_signals)
        assert 'signal' in answer, (what, answer)
