"""A store written in format 1 (kept in `fixtures/`, made by the format-1 code) opens, is
migrated in place, and then reads, exports, verifies and appends exactly as before."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import lmdb
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogPersistence
from eventlog import LmdbEventLog, NewEntry, ReadOnlyStoreError, StoreVersionError
from eventlog._engine import FORMAT_VERSION
from eventlog._storage import Table

FIXTURES = Path(__file__).with_name('fixtures')


def _index_keys(path: Path) -> list[bytes]:
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    try:
        index = env.open_db(b'index', create=False)
        with env.begin() as txn:
            return [bytes(key) for key, _ in txn.cursor(db=index)]
    finally:
        env.close()


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    path = tmp_path / 'store'
    shutil.copytree(FIXTURES / 'format1.lmdb', path)
    keys = _index_keys(path)
    assert bytes([Table.META]) + b'format' in keys
    assert any(key[0] == Table.BY_RUN for key in keys), 'the fixture is a format-1 store'
    return path


@pytest.fixture
def expected() -> dict[str, Any]:
    return json.loads((FIXTURES / 'v1-expected.json').read_text())


async def test_a_format_1_store_is_migrated_and_reads_as_before(v1_store: Path, expected: dict[str, Any]) -> None:
    log = LmdbEventLog(v1_store)
    try:
        runs = await log.list_runs()
        assert {run.run_id: run.conversation_id for run in runs} == expected['runs']
        for run in runs:
            assert run.agent_name == 'fixture'
            assert run.metadata == {'tenant': 'acme'}
            assert run.status == 'completed'
            assert run.message_count > 0
            # The stored bytes, as the format-1 code replayed them (pydantic-ai 2.62 wrote them; a newer
            # pydantic-ai would add fields when re-encoding decoded messages, so raw bytes are compared).
            got = (await log.run_messages_json(run.run_id)).decode()
            assert got == expected['run_messages'][run.run_id]
        # What each agent run returned is still exactly what its run replays.
        for run_id, result in expected['results'].items():
            if run_id in expected['runs']:
                assert (await log.run_messages_json(run_id)).decode() == result
        exported = io.BytesIO()
        await log.export(exported)
        # The format-1 code's export, entry line for entry line (hashes included: a migrated store
        # keeps its entries' chain rule 1); only the framing of export version 3 differs (its
        # header's version and chain rule boundary, and the closing line).
        header, *entry_lines, closing = exported.getvalue().splitlines(keepends=True)
        v1_header, *v1_entry_lines = (FIXTURES / 'v1-export.jsonl').read_bytes().splitlines(keepends=True)
        assert entry_lines == v1_entry_lines
        assert json.loads(v1_header) == {'format': 'pydantic-ai-eventlog', 'version': 1}
        last = json.loads(entry_lines[-1])['seq']
        assert json.loads(header) == {'format': 'pydantic-ai-eventlog', 'version': 3, 'chain_from': last + 1}
        heads = {json.loads(line)['conversation_id']: json.loads(line)['hash'] for line in v1_entry_lines}
        assert json.loads(closing) == {'type': 'closing', 'entries': len(v1_entry_lines), 'heads': heads}
        assert (await log.verify()).ok
    finally:
        log.close()
    keys = _index_keys(v1_store)
    assert not any(key[0] == Table.BY_RUN for key in keys)
    assert bytes([Table.META]) + b'format' in keys
    env = lmdb.open(str(v1_store), max_dbs=32, readonly=True, lock=False)
    index = env.open_db(b'index', create=False)
    with env.begin() as txn:
        assert txn.get(bytes([Table.META]) + b'format', db=index) == str(FORMAT_VERSION).encode()
    env.close()


async def test_idempotency_keys_survive_the_migration(v1_store: Path) -> None:
    log = LmdbEventLog(v1_store)
    try:
        runs = await log.list_runs(conversation_id='conv-a')
        first = runs[0]
        finished = [e for e in await log.entries(run_id=first.run_id) if e.kind == 'run_finished']
        last_seq = await log.last_seq()
        # Re-executing a recorded step (same run, same key) returns the recorded entry.
        again = NewEntry(
            conversation_id='conv-a',
            run_id=first.run_id,
            kind='run_finished',
            payload=finished[0].payload,
            idempotency_key=finished[0].idempotency_key,
        )
        assert await log.append(again) == finished[0].seq
        title = NewEntry(conversation_id='conv-b', kind='title', payload=b'{"title":"B"}', idempotency_key='title-once')
        titles = [e for e in await log.entries(conversation_id='conv-b') if e.kind == 'title']
        assert await log.append(title) == titles[0].seq
        assert await log.last_seq() == last_seq
    finally:
        log.close()


async def test_a_migrated_store_takes_new_runs(v1_store: Path) -> None:
    log = LmdbEventLog(v1_store)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f'reply {len(messages)}')])

    agent = Agent(FunctionModel(model), capabilities=[EventLogPersistence(log)])
    try:
        history = await log.context('conv-a')
        before = len(await log.transcript('conv-a'))
        # With the pydantic-ai that wrote the fixture, the decoded history re-encodes to the stored
        # bytes; a newer one adds fields, so the history no longer matches and is stored as inherited.
        same_bytes = ModelMessagesTypeAdapter.dump_json(history) == await log.transcript_json('conv-a')
        assert same_bytes or version('pydantic-ai-slim') != '2.62.0'
        result = await agent.run('one more', message_history=history, conversation_id='conv-a')
        replay = await log.run_messages(result.run_id)
        assert ModelMessagesTypeAdapter.dump_json(replay) == ModelMessagesTypeAdapter.dump_json(result.all_messages())
        if same_bytes:
            # Threaded: only the new request and response were stored.
            assert len(await log.transcript('conv-a')) == before + 2
        assert (await log.verify()).ok
    finally:
        log.close()
    reopened = LmdbEventLog(v1_store)  # already current: opening again changes nothing
    try:
        assert (await reopened.verify()).ok
        assert len(await reopened.list_runs(conversation_id='conv-a')) == 4
    finally:
        reopened.close()


def test_an_unknown_older_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / 's'
    LmdbEventLog(path).close()
    env = lmdb.open(str(path), max_dbs=32)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.put(bytes([Table.META]) + b'format', b'0', db=index)
    env.close()
    with pytest.raises(StoreVersionError, match='format 0'):
        LmdbEventLog(path)


def test_the_stored_run_layout_holds_every_run_field() -> None:
    """Run records are stored positionally; a field added to `RunRecord` must be stored too."""
    from eventlog import RunRecord
    from eventlog._keys import StoredRun

    assert set(StoredRun.__struct_fields__) == set(RunRecord.__struct_fields__) - {'run_id'}


# --- format 2 -> 3 ----------------------------------------------------------------------------
# `fixtures/format2.lmdb` was made by the format-2 code (main at 4d8d422): three agent runs with a
# tool call each in conv-a, one in conv-b with a titled idempotency key, then two conversations
# recorded and deleted, the second one last (its tombstone is the store's last entry). Format 3
# differs only in META `last_seq`, which an LMDB store's appends no longer write.


@pytest.fixture
def v2_store(tmp_path: Path) -> Path:
    path = tmp_path / 'store'
    shutil.copytree(FIXTURES / 'format2.lmdb', path)
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    index = env.open_db(b'index', create=False)
    with env.begin() as txn:
        assert txn.get(bytes([Table.META]) + b'format', db=index) == b'2', 'the fixture is a format-2 store'
    env.close()
    return path


def _meta(path: Path, key: bytes) -> bytes | None:
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    try:
        index = env.open_db(b'index', create=False)
        with env.begin() as txn:
            value = txn.get(bytes([Table.META]) + key, db=index)
            return None if value is None else bytes(value)
    finally:
        env.close()


async def test_a_format_2_store_opened_read_only_reads_and_verifies_as_it_is(v2_store: Path) -> None:
    """A read-only handle (an auditor's `verify`) reads a format-2 store without migrating it."""
    expected = json.loads((FIXTURES / 'v2-expected.json').read_text())
    before = (v2_store / 'data.mdb').read_bytes()
    log = LmdbEventLog(v2_store, read_only=True)
    try:
        assert await log.last_seq() == expected['last_seq']
        exported = io.BytesIO()
        await log.export(exported)
        header, *rest = exported.getvalue().splitlines(keepends=True)
        old_header, *old_rest = (FIXTURES / 'v2-export.jsonl').read_bytes().splitlines(keepends=True)
        assert rest == old_rest  # every entry and the closing line, hashes included
        # The header of today's exports, naming no rule-2 boundary: every entry keeps chain rule 1.
        assert {**json.loads(header), 'chain_from': None} == {
            **json.loads(old_header),
            'version': 3,
            'chain_from': None,
        }
        assert json.loads(header).get('chain_from') is None
        report = await log.verify()
        assert report.ok and report.chain_from is None
    finally:
        log.close()
    assert (v2_store / 'data.mdb').read_bytes() == before


def test_a_format_1_store_opened_read_only_names_its_migration(v1_store: Path) -> None:
    before = (v1_store / 'data.mdb').read_bytes()
    with pytest.raises(ReadOnlyStoreError, match='in format 1, which is brought to format 4 by opening it for writing'):
        LmdbEventLog(v1_store, read_only=True)
    assert (v1_store / 'data.mdb').read_bytes() == before


async def test_a_format_2_store_is_migrated_and_reads_as_before(v2_store: Path) -> None:
    expected = json.loads((FIXTURES / 'v2-expected.json').read_text())
    log = LmdbEventLog(v2_store)
    try:
        assert await log.last_seq() == expected['last_seq']
        runs = await log.list_runs()
        assert {run.run_id: run.conversation_id for run in runs} == expected['runs']
        for run in runs:
            assert (await log.run_messages_json(run.run_id)).decode() == expected['run_messages'][run.run_id]
        exported = io.BytesIO()
        await log.export(exported)
        assert _same_export(exported.getvalue(), (FIXTURES / 'v2-export.jsonl').read_bytes())
        assert (await log.verify()).ok
        # Idempotency keys hold: the title appended again is the recorded entry.
        title = NewEntry(conversation_id='conv-b', kind='title', payload=b'{"title":"B"}', idempotency_key='title-once')
        titles = [e for e in await log.entries(conversation_id='conv-b') if e.kind == 'title']
        assert await log.append(title) == titles[0].seq
        assert await log.last_seq() == expected['last_seq']
        # The next entry follows the last one ever assigned.
        fresh = NewEntry(conversation_id='conv-b', kind='title', payload=b'{"title":"B2"}')
        assert await log.append(fresh) == expected['last_seq'] + 1
        assert (await log.verify()).ok
    finally:
        log.close()
    assert _meta(v2_store, b'format') == str(FORMAT_VERSION).encode() == b'4'
    # Entries appended from the migration on are chained by rule 2; those before keep rule 1.
    assert _meta(v2_store, b'chain_from') == (expected['last_seq'] + 1).to_bytes(8, 'big')
    # The recorded last seq was left as the format-2 code wrote it; the append did not move it.
    assert _meta(v2_store, b'last_seq') == expected['last_seq'].to_bytes(8, 'big')
    reopened = LmdbEventLog(v2_store, read_only=True)  # current now: opens read-only
    try:
        assert await reopened.last_seq() == expected['last_seq'] + 1
    finally:
        reopened.close()


def test_a_migration_killed_at_any_moment_leaves_a_store_that_opens(tmp_path: Path) -> None:
    """Opening migrates in one transaction: a process killed with SIGKILL while it opens (before,
    during or after the migration) leaves the store in format 2 or 4, never in between."""
    export = (FIXTURES / 'v2-export.jsonl').read_bytes()
    code = (
        'import sys, time\n'
        'from eventlog import LmdbEventLog\n'
        "print('opening', flush=True)\n"
        'log = LmdbEventLog(sys.argv[1])\n'
        "print('opened', flush=True)\n"
        'time.sleep(60)\n'
    )
    formats: set[bytes | None] = set()
    for attempt, delay in enumerate([0.0, 0.001, 0.003, 0.006, 0.012, 0.05]):
        path = tmp_path / f'store-{attempt}'
        shutil.copytree(FIXTURES / 'format2.lmdb', path)
        proc = subprocess.Popen([sys.executable, '-c', code, str(path)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == 'opening'
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        formats.add(_meta(path, b'format'))
        log = LmdbEventLog(path)
        try:
            exported = io.BytesIO()
            asyncio.run(log.export(exported))
            assert _same_export(exported.getvalue(), export)
            assert asyncio.run(log.verify()).ok
        finally:
            log.close()
        assert _meta(path, b'format') == b'4'
    assert formats <= {b'2', b'4'}, formats


def _same_export(migrated: bytes, before: bytes) -> bool:
    """Whether a migrated store's export holds the entry and closing lines (hashes included) of the
    export made before, under a version-3 header naming where chain rule 2 starts (after them)."""
    header, *rest = migrated.splitlines(keepends=True)
    old_header, *old_rest = before.splitlines(keepends=True)
    last = json.loads(old_rest[-2])['seq']
    expected = {**json.loads(old_header), 'version': 3, 'chain_from': last + 1}
    return rest == old_rest and json.loads(header) == expected
