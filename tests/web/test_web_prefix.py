"""Ids by prefix in the viewer's paths, by the command line's rule (`eventlog_cli._ids`): a unique
prefix redirects to the full id's page (its query kept), an ambiguous one answers a page linking
every id it starts, and one that starts none (or is shorter than four characters) is 404. The
abbreviated run ids `eventlog runs` prints open their runs."""

from __future__ import annotations

import asyncio
import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic_ai.messages import ModelRequest, UserPromptPart
from starlette.testclient import TestClient
from webtools import Server, WebStore, serving

from eventlog import LmdbEventLog
from eventlog.entries import message_entry, run_finished_entry, run_started_entry
from eventlog_cli.web import create_app

CONVERSATIONS = {
    'orbit-one': ['abcd-1111'],
    'orbit-one-more': ['abcd-2222'],
    'orbit-two': ['abce-3333'],
    'solo-conversation': ['solo-run-a'],
    'team/x y': ['team/run 1'],
}
"""Conversation ids and their runs' ids."""


async def _build(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        for cid, runs in CONVERSATIONS.items():
            for run_id in runs:
                await log.append_many(
                    [
                        run_started_entry(conversation_id=cid, run_id=run_id),
                        message_entry(
                            ModelRequest(parts=[UserPromptPart(f'q {run_id}')]), conversation_id=cid, run_id=run_id
                        ),
                        run_finished_entry(conversation_id=cid, run_id=run_id, status='completed'),
                    ]
                )
    finally:
        log.close()


@pytest.fixture(scope='module')
def prefix_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('prefix') / 'store.lmdb'
    asyncio.run(_build(path))
    return path


@pytest.fixture(scope='module')
def client(prefix_store: Path) -> Iterator[TestClient]:
    log = LmdbEventLog(prefix_store)
    try:
        yield TestClient(create_app(log, store='s'), follow_redirects=False)
    finally:
        log.close()


_TITLE = re.compile(r'<title>(.*?) · eventlog</title>', re.S)


def _title(text: str) -> str:
    found = _TITLE.search(text)
    assert found is not None, text[:300]
    return html.unescape(found.group(1))


@pytest.mark.parametrize(
    ('path', 'target'),
    [
        ('/c/solo', '/c/solo-conversation'),
        ('/c/solo-con', '/c/solo-conversation'),
        ('/c/orbit-t', '/c/orbit-two'),
        ('/context/solo', '/context/solo-conversation'),
        ('/r/abce', '/r/abce-3333'),
        ('/r/abcd-1', '/r/abcd-1111'),
        ('/r/solo-run', '/r/solo-run-a'),
        ('/c/team%2Fx', '/c/team%2Fx%20y'),
        ('/r/team%2Frun', '/r/team%2Frun%201'),
    ],
)
def test_a_unique_prefix_redirects_to_the_full_id(client: TestClient, path: str, target: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 303, (path, answer.text[-300:])
    assert answer.headers['location'] == target
    opened = client.get(target)
    assert opened.status_code == 200
    assert _title(opened.text).split(' ', 1)[1].removeprefix('of ') in {
        *CONVERSATIONS,
        *(r for runs in CONVERSATIONS.values() for r in runs),
    }


def test_the_query_is_kept_and_an_exact_id_wins_over_longer_ones(client: TestClient) -> None:
    answer = client.get('/r/abce', params={'after': '2'})
    assert answer.headers['location'] == '/r/abce-3333?after=2'
    answer = client.get('/c/solo', params={'at': '3'})
    assert answer.headers['location'] == '/c/solo-conversation?at=3'
    exact = client.get('/c/orbit-one')  # also a prefix of orbit-one-more: the exact id wins
    assert exact.status_code == 200 and _title(exact.text) == 'Conversation orbit-one'


@pytest.mark.parametrize(
    ('path', 'kind', 'ids'),
    [
        ('/c/orbit', 'conversation', ['orbit-one', 'orbit-one-more', 'orbit-two']),
        ('/c/orbit-o', 'conversation', ['orbit-one', 'orbit-one-more']),
        ('/context/orbit', 'conversation', ['orbit-one', 'orbit-one-more', 'orbit-two']),
        ('/r/abcd', 'run', ['abcd-1111', 'abcd-2222']),
        ('/r/abc', 'run', []),  # shorter than 4 characters: never taken as a prefix
    ],
)
def test_an_ambiguous_prefix_lists_its_ids_as_links(client: TestClient, path: str, kind: str, ids: list[str]) -> None:
    answer = client.get(path)
    if not ids:
        assert answer.status_code == 404
        return
    assert answer.status_code == 300, answer.text[-300:]
    assert f'Ambiguous {kind} id prefix' in answer.text
    links = [html.unescape(h) for h in re.findall(r'<li><a href="([^"]+)"><code>', answer.text)]
    base = path.rsplit('/', 1)[0] + '/'
    assert links == [base + i for i in ids]
    for link in links:
        assert client.get(link).status_code == 200, link


@pytest.mark.parametrize('path', ['/c/zzzz', '/c/nothing-here', '/r/zzzz-0000', '/context/nope', '/c/orb'])
def test_a_prefix_of_nothing_is_404(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert 'in this store' in answer.text


def test_prefixes_redirect_through_uvicorn(prefix_store: Path) -> None:
    server: Server
    with serving(prefix_store) as server, httpx.Client(base_url=server.base, timeout=60) as http:
        answer = http.get('/c/team%2Fx')
        assert answer.status_code == 303 and answer.headers['location'] == '/c/team%2Fx%20y'
        followed = http.get('/c/team%2Fx', follow_redirects=True)
        assert followed.status_code == 200 and _title(followed.text) == 'Conversation team/x y'
        assert http.get('/r/abcd').status_code == 300


def test_the_ids_the_command_line_prints_open_their_pages(web_store: WebStore) -> None:
    """`eventlog runs` abbreviates the demo's run ids (UUIDs); each one printed opens its run."""
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'runs', '--store', str(web_store.path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, 'EVENTLOG_STORE': '', 'COLUMNS': '200'},
    )
    assert done.returncode == 0, done.stderr
    printed = re.findall(r'^([0-9a-f]{8}-[0-9a-f-]+)\s', done.stdout, re.M)
    assert len(printed) > 10 and all(len(p) < 36 for p in printed), done.stdout[:500]
    log = LmdbEventLog(web_store.path)
    try:
        client = TestClient(create_app(log, store='s'), follow_redirects=False)
        for short in printed[:5] + printed[-5:]:
            answer = client.get(f'/r/{short}')
            assert answer.status_code == 303, short
            target = answer.headers['location']
            assert target.startswith(f'/r/{short}') and len(target) == len('/r/') + 36
            assert _title(client.get(target).text) == f'Run {target[3:]}'
        answer = client.get('/c/orbit')  # the demo's conversation, `orbit-migration`
        assert answer.status_code == 303 and answer.headers['location'] == f'/c/{web_store.demo_conversation}'
    finally:
        log.close()
