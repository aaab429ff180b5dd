"""`verify` findings on every page they concern: an entry altered in place (its payload still
decodes, so the page itself looks healthy) is named on its conversation's page, its run's page
and its own page, its number linking to it; the list shows `checking…` and reloads itself until
the first report is there; a long reason stays inside the table."""

from __future__ import annotations

import asyncio
import html
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from starlette.testclient import TestClient
from webtools import serving

from eventlog import LmdbEventLog
from eventlog._keys import encode_run, run_key, seq_key
from eventlog._storage import Table
from eventlog.entries import VerifyReport, message_entry, run_finished_entry, run_started_entry
from eventlog.log import EventLogBase

LONG_RUN = 'run-with-a-very-long-identifier-' + 'x' * 160
"""A run whose record is altered in the `long` store: its reason quotes the id, 192 unbroken characters."""


async def _one_run(log: EventLogBase, cid: str, run_id: str) -> list[int]:
    seqs = await log.append_many(
        [
            run_started_entry(conversation_id=cid, run_id=run_id, agent_name='a'),
            message_entry(
                ModelRequest(parts=[UserPromptPart(f'question {run_id}')]), conversation_id=cid, run_id=run_id
            ),
            message_entry(ModelResponse(parts=[TextPart(f'answer {run_id}')]), conversation_id=cid, run_id=run_id),
            run_finished_entry(conversation_id=cid, run_id=run_id, status='completed'),
        ]
    )
    return list(seqs)


def _put(log: EventLogBase, table: int, key: bytes, value: bytes) -> None:
    log._write_sync(lambda txn: txn.put(table, key, value))  # pyright: ignore[reportPrivateUsage]


def _get(log: EventLogBase, table: int, key: bytes) -> bytes:
    value = log._read_sync(lambda txn: txn.get(table, key))  # pyright: ignore[reportPrivateUsage]
    assert value is not None
    return value


@dataclass
class Damaged:
    """A store with one entry altered in place."""

    path: Path
    seq: int
    """The altered entry (the question of run `r2` of conversation `c`)."""
    clean_seq: int
    """An entry of run `r1`, before it, intact."""


async def _build(path: Path) -> Damaged:
    log = LmdbEventLog(path)
    try:
        first = await _one_run(log, 'c', 'r1')
        second = await _one_run(log, 'c', 'r2')
        await _one_run(log, 'd', 'rd')
        value = _get(log, Table.ENTRIES, seq_key(second[1]))
        assert b'question r2' in value
        _put(log, Table.ENTRIES, seq_key(second[1]), value.replace(b'question r2', b'question R2'))
        report = await log.verify()
        assert [(p.conversation_id, p.code, p.seq) for p in report.problems] == [('c', 'hash-mismatch', second[1])]
    finally:
        log.close()
    return Damaged(path, second[1], first[1])


@pytest.fixture(scope='module')
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Damaged:
    return asyncio.run(_build(tmp_path_factory.mktemp('damaged') / 'store.lmdb'))


@pytest.fixture(scope='module')
def client(damaged: Damaged) -> Iterator[TestClient]:
    from eventlog_cli.web import create_app

    log = LmdbEventLog(damaged.path)
    try:
        client = TestClient(create_app(log, store='s'))
        assert 'BROKEN' in client.get('/stats').text  # waits for the first report
        yield client
    finally:
        log.close()


def _findings(text: str) -> str:
    found = re.search(r'<section class="problem findings" id="findings".*?</section>', text, re.S)
    assert found is not None, text[-1500:]
    return html.unescape(found.group(0))


def test_the_conversation_page_names_the_finding_and_marks_the_entry(client: TestClient, damaged: Damaged) -> None:
    page = client.get('/c/c').text
    box = _findings(page)
    assert 'verify found 1 problem in this conversation' in box
    assert f'<a class="seq" href="/e/{damaged.seq}">#{damaged.seq}</a>' in box
    assert 'hash-mismatch' in box and 'the entry was altered' in box
    assert re.search(rf'<article class="entry kind-message damaged" id="e{damaged.seq}">', page)
    assert len(re.findall(r'class="entry [^"]*damaged', page)) == 1
    assert 'id="findings"' not in client.get('/c/d').text


def test_the_run_page_names_its_own_finding_and_points_others_to_the_conversation(
    client: TestClient, damaged: Damaged
) -> None:
    page = client.get('/r/r2').text
    box = _findings(page)
    assert 'verify found 1 problem in this run' in box
    assert f'href="/e/{damaged.seq}">#{damaged.seq}</a>' in box
    assert re.search(rf'<li class="entry kind-message damaged" id="e{damaged.seq}">', page)
    other = _findings(client.get('/r/r1').text)  # the damage is in r2: r1's page points to it
    assert 'in this run' not in other
    assert 'its conversation has 1 other finding' in other and 'href="/c/c#findings"' in other
    assert 'id="findings"' not in client.get('/r/rd').text


def test_the_entry_page_names_its_finding(client: TestClient, damaged: Damaged) -> None:
    box = _findings(client.get(f'/e/{damaged.seq}').text)
    assert 'verify found 1 problem in this entry' in box and 'hash-mismatch' in box
    assert f'href="/e/{damaged.seq}">#{damaged.seq}</a>' in box
    before = _findings(client.get(f'/e/{damaged.clean_seq}').text)
    assert 'in this entry' not in before and 'its conversation has 1 other finding' in before
    assert 'id="findings"' not in client.get(f'/e/{damaged.seq + 6}').text  # conversation d


def test_the_list_links_a_broken_conversation_to_its_findings(client: TestClient, damaged: Damaged) -> None:
    page = html.unescape(client.get('/').text)
    assert f'href="/c/c#findings">broken: #{damaged.seq} hash-mismatch' in page


def test_the_list_reloads_itself_while_verify_is_checking(damaged: Damaged, monkeypatch: pytest.MonkeyPatch) -> None:
    """`checking…` with a refresh of the page (no script: the viewer runs none) until the first
    report is there, then the report and no refresh."""
    import eventlog_cli.web.app as web_app

    gate = threading.Event()
    real = web_app.read_verify

    async def held(log: LmdbEventLog) -> tuple[VerifyReport, int, int]:
        await asyncio.to_thread(gate.wait, 60)
        return await real(log)

    monkeypatch.setattr(web_app, 'read_verify', held)
    log = LmdbEventLog(damaged.path)
    try:
        client = TestClient(web_app.create_app(log, store='s'))
        waiting = client.get('/').text
        assert '<meta http-equiv="refresh" content="2">' in waiting
        assert 'checking…' in waiting and '(reload)' not in waiting
        assert 'verify is still checking the store' in client.get('/c/c').text
        gate.set()
        deadline = time.monotonic() + 60
        while client.get('/').text.count('checking…'):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        done = client.get('/').text
        assert 'http-equiv="refresh"' not in done and 'broken: #' in done
    finally:
        gate.set()
        log.close()


async def _build_long(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        await _one_run(log, 'long-reason', LONG_RUN)
        await _one_run(log, 'fine', 'fine-run')
        run = await log.get_run(LONG_RUN)
        assert run is not None
        run.agent_name = 'someone-else'
        _put(log, Table.RUNS, run_key(LONG_RUN), encode_run(run))
        report = await log.verify()
        assert any(LONG_RUN in p.reason for p in report.problems)
    finally:
        log.close()


@pytest.fixture(scope='module')
def long_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp('long') / 'long.lmdb'
    asyncio.run(_build_long(store))
    return store


@pytest.mark.parametrize('width', [400, 1400])
def test_a_long_reason_stays_inside_the_table_in_a_browser(
    long_store: Path, page: Page, tmp_path: Path, width: int
) -> None:
    store = long_store
    page.set_viewport_size({'width': width, 'height': 900})
    with serving(store) as server:
        page.goto(server.base + '/stats')  # waits for the report
        page.goto(server.base + '/')
        cell = page.locator('#conversations tr', has_text='long-reason').locator('td.verify')
        expect(cell).to_contain_text('broken: #')
        page.screenshot(path=str(tmp_path / f'list-{width}.png'), full_page=True)
        sizes = page.evaluate(
            """() => {
              const table = document.querySelector('#conversations');
              const box = table.parentElement;
              const cell = [...table.querySelectorAll('td.verify')].find(td => td.textContent.includes('broken'));
              const line = parseFloat(getComputedStyle(cell).lineHeight) || 20;
              return {page: document.documentElement.scrollWidth, inner: window.innerWidth,
                      table: table.scrollWidth, box: box.clientWidth, scrolls: getComputedStyle(box).overflowX,
                      cell: cell.getBoundingClientRect().height, line: line};
            }"""
        )
        assert sizes['page'] <= sizes['inner'], sizes
        assert sizes['scrolls'] == 'auto', sizes
        assert sizes['cell'] <= 4 * sizes['line'] + 10, sizes  # clipped to three lines, not 190 characters tall
        if width == 1400:
            assert sizes['table'] <= sizes['box'], sizes  # no sideways scrolling on a desktop screen
        page.goto(server.base + '/stats')
        reason = page.locator('#findings td.reason', has_text=LONG_RUN[:40])
        expect(reason).to_be_visible()
        fits = page.evaluate(
            '() => [document.documentElement.scrollWidth, window.innerWidth,'
            " document.querySelector('#findings').scrollWidth, document.querySelector('#findings').parentElement.clientWidth]"
        )
        assert fits[0] <= fits[1], fits
        if width == 1400:
            assert fits[2] <= fits[3], fits
        page.goto(server.base + '/c/long-reason')
        expect(page.locator('#findings')).to_contain_text('run-record')
        assert page.evaluate('document.documentElement.scrollWidth <= window.innerWidth')
        page.screenshot(path=str(tmp_path / f'conversation-{width}.png'), full_page=True)
