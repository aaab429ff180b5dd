"""Every page of the viewer answers over deeply nested JSON (issue 42): the conversation, its
context, each run, each entry and the search, with what nests deeper than
`eventlog.nesting.DEPTH_LIMIT` shown as `…`; the payload link serves the stored bytes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deepjson import AFTER, HUGE_TEXT, NEEDLE, OTHER, DeepStore, build_deep_store, unreadable_payload
from pydantic_ai.messages import ModelRequest, UserPromptPart
from starlette.testclient import TestClient

from eventlog import LmdbEventLog, NewEntry, message_entry, run_started_entry
from eventlog.nesting import CLIPPED
from eventlog_cli.web.app import create_app


@dataclass
class Viewer:
    client: TestClient
    log: LmdbEventLog
    store: DeepStore


@pytest.fixture(scope='module')
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    path = tmp_path_factory.mktemp('deep-web') / 'store.lmdb'
    store = asyncio.run(build_deep_store(path))
    log = LmdbEventLog(path)
    try:
        yield Viewer(TestClient(create_app(log, store='deep'), raise_server_exceptions=False), log, store)
    finally:
        log.close()


def _page(viewer: Viewer, path: str) -> str:
    response = viewer.client.get(path)
    assert response.status_code == 200, (path, response.status_code, response.text[-500:])
    return response.text


def test_the_conversation_pages_show_the_deep_calls_clipped(viewer: Viewer) -> None:
    page = _page(viewer, '/c/deep')
    assert CLIPPED in page and AFTER in page
    assert AFTER in _page(viewer, '/context/deep')
    page = _page(viewer, '/c/huge')
    assert CLIPPED in page and 'next page' in page  # the deep return fills the first page's budget
    assert HUGE_TEXT in _page(viewer, f'/c/huge?after={viewer.store.huge_call_seq + 1}')
    assert CLIPPED in _page(viewer, '/context/huge')
    assert HUGE_TEXT in _page(viewer, '/context/huge?ctx=3')
    assert 'huge' in _page(viewer, '/') and 'huge' in _page(viewer, '/runs')


def test_every_run_and_every_entry_page_answers(viewer: Viewer) -> None:
    runs = asyncio.run(viewer.log.list_runs())
    assert len(runs) == 5
    for run in runs:
        _page(viewer, f'/r/{run.run_id}')
    assert CLIPPED in _page(viewer, f'/r/{viewer.store.deep_runs[1]}')
    assert CLIPPED in _page(viewer, f'/r/{viewer.store.huge_run}')
    last = asyncio.run(viewer.log.last_seq())
    for seq in range(1, last + 1):
        _page(viewer, f'/e/{seq}')
    assert CLIPPED in _page(viewer, f'/e/{viewer.store.deep_call_seq}')
    assert CLIPPED in _page(viewer, f'/e/{viewer.store.huge_call_seq}')


def test_the_payload_link_serves_the_stored_bytes(viewer: Viewer) -> None:
    for seq in (viewer.store.deep_call_seq, viewer.store.huge_call_seq):
        entry = asyncio.run(viewer.log.get_entry(seq))
        assert entry is not None
        response = viewer.client.get(f'/e/{seq}/payload')
        assert response.status_code == 200 and response.content == bytes(entry.payload)


def _unmarked(viewer: Viewer, path: str) -> str:
    return re.sub('</?mark>', '', _page(viewer, path))


def test_search_pages_answer_and_show_the_deep_calls_clipped(viewer: Viewer) -> None:
    assert OTHER in _unmarked(viewer, '/search?q=ferry')
    assert AFTER in _unmarked(viewer, '/search?q=marmot&c=deep')
    page = _page(viewer, f'/search?q={NEEDLE}')
    assert f'#{viewer.store.deep_call_seq}' in page and CLIPPED in page
    assert HUGE_TEXT in _unmarked(viewer, '/search?q=giraffe&c=huge')
    assert 'could not be read' not in _page(viewer, '/stats')


def test_the_search_page_names_a_message_pydantic_ai_cannot_read(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 'store.lmdb')
    try:

        async def fill() -> int:
            await log.append(run_started_entry(conversation_id='old', run_id='run-old'))
            prompt = ModelRequest(parts=[UserPromptPart('the otter swims')])
            await log.append(message_entry(prompt, conversation_id='old', run_id='run-old'))
            payload = unreadable_payload()  # as an earlier version could store it
            return await log.append(
                NewEntry(conversation_id='old', run_id='run-old', kind='message', payload=payload, prevalidated=True)
            )

        bad = asyncio.run(fill())
        client = TestClient(create_app(log, store='old'), raise_server_exceptions=False)
        page = client.get('/search?q=otter')
        assert page.status_code == 200 and 'otter</mark> swims' in page.text
        assert f'could not be read to be indexed, so no search finds them: #{bad}' in page.text
        assert client.get(f'/e/{bad}').status_code == 200
    finally:
        log.close()
