"""The command line on a PostgreSQL store: `--store postgresql://...#schema` (or `$EVENTLOG_STORE`).

Every command runs as the console script does, in a real subprocess, against the test server;
each test has a schema of its own. The LMDB store that `clitools.build_store` records with real
agent runs is exported and imported into PostgreSQL, and the views of both stores are compared
output for output. Every run also checks that no password and no traceback reaches the output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from clitools import DETAIL, Store, build_store, invoke
from pgserver import fresh_schema

COMMAND = [sys.executable, '-m', 'eventlog_cli']


@dataclass
class Done:
    """A finished `eventlog` run."""

    code: int
    out: str
    err: str


def eventlog(*args: str | Path, env: dict[str, str] | None = None, secret: str | None = None) -> Done:
    """Run `eventlog ARGS` in a subprocess (no `$EVENTLOG_STORE` unless `env` sets it); check
    that `secret` (a password) and tracebacks stay out of its output."""
    base = {**os.environ, 'COLUMNS': '200'}
    base.pop('EVENTLOG_STORE', None)
    done = subprocess.run(
        [*COMMAND, *map(str, args)], capture_output=True, text=True, env={**base, **(env or {})}, timeout=120
    )
    assert 'Traceback' not in done.stderr, done.stderr
    if secret:
        assert secret not in done.stdout and secret not in done.stderr
    return Done(done.returncode, done.stdout, done.stderr)


@dataclass
class Setup:
    """The LMDB store, its export, and a PostgreSQL store (a fresh schema) holding its import."""

    lmdb: Store
    export: Path
    dsn: str
    schema: str

    @property
    def url(self) -> str:
        return f'{self.dsn}#{self.schema}'

    @property
    def password(self) -> str:
        return urlsplit(self.dsn).password or ''

    def pg(self, *args: str | Path, env: dict[str, str] | None = None) -> Done:
        """`eventlog ARGS --store URL`."""
        return eventlog(*args, '--store', self.url, env=env, secret=self.password)

    def lm(self, *args: str | Path) -> Done:
        """`eventlog ARGS --store LMDB-PATH`, in this process (the reference the PostgreSQL runs are compared with)."""
        result = invoke(*args, store=self.lmdb.path, env={'COLUMNS': '200'})
        return Done(result.exit_code, result.stdout, result.stderr)

    def shown(self) -> str:
        """The store as the command line names it: the URL without its password, with its schema."""
        parts = urlsplit(self.dsn)
        return f'postgresql://{parts.username}@{parts.hostname}:{parts.port}{parts.path}#{self.schema}'


def schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute('SELECT 1 FROM pg_namespace WHERE nspname = %s', (schema,)).fetchone() is not None


@pytest.fixture(scope='module')
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Path]:
    """An LMDB store recorded by real agent runs, and its export."""
    root = tmp_path_factory.mktemp('pgcli')
    store = build_store(root / 'store.lmdb')
    export = root / 'store.jsonl'
    done = eventlog('export', '-o', export, '--store', store.path)
    assert done.code == 0, done.err
    return store, export


@pytest.fixture
def empty(recorded: tuple[Store, Path], pg_dsn: str, pg_schemas: list[str]) -> Setup:
    """A schema name of this test's own, with nothing in it yet."""
    schema = fresh_schema()
    pg_schemas.append(schema)
    return Setup(recorded[0], recorded[1], pg_dsn, schema)


@pytest.fixture
def setup(empty: Setup) -> Setup:
    """The recorded store imported into this test's schema."""
    done = empty.pg('import', empty.export)
    assert done.code == 0, done.err
    return empty


def test_import_creates_the_schema_and_the_export_round_trips_byte_for_byte(empty: Setup, tmp_path: Path) -> None:
    assert not schema_exists(empty.dsn, empty.schema)
    done = empty.pg('import', empty.export)
    assert done.code == 0, done.err
    count = sum(1 for _ in empty.export.open('rb')) - 2  # the header and the closing line
    assert done.err == f'imported {count} entries from {empty.export} into {empty.shown()}\n'
    assert schema_exists(empty.dsn, empty.schema)
    from_pg = tmp_path / 'from-pg.jsonl'
    assert empty.pg('export', '-o', from_pg).code == 0
    assert from_pg.read_bytes() == empty.export.read_bytes()
    back = tmp_path / 'back.lmdb'
    assert eventlog('import', from_pg, '--store', back).code == 0
    again = eventlog('export', '--store', back)
    assert again.code == 0
    assert again.out.encode() == empty.export.read_bytes()


def test_an_empty_import_leaves_no_schema_behind(empty: Setup, tmp_path: Path) -> None:
    from eventlog import LmdbEventLog

    LmdbEventLog(tmp_path / 'empty.lmdb').close()
    nothing = tmp_path / 'nothing.jsonl'
    assert eventlog('export', '-o', nothing, '--store', tmp_path / 'empty.lmdb').code == 0
    done = empty.pg('import', nothing)
    assert done.code == 0, done.err
    assert done.err == f'imported 0 entries (the export holds none); no store was created at {empty.shown()}\n'
    assert not schema_exists(empty.dsn, empty.schema)
    broken = tmp_path / 'broken.jsonl'
    broken.write_bytes(empty.export.read_bytes()[:-40])  # cut short: refused, all or nothing
    refused = empty.pg('import', broken)
    assert refused.code == 1 and refused.err.count('\n') == 1
    assert not schema_exists(empty.dsn, empty.schema)


VIEWS = [
    ['conversations', '--json', '--include-archived'],
    ['runs', '--json'],
    ['runs', 'alpha', '--json'],
    ['info', 'alpha', '--json'],
    ['show', 'alpha', '--json'],
    ['context', 'alpha', '--json'],
    ['replay', '--last', '--json'],
    ['tail', '-n', '7', '--json'],
    ['conversations'],
    ['show', 'alpha'],
    ['context', 'alpha'],
    ['info', 'alpha'],
    ['tail', '-n', '5'],
    ['verify'],
]
"""Views whose output on the PostgreSQL store must equal the LMDB store's, byte for byte."""


def test_the_views_of_a_postgres_store_match_the_lmdb_store_it_was_imported_from(setup: Setup) -> None:
    run = setup.lmdb.alpha_runs[1]
    for args in [*VIEWS, ['replay', run], ['show', '--run', run, '--full', '--json'], ['replay', run[:-4], '--json']]:
        pg, lm = setup.pg(*args), setup.lm(*args)
        assert pg.code == 0, (args, pg.err)
        assert lm.code == 0, (args, lm.err)
        assert pg.out == lm.out, args
        assert pg.out.strip(), args
    assert 'value-of-gizmo' in setup.pg('replay', run).out
    done = setup.pg('stats', '--json')
    assert done.code == 0, done.err
    data = json.loads(done.out)
    lmdb = json.loads(setup.lm('stats', '--json').out)
    assert data['store'] == setup.shown()
    assert data['disk_bytes'] > 0
    for key in ('conversations', 'runs', 'runs_by_status', 'entries', 'messages', 'compactions', 'last_seq'):
        assert data[key] == lmdb[key], key
    assert data['index']['analyzer'] is None
    verify = setup.pg('verify')
    assert verify.code == 0 and verify.out.startswith('ok: ')
    assert verify.err.startswith('eventlog: note: the walk of the LMDB file') and verify.err.count('\n') == 1
    table = setup.pg('stats')
    assert table.out.splitlines()[0].split() == ['store', setup.shown()]
    # The same store from the environment, and named before the command.
    by_env = eventlog('conversations', '--json', env={'EVENTLOG_STORE': setup.url}, secret=setup.password)
    before = eventlog('--store', setup.url, 'conversations', '--json', secret=setup.password)
    assert by_env.code == before.code == 0
    assert by_env.out == before.out == setup.lm('conversations', '--json').out
    assert {c['conversation_id'] for c in json.loads(by_env.out)} == {'alpha', 'beta'}


def test_search_builds_and_uses_the_persistent_index_in_postgres(setup: Setup) -> None:
    first = setup.pg('search', 'quokka bucket', '--conversation', 'alpha', '--json')
    assert first.code == 0, first.err
    assert json.loads(setup.pg('stats', '--json').out)['index']['analyzer'] is None  # a search writes no index
    assert setup.pg('reindex').code == 0
    done = setup.pg('search', 'quokka bucket', '--conversation', 'alpha', '--json')
    assert done.code == 0, done.err
    found = json.loads(done.out)
    expected = json.loads(setup.lm('search', 'quokka bucket', '--conversation', 'alpha', '--json').out)
    assert found['note'] is None  # the persistent index, not a corpus rebuilt in memory
    assert found['index_analyzer'] == 'default'
    assert [(h['seq'], h['score'], h['text']) for h in found['results']] == [
        (h['seq'], h['score'], h['text']) for h in expected['results']
    ]
    assert DETAIL in found['results'][0]['text']
    assert 'wombat' not in done.out  # beta's detail stays out of alpha's search
    index = json.loads(setup.pg('stats', '--json').out)['index']
    assert index['analyzer'] == 'default' and index['current'] and index['documents'] > 0
    everywhere = setup.pg('search', 'wombat', '--all')
    assert everywhere.code == 0 and 'wombat-4242' in everywhere.out
    assert setup.pg('verify').code == 0  # the index checks out against the log
    rebuilt = setup.pg('reindex', '--analyzer', 'english', '--json')
    assert rebuilt.code == 0, rebuilt.err
    assert json.loads(rebuilt.out)['analyzer'] == 'english'


def test_managing_conversations(setup: Setup) -> None:
    titled = setup.pg('title', 'beta', 'Beta notes')
    assert titled.code == 0 and 'Beta notes' in titled.out
    forked = setup.pg('fork', 'alpha', '--id', 'alpha-copy', '--json')
    assert forked.code == 0, forked.err
    assert json.loads(forked.out)['conversation_id'] == 'alpha-copy'
    assert setup.pg('archive', 'beta').code == 0
    listed = [c['conversation_id'] for c in json.loads(setup.pg('conversations', '--json').out)]
    assert sorted(listed) == ['alpha', 'alpha-copy']
    assert setup.pg('unarchive', 'beta').code == 0
    explained = setup.pg('delete', 'beta')
    assert explained.code == 1 and 'Nothing was changed' in explained.err
    assert setup.pg('info', 'beta').code == 0
    deleted = setup.pg('delete', 'beta', '--yes')
    assert deleted.code == 0, deleted.err
    assert deleted.out.startswith('deleted beta: ')
    assert deleted.err.startswith('vacuumed (VACUUM FULL) ') and deleted.err.count('\n') == 1
    assert setup.password not in deleted.err
    stats = json.loads(setup.pg('stats', '--json').out)
    assert stats['scrub_pending'] is None
    compact = setup.pg('compact')
    assert compact.code == 0, compact.err
    assert compact.out.startswith('vacuumed (VACUUM FULL) ') and setup.password not in compact.out
    gone = setup.pg('info', 'beta')
    assert gone.code == 1 and 'was deleted' in gone.err
    verify = setup.pg('verify')
    assert verify.code == 0 and '1 deletion tombstone' in verify.out
    assert 'wombat' not in setup.pg('export').out


def test_without_a_fragment_the_schema_is_eventlog(pg_dsn: str) -> None:
    database = fresh_schema()  # a database of its own, so that no real `eventlog` schema is touched
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE {database}')
    try:
        url = urlsplit(pg_dsn)._replace(path=f'/{database}').geturl()
        assert eventlog('stats', '--store', url, secret=urlsplit(pg_dsn).password).code == 1
        from eventlog.postgres_log import PostgresEventLog

        PostgresEventLog(url).close()  # the library's default schema
        done = eventlog('stats', '--json', '--store', url, secret=urlsplit(pg_dsn).password)
        assert done.code == 0, done.err
        assert json.loads(done.out)['store'].endswith(f'/{database}#eventlog')
        assert schema_exists(url, 'eventlog')
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS {database} WITH (FORCE)')


WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from eventlog import message_entry, run_finished_entry, run_started_entry
    from eventlog.postgres_log import PostgresEventLog

    async def main(dsn, schema, go):
        log = PostgresEventLog(dsn, schema=schema, create=False)
        while not Path(go).exists():
            time.sleep(0.02)
        await log.append(run_started_entry(conversation_id='live', run_id='writer-run'))
        for i in range(3):
            message = ModelRequest(parts=[UserPromptPart(f'appended by the writer process, number {i}')])
            await log.append(message_entry(message, conversation_id='live', run_id='writer-run'))
            await asyncio.sleep(0.05)
        await log.append(run_finished_entry(conversation_id='live', run_id='writer-run', status='completed'))
        log.close()

    asyncio.run(main(*sys.argv[1:]))
    """
)


def test_tail_follow_prints_what_another_process_appends(setup: Setup, tmp_path: Path) -> None:
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    go = tmp_path / 'go'
    last = json.loads(setup.pg('stats', '--json').out)['last_seq']
    writer = subprocess.Popen(
        [sys.executable, '-c', WRITER, setup.dsn, setup.schema, str(go)], env=env, stderr=subprocess.PIPE, text=True
    )
    follower = subprocess.Popen(
        [
            *COMMAND, 'tail', '--follow', '-n', '2', '--max-entries', '7', '--interval', '0.05',
            '--timeout', '60', '--store', setup.url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        backlog = [follower.stdout.readline(), follower.stdout.readline()]
        assert [line.split()[0] for line in backlog] == [f'#{last - 1}', f'#{last}']
        go.touch()
        _, writer_errors = writer.communicate(timeout=60)
        assert writer.returncode == 0, writer_errors
        rest, errors = follower.communicate(timeout=60)
    finally:
        for process in (follower, writer):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert follower.returncode == 0, errors
    lines = rest.splitlines()
    assert [line.split()[0] for line in lines] == [f'#{last + n}' for n in range(1, 6)]
    assert [line.split()[4] for line in lines] == ['run_started', 'message', 'message', 'message', 'run_finished']
    for i in range(3):
        assert f'appended by the writer process, number {i}' in lines[i + 1]
    idle = setup.pg('tail', '-n', '1', '--follow', '--timeout', '0.3', '--interval', '0.05', '--json')
    assert idle.code == 0
    assert json.loads(idle.out)['seq'] == last + 5


READERS = [
    ['conversations'],
    ['runs'],
    ['info', 'c'],
    ['show', 'c'],
    ['replay', 'r'],
    ['context', 'c'],
    ['search', 'x', '--all'],
    ['fork', 'c'],
    ['title', 'c', 't'],
    ['archive', 'c'],
    ['delete', 'c', '--yes'],
    ['compact'],
    ['export'],
    ['verify'],
    ['stats'],
    ['reindex'],
    ['tail'],
    ['tail', '--follow'],
]


def test_no_schema_is_one_line_and_creates_nothing(empty: Setup) -> None:
    for args in READERS:
        done = empty.pg(*args)
        assert done.code == 1, args
        assert done.out == ''
        assert done.err == (
            f'eventlog: no store at {empty.shown()} (no schema {empty.schema!r} with an event log in that database)\n'
        )
    assert not schema_exists(empty.dsn, empty.schema)


def test_connection_errors_are_one_line_without_the_password(empty: Setup) -> None:
    parts = urlsplit(empty.dsn)
    wrong = empty.dsn.replace(f':{empty.password}@', ':not-the-password@')
    refused = eventlog('conversations', '--store', f'{wrong}#{empty.schema}', secret='not-the-password')
    assert refused.code == 1
    assert refused.err.startswith('eventlog: cannot connect to PostgreSQL at ') and refused.err.count('\n') == 1
    assert 'password authentication failed' in refused.err
    nobody = empty.dsn.replace(f'{parts.hostname}:{parts.port}', f'{parts.hostname}:1')
    unreachable = eventlog('stats', '--store', nobody, secret=empty.password)
    assert unreachable.code == 1
    assert unreachable.err.startswith('eventlog: cannot connect to PostgreSQL at ') and unreachable.err.count('\n') == 1
    assert not schema_exists(empty.dsn, empty.schema)


def test_unusable_urls_and_lmdb_only_commands_say_so_in_one_line(empty: Setup) -> None:
    setup = empty
    for store, expected in [
        (f'{setup.dsn}#Not-A-Schema', 'is not a schema name'),
        (f'{setup.dsn}?schema=x', '?schema= is not a PostgreSQL connection parameter'),
        (f'{setup.dsn}#', 'empty #schema'),
    ]:
        done = eventlog('conversations', '--store', store, secret=setup.password)
        assert done.code == 1 and done.err.count('\n') == 1
        assert expected in done.err
    demo = eventlog('demo', '--store', setup.url, secret=setup.password)
    assert demo.code == 1 and 'LMDB' in demo.err and demo.err.count('\n') == 1
    assert not schema_exists(setup.dsn, setup.schema)
