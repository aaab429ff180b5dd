"""The search index kept in a local LMDB directory that follows a PostgreSQL log (`projections_dir`).

Two handles on one PostgreSQL schema stand for two machines: one appends, the other searches
through its own local index. A search sees every append committed before it, and a local
index deleted and rebuilt from the log answers identically.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
from backends import schema_for
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import PostgresEventLog, message_entry, run_started_entry
from eventlog._keys import key_seq
from search import SearchEngine, SearchOptions
from search.index_format import INDEX_PROJECTION
from search.persistent_index import PersistentIndex as LmdbIndex
from tests.log.logtools import at


async def _append(log: PostgresEventLog, run_id: str, texts: list[str], offset: int) -> None:
    await log.append(run_started_entry(conversation_id='conv', run_id=run_id))
    for number, text in enumerate(texts):
        message = ModelRequest(parts=[UserPromptPart(text, timestamp=at(offset + number))])
        await log.append(message_entry(message, conversation_id='conv', run_id=run_id))


async def _answers(log: PostgresEventLog, queries: list[str]) -> list[str]:
    engine = SearchEngine(LmdbIndex(log), SearchOptions(context_lines=1, max_matches=5))
    return [await engine.search(query, scope='conversation', conversation_id='conv') for query in queries]


async def test_a_local_index_sees_what_another_machine_committed(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    schema = schema_for(tmp_path / 'shared')
    pg_schemas.append(schema)
    writer = PostgresEventLog(pg_dsn, schema=schema)
    reader = PostgresEventLog(pg_dsn, schema=schema, projections_dir=tmp_path / 'local-index')
    try:
        await _append(writer, 'run-1', ['the deploy key lives in /srv/keys/alpha', 'budget is 4200 euros'], 0)
        first = await _answers(reader, ['deploy key', 'budget'])
        assert '/srv/keys/alpha' in first[0]
        assert '4200' in first[1]
        assert '17 tables' not in (await _answers(reader, ['zebra']))[0]

        # Another machine appends: the next search on this one sees it, with no call in between.
        await _append(writer, 'run-2', ['the zebra migration moved 17 tables'], 10)
        assert '17 tables' in (await _answers(reader, ['zebra']))[0]
        assert reader.has_projection('ix')
        assert not writer.has_projection('ix')  # nothing of the local index went to the database

        queries = ['deploy key', 'budget', 'zebra migration', 'tables', 'nothing-matches-this']
        before = await _answers(reader, queries)
    finally:
        reader.close()
    # The local directory is a cache of the log: delete it, and a rebuilt one answers the same.
    shutil.rmtree(tmp_path / 'local-index')
    again = PostgresEventLog(pg_dsn, schema=schema, projections_dir=tmp_path / 'local-index')
    try:
        assert await _answers(again, queries) == before
    finally:
        again.close()
        writer.close()


_APPENDER = """
import asyncio, sys
from pydantic_ai.messages import ModelRequest, UserPromptPart
from eventlog import PostgresEventLog, message_entry, run_started_entry
from eventlog._keys import key_seq

async def main() -> None:
    log = PostgresEventLog(sys.argv[1], schema=sys.argv[2])
    try:
        await log.append(run_started_entry(conversation_id='conv', run_id='other-machine'))
        print('ready', flush=True)
        for line in sys.stdin:
            message = ModelRequest(parts=[UserPromptPart(line.strip())])
            seq = await log.append(message_entry(message, conversation_id='conv', run_id='other-machine'))
            print(f'ack {seq}', flush=True)
    finally:
        log.close()

asyncio.run(main())
"""


async def test_a_search_sees_what_another_process_committed_before_it(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    """The local index asks the log's position while it searches its records (one round trip,
    overlapped): an append another process committed just before the search is still found."""
    schema = schema_for(tmp_path / 'shared')
    pg_schemas.append(schema)
    reader = PostgresEventLog(pg_dsn, schema=schema, projections_dir=tmp_path / 'local-index')
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, '-c', _APPENDER, pg_dsn, schema],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, 'PYTHONPATH': str(root)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == 'ready'
        assert reader.start_log_position() is not None  # the overlapped check is the one in use
        await _append(reader, 'run-1', ['the walrus count is unknown'], 0)
        assert 'unknown' in (await _answers(reader, ['walrus']))[0]
        for round_number in range(4):
            word = f'narwhal{round_number}'
            assert f'tusk-{round_number}' not in (await _answers(reader, [word]))[0]
            proc.stdin.write(f'{word} measured tusk-{round_number}\n')
            proc.stdin.flush()
            assert proc.stdout.readline().startswith('ack ')  # committed in the other process
            found = (await _answers(reader, [word]))[0]
            assert f'tusk-{round_number}' in found, found
            if round_number == 1:
                # The connection that asks the position breaks: the next search still sees everything.
                async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
                    cursor = await admin.execute(
                        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity '
                        "WHERE query LIKE 'SELECT k FROM %entries% WHERE tx < %' AND pid <> pg_backend_pid()"
                    )
                    assert (await cursor.fetchall()) != []
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        reader.close()


def _local_records(log: PostgresEventLog) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every record of the local index, by table."""
    return log.read_projection(INDEX_PROJECTION, lambda r, _: {t: list(r.scan(t)) for t in INDEX_PROJECTION.tables})


async def test_a_local_index_keeps_what_it_shows_and_reads_only_the_position(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    """The local index holds the payload of every message it indexes and the name of every run,
    so a search asks the database for nothing but the log's last `seq` (no connection is taken
    from the pool), even for messages this process never showed."""
    schema = schema_for(tmp_path / 'shared')
    pg_schemas.append(schema)
    writer = PostgresEventLog(pg_dsn, schema=schema)
    reader = PostgresEventLog(pg_dsn, schema=schema, projections_dir=tmp_path / 'local-index')
    try:
        for number in range(3):
            await _append(writer, f'run-{number}', [f'walrus {number} counted', f'seal {number} slept'], number * 10)
        LmdbIndex(reader).catch_up()
        payloads = {entry.seq: entry.payload for entry in await writer.entries(conversation_id='conv')}
        records = _local_records(reader)
        kept = {key_seq(value[:8]): value[8:] for _, value in records['pos']}
        assert len(kept) == 6 and all(kept[seq] == payloads[seq] for seq in kept)
        starts = {key_seq(key): value.decode() for key, value in records['starts']}
        assert sorted(starts.values()) == ['run-0', 'run-1', 'run-2']
        assert all(payloads[seq] == b'' or seq not in kept for seq in starts)  # run_started entries

        before = reader._pool.get_stats().get('requests_num', 0)  # pyright: ignore[reportPrivateUsage]
        answers = await _answers(reader, ['walrus', 'seal', 'counted slept'])  # a new index object: nothing cached
        after = reader._pool.get_stats().get('requests_num', 0)  # pyright: ignore[reportPrivateUsage]
        assert all('walrus 2 counted' in answer or 'seal 2 slept' in answer for answer in answers), answers
        assert after == before
    finally:
        reader.close()
        writer.close()


async def test_an_erasure_on_another_machine_reaches_what_the_local_index_keeps(
    pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    """An erasure committed on another machine: the next search here shows the placeholder (not
    the kept payload, not a cached message), and no local record holds the erased text; a
    deleted conversation leaves no local record."""
    schema = schema_for(tmp_path / 'shared')
    pg_schemas.append(schema)
    writer = PostgresEventLog(pg_dsn, schema=schema)
    reader = PostgresEventLog(pg_dsn, schema=schema, projections_dir=tmp_path / 'local-index')
    try:
        await _append(writer, 'run-1', ['the vault password is hunter2', 'lunch is at noon'], 0)
        # A fork whose run continues the history: its corpus holds copies of the messages.
        await writer.fork('conv', new_conversation_id='copy')
        fork_tip = (await writer.entries(conversation_id='copy'))[-1].seq
        await writer.append(run_started_entry(conversation_id='copy', run_id='copy-1', parent=fork_tip))
        engine = SearchEngine(LmdbIndex.for_log(reader), SearchOptions(context_lines=1))  # keeps its cache
        for conversation in ('conv', 'copy'):
            assert 'hunter2' in await engine.search('vault', scope='conversation', conversation_id=conversation)
        assert sum(b'hunter2' in value for _, value in _local_records(reader)['pos']) == 2

        await writer.erase('conv', run_id='run-1')
        for conversation in ('conv', 'copy'):
            answer = await engine.search('erased', scope='conversation', conversation_id=conversation)
            assert answer.startswith('Found '), answer
            assert 'hunter2' not in answer and '[erased: ' in answer
        records = _local_records(reader)
        assert not any(b'hunter2' in key + value for rows in records.values() for key, value in rows)
        assert records['pos'] and records['starts']

        await writer.delete_conversation('copy')
        await writer.delete_conversation('conv')
        answer = await engine.search('erased', scope='conversation', conversation_id='conv')
        assert answer.startswith('No ') and '[erased: ' not in answer, answer
        records = _local_records(reader)
        assert records['pos'] == [] and records['starts'] == [] and records['runs'] == []
    finally:
        reader.close()
        writer.close()
