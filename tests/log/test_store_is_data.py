"""A store is data: the log never imports or calls what a store's catalogue names (issue 42).

Earlier versions imported each catalogued projection's `maintainer` (`module:function`) before a
scrub or a compaction. Here the catalogue of a real store names an attacker's module (on
`sys.path`, as the working directory is), `this:s` (a module whose import runs code) and
`sys:exit`; the log's scrubs, compactions and opens (LMDB, and PostgreSQL with `retention=` at
open and `eventlog erase`) run none of it: the projection's kind alone chooses its maintainer, and a
kind nothing installed maintains is cleared.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from backends import schema_for

from eventlog import LmdbEventLog, PostgresEventLog, RetentionPolicy
from eventlog._keys import META_PROJECTION_PREFIX, META_SCRUB_PENDING, Table
from eventlog._storage import WriteTxn
from eventlog.log import EventLogBase
from eventlog.projection import ProjectionSpec, maintainer_for
from search.index_format import TABLES as INDEX_TABLES
from tests.log.logtools import add_run, exchange
from tests.log.maintainer_plugin import install_maintainer

ROOT = Path(__file__).resolve().parents[2]
EVIL = ProjectionSpec('evil', ('docs',))
SECRET = b'held-by-the-attackers-projection'
ZEN = 'Beautiful is better than ugly'
OLD_REFERENCE = 'search.lmdb_index:maintain_index'
"""What stores of earlier versions record as the index's maintainer."""


@pytest.fixture
def attacker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on `sys.path` holding a module that leaves marker files when imported and called
    (what `python -m` in that directory, or an application started there, would see)."""
    where = tmp_path / 'attacker'
    where.mkdir()
    (where / 'attacker_mod.py').write_text(
        'from pathlib import Path\n'
        "Path(__file__).with_name('IMPORTED').write_text('imported')\n"
        'def maintain(store):\n'
        "    Path(__file__).with_name('CALLED').write_text('called')\n"
    )
    monkeypatch.syspath_prepend(str(where))
    yield where
    sys.modules.pop('attacker_mod', None)


HOSTILE = ['attacker_mod:maintain', 'this:s', 'sys:exit']


async def _poison(log: EventLogBase, maintainer: str, *, pending: bool = True) -> None:
    """A projection `evil` holding `SECRET`, its catalogue entry naming `maintainer` (as a store
    of an earlier version, or an attacker, records it), and a pending scrub."""
    store = log
    assert isinstance(store, LmdbEventLog | PostgresEventLog)
    store.write_projection(EVIL, lambda records, _: records.put('docs', b'k', SECRET))
    entry = {'name': 'evil', 'tables': ['docs'], 'format': '', 'maintainer': maintainer}

    def write(txn: WriteTxn) -> None:
        txn.put(Table.META, META_PROJECTION_PREFIX + b'evil', json.dumps(entry).encode())
        if pending:
            txn.put(Table.META, META_SCRUB_PENDING, (1).to_bytes(8, 'big'))

    store._write_sync(write)  # pyright: ignore[reportPrivateUsage]
    assert {e.name: e.maintainer for e in store.projection_catalogue()}['evil'] == maintainer


def _nothing_ran(where: Path, captured: pytest.CaptureFixture[str]) -> None:
    assert not (where / 'IMPORTED').exists(), 'a module the store named was imported'
    assert not (where / 'CALLED').exists(), 'a function the store named was called'
    assert 'attacker_mod' not in sys.modules
    assert ZEN not in captured.readouterr().out, '`this`, which the store named, was imported'


@pytest.mark.parametrize('maintainer', HOSTILE)
async def test_an_lmdb_scrub_and_compaction_run_nothing_the_catalogue_names(
    tmp_path: Path, attacker: Path, maintainer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await add_run(log, 'c', 'r', exchange(0, 'walrus'))
        await _poison(log, maintainer)
    finally:
        log.close()
    log = LmdbEventLog(store)  # finishes the pending scrub: it must not run the catalogue's code
    try:
        _nothing_ran(attacker, capsys)
        assert await log.scrub_pending() is None
        assert log.read_projection(EVIL, lambda r, _: list(r.scan('docs'))) == []  # unknown kind: cleared
        await _poison(log, maintainer, pending=False)
        await log.compact()
        _nothing_ran(attacker, capsys)
        assert log.read_projection(EVIL, lambda r, _: list(r.scan('docs'))) == []
    finally:
        log.close()
    assert SECRET not in (store / 'data.mdb').read_bytes()


async def test_a_read_only_open_leaves_a_pending_scrub_and_the_store_as_they_are(
    tmp_path: Path, attacker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await add_run(log, 'c', 'r', exchange(0, 'walrus'))
        await _poison(log, HOSTILE[0])
    finally:
        log.close()
    before = (store / 'data.mdb').read_bytes()
    reader = LmdbEventLog(store, read_only=True)
    try:
        assert (await reader.verify()).scrub_pending == 1
    finally:
        reader.close()
    _nothing_ran(attacker, capsys)
    assert (store / 'data.mdb').read_bytes() == before


def test_a_kind_is_maintained_only_by_what_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A third-party kind's maintainer comes from installed packages' entry points; a kind named
    nowhere has none (it is cleared), and the kinds this distribution ships cannot be taken over."""
    assert maintainer_for('evil') is None
    install_maintainer(tmp_path / 'plugins', monkeypatch, 'evil', 'eventlog.projection:keep_as_is')
    install_maintainer(tmp_path / 'plugins', monkeypatch, 'ix', 'eventlog.projection:keep_as_is')
    from eventlog.projection import keep_as_is
    from search.persistent_index import maintain_index

    assert maintainer_for('evil') is keep_as_is
    assert maintainer_for('ix') is maintain_index


async def test_postgres_retention_at_open_and_erase_run_nothing_the_catalogue_names(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path, attacker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = schema_for(tmp_path / 'pg')
    pg_schemas.append(schema)
    log = PostgresEventLog(pg_dsn, schema=schema)
    try:
        await add_run(log, 'c', 'r', exchange(0, 'walrus'))
        await add_run(log, 'old', 'o', exchange(1, 'erase me'))
        await _poison(log, 'sys:exit', pending=False)
    finally:
        log.close()
    # An application opening the store with a retention policy: earlier versions exited here.
    policy = RetentionPolicy(conversations={'old': timedelta(microseconds=1)})
    log = await asyncio.to_thread(PostgresEventLog, pg_dsn, schema=schema, retention=policy)
    try:
        assert log.retention_report is not None and log.retention_report.erased == {'old': 2}
        assert log.read_projection(EVIL, lambda r, _: list(r.scan('docs'))) == []
        await _poison(log, 'attacker_mod:maintain', pending=False)
    finally:
        log.close()
    _nothing_ran(attacker, capsys)
    # The operator's `eventlog erase`, run in the directory that holds the attacker's module.
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'EVENTLOG_STORE': ''}
    result = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'erase', 'c', '--yes', '--store', f'{pg_dsn}#{schema}'],
        cwd=attacker,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert ZEN not in result.stdout
    _nothing_ran(attacker, capsys)
    log = PostgresEventLog(pg_dsn, schema=schema, read_only=True)
    try:
        assert log.read_projection(EVIL, lambda r, _: list(r.scan('docs'))) == []
    finally:
        log.close()


async def test_an_old_stores_catalogue_entry_of_the_index_is_maintained_by_its_kind(tmp_path: Path) -> None:
    """Stores of earlier versions name the index's maintainer `search.lmdb_index:maintain_index`, a
    module that no longer exists: the string is ignored, the kind `ix` is maintained (caught up
    before the compaction), not cleared."""
    from search.persistent_index import PersistentIndex

    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await add_run(log, 'c', 'r0', exchange(0, 'walrus'))
        PersistentIndex(log).catch_up()
        entry = {'name': 'ix', 'tables': list(INDEX_TABLES), 'format': '3', 'maintainer': OLD_REFERENCE}

        def write(txn: WriteTxn) -> None:
            txn.put(Table.META, META_PROJECTION_PREFIX + b'ix', json.dumps(entry).encode())

        log._write_sync(write)  # pyright: ignore[reportPrivateUsage]
        await add_run(log, 'c', 'r1', exchange(1, 'narwhal'))
        lagging = PersistentIndex.open_existing(log).state()
        assert lagging.position < lagging.log_position
        await log.compact()
        state = PersistentIndex.open_existing(log).state()
        assert state.analyzer is not None and state.position == state.log_position == await log.last_seq()
    finally:
        log.close()


async def test_names_that_are_no_projections_do_not_stop_a_scrub(tmp_path: Path) -> None:
    """A catalogue entry or a database whose name no projection can have (written by hand into the
    store) is left alone: it cannot keep an erasure's scrub from finishing."""
    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await add_run(log, 'c', 'r', exchange(0, 'walrus'))
        entry = {'name': 'Not A Name!', 'tables': ['x'], 'format': '', 'maintainer': None}

        def write(txn: WriteTxn) -> None:
            txn.put(Table.META, META_PROJECTION_PREFIX + b'odd', json.dumps(entry).encode())

        log._write_sync(write)  # pyright: ignore[reportPrivateUsage]
        log.env.open_db(b'Odd Name.docs')  # a database no projection can have
        log.env.open_db(b'demo.Bad Table')
        done = await log.erase('c', reason='request')
        assert done.scrubbed, done.scrub_error
        assert await log.scrub_pending() is None
    finally:
        log.close()
