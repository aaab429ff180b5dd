"""The catalogue of projections: an erasure reaches every projection of the store, whatever the
erasing process imported (issue 28).

The index and the vectors are built here; another process, which imports `eventlog` and nothing
of `search`, erases a message holding a marker. No file of the store (of `projections_dir` on
PostgreSQL) holds the marker afterwards, a search finds nothing, and the index is the one a
rebuild from the log gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from backends import schema_for
from pydantic_ai.embeddings import Embedder

from eventlog import LmdbEventLog, PostgresEventLog
from eventlog._storage import Table
from eventlog.log import EventLogBase
from eventlog.projection import ProjectionSpec
from search import SearchEngine, SearchOptions
from search.lmdb_index import INDEX_PROJECTION, LmdbIndex
from search.vector_index import VectorIndex
from tests.log.logtools import add_run, exchange
from tests.search.semtools import HashingEmbeddingModel

ROOT = Path(__file__).resolve().parents[2]
MARKER = 'zqxvermilionmarker'

_ERASER = textwrap.dedent(
    """
    import asyncio, sys
    import eventlog

    assert not any(name == 'search' or name.startswith('search.') for name in sys.modules), 'search imported'
    if sys.argv[1] == 'lmdb':
        log = eventlog.LmdbEventLog(sys.argv[2])
    else:
        log = eventlog.PostgresEventLog(sys.argv[2], schema=sys.argv[3], projections_dir=sys.argv[4])
    assert not any(name == 'search' or name.startswith('search.') for name in sys.modules), 'search imported'
    done = asyncio.run(log.erase('c', run_id='secret', reason='request'))
    log.close()
    print('scrubbed' if done.scrubbed else f'not scrubbed: {done.scrub_error}')
    """
)


def _erase_elsewhere(*args: str) -> None:
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    result = subprocess.run(
        [sys.executable, '-c', _ERASER, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'scrubbed', result.stdout


def _files_holding(directory: Path, marker: bytes) -> list[str]:
    return [str(path) for path in directory.rglob('*') if path.is_file() and marker in path.read_bytes()]


async def _build(log: EventLogBase) -> list[int]:
    await add_run(log, 'c', 'before', exchange(0, 'walrus'))
    secret = await add_run(log, 'c', 'secret', exchange(1, f'the code is {MARKER}'))
    await add_run(log, 'c', 'after', exchange(2, 'walrus again'))
    await add_run(log, 'other', 'o', exchange(3, 'seal'))
    index = LmdbIndex(log)
    index.catch_up()
    vectors = VectorIndex(log, Embedder(HashingEmbeddingModel()))
    await vectors.catch_up()
    assert set(secret) <= set(vectors.seqs_with_vectors())
    engine = SearchEngine(index, SearchOptions(context_lines=0))
    assert MARKER in await engine.search(MARKER, scope='conversation', conversation_id='c')
    return secret


async def _check_after(log: EventLogBase, secret: list[int]) -> None:
    index = LmdbIndex(log)
    engine = SearchEngine(index, SearchOptions(context_lines=0))
    answer = await engine.search(MARKER, scope='conversation', conversation_id='c')
    assert answer.startswith('No matches'), answer
    assert index.verify() == []  # the index is the one a rebuild from the log gives
    vectors = VectorIndex(log, Embedder(HashingEmbeddingModel()))
    assert not set(secret) & set(vectors.seqs_with_vectors())
    kept = vectors.vector_records()
    await vectors.rebuild()
    assert vectors.vector_records() == kept


async def test_an_erasure_by_a_process_without_search_scrubs_the_lmdb_index_and_vectors(tmp_path: Path) -> None:
    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        secret = await _build(log)
    finally:
        log.close()
    assert _files_holding(store, MARKER.encode())  # the oracle can fail: the index holds the marker

    _erase_elsewhere('lmdb', str(store))

    assert _files_holding(store, MARKER.encode()) == []
    log = LmdbEventLog(store)
    try:
        await _check_after(log, secret)
    finally:
        log.close()


async def test_an_erasure_by_a_process_without_search_scrubs_the_local_projections_of_postgres(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    schema = schema_for(tmp_path / 'shared')
    pg_schemas.append(schema)
    local = tmp_path / 'local-index'
    log = PostgresEventLog(pg_dsn, schema=schema, projections_dir=local)
    try:
        secret = await _build(log)
    finally:
        log.close()
    assert _files_holding(local, MARKER.encode())  # the local index keeps the payloads it shows

    _erase_elsewhere('postgres', pg_dsn, schema, str(local))

    assert _files_holding(local, MARKER.encode()) == []
    log = PostgresEventLog(pg_dsn, schema=schema, projections_dir=local)
    try:
        await _check_after(log, secret)
    finally:
        log.close()


async def test_a_projection_without_a_usable_maintainer_is_cleared(tmp_path: Path) -> None:
    """An index whose maintainer cannot be imported, and a projection never catalogued, are cleared
    by the scrub; the index rebuilds from the log on its next search."""
    from eventlog.projection import record_in_catalogue

    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await _build(log)
        uncatalogued = ProjectionSpec('notes', ('text',))
        log.write_projection(uncatalogued, lambda records, _: records.put('text', b'k', MARKER.encode()))
        broken = ProjectionSpec('ix', INDEX_PROJECTION.tables, format='3', maintainer='no_such_module:maintain')
        log._write_sync(lambda txn: record_in_catalogue(txn, broken))  # pyright: ignore[reportPrivateUsage]
        log._write_sync(lambda txn: txn.delete(Table.META, b'projection/notes'))  # pyright: ignore[reportPrivateUsage]
    finally:
        log.close()

    _erase_elsewhere('lmdb', str(store))

    assert _files_holding(store, MARKER.encode()) == []
    log = LmdbEventLog(store)
    try:
        assert LmdbIndex.open_existing(log).state().analyzer is None  # cleared, not caught up
        assert log.read_projection(ProjectionSpec('notes', ('text',)), lambda r, _: list(r.scan('text'))) == []
        index = LmdbIndex(log)
        engine = SearchEngine(index, SearchOptions(context_lines=0))
        assert 'walrus' in await engine.search('walrus', scope='conversation', conversation_id='c')
        assert (await engine.search(MARKER, scope='conversation', conversation_id='c')).startswith('No ')
    finally:
        log.close()


def test_the_recorded_maintainer_still_names_the_former_module_which_aliases_the_index() -> None:
    """Stores record `search.lmdb_index:maintain_index` (processes of earlier versions resolve it):
    the index's spec keeps naming it, and the former module re-exports the split index's names."""
    import importlib

    import search.lmdb_index as former
    import search.persistent_index as index

    assert INDEX_PROJECTION.maintainer == 'search.lmdb_index:maintain_index'
    module, _, function = INDEX_PROJECTION.maintainer.partition(':')
    assert getattr(importlib.import_module(module), function) is index.maintain_index
    assert former.LmdbIndex is LmdbIndex is index.PersistentIndex
    assert former.INDEX_PROJECTION is index.INDEX_PROJECTION is INDEX_PROJECTION
    for name in index.__all__:
        assert getattr(former, name) is getattr(index, name)
