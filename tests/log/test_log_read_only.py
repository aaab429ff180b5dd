"""Reading a write-protected copy of a store through the API (issue 27, "read-only evidence").

Real stores recorded by real pydantic-ai agent runs; a real read-only bind mount (the tests run
as root), a real unprivileged user (`nobody`) under a Python it can run, and a real PostgreSQL
role granted only USAGE on the schema and SELECT on its tables. Every read works, every write
raises `ReadOnlyStoreError` in one line, and nothing of the store changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability.persistence import EventLogPersistence
from capability.search import backend_for
from eventlog import LmdbEventLog, NewEntry, ReadOnlyStoreError, RetentionPolicy, StoreLocationError
from eventlog.log import EventLogBase
from eventlog.postgres_log import PostgresEventLog
from eventlog.projection import ProjectionSpec
from search.analyzers import resolve_analyzer
from search.engine import SearchEngine, SearchOptions
from search.persistent_index import PersistentIndex

DETAIL = 'the vault combination is marmot-5150'
"""Said in conversation `alpha` and searched for afterwards."""


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[TextPart(f'noted: {prompt}')])


async def record(log: EventLogBase, *, index: bool = True) -> None:
    """Two conversations recorded by real agent runs (three runs), a title, and (with `index`) the
    store's search index brought up to date."""
    agent = Agent(FunctionModel(_reply), name='clerk', capabilities=[EventLogPersistence[None](log)])
    first = await agent.run(f'remember {DETAIL}', conversation_id='alpha')
    await agent.run('and the weather is fine', message_history=first.all_messages())
    await agent.run('an unrelated chat about lunch', conversation_id='beta')
    await log.set_title('alpha', 'Vault notes')
    if index:
        PersistentIndex.for_log(log).catch_up()


async def snapshot(log: EventLogBase, tmp: Path) -> dict[str, object]:
    """Everything an auditor reads, as comparable data."""
    convs = await log.list_conversations(include_archived=True)
    runs = await log.list_runs()
    out = tmp / f'export-{os.urandom(4).hex()}.jsonl'
    exported = await log.export(out)
    return {
        'conversations': [(c.conversation_id, c.title, c.entry_count) for c in convs],
        'runs': [(r.run_id, r.conversation_id, r.status) for r in runs],
        'messages': [await log.run_messages_json(r.run_id) for r in runs],
        'transcripts': [await log.transcript_json(c.conversation_id) for c in convs],
        'entries': [(e.seq, e.kind, e.payload) for e in await log.entries()],
        'exported': exported,
        'export': out.read_bytes(),
        'verify': (await log.verify()).ok,
        'scrub_pending': await log.scrub_pending(),
    }


async def search_hits(log: EventLogBase, query: str) -> list[tuple[str, int | None]]:
    """The hits of a search of every conversation, as (run id, entry number)."""
    analyzer = resolve_analyzer('default')
    engine = SearchEngine(backend_for(log, analyzer), SearchOptions(max_matches=10, analyzer=analyzer))
    result = await engine.find(query, scope='all', conversation_id=None)
    return [(hit.run_id, hit.seq) for hit in result.hits]


def tree_digest(path: Path) -> dict[str, str]:
    """Every file of a directory and the hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


def writes(log: EventLogBase, tmp: Path) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every kind of write the API offers, each as a call."""
    export = tmp / 'for-import.jsonl'

    async def index_catch_up() -> object:
        return PersistentIndex.open_existing(log).catch_up()

    async def projection_write() -> object:
        return log.write_projection(
            ProjectionSpec('mine', ('docs',)), lambda records, _: records.put('docs', b'k', b'v')
        )

    async def projection_clear() -> object:
        assert isinstance(log, LmdbEventLog | PostgresEventLog)
        log.clear_projection('bm25')
        return None

    async def import_() -> object:
        export.write_bytes(b'')
        return await log.import_(export)

    calls: dict[str, Callable[[], Awaitable[object]]] = {
        'append': lambda: log.append(NewEntry(conversation_id='alpha', kind='archived')),
        'append_many': lambda: log.append_many([NewEntry(conversation_id='gamma', kind='archived')]),
        'set_title': lambda: log.set_title('alpha', 'changed'),
        'archive': lambda: log.archive('beta'),
        'fork': lambda: log.fork('alpha'),
        'delete_conversation': lambda: log.delete_conversation('beta'),
        'erase': lambda: log.erase('alpha'),
        'scrub': log.scrub,
        'retain': lambda: log.retain(RetentionPolicy(max_age='1s')),
        'take_run_lease': lambda: log.take_run_lease('r', 'me', 30),
        'import': import_,
        'index catch_up': index_catch_up,
        'write_projection': projection_write,
        'clear_projection': projection_clear,
    }
    if isinstance(log, LmdbEventLog):
        calls['compact'] = log.compact

        async def open_table() -> object:
            return log.open_table(b'mine.docs')

        calls['open_table'] = open_table
    return calls


async def assert_every_write_refused(log: EventLogBase, tmp: Path, reason: str) -> None:
    for name, call in writes(log, tmp).items():
        with pytest.raises(ReadOnlyStoreError) as caught:
            await call()
        message = str(caught.value)
        assert '\n' not in message, name
        assert 'read-only' in message and reason in message and 'nothing was written' in message, (name, message)


# --- a read-only bind mount ------------------------------------------------------------------


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A store recorded by real runs (`src/store`) and the same directory through a read-only bind
    mount (`ro/store`), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip('a bind mount needs root: run the suite as root to test read-only media')
    source, view = tmp_path / 'src', tmp_path / 'ro'
    source.mkdir()
    view.mkdir()
    log = LmdbEventLog(source / 'store')
    try:
        asyncio.run(record(log))
    finally:
        log.close()
    subprocess.run(['mount', '--bind', str(source), str(view)], check=True)
    try:
        subprocess.run(['mount', '-o', 'remount,ro,bind', str(view)], check=True)
        yield source / 'store', view / 'store'
    finally:
        subprocess.run(['umount', str(view)], check=True)


async def test_a_store_on_a_read_only_mount_opens_read_only_and_reads_like_the_original(
    mounted: tuple[Path, Path], tmp_path: Path
) -> None:
    original, view = mounted
    with pytest.raises(StoreLocationError, match=r'read_only=True'):
        LmdbEventLog(view)  # the default opens for writing, and says how to read it instead
    before = tree_digest(original)
    writable = LmdbEventLog(original)
    expected = await snapshot(writable, tmp_path)
    expected_hits = await search_hits(writable, 'marmot')
    writable.close()
    before = tree_digest(original)

    log = LmdbEventLog(view, read_only=None)
    try:
        assert log.read_only and log.read_only_reason == 'its file system is mounted read-only'
        assert log.lockless  # LMDB cannot open its lock file on read-only media
        assert await snapshot(log, tmp_path) == expected
        assert expected['verify'] is True and expected['exported']
        hits = await search_hits(log, 'marmot')
        assert hits == expected_hits and hits  # the index is current: read as it is
        assert PersistentIndex.open_existing(log).verify() == []
        later = datetime.now(UTC) + timedelta(days=1)
        assert (await log.retain(RetentionPolicy(max_age='1s'), dry_run=True, now=later)).erased  # reads only
        await assert_every_write_refused(log, tmp_path, 'its file system is mounted read-only')
    finally:
        log.close()
    assert tree_digest(original) == before


async def _expected_from_a_writable_copy(store: Path, tmp_path: Path) -> list[tuple[str, int | None]]:
    """What a search of `store` finds, asked of a writable copy of it (which brings its index up to date)."""
    copy = tmp_path / f'copy-{store.name}'
    shutil.copytree(store, copy)
    log = LmdbEventLog(copy)
    try:
        return await search_hits(log, 'marmot')
    finally:
        log.close()


async def test_a_stale_or_missing_index_is_answered_from_the_log_without_writing(tmp_path: Path) -> None:
    never = tmp_path / 'never'  # recorded without ever building the index
    log = LmdbEventLog(never)
    await record(log, index=False)
    log.close()
    lagging = tmp_path / 'lagging'  # its index stops before the last run
    log = LmdbEventLog(lagging)
    await record(log)
    await Agent(FunctionModel(_reply), capabilities=[EventLogPersistence[None](log)]).run(
        'marmot sightings were reported', conversation_id='gamma'
    )
    log.close()
    counts: list[int] = []
    for store in (never, lagging):
        expected = await _expected_from_a_writable_copy(store, tmp_path)
        counts.append(len(expected))
        for name in ('lock.mdb', 'eventlog.lock'):
            (store / name).unlink()  # a copy of the data file alone
        before = tree_digest(store)
        reader = LmdbEventLog(store, read_only=True)
        try:
            assert reader.read_only_reason == 'opened read-only as asked'
            index = PersistentIndex.open_existing(reader)
            assert index.state().position < index.state().log_position
            assert await search_hits(reader, 'marmot') == expected  # answered from the log itself
            assert index.verify() == []
        finally:
            reader.close()
        assert tree_digest(store) == before  # no lock file created, nothing written
    assert counts[0] >= 1 and counts[1] == counts[0] + 1  # the lagging index misses gamma's message: found


async def test_a_read_only_open_finishes_no_pending_scrub_and_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / 'store'
    log = LmdbEventLog(store)
    await record(log)
    done = await log.erase('beta', scrub=False)
    assert done.seqs and await log.scrub_pending() is not None
    log.close()
    before = tree_digest(store)
    reader = LmdbEventLog(store, read_only=True)
    try:
        assert await reader.scrub_pending() is not None  # a writable open would have scrubbed it
        assert not reader.lockless  # this process may write lock.mdb: its readers keep their slots
        await assert_every_write_refused(reader, tmp_path, 'opened read-only as asked')
        with pytest.raises(ReadOnlyStoreError, match='as asked'):
            LmdbEventLog(store, read_only=True, retention=RetentionPolicy(max_age='1s'))
    finally:
        reader.close()
    after = tree_digest(store)
    assert after['data.mdb'] == before['data.mdb'] and after.keys() == before.keys()
    with pytest.raises(StoreLocationError, match='creates nothing'):
        LmdbEventLog(tmp_path / 'absent', read_only=True)
    assert not (tmp_path / 'absent').exists()


async def test_a_read_only_handle_beside_a_writable_one_in_one_process(tmp_path: Path) -> None:
    store = tmp_path / 'store'
    writer = LmdbEventLog(store)
    await record(writer)
    reader = LmdbEventLog(store, read_only=True)
    try:
        seq = await writer.append(NewEntry(conversation_id='alpha', kind='archived'))
        assert (await reader.get_entry(seq)) is not None  # one environment: the reader sees the commit
        with pytest.raises(ReadOnlyStoreError):
            await reader.archive('beta')
    finally:
        reader.close()
        writer.close()
    reader = LmdbEventLog(store, read_only=True)
    try:
        with pytest.raises(ReadOnlyStoreError, match='close those handles'):
            LmdbEventLog(store)
    finally:
        reader.close()


_NOBODY_SCRIPT = """
import asyncio, json, sys
from eventlog import LmdbEventLog, NewEntry, ReadOnlyStoreError
from search.persistent_index import PersistentIndex
from search.engine import SearchEngine, SearchOptions
from search.analyzers import resolve_analyzer
from capability.search import backend_for

async def main():
    log = LmdbEventLog(sys.argv[1], read_only=None)
    analyzer = resolve_analyzer('default')
    found = await SearchEngine(backend_for(log, analyzer), SearchOptions(analyzer=analyzer)).find('marmot', scope='all', conversation_id=None)
    try:
        await log.append(NewEntry(conversation_id='alpha', kind='archived'))
        refused = None
    except ReadOnlyStoreError as exc:
        refused = str(exc)
    print(json.dumps({
        'reason': log.read_only_reason, 'lockless': log.lockless,
        'conversations': [c.conversation_id for c in await log.list_conversations()],
        'verify': (await log.verify()).ok, 'index_findings': len(PersistentIndex.open_existing(log).verify()),
        'hits': [hit.seq for hit in found.hits], 'refused': refused,
    }))

asyncio.run(main())
"""


def nobody_python() -> list[str]:
    """How to run Python as `nobody`: the system interpreter of the venv's version, with the venv's
    packages and this checkout on its path (the venv's own interpreter lives under /root, which
    `nobody` may not enter). Skips, saying why, where that cannot be."""
    if os.geteuid() != 0:
        pytest.skip('switching to the user nobody needs root')
    system = Path(f'/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}')
    if not system.exists() or shutil.which('setpriv') is None:
        pytest.skip(f'no {system} or setpriv on this machine: cannot run Python as nobody')
    return ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', str(system)]


def nobody_env() -> dict[str, str]:
    """The environment `nobody` runs in: this checkout and the venv's packages on the path."""
    site = next(p for p in sys.path if p.endswith('site-packages') and Path(p).is_dir())
    here = str(Path(__file__).resolve().parents[2])
    return {'PATH': '/usr/bin:/bin', 'HOME': '/nonexistent', 'PYTHONPATH': f'{here}:{site}', 'COLUMNS': '200'}


@pytest.fixture(params=['root-dir', 'own-dir'])
def root_owned_store(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A store recorded by real runs with root's 0644 files, in a 0755 directory owned by root
    (`root-dir`) or by `nobody` (`own-dir`: only the files are write-protected), where `nobody`
    can reach it (pytest's own temporary directories are 0700)."""
    base = Path(tempfile.mkdtemp(prefix='eventlog-ro-'))
    try:
        base.chmod(0o755)
        store = base / 'store'
        log = LmdbEventLog(store)
        try:
            asyncio.run(record(log))
        finally:
            log.close()
        store.chmod(0o755)
        for file in store.iterdir():
            file.chmod(0o644)
        if request.param == 'own-dir' and os.geteuid() == 0:
            os.chown(store, 65534, 65534)
        yield store
    finally:
        shutil.rmtree(base)


def test_a_user_who_may_not_write_the_store_reads_it(root_owned_store: Path) -> None:
    command = nobody_python()
    before = tree_digest(root_owned_store)
    done = subprocess.run(
        [*command, '-c', _NOBODY_SCRIPT, str(root_owned_store)],
        capture_output=True,
        text=True,
        env=nobody_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if root_owned_store.stat().st_uid == 0:
        assert seen['reason'] == f'this process may not write the directory {root_owned_store}'
    else:  # the directory is nobody's: only the files stand in the way
        assert seen['reason'] == f'this process may not write {root_owned_store / "data.mdb"}'
    assert seen['lockless'] is True  # lock.mdb is root's: LMDB reads without it
    assert seen['conversations'] == ['alpha', 'beta'] and seen['verify'] is True and seen['index_findings'] == 0
    assert seen['hits']
    assert seen['refused'] is not None and 'may not write' in seen['refused']
    assert tree_digest(root_owned_store) == before


# --- PostgreSQL: a role with USAGE and SELECT only -----------------------------------------------


@pytest.fixture
def pg_reader(pg_dsn: str, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A schema recorded by real runs (its index built) and a role granted only USAGE on the schema
    and SELECT on its tables: (owner DSN, reader DSN, schema); dropped afterwards."""
    schema = 'ro_' + os.urandom(5).hex()
    role = f'{schema}_auditor'
    owner = PostgresEventLog(pg_dsn, schema=schema)
    try:
        asyncio.run(record(owner))
    finally:
        owner.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'auditor-pw'")  # type: ignore[arg-type]
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')  # type: ignore[arg-type]
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')  # type: ignore[arg-type]
    try:
        yield pg_dsn, make_conninfo(pg_dsn, user=role, password='auditor-pw'), schema
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
            conn.execute(f'DROP OWNED BY {role}')  # type: ignore[arg-type]
            conn.execute(f'DROP ROLE {role}')  # type: ignore[arg-type]


def _row_counts(dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            str(row[0])
            for row in conn.execute('SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1', (schema,))
        ]
        return {
            name: int(conn.execute(f'SELECT count(*) FROM "{schema}"."{name}"').fetchone()[0])  # type: ignore[arg-type,index]
            for name in names
        }


async def test_a_select_only_role_reads_a_postgres_store(pg_reader: tuple[str, str, str], tmp_path: Path) -> None:
    owner_dsn, reader_dsn, schema = pg_reader
    owner = PostgresEventLog(owner_dsn, schema=schema)
    try:
        expected = await snapshot(owner, tmp_path)
        expected_hits = await search_hits(owner, 'marmot')
    finally:
        owner.close()
    counts = _row_counts(owner_dsn, schema)
    log = PostgresEventLog(reader_dsn, schema=schema, read_only=None, create=False)
    try:
        reason = log.read_only_reason
        assert reason is not None and 'has no INSERT privilege' in reason and '_auditor' in reason
        assert await snapshot(log, tmp_path) == expected
        assert await search_hits(log, 'marmot') == expected_hits and expected_hits
        assert PersistentIndex.open_existing(log).verify() == []
        await assert_every_write_refused(log, tmp_path, 'has no INSERT privilege')
    finally:
        log.close()
    explicit = PostgresEventLog(reader_dsn, schema=schema, read_only=True)
    try:
        assert explicit.read_only_reason == 'opened read-only as asked'
        assert [c.conversation_id for c in await explicit.list_conversations()] == ['alpha', 'beta']
        with pytest.raises(ReadOnlyStoreError, match='as asked'):
            await explicit.set_title('alpha', 'x')
    finally:
        explicit.close()
    assert _row_counts(owner_dsn, schema) == counts
