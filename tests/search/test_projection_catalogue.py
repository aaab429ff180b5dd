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
from search.index_format import INDEX_PROJECTION
from search.persistent_index import PersistentIndex as LmdbIndex
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
    """A projection of a kind nothing installed maintains, and a projection never catalogued, are
    cleared by the scrub; the index, maintained by its kind, still answers."""
    from eventlog.projection import record_in_catalogue

    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    try:
        await _build(log)
        uncatalogued = ProjectionSpec('notes', ('text',))
        log.write_projection(uncatalogued, lambda records, _: records.put('text', b'k', MARKER.encode()))
        unknown = ProjectionSpec('mystery', ('text',))
        log.write_projection(unknown, lambda records, _: records.put('text', b'k', MARKER.encode()))
        log._write_sync(lambda txn: record_in_catalogue(txn, unknown))  # pyright: ignore[reportPrivateUsage]
        log._write_sync(lambda txn: txn.delete(Table.META, b'projection/notes'))  # pyright: ignore[reportPrivateUsage]
    finally:
        log.close()

    _erase_elsewhere('lmdb', str(store))

    assert _files_holding(store, MARKER.encode()) == []
    log = LmdbEventLog(store)
    try:
        assert LmdbIndex.open_existing(log).state().analyzer is not None  # maintained, not cleared
        assert log.read_projection(ProjectionSpec('notes', ('text',)), lambda r, _: list(r.scan('text'))) == []
        assert log.read_projection(unknown, lambda r, _: list(r.scan('text'))) == []
        index = LmdbIndex(log)
        engine = SearchEngine(index, SearchOptions(context_lines=0))
        assert 'walrus' in await engine.search('walrus', scope='conversation', conversation_id='c')
        assert (await engine.search(MARKER, scope='conversation', conversation_id='c')).startswith('No ')
    finally:
        log.close()


def test_the_index_and_the_vectors_are_maintained_by_their_kind() -> None:
    """The log picks the index's and the vectors' maintainers by the projections' names, from its
    own table; what the catalogue records of them names no code."""
    import search.persistent_index as index
    from eventlog.projection import CatalogueEntry, maintainer_for
    from search.vector_index import VECTOR_PROJECTION, maintain_vectors

    assert maintainer_for(INDEX_PROJECTION.name) is index.maintain_index
    assert maintainer_for(VECTOR_PROJECTION.name) is maintain_vectors
    assert CatalogueEntry.of(INDEX_PROJECTION).maintainer is None
