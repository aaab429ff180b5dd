"""The runs page (`/runs`): every run of the store across conversations, filtered by status (the
log's statuses and the command line's `interrupted`), agent, conversation and start time, ordered
by start or duration, paged; every bad query value is a 400 page naming it, never a 500."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from starlette.testclient import TestClient

from eventlog import LmdbEventLog
from eventlog.entries import NewEntry, message_entry, run_finished_entry, run_started_entry
from eventlog_cli.web import create_app
from eventlog_cli.web.reads import RUNS_PAGE

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)

Finish = Literal['completed', 'failed', 'cancelled'] | None

RUNS: list[tuple[str, str, str, datetime, float, Finish]] = [
    # run id, conversation, agent, start, seconds to finish, how it finished (None: never)
    ('alpha-run-1', 'alpha', 'planner', T0, 5.0, 'completed'),
    ('alpha-run-2', 'alpha', 'planner', T0 + timedelta(days=1), 1.0, 'failed'),
    ('alpha-run-3', 'alpha', 'coder', T0 + timedelta(days=2), 0.0, None),
    ('beta-run-1', 'beta', 'coder', T0 + timedelta(days=1, hours=2), 30.0, 'completed'),
    ('beta-run-2', 'beta', 'coder', T0 + timedelta(days=3), 2.0, 'cancelled'),
]
"""The hand-made runs; `BULK` more completed runs of conversation `bulk` follow, for paging."""

BULK = RUNS_PAGE + 10
"""Runs of the `bulk` conversation, one a minute from 2026-02-01, the i-th lasting i ms."""


def _at(entry: NewEntry, moment: datetime) -> NewEntry:
    return replace(entry, timestamp=moment)


async def _add(log: LmdbEventLog, run_id: str, cid: str, agent: str, start: datetime, secs: float, end: Finish) -> None:
    entries = [
        _at(run_started_entry(conversation_id=cid, run_id=run_id, agent_name=agent), start),
        _at(
            message_entry(ModelRequest(parts=[UserPromptPart(f'q {run_id}')]), conversation_id=cid, run_id=run_id),
            start,
        ),
    ]
    if end is not None:
        finish = start + timedelta(seconds=secs)
        entries.append(
            _at(
                message_entry(ModelResponse(parts=[TextPart(f'a {run_id}')]), conversation_id=cid, run_id=run_id),
                finish,
            )
        )
        entries.append(
            _at(
                run_finished_entry(
                    conversation_id=cid, run_id=run_id, status=end, error='boom' if end == 'failed' else None
                ),
                finish,
            )
        )
    await log.append_many(entries)


async def _build(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        for run in RUNS:
            await _add(log, *run)
        bulk0 = datetime(2026, 2, 1, tzinfo=UTC)
        for i in range(BULK):
            await _add(log, f'bulk-{i:03d}', 'bulk', 'bulk-agent', bulk0 + timedelta(minutes=i), i / 1000, 'completed')
    finally:
        log.close()


@pytest.fixture(scope='module')
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    path = tmp_path_factory.mktemp('runs') / 'store.lmdb'
    asyncio.run(_build(path))
    log = LmdbEventLog(path)
    try:
        yield TestClient(create_app(log, store=str(path)), follow_redirects=False)
    finally:
        log.close()


_ROW_RUN = re.compile(r'<a class="run" href="/r/([^"]+)"')


def _runs(client: TestClient, **params: str) -> list[str]:
    """The run ids a page of `/runs?params` lists, in its order."""
    answer = client.get('/runs', params=params)
    assert answer.status_code == 200, (params, answer.text[-600:])
    return [html.unescape(r) for r in _ROW_RUN.findall(answer.text)]


def _summary(client: TestClient, **params: str) -> str:
    answer = client.get('/runs', params=params)
    found = re.search(r'<p class="dim" id="runs-summary">(.*?)</p>', answer.text, re.S)
    assert found is not None
    return html.unescape(found.group(1))


def test_the_runs_page_lists_every_conversation_latest_first_and_is_linked_from_every_page(client: TestClient) -> None:
    first = _runs(client)
    assert len(first) == RUNS_PAGE
    assert first[:3] == ['bulk-059', 'bulk-058', 'bulk-057']
    second = _runs(client, page='2')
    assert second == [f'bulk-{i:03d}' for i in range(9, -1, -1)] + [
        'beta-run-2',
        'alpha-run-3',
        'beta-run-1',
        'alpha-run-2',
        'alpha-run-1',
    ]
    summary = _summary(client)
    assert summary.startswith(f'{len(RUNS) + BULK} runs: {BULK + 2} completed, 1 ') and summary.endswith(
        '; page 1, 50 shown'
    )
    assert all(f'1 {s}' in summary for s in ('failed', 'running', 'cancelled'))
    page = client.get('/runs').text
    assert 'rel="next" href="/runs?sort=-start&amp;page=2"' in page
    assert 'rel="prev"' not in page
    assert 'rel="prev"' in client.get('/runs', params={'page': '2'}).text
    assert 'rel="next"' not in client.get('/runs', params={'page': '2'}).text
    for path in ('/', '/stats', '/c/alpha', '/r/alpha-run-1', '/search'):
        assert 'href="/runs" id="nav-runs"' in client.get(path).text, path
    assert 'id="all-runs"' in client.get('/').text
    assert 'href="/runs?c=alpha"' in client.get('/c/alpha').text
    assert 'href="/runs?c=alpha"' in client.get('/r/alpha-run-1').text


def test_runs_are_filtered_by_status_as_the_command_line_names_them(client: TestClient) -> None:
    assert _runs(client, status='failed') == ['alpha-run-2']
    assert _runs(client, status='cancelled') == ['beta-run-2']
    assert _runs(client, status='interrupted') == ['alpha-run-3']  # `eventlog runs --interrupted`
    assert _runs(client, status='running') == ['alpha-run-3']
    assert len(_runs(client, status='completed')) == RUNS_PAGE
    assert _summary(client, status='completed') == f'{BULK + 2} runs: {BULK + 2} completed; page 1, 50 shown'
    assert _summary(client, status='failed') == '1 run: 1 failed; page 1, 1 shown'


def test_runs_are_filtered_by_agent_conversation_and_time(client: TestClient) -> None:
    assert _runs(client, agent='coder') == ['beta-run-2', 'alpha-run-3', 'beta-run-1']
    assert _runs(client, agent='nobody') == []
    assert 'no runs match' in client.get('/runs', params={'agent': 'nobody'}).text
    assert _runs(client, c='alpha') == ['alpha-run-3', 'alpha-run-2', 'alpha-run-1']
    assert client.get('/runs', params={'c': 'bet'}).status_code == 404  # shorter than a prefix: no such id
    assert _runs(client, c='alph', agent='planner') == ['alpha-run-2', 'alpha-run-1']  # a unique prefix
    # `to` as a date takes the whole day; `from` as a date starts at its midnight, UTC.
    assert _runs(client, **{'from': '2026-01-02', 'to': '2026-01-02'}) == ['beta-run-1', 'alpha-run-2']
    assert _runs(client, **{'from': '2026-01-02T11:00', 'to': '2026-01-03T10:00'}) == ['beta-run-1']
    assert _runs(client, **{'from': '2026-01-02T13:00+01:00', 'to': '2026-01-02'}) == ['beta-run-1']
    assert _runs(client, to='2026-01-01T10:00:00Z') == []  # `to` is exclusive
    assert _runs(client, status='completed', c='alpha', to='2026-01-31') == ['alpha-run-1']
    # The filters carry over to the pager and the order links.
    page = client.get('/runs', params={'c': 'bulk', 'status': 'completed'}).text
    assert 'href="/runs?sort=-start&amp;page=2&amp;status=completed&amp;c=bulk"' in page
    assert 'href="/runs?sort=start&amp;status=completed&amp;c=bulk"' in page


def test_runs_are_ordered_by_start_or_duration_unfinished_last(client: TestClient) -> None:
    assert _runs(client, c='alpha', sort='start') == ['alpha-run-1', 'alpha-run-2', 'alpha-run-3']
    assert _runs(client, agent='coder', sort='-duration') == ['beta-run-1', 'beta-run-2', 'alpha-run-3']
    assert _runs(client, agent='coder', sort='duration') == ['beta-run-2', 'beta-run-1', 'alpha-run-3']
    longest = _runs(client, sort='-duration')
    assert longest[:3] == ['beta-run-1', 'alpha-run-1', 'beta-run-2']
    shortest = _runs(client, sort='duration', page='2')
    assert shortest[-1] == 'alpha-run-3'  # no duration: last either way
    page = client.get('/runs', params={'agent': 'coder', 'sort': '-duration'}).text
    assert re.search(r'<td class="num nowrap">30\.00 s</td>', page)


@pytest.mark.parametrize(
    ('params', 'message'),
    [
        ({'status': 'broken'}, 'status must be one of running, completed, failed, cancelled, interrupted'),
        ({'sort': 'size'}, 'sort must be one of -start, start, -duration, duration'),
        ({'page': '0'}, 'page must be at least 1'),
        ({'page': 'two'}, 'page must be a whole number'),
        ({'from': 'yesterday'}, 'from must be a date or a date and time'),
        ({'to': '2026-13-01'}, 'to must be a date or a date and time'),
        ({'to': '9999-12-31'}, 'to must be a date or a date and time'),
        ({'from': '2026-01-03', 'to': '2026-01-02'}, 'to must be later than from'),
        ({'c': 'x' * 300}, 'longer than 200 bytes'),
        ({'c': 'a\x1bb'}, 'conversation_id'),
    ],
)
def test_a_bad_query_value_is_a_400_naming_it(client: TestClient, params: dict[str, str], message: str) -> None:
    answer = client.get('/runs', params=params)
    assert answer.status_code == 400, answer.text[-400:]
    assert message in html.unescape(answer.text)


def test_an_unknown_conversation_is_404_and_an_ambiguous_prefix_400(client: TestClient, tmp_path: Path) -> None:
    assert client.get('/runs', params={'c': 'gamma'}).status_code == 404
    assert _runs(client, page='999999999999') == []
    assert 'the first page' in client.get('/runs', params={'page': '99'}).text

    async def two() -> None:
        log = LmdbEventLog(tmp_path / 's.lmdb')
        try:
            await _add(log, 'r1', 'shared-one', 'a', T0, 1, 'completed')
            await _add(log, 'r2', 'shared-two', 'a', T0, 1, 'completed')
        finally:
            log.close()

    asyncio.run(two())
    log = LmdbEventLog(tmp_path / 's.lmdb')
    try:
        answer = TestClient(create_app(log, store='s')).get('/runs', params={'c': 'shared'})
        assert answer.status_code == 400
        assert "conversation id prefix 'shared' is ambiguous" in html.unescape(answer.text)
    finally:
        log.close()


def test_the_runs_page_follows_appends_and_deletes(tmp_path: Path) -> None:
    """The viewer keeps the runs between requests: appended runs, finished runs and deleted
    conversations show on the next request as the log lists them."""
    path = tmp_path / 'live.lmdb'
    log = LmdbEventLog(path)
    try:
        asyncio.run(_add(log, 'one', 'live', 'a', T0, 1, 'completed'))
        asyncio.run(_add(log, 'open', 'live', 'a', T0 + timedelta(hours=1), 0, None))
        client = TestClient(create_app(log, store='s'))
        assert _runs(client) == ['open', 'one']
        assert _runs(client, status='interrupted') == ['open']
        asyncio.run(_add(log, 'two', 'other', 'b', T0 + timedelta(hours=2), 3, 'failed'))
        asyncio.run(log.append(run_finished_entry(conversation_id='live', run_id='open', status='completed')))
        assert _runs(client) == ['two', 'open', 'one']
        assert 'child runs' not in client.get('/r/one').text
        asyncio.run(
            log.append_many(
                [
                    run_started_entry(conversation_id='live', run_id='child', parent_run_id='one'),
                    run_finished_entry(conversation_id='live', run_id='child', status='completed'),
                ]
            )
        )
        parent = client.get('/r/one').text  # its child runs, found through the viewer's runs
        assert re.search(r'<dt>child runs</dt><dd><a href="/r/child"><code>child</code></a> \(completed\)', parent)
        assert 'href="/r/one" title="one"' in client.get('/runs', params={'c': 'live'}).text  # the parent column
        assert _runs(client, status='interrupted') == []
        assert _runs(client, status='failed') == ['two']
        asyncio.run(log.delete_conversation('other'))
        listed = [r.run_id for r in asyncio.run(log.list_runs())]
        assert _runs(client, sort='start') == listed  # as the log lists them after the delete
        assert 'two' not in listed
    finally:
        log.close()
