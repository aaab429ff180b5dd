"""The viewer over a PostgreSQL store (`--store postgresql://...#schema`), on the tests' own server:
the web store exported from LMDB and imported there, served by a real `eventlog serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from pgserver import fresh_schema
from webtools import SCRIPT_TEXT, WebStore, serving


def _eventlog(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    assert done.returncode == 0, done.stderr


def test_the_viewer_serves_a_postgresql_store(
    web_store: WebStore, pg_dsn: str, pg_schemas: list[str], tmp_path: Path
) -> None:
    export = tmp_path / 'store.jsonl'
    _eventlog('export', '-o', str(export), '--store', str(web_store.path))
    schema = fresh_schema()
    pg_schemas.append(schema)
    _eventlog('import', str(export), '--store', f'{pg_dsn}#{schema}')
    password = urlsplit(pg_dsn).password or ''
    with serving(f'{pg_dsn}#{schema}') as running:
        pages = {
            '/': 'Orbit migration planning (demo)',
            '/c/hostile': SCRIPT_TEXT.replace('<', '&lt;').replace('>', '&gt;').replace('"', '&#34;'),
            f'/e/{web_store.seqs["hostile_call"]}': 'lookup',
            f'/r/{web_store.long_run}': 'run_started',
            '/search?q=deploy+path': '<mark>',
            '/stats': 'every hash chain is intact',
        }
        for path, expected in pages.items():
            response = httpx.get(running.base + path, timeout=300)
            assert response.status_code == 200, path
            assert expected in response.text, path
            assert not password or password not in response.text
        assert f'#{schema}' in httpx.get(running.base + '/stats', timeout=300).text
    assert not password or password not in running.url
