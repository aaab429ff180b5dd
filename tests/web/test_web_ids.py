"""Ids holding URL syntax (`%2F`, `%20`, `/`, `?`, `#`, spaces, dot segments, unicode): every link the
viewer makes to a conversation, its context or a run opens that very page, through TestClient and
through a real `eventlog serve` subprocess (uvicorn) read with httpx. Pairs such as `a%20b` and `a b`
are both stored, so decoding a path twice opens the other one's page."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from starlette.testclient import TestClient
from webtools import Server, serving

from eventlog import LmdbEventLog
from eventlog.entries import message_entry, run_finished_entry, run_started_entry
from eventlog_cli._text import clean
from eventlog_cli.web import create_app

IDS = [
    'a%20b',
    'a b',
    'x%2Fy',
    'x/y',
    '100%',
    '%41',
    'A',
    'what?now#frag',
    'up/../down',
    'down',
    '/lead/',
    'café/ü 漢字',
    'plus+and&amp;=',
]
"""Conversation ids; each conversation's one run is `run:` + its id."""


async def _build(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        for cid in IDS:
            run_id = f'run:{cid}'
            await log.append_many(
                [
                    run_started_entry(conversation_id=cid, run_id=run_id, agent_name='ids'),
                    message_entry(
                        ModelRequest(parts=[UserPromptPart(f'question of {cid}')]), conversation_id=cid, run_id=run_id
                    ),
                    message_entry(
                        ModelResponse(parts=[TextPart(f'answer of {cid}')]), conversation_id=cid, run_id=run_id
                    ),
                    run_finished_entry(conversation_id=cid, run_id=run_id, status='completed'),
                ]
            )
    finally:
        log.close()


@pytest.fixture(scope='module')
def ids_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('ids') / 'store.lmdb'
    asyncio.run(_build(path))
    return path


@pytest.fixture(scope='module')
def ids_client(ids_store: Path) -> Iterator[TestClient]:
    log = LmdbEventLog(ids_store)
    try:
        yield TestClient(create_app(log, store=str(ids_store)))
    finally:
        log.close()


@pytest.fixture(scope='module')
def ids_server(ids_store: Path) -> Iterator[Server]:
    with serving(ids_store) as running:
        yield running


_TITLE = re.compile(r'<title>(.*?) · eventlog</title>', re.S)
_HREF = re.compile(r'(?:href|src)="(/(?:c|r|context)/[^"]*)"')


def _title(text: str) -> str:
    found = _TITLE.search(text)
    assert found is not None, text[:300]
    return html.unescape(found.group(1))


def _links(text: str) -> set[str]:
    """The viewer's links to conversations, context views and runs, without their fragment."""
    return {html.unescape(h).split('#', 1)[0] for h in _HREF.findall(text)}


def _walk(get: Callable[[str], httpx.Response]) -> dict[str, str]:
    """Every conversation link of the list, then every link of each transcript and run page; each
    opened and its title checked against the id its link was made for. Returns href -> title."""
    listing = get('/')
    assert listing.status_code == 200
    rows = re.findall(r'<a class="conversation" href="([^"]+)"><code>(.*?)</code>', listing.text)
    assert len(rows) == len(IDS), rows
    seen: dict[str, str] = {}
    for href, shown in rows:
        href = html.unescape(href)
        cid = next(c for c in IDS if html.escape(clean(c), quote=False) == shown)
        page = get(href)
        assert page.status_code == 200, (cid, href, page.status_code)
        assert _title(page.text) == f'Conversation {cid}', (cid, href)
        assert f'question of {html.escape(cid, quote=False)}' in page.text
        seen[href] = cid
        for link in _links(page.text):
            opened = get(link)
            assert opened.status_code == 200, (cid, link, opened.status_code)
            title = _title(opened.text)
            kind = link.split('/', 2)[1]
            want = {'c': f'Conversation {cid}', 'context': f'Context of {cid}', 'r': f'Run run:{cid}'}[kind]
            assert title == want, (cid, link, title)
            if kind == 'r':
                back = [u for u in _links(opened.text) if u.startswith('/c/')]
                assert back and all(_title(get(u).text) == f'Conversation {cid}' for u in back), (cid, back)
            seen[link] = cid
    return seen


def test_every_id_link_opens_its_own_page_in_the_test_client(ids_client: TestClient) -> None:
    seen = _walk(ids_client.get)
    assert set(seen.values()) == set(IDS)
    assert sum(1 for link in seen if link.startswith('/r/')) >= len(IDS)


def test_every_id_link_opens_its_own_page_through_uvicorn(ids_server: Server) -> None:
    with httpx.Client(base_url=ids_server.base, timeout=60) as client:
        seen = _walk(client.get)
    assert set(seen.values()) == set(IDS)
    assert sum(1 for link in seen if link.startswith('/context/')) >= len(IDS)


def test_a_search_hit_links_to_its_own_conversation_and_run(ids_client: TestClient) -> None:
    found = ids_client.get('/search', params={'q': 'question'})
    assert found.status_code == 200
    links = sorted(_links(found.text))
    assert len([u for u in links if u.startswith('/c/')]) == len(IDS), links
    for link in links:
        page = ids_client.get(link)
        assert page.status_code == 200, link
        title = _title(page.text)
        assert title.removeprefix('Conversation ').removeprefix('Run run:') in IDS, (link, title)


def test_the_search_scoped_to_an_odd_id_links_back_to_it(ids_client: TestClient) -> None:
    for cid in ('a%20b', 'x%2Fy', 'what?now#frag'):
        page = ids_client.get('/search', params={'q': 'question', 'c': cid})
        assert page.status_code == 200, cid
        back = [u for u in _links(page.text) if u.startswith('/c/')]
        assert back and all(_title(ids_client.get(u).text) == f'Conversation {cid}' for u in back), (cid, back)
