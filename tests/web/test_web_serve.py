"""`eventlog serve` as a user runs it: the URL it prints, a token made off loopback, and one-line
errors for a missing store, a port in use and an empty token."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from webtools import Server, WebStore, serving

from eventlog_cli.web import is_loopback, viewer_url


def _serve_fails(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'serve', *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == '' and len(done.stderr.splitlines()) == 1, done.stderr
    return done


def test_serve_prints_its_loopback_url_and_answers_there(server: Server, web_store: WebStore) -> None:
    assert server.url.startswith('http://127.0.0.1:') and 'token' not in server.url
    response = httpx.get(server.url, timeout=60)
    assert response.status_code == 200 and 'Orbit migration planning (demo)' in response.text
    # Without a token it answers loopback host names only (DNS rebinding).
    port = server.base.rsplit(':', 1)[1]
    assert httpx.get(server.url, headers={'host': f'attacker.example:{port}'}, timeout=60).status_code == 400
    assert httpx.get(server.url, headers={'host': f'localhost:{port}'}, timeout=60).status_code == 200


def test_off_loopback_a_token_is_made_and_required(web_store: WebStore) -> None:
    with serving(web_store.path, '--host', '0.0.0.0') as running:
        assert '/?token=' in running.url
        token = running.url.split('token=', 1)[1]
        assert len(token) >= 24
        local = running.base.replace('0.0.0.0', '127.0.0.1')
        assert httpx.get(local + '/', timeout=60).status_code == 401
        assert httpx.get(local + '/', headers={'authorization': f'Bearer {token}'}, timeout=60).status_code == 200


def test_a_missing_store_is_one_line(tmp_path: Path) -> None:
    done = _serve_fails('--store', str(tmp_path / 'nothing.lmdb'), '--port', '0')
    assert done.stderr.startswith('eventlog: no store at ')


def test_a_port_in_use_is_one_line(web_store: WebStore) -> None:
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _serve_fails('--store', str(web_store.path), '--port', str(port))
    assert done.stderr.startswith(f'eventlog: cannot listen on 127.0.0.1:{port}: ')


def test_an_empty_token_is_refused(web_store: WebStore) -> None:
    done = _serve_fails('--store', str(web_store.path), '--port', '0', '--token', ' ')
    assert done.stderr == 'eventlog: --token must not be empty\n'


def test_loopback_addresses_and_urls() -> None:
    assert is_loopback('127.0.0.1') and is_loopback('::1') and is_loopback('[::1]') and is_loopback('LOCALHOST')
    assert not is_loopback('0.0.0.0') and not is_loopback('192.168.1.4') and not is_loopback('example.org')
    assert viewer_url('::1', 80, None) == 'http://[::1]:80/'
    assert viewer_url('127.0.0.1', 8765, 'abc') == 'http://127.0.0.1:8765/?token=abc'


def test_a_search_right_after_the_first_page_is_answered(web_store: WebStore) -> None:
    """The list starts `verify` in a thread; a search at once imports the search engine in another
    (both once had to import pydantic-ai at the same moment, which could fail half initialized)."""
    with serving(web_store.path) as running:
        assert httpx.get(running.base + '/', timeout=60).status_code == 200
        response = httpx.get(running.base + '/search', params={'q': 'deploy path'}, timeout=120)
        assert response.status_code == 200 and '<mark>' in response.text
