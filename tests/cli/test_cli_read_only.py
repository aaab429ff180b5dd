"""The command line on a write-protected store (issue 27, "read-only evidence").

Every command runs through the `eventlog` console script in a subprocess, on a store recorded
by real agent runs (`clitools.build_store`): behind a real read-only bind mount, as the user
`nobody` on root's 0644 files, with `EVENTLOG_READ_ONLY=1` on a writable store, and as a
PostgreSQL role granted only USAGE and SELECT. Reading commands and `serve` succeed; writing
commands refuse in one line with a non-zero status, and the store is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from clitools import DETAIL, Store, build_store
from psycopg.conninfo import make_conninfo

from eventlog.postgres_log import PostgresEventLog
from tests.log.test_log_read_only import nobody_env, nobody_python, record
from tests.web.webtools import serving

EVENTLOG = Path(sys.executable).with_name('eventlog')
"""The console script of the environment running the tests."""


def eventlog(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`eventlog ARGS` in a subprocess (wide output, no store from the environment)."""
    full = {**os.environ, 'COLUMNS': '200', 'EVENTLOG_STORE': '', **(env or {})}
    return subprocess.run(
        [str(EVENTLOG), *map(str, args)], capture_output=True, text=True, env=full, timeout=300, check=False
    )


def tree_digest(path: Path) -> dict[str, str]:
    """Every file of a directory and the hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


@dataclass
class Mounted:
    store: Store
    """The store as recorded (writable), with its runs."""
    view: Path
    """The same store through a read-only bind mount."""


@pytest.fixture(scope='module')
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mounted]:
    """A store recorded by real runs, its search index built, seen through a read-only bind mount."""
    if os.geteuid() != 0:
        pytest.skip('a bind mount needs root: run the suite as root to test read-only media')
    base = tmp_path_factory.mktemp('readonly')
    source, view = base / 'src', base / 'ro'
    source.mkdir()
    view.mkdir()
    store = build_store(source / 'store.lmdb')
    assert eventlog('search', '--all', 'quokka', '--store', store.path).returncode == 0  # builds the index
    keys = base / 'keys'
    keys.mkdir()
    assert eventlog('keygen', '-o', keys / 'audit.key').returncode == 0
    signed = eventlog('checkpoint', '-k', keys / 'audit.key', '-o', keys / 'cp.json', '--store', store.path)
    assert signed.returncode == 0, signed.stderr
    subprocess.run(['mount', '--bind', str(source), str(view)], check=True)
    try:
        subprocess.run(['mount', '-o', 'remount,ro,bind', str(view)], check=True)
        yield Mounted(store, view / 'store.lmdb')
    finally:
        subprocess.run(['umount', str(view)], check=True)


def reads(store: Path | str, run_id: str, out: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """Every reading command on `store`, each asserted to succeed; their outputs by command."""
    commands: dict[str, list[str | Path]] = {
        'conversations': ['conversations'],
        'runs': ['runs'],
        'show': ['show', 'alpha'],
        'replay': ['replay', run_id],
        'verify': ['verify'],
        'search': ['search', '--all', 'quokka'],
        'stats': ['stats'],
        'export': ['export', '-o', out],
    }
    outputs: dict[str, str] = {}
    for name, args in commands.items():
        done = eventlog(*args, '--store', store, env=env)
        assert done.returncode == 0, (name, done.stderr)
        assert 'Traceback' not in done.stderr, (name, done.stderr)
        outputs[name] = done.stdout
    assert 'Alpha planning' in outputs['conversations']
    assert run_id[:8] in outputs['runs']
    assert DETAIL in outputs['show'] and DETAIL in outputs['search']
    assert outputs['verify'].startswith('ok:')
    assert out.stat().st_size > 0
    return outputs


def refuses(store: Path | str, export: Path, reason: str, env: dict[str, str] | None = None) -> None:
    """Every writing command on `store` fails in one line naming `reason`, with status 1."""
    for args in (
        ['erase', 'alpha', '--yes'],
        ['delete', 'alpha', '--yes'],
        ['compact'],
        ['import', export],
        ['title', 'alpha', 'renamed'],
        ['reindex'],
    ):
        done = eventlog(*args, '--store', store, env=env)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1, (args, done.stderr)
        assert 'is open read-only' in lines[0] and reason in lines[0] and 'nothing was written' in lines[0], lines


def test_reading_commands_work_on_a_read_only_mount_and_writing_ones_refuse(mounted: Mounted, tmp_path: Path) -> None:
    original = mounted.store.path
    expected = reads(original, mounted.store.alpha_runs[0], tmp_path / 'original.jsonl')
    before = tree_digest(original)  # after the writable reads, which take LMDB reader slots in lock.mdb
    got = reads(mounted.view, mounted.store.alpha_runs[0], tmp_path / 'copy.jsonl')
    for name in ('conversations', 'runs', 'show', 'replay', 'verify'):
        assert got[name] == expected[name].replace(str(original), str(mounted.view)), name
    assert (tmp_path / 'copy.jsonl').read_bytes() == (tmp_path / 'original.jsonl').read_bytes()
    refuses(mounted.view, tmp_path / 'copy.jsonl', 'its file system is mounted read-only')
    keys = mounted.view.parent.parent / 'keys'
    proved = eventlog(
        'verify', '--checkpoint', keys / 'cp.json', '--public-key', keys / 'audit.key.pub', '--store', mounted.view
    )
    assert proved.returncode == 0 and proved.stdout.startswith('ok'), proved.stdout + proved.stderr
    again = eventlog('checkpoint', '-k', keys / 'audit.key', '-o', tmp_path / 'cp2.json', '--store', mounted.view)
    assert again.returncode == 1 and 'is open read-only' in again.stderr and again.stderr.count('\n') == 1
    assert not (tmp_path / 'cp2.json').exists()
    assert tree_digest(original) == before


def test_serve_answers_pages_of_a_read_only_mount(mounted: Mounted) -> None:
    with serving(mounted.view) as server:
        home = httpx.get(server.base + '/', timeout=60)
        assert home.status_code == 200 and 'Alpha planning' in home.text
        found = httpx.get(server.base + '/search', params={'q': 'quokka'}, timeout=60)
        assert found.status_code == 200 and '7731' in found.text  # a hit's text, not the query echoed
        stats = httpx.get(server.base + '/stats', timeout=60)
        assert stats.status_code == 200


def test_eventlog_read_only_opens_a_writable_store_read_only(tmp_path: Path) -> None:
    store = build_store(tmp_path / 'store.lmdb')
    before = tree_digest(store.path)
    asked = {'EVENTLOG_READ_ONLY': '1'}
    reads(store.path, store.alpha_runs[0], tmp_path / 'out.jsonl', env=asked)
    refuses(store.path, tmp_path / 'out.jsonl', 'opened read-only as asked', env=asked)
    after = tree_digest(store.path)
    assert after['data.mdb'] == before['data.mdb']
    bad = eventlog('conversations', '--store', store.path, env={'EVENTLOG_READ_ONLY': 'maybe'})
    assert bad.returncode == 1 and bad.stderr.count('\n') == 1 and 'EVENTLOG_READ_ONLY must be 1' in bad.stderr
    assert eventlog('title', 'alpha', 'renamed', '--store', store.path).returncode == 0  # without it: writable


def test_a_user_who_may_not_write_the_store_runs_the_reading_commands() -> None:
    command = nobody_python()
    base = Path(tempfile.mkdtemp(prefix='eventlog-cli-ro-'))
    try:
        base.chmod(0o755)
        store = build_store(base / 'store.lmdb')
        store.path.chmod(0o755)
        for file in store.path.iterdir():
            file.chmod(0o644)
        before = tree_digest(store.path)
        env = nobody_env()
        for args, wanted in (
            (['conversations'], 'Alpha planning'),
            (['verify'], 'ok:'),
            (['search', '--all', 'quokka'], DETAIL),
            (['show', 'alpha'], DETAIL),
        ):
            done = subprocess.run(
                [*command, '-m', 'eventlog_cli', *args, '--store', str(store.path)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            assert done.returncode == 0 and wanted in done.stdout, (args, done.stderr)
        done = subprocess.run(
            [*command, '-m', 'eventlog_cli', 'delete', 'alpha', '--yes', '--store', str(store.path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 1 and done.stderr.count('\n') == 1
        assert f'this process may not write the directory {store.path}' in done.stderr
        assert tree_digest(store.path) == before
    finally:
        shutil.rmtree(base)


def test_a_select_only_postgres_role_runs_the_reading_commands(pg_dsn: str, tmp_path: Path) -> None:
    import asyncio

    schema = 'ro_cli_' + os.urandom(4).hex()
    role = f'{schema}_auditor'
    owner = PostgresEventLog(pg_dsn, schema=schema)
    try:
        asyncio.run(record(owner))
        runs = asyncio.run(owner.list_runs())
    finally:
        owner.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'auditor-pw'")  # type: ignore[arg-type]
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')  # type: ignore[arg-type]
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')  # type: ignore[arg-type]
    try:
        params = psycopg.conninfo.conninfo_to_dict(make_conninfo(pg_dsn, user=role, password='auditor-pw'))
        url = f'postgresql://{role}:auditor-pw@{params["host"]}:{params["port"]}/{params.get("dbname", "postgres")}'
        store = f'{url}#{schema}'
        for args, wanted in (
            (['conversations'], 'Vault notes'),
            (['verify'], 'ok:'),
            (['search', '--all', 'marmot'], 'marmot-5150'),
            (['replay', runs[0].run_id], 'marmot-5150'),
            (['export', '-o', str(tmp_path / 'out.jsonl')], ''),
        ):
            done = eventlog(*args, '--store', store)
            assert done.returncode == 0 and wanted in done.stdout, (args, done.stderr)
        done = eventlog('delete', 'alpha', '--yes', '--store', store)
        assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
        assert 'is open read-only' in done.stderr and 'has no INSERT privilege' in done.stderr
        assert 'auditor-pw' not in done.stderr
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
            conn.execute(f'DROP OWNED BY {role}')  # type: ignore[arg-type]
            conn.execute(f'DROP ROLE {role}')  # type: ignore[arg-type]


def test_the_read_only_option_before_or_after_the_command(tmp_path: Path) -> None:
    """`--read-only` (before the command or after it) opens the store read-only: the writing
    command refuses in one line, a reading one works, the store is unchanged, and the setting
    does not outlive the command (the next one writes)."""
    store = build_store(tmp_path / 'store.lmdb')
    before = tree_digest(store.path)
    for argv in (['--read-only', 'title', 'alpha', 'renamed'], ['title', 'alpha', 'renamed', '--read-only']):
        done = eventlog(*argv, '--store', store.path)
        assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
        assert 'is open read-only' in done.stderr and 'opened read-only as asked' in done.stderr, done.stderr
    listed = eventlog('conversations', '--read-only', '--store', store.path)
    assert listed.returncode == 0 and 'alpha' in listed.stdout
    assert tree_digest(store.path)['data.mdb'] == before['data.mdb']
    from clitools import invoke

    assert invoke('--read-only', 'title', 'alpha', 'renamed', store=store.path).exit_code == 1
    assert 'EVENTLOG_READ_ONLY' not in os.environ
    assert invoke('title', 'alpha', 'renamed', store=store.path).exit_code == 0
