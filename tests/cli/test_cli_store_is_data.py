"""A store is data: nothing read from it is imported or called (issue 42, first section).

Earlier versions recorded each projection's maintainer in the store's catalogue as a
`module:function` string and imported and called it before a scrub, and every command that opened
a store for writing finished a pending scrub at open. A store someone handed you could so make
`eventlog verify` import a module from the working directory, run an arbitrary module's import-time
code (`this:s`) or end the command (`sys:exit`). Here a real store, recorded by real agent runs,
gets such catalogue entries and a pending scrub; each command runs as `python -m eventlog_cli` in a
subprocess whose working directory holds the attacker's module. No command imports or calls
anything the store names; reading commands change nothing in the store (its data file stays byte
for byte as it was, the scrub stays pending and `verify` reports it); `compact` and `erase` finish
the scrub, maintaining the index by its kind and clearing the projections of unknown kinds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import DETAIL, build_store

from eventlog import LmdbEventLog
from eventlog._keys import META_PROJECTION_PREFIX, META_SCRUB_PENDING, Table
from eventlog._storage import WriteTxn
from eventlog.projection import CatalogueEntry, ProjectionSpec
from search.index_format import INDEX_PROJECTION
from search.persistent_index import PersistentIndex

MARKER_MODULE = 'attacker_maintainer'
"""A module the attacker placed in the directory the command runs in."""

ZEN = 'Beautiful is better than ugly'
"""What importing `this` prints."""

HOSTILE = {
    'marker': f'{MARKER_MODULE}:maintain',
    'this': 'this:s',
    'exit': 'sys:exit',
}
"""The maintainers an attacker records: a module of the working directory that leaves a marker
file, a module whose import runs code (it prints), and a function that ends the process."""

SECRET = b'attacker-projection-holds-this'
"""Held by the attacker's projection: cleared by a scrub, never maintained."""


def _python_cli(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`python -m eventlog_cli ARGS` run in `cwd` (which is then first on the child's `sys.path`)."""
    env = {**os.environ, 'COLUMNS': '200', 'EVENTLOG_STORE': ''}
    env['PYTHONPATH'] = os.pathsep.join(p for p in [str(Path(__file__).parents[2]), env.get('PYTHONPATH', '')] if p)
    return subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _poison(store: Path, maintainer: str) -> None:
    """Record, as an attacker editing the store would, a projection `evil` whose catalogue entry
    names `maintainer`, the index's entry naming it too, and a pending scrub."""
    log = LmdbEventLog(store)
    try:
        PersistentIndex(log).catch_up()
        evil = ProjectionSpec('evil', ('docs',))
        log.write_projection(evil, lambda records, _: records.put('docs', b'k', SECRET))
        entries = {
            'evil': CatalogueEntry('evil', evil.tables, '', maintainer),
            'ix': CatalogueEntry('ix', INDEX_PROJECTION.tables, INDEX_PROJECTION.format, maintainer),
        }

        def write(txn: WriteTxn) -> None:
            for name, entry in entries.items():
                txn.put(Table.META, META_PROJECTION_PREFIX + name.encode(), json.dumps(_as_dict(entry)).encode())
            txn.put(Table.META, META_SCRUB_PENDING, (1).to_bytes(8, 'big'))

        log._write_sync(write)  # pyright: ignore[reportPrivateUsage]
        catalogue = {entry.name: entry.maintainer for entry in log.projection_catalogue()}
        assert catalogue['evil'] == catalogue['ix'] == maintainer  # the store names the code
    finally:
        log.close()


def _as_dict(entry: CatalogueEntry) -> dict[str, object]:
    return {'name': entry.name, 'tables': list(entry.tables), 'format': entry.format, 'maintainer': entry.maintainer}


@pytest.fixture
def attacker_dir(tmp_path: Path) -> Path:
    """The directory the commands run in, holding the attacker's module."""
    where = tmp_path / 'cwd'
    where.mkdir()
    (where / f'{MARKER_MODULE}.py').write_text(
        'from pathlib import Path\n'
        "Path(__file__).with_name('IMPORTED').write_text('imported')\n"
        'def maintain(store):\n'
        "    Path(__file__).with_name('CALLED').write_text('called')\n"
    )
    return where


def _no_code_ran(where: Path, result: subprocess.CompletedProcess[str]) -> None:
    assert not (where / 'IMPORTED').exists(), 'the command imported a module the store named'
    assert not (where / 'CALLED').exists(), 'the command called a function the store named'
    assert ZEN not in result.stdout + result.stderr, 'the command imported `this`, which the store named'


def _scrub_pending(store: Path, where: Path) -> int | None:
    result = _python_cli(where, '--read-only', 'verify', '--json', '--store', store)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)['scrub_pending']


READING = [
    pytest.param(['verify'], id='verify'),
    pytest.param(['show', 'alpha'], id='show'),
    pytest.param(['search', 'quokka', '--all'], id='search'),
    pytest.param(['replay', '--last', '--conversation', 'alpha'], id='replay'),
    pytest.param(['context', 'alpha'], id='context'),
    pytest.param(['stats'], id='stats'),
    pytest.param(['conversations'], id='conversations'),
]


@pytest.mark.parametrize('hostile', list(HOSTILE), ids=list(HOSTILE))
def test_reading_commands_run_nothing_the_store_names_and_change_nothing(
    tmp_path: Path, attacker_dir: Path, hostile: str
) -> None:
    store = build_store(tmp_path / 'store.lmdb').path
    _poison(store, HOSTILE[hostile])
    before = (store / 'data.mdb').read_bytes()
    for param in READING:
        argv = list(param.values[0])  # pyright: ignore[reportUnknownArgumentType]
        result = _python_cli(attacker_dir, *argv, '--store', store)
        assert result.returncode == 0, (argv, result.stderr)
        _no_code_ran(attacker_dir, result)
        assert (store / 'data.mdb').read_bytes() == before, f'{argv[0]} changed the store it read'
    found = _python_cli(attacker_dir, 'search', 'quokka', '--all', '--store', store)
    assert 'quokka' in found.stdout  # the search answers (its index caught up in memory)
    verified = _python_cli(attacker_dir, 'verify', '--json', '--store', store)
    assert json.loads(verified.stdout)['scrub_pending'] == 1  # reported, left pending
    assert (store / 'data.mdb').read_bytes() == before


@pytest.mark.parametrize('hostile', list(HOSTILE), ids=list(HOSTILE))
@pytest.mark.parametrize('command', ['compact', 'erase'])
def test_writing_commands_finish_the_scrub_by_kind_and_clear_what_they_do_not_know(
    tmp_path: Path, attacker_dir: Path, hostile: str, command: str
) -> None:
    store = build_store(tmp_path / 'store.lmdb').path
    _poison(store, HOSTILE[hostile])
    argv = ['compact'] if command == 'compact' else ['erase', 'alpha', '--contains', 'quokka', '--yes']
    result = _python_cli(attacker_dir, *argv, '--store', store)
    assert result.returncode == 0, result.stderr
    _no_code_ran(attacker_dir, result)
    assert _scrub_pending(store, attacker_dir) is None
    log = LmdbEventLog(store, read_only=True)
    try:
        assert log.read_projection(ProjectionSpec('evil', ('docs',)), lambda r, _: list(r.scan('docs'))) == []
        index = PersistentIndex.open_existing(log)
        assert index.state().analyzer is not None  # the index was maintained by its kind, not cleared
        assert index.verify() == []
    finally:
        log.close()
    assert SECRET not in (store / 'data.mdb').read_bytes()
    if command == 'erase':
        assert b'quokka-archive-7731' in DETAIL.encode()
        assert b'quokka-archive-7731' not in (store / 'data.mdb').read_bytes()


def test_reading_commands_leave_a_store_of_an_older_format_as_it_is(tmp_path: Path, attacker_dir: Path) -> None:
    """An auditor's `verify` (and every reading command) of a format-2 store reads it as it is:
    the store is not migrated; a writing command migrates it."""
    store = tmp_path / 'store.lmdb'
    shutil.copytree(Path(__file__).parents[1] / 'log' / 'fixtures' / 'format2.lmdb', store)
    before = (store / 'data.mdb').read_bytes()
    for argv in (['verify'], ['conversations'], ['show', 'conv-b'], ['search', 'the', '--all'], ['export']):
        result = _python_cli(attacker_dir, *argv, '--store', store)
        assert result.returncode == 0, (argv, result.stderr)
        assert (store / 'data.mdb').read_bytes() == before, f'{argv[0]} changed the store it read'
    assert _python_cli(attacker_dir, 'title', 'conv-b', 'B', '--store', store).returncode == 0
    assert (store / 'data.mdb').read_bytes() != before
