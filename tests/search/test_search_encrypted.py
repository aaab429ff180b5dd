"""Searching an encrypted store (docs/encryption.md): no index is kept at rest, searches index the
log in memory (payloads opened), and a shredded conversation drops out of them at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import make_log
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import message_entry, run_finished_entry, run_started_entry
from eventlog.errors import EncryptionSetupError
from eventlog.log import EventLogBase
from search import SearchEngine, SearchOptions
from search.analyzers import resolve_analyzer
from search.persistent_index import PersistentIndex, backend_for
from search.vector_index import VectorIndex


async def add_run(log: EventLogBase, conversation_id: str, run_id: str, text: str) -> None:
    await log.append(run_started_entry(conversation_id=conversation_id, run_id=run_id))
    for message in (
        ModelRequest(parts=[UserPromptPart(f'tell me about {text}')]),
        ModelResponse(parts=[TextPart(text)]),
    ):
        await log.append(message_entry(message, conversation_id=conversation_id, run_id=run_id))
    await log.append(run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'))


async def _conversations_found(log: object, query: str) -> set[str]:
    backend = backend_for(log, resolve_analyzer('default'))  # type: ignore[arg-type]
    result = await SearchEngine(backend, SearchOptions()).find(query, scope='all', conversation_id=None)
    return {hit.conversation_id for hit in result.hits if hit.conversation_id is not None}


async def test_search_reads_in_memory_and_a_shred_drops_the_conversation(tmp_path: Path) -> None:
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        await add_run(log, 'c', 'r1', 'zebrafinch migration')
        await add_run(log, 'd', 'r2', 'zebrafinch courtship')
        assert await _conversations_found(log, 'zebrafinch') == {'c', 'd'}
        with pytest.raises(EncryptionSetupError, match='not kept for an encrypted store'):
            PersistentIndex(log)
        with pytest.raises(EncryptionSetupError, match='vector index'):
            VectorIndex(log, object())  # type: ignore[arg-type]
        assert not log.has_projection('ix')
        await log.shred('c')
        assert await _conversations_found(log, 'zebrafinch') == {'d'}
    finally:
        log.close()
    for path in (tmp_path / 'store.lmdb').iterdir():
        assert b'zebrafinch' not in path.read_bytes()
