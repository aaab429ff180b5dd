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
from search import SearchEngine, SearchOptions
from search.lmdb_index import LmdbIndex
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
                        "WHERE query LIKE 'SELECT v FROM %meta% WHERE k = $1' AND pid <> pg_backend_pid()"
                    )
                    assert (await cursor.fetchall()) != []
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        reader.close()
