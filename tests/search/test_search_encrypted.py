"""Searching an encrypted store (docs/encryption.md): its search and vector indexes are kept in
the process's memory only (built from the log, payloads opened), never at rest, and a shredded
conversation drops out of them at once."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest
from backends import make_log, postgres_dsn, schema_for
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import message_entry, run_finished_entry, run_started_entry
from eventlog.log import EventLogBase
from search import SearchEngine, SearchOptions
from search.analyzers import resolve_analyzer
from search.persistent_index import PersistentIndex, backend_for


def _tables(store: Path) -> set[bytes]:
    """The named databases of an LMDB store."""
    env = lmdb.open(str(store), max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return {bytes(key) for key, _ in txn.cursor()}
    finally:
        env.close()


async def add_run(log: EventLogBase, conversation_id: str, run_id: str, text: str) -> None:
    await log.append(run_started_entry(conversation_id=conversation_id, run_id=run_id))
    for message in (
        ModelRequest(parts=[UserPromptPart(f'tell me about {text}')]),
        ModelResponse(parts=[TextPart(text)]),
    ):
        await log.append(message_entry(message, conversation_id=conversation_id, run_id=run_id))
    await log.append(run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'))


async def _conversations_found(log: EventLogBase, query: str) -> set[str]:
    backend = backend_for(log, resolve_analyzer('default'))
    assert isinstance(backend, PersistentIndex)  # the index, kept in memory for an encrypted store
    result = await SearchEngine(backend, SearchOptions()).find(query, scope='all', conversation_id=None)
    return {hit.conversation_id for hit in result.hits if hit.conversation_id is not None}


@pytest.mark.parametrize('backend', ['lmdb-encrypted', 'postgres-encrypted'])
async def test_the_index_lives_in_memory_and_a_shred_drops_the_conversation(tmp_path: Path, backend: str) -> None:
    log = make_log(backend, tmp_path)
    try:
        await add_run(log, 'c', 'r1', 'zebrafinch migration')
        await add_run(log, 'd', 'r2', 'zebrafinch courtship')
        assert await _conversations_found(log, 'zebrafinch') == {'c', 'd'}
        assert log.has_projection('ix')
        await add_run(log, 'e', 'r3', 'zebrafinch song')  # caught up incrementally
        assert await _conversations_found(log, 'zebrafinch') == {'c', 'd', 'e'}
        await log.shred('c')
        assert await _conversations_found(log, 'zebrafinch') == {'d', 'e'}
        assert await _conversations_found(log, 'migration') == set()
        assert PersistentIndex(log).verify() == []  # the index matches one rebuilt from the log
    finally:
        log.close()
    if backend == 'lmdb-encrypted':
        store = tmp_path / 'store.lmdb'
        for path in store.iterdir():
            assert b'zebrafinch' not in path.read_bytes()
        assert _tables(store) == {b'entries', b'index'}  # no projection tables at rest
    else:
        import psycopg

        with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
            schema = schema_for(tmp_path / 'store.lmdb')
            rows = conn.execute(f'SELECT count(*) FROM "{schema}".projection_records').fetchone()
            assert rows == (0,)  # no projection records at rest
    reopened = make_log(backend, tmp_path)
    try:
        assert not reopened.has_projection('ix')  # a new process builds its own at its first search
        assert await _conversations_found(reopened, 'zebrafinch') == {'d', 'e'}
    finally:
        reopened.close()
        if backend == 'postgres-encrypted':
            from pgserver import drop_schema

            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))


async def test_the_vector_index_lives_in_memory_and_forgets_a_shredded_conversation(tmp_path: Path) -> None:
    from pydantic_ai.embeddings import Embedder
    from semtools import HashingEmbeddingModel

    from search.vector_index import VectorIndex

    log = make_log('lmdb-encrypted', tmp_path)
    try:
        await add_run(log, 'c', 'r1', 'my vault code is 4711')
        await add_run(log, 'd', 'r2', 'lunch at noon')
        vectors = VectorIndex(log, Embedder(HashingEmbeddingModel()))
        await vectors.catch_up()
        messages = {e.seq: e.conversation_id for e in await log.entries(kinds=['message'])}
        assert set(vectors.seqs_with_vectors()) == set(messages)
        await log.shred('c')
        await vectors.catch_up()
        assert set(vectors.seqs_with_vectors()) == {seq for seq, conv in messages.items() if conv == 'd'}
    finally:
        log.close()
    assert _tables(tmp_path / 'store.lmdb') == {b'entries', b'index'}
    for path in (tmp_path / 'store.lmdb').iterdir():
        assert b'4711' not in path.read_bytes()


async def test_an_encrypted_postgres_store_keeps_nothing_in_its_projections_dir(tmp_path: Path) -> None:
    from backends import keyring_for

    from eventlog.postgres_log import PostgresEventLog

    schema = schema_for(tmp_path / 'store.lmdb')
    local = tmp_path / 'local'
    log = PostgresEventLog(postgres_dsn(), schema=schema, projections_dir=local, keys=keyring_for(tmp_path))
    try:
        await add_run(log, 'c', 'r1', 'zebrafinch migration')
        assert not log.projections_apart and log.start_log_position() is None
        assert await _conversations_found(log, 'zebrafinch') == {'c'}
    finally:
        log.close()
        from pgserver import drop_schema

        drop_schema(postgres_dsn(), schema)
    for path in local.rglob('*'):
        if path.is_file():
            assert b'zebrafinch' not in path.read_bytes()
