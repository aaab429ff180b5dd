"""The tracked-projection API (`eventlog.projection`), the same on every backend.

A projection's records behave as sorted byte-keyed tables; its position and its writes
commit together or not at all; its function reads the log in the same snapshot.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog import LmdbEventLog
from eventlog.errors import InvalidArgumentError
from eventlog.log import EventLogBase
from eventlog.projection import LogReader, ProjectionRecords, ProjectionSpec, ProjectionStore, ProjectionWriter
from tests.log.logtools import add_run, exchange
from tests.log.maintainer_plugin import install_maintainer

SPEC = ProjectionSpec('demo', ('docs', 'terms'))


def _store(log: EventLogBase) -> ProjectionStore:
    assert isinstance(log, ProjectionStore)
    return log


def _dump(
    store: ProjectionStore, spec: ProjectionSpec = SPEC
) -> tuple[int | None, dict[str, list[tuple[bytes, bytes]]]]:
    return store.read_projection(spec, lambda r, _: (r.position(), {t: list(r.scan(t)) for t in spec.tables}))


class _Boom(Exception):
    pass


def test_records_behave_like_sorted_tables(log: EventLogBase) -> None:
    """Random puts and deletes, then every kind of read, against a dict kept beside them."""
    store = _store(log)
    rng = random.Random(7)
    alphabet = [b'', b'\x00', b'a', b'ab', b'b', b'\xfe', b'\xff', b'\xff\xff']
    model: dict[str, dict[bytes, bytes]] = {'docs': {}, 'terms': {}}

    def key() -> bytes:
        return b''.join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))) or b'k'

    for round_ in range(40):

        def write(r: ProjectionWriter, round_: int = round_) -> None:
            for _ in range(20):
                table = rng.choice(SPEC.tables)
                k = key()
                if rng.random() < 0.7:
                    value = f'{round_}'.encode()
                    r.put(table, k, value)
                    model[table][k] = value
                elif rng.random() < 0.5:
                    r.delete(table, k)
                    model[table].pop(k, None)
                else:
                    removed = r.delete_prefix(table, k)
                    expected = sorted(x for x in model[table] if x.startswith(k))
                    assert removed == expected
                    for x in expected:
                        del model[table][x]

        store.write_projection(SPEC, lambda r, _: write(r))

        def check(r: ProjectionRecords) -> None:
            for table in SPEC.tables:
                items = sorted(model[table].items())
                assert list(r.scan(table)) == items
                for prefix in (b'', b'a', b'\xff', b'\x00'):
                    for start in (None, b'', b'a', b'b\xff', b'\xff'):
                        forward = [(k, v) for k, v in items if k.startswith(prefix) and (start is None or k >= start)]
                        assert list(r.scan(table, prefix=prefix, start=start)) == forward
                        backward = [
                            (k, v) for k, v in reversed(items) if k.startswith(prefix) and (start is None or k <= start)
                        ]
                        assert list(r.scan(table, prefix=prefix, start=start, reverse=True)) == backward
                    last = [(k, v) for k, v in items if k.startswith(prefix)]
                    assert r.last(table, prefix) == (last[-1] if last else None)
                probe = key()
                assert r.get(table, probe) == model[table].get(probe)

        store.read_projection(SPEC, lambda r, _: check(r))


def test_position_and_writes_commit_together_or_not_at_all(log: EventLogBase) -> None:
    store = _store(log)
    assert _dump(store) == (None, {'docs': [], 'terms': []})

    def first(r: ProjectionWriter) -> None:
        r.put('docs', b'a', b'1')
        r.set_position(3)

    store.write_projection(SPEC, lambda r, _: first(r))
    committed = _dump(store)
    assert committed == (3, {'docs': [(b'a', b'1')], 'terms': []})

    def failing(r: ProjectionWriter) -> None:
        r.put('docs', b'a', b'2')
        r.put('terms', b't', b'x')
        r.delete('docs', b'a')
        r.set_position(9)
        r.clear()
        r.put('docs', b'z', b'after clear')
        r.set_position(11)
        raise _Boom

    with pytest.raises(_Boom):
        store.write_projection(SPEC, lambda r, _: failing(r))
    assert _dump(store) == committed

    def clearing(r: ProjectionWriter) -> None:
        r.clear()
        assert r.position() is None and list(r.scan('docs')) == []
        r.put('terms', b'b', b'2')

    store.write_projection(SPEC, lambda r, _: clearing(r))
    assert _dump(store) == (None, {'docs': [], 'terms': [(b'b', b'2')]})


async def test_projections_are_separate_and_known_without_being_created(log: EventLogBase) -> None:
    store = _store(log)
    other = ProjectionSpec('other', ('docs',))
    assert not store.has_projection('demo') and not store.has_projection('other')
    store.write_projection(SPEC, lambda r, _: (r.put('docs', b'k', b'mine'), r.set_position(1)))
    assert store.has_projection('demo') and not store.has_projection('other')
    assert _dump(store, other) == (None, {'docs': []})
    assert store.has_projection('other')
    assert _dump(store)[1]['docs'] == [(b'k', b'mine')]
    # The log's own data is untouched by a projection's writes.
    assert await log.last_seq() == 0
    assert (await log.verify()).ok


async def test_the_log_reader_sees_the_same_snapshot_in_batches(log: EventLogBase) -> None:
    store = _store(log)
    for i in range(4):
        await add_run(log, f'c{i % 2}', f'r{i}', exchange(i, f'text {i}'))
    everything = [e.seq for e in await log.entries()]

    def batch(r: ProjectionWriter, reader: LogReader) -> list[int]:
        position = r.position() or 0
        seqs = [entry.seq for entry in reader.entries_after(position, limit=3)]
        if seqs:
            r.set_position(seqs[-1])
            r.put('docs', seqs[-1].to_bytes(8, 'big'), b'')
        return seqs

    seen: list[int] = []
    while applied := store.write_projection(SPEC, batch):
        assert len(applied) <= 3
        seen.extend(applied)
    assert seen == everything
    assert store.read_projection(SPEC, lambda r, reader: (r.position(), reader.last_seq())) == (seen[-1], seen[-1])
    assert list(store.read_projection(SPEC, lambda _, reader: reader.entries_after(0, limit=0))) == []


@pytest.mark.parametrize('name', ['', 'Upper', 'has.dot', 'x' * 40, '1st'])
def test_projection_and_table_names_are_checked(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        ProjectionSpec(name, ('docs',))
    with pytest.raises(InvalidArgumentError):
        ProjectionSpec('fine', (name,))
    with pytest.raises(InvalidArgumentError, match='twice'):
        ProjectionSpec('fine', ('a', 'a'))


# --- LMDB: persistence, other processes, compaction, crashes -------------------------------------


def test_lmdb_projection_tables_are_named_databases_and_persist(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    assert not log.has_projection('demo')
    with log.env.begin() as txn:
        before = {bytes(k) for k, _ in txn.cursor()}
    assert not log.has_projection('demo'), 'asking creates nothing'
    with log.env.begin() as txn:
        assert {bytes(k) for k, _ in txn.cursor()} == before
    log.write_projection(SPEC, lambda r, _: (r.put('docs', b'k', b'v'), r.set_position(5)))
    with log.env.begin() as txn:
        names = {bytes(k) for k, _ in txn.cursor()}
    assert {b'demo.docs', b'demo.terms', b'projections'} <= names
    log.close()
    reopened = LmdbEventLog(path)
    assert reopened.has_projection('demo')
    assert _dump(reopened) == (5, {'docs': [(b'k', b'v')], 'terms': []})
    reopened.close()


def test_lmdb_projection_sees_another_processs_writes(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    assert _dump(log)[0] is None  # tables opened (and handles cached) before the other process writes
    code = (
        'from eventlog import LmdbEventLog\n'
        'from eventlog.projection import ProjectionSpec\n'
        f'log = LmdbEventLog({str(path)!r})\n'
        "spec = ProjectionSpec('demo', ('docs', 'terms'))\n"
        "log.write_projection(spec, lambda r, _: (r.put('terms', b'from', b'child'), r.set_position(42)))\n"
        'log.close()\n'
    )
    subprocess.run([sys.executable, '-c', code], check=True, timeout=120)
    assert _dump(log) == (42, {'docs': [], 'terms': [(b'from', b'child')]})
    log.close()


async def test_lmdb_projection_handles_survive_compaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_maintainer(tmp_path / 'plugins', monkeypatch, 'demo', 'eventlog.projection:keep_as_is')
    kept = ProjectionSpec('demo', ('docs', 'terms'))
    log = LmdbEventLog(tmp_path / 's')
    await add_run(log, 'c', 'r', exchange(1, 'hello'))
    log.write_projection(kept, lambda r, _: (r.put('docs', b'k', b'v' * 5000), r.set_position(1)))
    await log.compact()
    assert _dump(log, kept) == (1, {'docs': [(b'k', b'v' * 5000)], 'terms': []})
    log.write_projection(kept, lambda r, _: (r.put('terms', b'after', b'compact'), r.set_position(2)))
    assert _dump(log, kept)[0] == 2
    log.close()


async def test_compaction_clears_a_projection_without_a_maintainer(tmp_path: Path) -> None:
    """A projection of a kind nothing installed maintains is cleared before a compaction: it
    rebuilds from the log, and no copy of erased text outlives the compaction."""
    broken = ProjectionSpec('gone', ('docs',))
    log = LmdbEventLog(tmp_path / 's')
    await add_run(log, 'c', 'r', exchange(1, 'hello'))
    log.write_projection(SPEC, lambda r, _: (r.put('docs', b'k', b'v'), r.set_position(1)))
    log.write_projection(broken, lambda r, _: (r.put('docs', b'k', b'v'), r.set_position(1)))
    await log.compact()
    assert _dump(log) == (None, {'docs': [], 'terms': []})
    assert log.read_projection(broken, lambda r, _: (r.position(), list(r.scan('docs')))) == (None, [])
    assert {entry.name for entry in log.projection_catalogue()} == {'demo', 'gone'}
    log.write_projection(SPEC, lambda r, _: (r.put('terms', b'after', b'compact'), r.set_position(2)))
    assert _dump(log)[0] == 2
    log.close()


_CRASH_WORKER = """
import os, sys
from eventlog import LmdbEventLog
from eventlog.projection import ProjectionSpec
log = LmdbEventLog(sys.argv[1])
spec = ProjectionSpec('demo', ('docs', 'terms'))
log.write_projection(spec, lambda r, _: (r.put('docs', b'committed', b'1'), r.set_position(1)))
def half_done(r, _):
    for i in range(2000):
        r.put('docs', b'lost%05d' % i, b'x' * 100)
    r.set_position(2)
    print('inside', flush=True)
    sys.stdin.readline()  # killed here, with the transaction open
log.write_projection(spec, half_done)
"""


def test_lmdb_projection_killed_mid_transaction_keeps_its_last_commit(tmp_path: Path) -> None:
    path = tmp_path / 's'
    LmdbEventLog(path).close()
    child = subprocess.Popen(
        [sys.executable, '-c', _CRASH_WORKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == 'inside'
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:  # pragma: no cover - only when the test failed before the kill
            child.kill()
    assert child.returncode == -signal.SIGKILL
    log = LmdbEventLog(path)
    assert _dump(log) == (1, {'docs': [(b'committed', b'1')], 'terms': []})
    log.close()
