"""Requests that once cost the viewer without bound, or broke its answers: huge messages (pages
bounded in bytes, clipped texts linking to the payload), a stored media type with CR/LF/NUL, a
redirect to another host, and a guessable token."""

from __future__ import annotations

import asyncio
import http.client
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic_ai.messages import BinaryContent, ModelRequest, ModelResponse, TextPart, UserPromptPart
from starlette.testclient import TestClient
from webtools import TOKEN, serving

from eventlog import LmdbEventLog
from eventlog.entries import message_entry, run_finished_entry, run_started_entry
from eventlog_cli.web import create_app

HUGE = 3 << 20
"""A message of 3 MB: over the size a page decodes."""
BIG = 300_000
"""Messages of 300 kB: decoded, their text clipped."""
PAGE_LIMIT = 400_000
"""No page of these stores may be larger (bytes of HTML)."""
EVIL_TYPE = 'image/png\r\nX-Injected: 1\x00'


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('bounds') / 'store.lmdb'

    async def build() -> None:
        log = LmdbEventLog(path)
        try:
            entries = [run_started_entry(conversation_id='big', run_id='r1')]
            entries.append(
                message_entry(ModelRequest(parts=[UserPromptPart('H' * HUGE)]), conversation_id='big', run_id='r1')
            )
            for i in range(12):
                text = f'start {i} ' + 'b' * BIG + f' end {i}'
                entries.append(message_entry(ModelResponse(parts=[TextPart(text)]), conversation_id='big', run_id='r1'))
            entries.append(run_finished_entry(conversation_id='big', run_id='r1', status='completed'))
            await log.append_many(entries)
            evil = ModelRequest(parts=[UserPromptPart(['a file', BinaryContent(b'\x89PNG', media_type=EVIL_TYPE)])])
            await log.append_many(
                [
                    run_started_entry(conversation_id='files', run_id='r2'),
                    message_entry(evil, conversation_id='files', run_id='r2'),
                    run_finished_entry(conversation_id='files', run_id='r2', status='completed'),
                ]
            )
        finally:
            log.close()

    asyncio.run(build())
    return path


@pytest.fixture(scope='module')
def client(store: Path) -> Iterator[TestClient]:
    log = LmdbEventLog(store)
    try:
        yield TestClient(create_app(log, store=str(store)))
    finally:
        log.close()


def test_pages_of_huge_messages_are_bounded_in_bytes_and_link_the_payload(client: TestClient) -> None:
    seen: list[str] = []
    url: str | None = '/c/big'
    while url is not None:  # every page of the transcript
        page = client.get(url)
        assert page.status_code == 200 and len(page.content) < PAGE_LIMIT, (url, len(page.content))
        seen.append(page.text)
        found = [part for part in page.text.split('"') if part.startswith('/c/big?after=')]
        url = found[-1].replace('&amp;', '&') if 'rel="next"' in page.text and found else None
        assert len(seen) < 20
    html = '\n'.join(seen)
    assert 'too large to show on a page' in html and 'href="/e/2/payload"' in html
    assert all(f'start {i} ' in html for i in range(12))  # every message is on some page
    assert 'more characters not shown' in html and 'end 0' not in html
    for url in ['/r/r1', '/e/2', '/e/3', '/context/big', '/search?q=start']:
        page = client.get(url)
        assert page.status_code == 200 and len(page.content) < PAGE_LIMIT, (url, len(page.content))
    assert 'too large to show on a page' in client.get('/e/2').text
    assert len(client.get('/e/2/payload').content) > HUGE  # the full payload is one link away


def test_a_stored_media_type_with_cr_lf_nul_is_served_as_octet_stream(store: Path) -> None:
    with serving(store) as server:
        answer = httpx.get(f'{server.base}/e/17/file/0', timeout=60)
        assert answer.status_code == 200
        assert answer.content == b'\x89PNG'
        assert answer.headers['content-type'] == 'application/octet-stream'
        assert 'x-injected' not in answer.headers
        page = httpx.get(f'{server.base}/e/17', timeout=60)
        assert page.status_code == 200 and 'image/png\\x0d\\x0a' in page.text  # shown escaped


def test_the_token_redirect_stays_on_this_server(store: Path) -> None:
    with serving(store, '--token', TOKEN) as server:
        host, port = server.base.removeprefix('http://').rsplit(':', 1)
        for path, expected in [
            ('//evil.example/', '/evil.example/'),
            ('///evil.example/x', '/evil.example/x'),
            ('/\\evil.example/', '/evil.example/'),
            ('/c/big', '/c/big'),
        ]:
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                connection.request('GET', f'{path}?page=2&token={TOKEN}')  # sent as is, not parsed as a URL
                answer = connection.getresponse()
                answer.read()
            finally:
                connection.close()
            assert answer.status == 303, path
            assert answer.getheader('location') == f'{expected}?page=2', (path, answer.getheader('location'))


def test_a_short_token_is_warned_about(store: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, '-m', 'eventlog_cli', 'serve', '--store', str(store), '--port', '0', '--token', 'abc'],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert ' at http://' in process.stdout.readline()  # the warning comes before the URL
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert err.startswith('eventlog: warning: a --token of 3 characters can be guessed'), err
