"""No password reaches the output: every command, and every page of `serve`, on a PostgreSQL store
whose password is a marker found nowhere else.

The role is made for this module with a password of its own (the tests' server password is
shared by every test, so it could not tell one leak from another); every command runs as the
console script does, in a subprocess, successful runs and refused ones alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from clitools import Store, build_store
from pgserver import fresh_schema

MARKER = f'Mk{uuid.uuid4().hex[:12]}Pw'
"""The role's password: it must never be printed or served."""


@pytest.fixture(scope='module')
def marked_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A DSN of the tests' server as a role whose password is `MARKER`."""
    from backends import postgres_dsn

    admin = postgres_dsn()
    role = f'hyg_{uuid.uuid4().hex[:10]}'
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{MARKER}'")
    parts = urlsplit(admin)
    netloc = f'{role}:{MARKER}@{parts.hostname}:{parts.port}'
    yield urlunsplit((parts.scheme, netloc, parts.path, parts.query, ''))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY {role} CASCADE')
        conn.execute(f'DROP ROLE {role}')


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, 'COLUMNS': '200', 'NO_COLOR': '1'}
    env.pop('EVENTLOG_STORE', None)
    return subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def _clean(done: subprocess.CompletedProcess[str], args: tuple[object, ...]) -> None:
    assert MARKER not in done.stdout, (args, done.stdout[-2000:])
    assert MARKER not in done.stderr, (args, done.stderr[-2000:])
    assert 'Traceback' not in done.stderr, (args, done.stderr[-3000:])


def test_no_command_and_no_page_prints_the_password(marked_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / 'web'))
    from webtools import serving  # pyright: ignore[reportMissingImports]

    root = tmp_path_factory.mktemp('secrets')
    lmdb: Store = build_store(root / 'store.lmdb')
    export = root / 'store.jsonl'
    assert _run('export', '-o', export, '--store', lmdb.path).returncode == 0
    schema = fresh_schema()
    url = f'{marked_dsn}#{schema}'
    key = root / 'signing.pem'
    assert _run('keygen', '-o', key).returncode == 0
    codes: dict[str, int] = {}

    def pg(*args: str | Path, store: str = url) -> subprocess.CompletedProcess[str]:
        done = _run(*args, '--store', store, cwd=root)
        _clean(done, args)
        codes[' '.join(map(str, args[:1]))] = done.returncode
        return done

    assert pg('import', export).returncode == 0
    run = lmdb.alpha_runs[0]
    for args in [
        ('conversations', '--include-archived'),
        ('conversations', '--json'),
        ('runs',),
        ('runs', 'alpha', '--json'),
        ('info', 'alpha'),
        ('show', 'alpha'),
        ('replay', run),
        ('replay', '--last', '--json'),
        ('context', 'alpha'),
        ('search', 'quokka'),
        ('search', 'quokka', '--json'),
        ('tail', '-n', '3'),
        ('verify',),
        ('verify', '--json'),
        ('stats',),
        ('stats', '--json'),
        ('reindex',),
        ('title', 'alpha', 'Renamed'),
        ('archive', 'beta'),
        ('unarchive', 'beta'),
        ('fork', 'alpha'),
        ('checkpoint', '-k', key, '-o', root / 'cp1.json'),
        ('export', '-o', root / 'again.jsonl'),
        ('export', '--signed', '-o', root / 'signed.jsonl'),
        ('erase', 'beta', '--yes'),
        ('retain', '--max-age', '3650d'),
        ('retain', '--max-age', '1s', '--dry-run'),
        ('delete', 'beta', '--yes'),
        ('compact',),
        ('demo',),
        ('show', 'no-such-conversation'),
        ('import', export),
    ]:
        pg(*args)
    assert codes['erase'] == 0 and codes['checkpoint'] == 0 and codes['verify'] == 0
    done = _run('verify-export', root / 'signed.jsonl', '-p', f'{key}.pub')
    _clean(done, ('verify-export',))
    # Refused stores: a schema without a log, a reserved schema, a wrong port, a broken URL.
    parts = urlsplit(marked_dsn)
    schema_less = fresh_schema()  # no log there (an import would create one)
    for store in [
        f'{marked_dsn}#{schema_less}',
        f'{marked_dsn}#pg_secret',
        marked_dsn.replace(f':{parts.port}', ':1') + '#eventlog',
        f'postgresql://{parts.username}:{MARKER}@[::1:{parts.port}/db',
        f'postgresql://{parts.username}:{MARKER}@{parts.hostname}:notaport/db',
        f'host={parts.hostname} port={parts.port} user={parts.username} password={MARKER} sslmode=nonsense',
    ]:
        importing = [('import', export)] if store.startswith('postgresql://') and schema_less not in store else []
        for args in [('conversations',), ('stats', '--json'), ('serve', '--port', '0'), *importing]:
            refused = pg(*args, store=store)
            assert refused.returncode != 0, (args, store)
            assert refused.stderr.count('\n') == 1, (args, refused.stderr)
    with serving(url) as server:
        pages = ['/', '/?archived=1', '/c/alpha', '/context/alpha', f'/r/{run}', '/e/1', '/e/1/payload', '/stats']
        pages += ['/search?q=quokka', '/c/nothing', '/e/999999', '/search?q=%22']
        for page in pages:
            answer = httpx.get(server.base + page, timeout=120)
            assert MARKER not in answer.text, page
            assert answer.status_code in (200, 404, 400), page
