"""The viewer shows what `show` shows of a conversation's shape: its runs' instructions (once, and
where they change), its branches (regenerated, edited, left), its fork, and a sub-agent run nested
under the tool call it ran in; through the TestClient (the HTML) and in Chromium (what is seen)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from outlinestore import HELPER_INSTRUCTIONS, INSTRUCTIONS, OutlineStore, outline_store
from playwright.sync_api import Page, expect
from starlette.testclient import TestClient
from webtools import serving

from eventlog import LmdbEventLog
from eventlog_cli.web import create_app


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> OutlineStore:
    return outline_store(tmp_path_factory.mktemp('web-outline') / 'store.lmdb')


@pytest.fixture(scope='module')
def client(store: OutlineStore) -> Iterator[TestClient]:
    log = LmdbEventLog(store.path, read_only=True)
    try:
        yield TestClient(create_app(log, store=str(store.path)))
    finally:
        log.close()


def _text(fragment: str) -> str:
    """The text of an HTML fragment, tags dropped, entities decoded, spaces collapsed."""
    return re.sub(r'\s+', ' ', html.unescape(re.sub(r'<[^>]+>', ' ', fragment))).strip()


def _before(page: str, seq: int) -> str:
    """The HTML between the article of entry `seq` and the article before it: its marks."""
    at = page.rfind('<article', 0, page.index(f'id="e{seq}"'))
    return page[page.rfind('</article>', 0, at) : at]


def test_the_transcript_marks_branches_and_nests_the_sub_agent(client: TestClient, store: OutlineStore) -> None:
    page = client.get('/c/talk').text
    runs, first = store.runs, store.first_seqs
    left = _text(_before(page, first['second']))
    assert f'↰ branch left: run {runs["regenerated"]} went on from entry #3 instead (regenerated)' in left
    branch = _text(_before(page, first['regenerated']))
    assert f'↳ branch from entry #3: regenerated, run {runs["regenerated"]}; the branch from #6 on is left' in branch
    assert f'branch left: run {runs["edited"]} went on from entry #3 instead (edited)' in branch
    assert 'branch from entry #3: edited' in _text(_before(page, first['edited']))
    assert _text(_before(page, first['delegating'])) == ''  # a turn that continues the line: no mark
    nested = _before(page, first['helper'])
    assert 'class="mark mark-sub-agent"' in nested
    assert f'↳ sub-agent run {runs["helper"]} (agent helper) inside tool call ask_helper (call call-h1)' in _text(
        nested
    )
    for seq in (first['helper'], first['helper'] + 1):
        assert re.search(rf'<article class="entry kind-message nested depth-1[^"]*" id="e{seq}"', page)
    assert re.search(rf'<article class="entry kind-message" id="e{first["helper"] + 4}"', page)  # back at the top


def test_the_transcript_shows_instructions_once_and_escaped(client: TestClient, store: OutlineStore) -> None:
    page = client.get('/c/talk').text
    assert page.count('part-instructions') == 7  # each run's first request, and the change at #26
    assert page.count('(as at #2)') == 4
    assert page.count(html.escape(INSTRUCTIONS)) == 2
    shown = HELPER_INSTRUCTIONS.replace('\x1b', '\\x1b').replace('\x07', '\\x07')
    assert html.escape(shown, quote=False) in page and '<b>no markup</b>' not in page
    assert 'Instructions (changed)' in _text(page.split('id="e26"', 1)[1].split('</article>', 1)[0])


def test_the_fork_and_the_run_pages_say_where_they_branch(client: TestClient, store: OutlineStore) -> None:
    fork = _text(client.get('/c/fork').text)
    assert f'⑂ forked from talk at entry #{store.fork_at}' in fork
    run = _text(client.get(f'/r/{store.runs["regenerated"]}').text)
    assert f'branch ↳ branch from entry #3: regenerated, run {store.runs["regenerated"]}' in run
    helper = _text(client.get(f'/r/{store.runs["helper"]}').text)
    assert 'inside tool call ask_helper (call call-h1)' in helper
    entry = _text(client.get(f'/e/{store.first_seqs["second"]}').text)
    assert f'Instructions {INSTRUCTIONS}' in entry  # one entry alone: its instructions whole


def test_the_branch_is_seen_in_chromium(page: Page, store: OutlineStore) -> None:
    with serving(store.path) as server:
        page.goto(f'{server.base}/c/talk')
        transcript = page.locator('section.transcript')
        branch = transcript.locator('.mark-branch').first
        expect(branch).to_be_visible()
        expect(branch).to_contain_text('branch from entry #3: regenerated')
        expect(transcript.locator('.mark-left')).to_have_count(2)
        # The marks sit right before the articles they concern, in document order.
        order = page.evaluate(
            """() => [...document.querySelectorAll('section.transcript .mark, section.transcript article')]
                .map(e => e.classList.contains('mark') ? e.className.split(' ')[1] : e.id)"""
        )
        regenerated = f'e{store.first_seqs["regenerated"]}'
        assert order[order.index(regenerated) - 2 : order.index(regenerated)] == ['mark-branch', 'mark-left']
        # The sub-agent's messages are indented under the tool call; the parent's next one is not.
        helper = page.locator(f'#e{store.first_seqs["helper"]}')
        parent = page.locator(f'#e{store.first_seqs["helper"] - 3}')
        helper_box, parent_box = helper.bounding_box(), parent.bounding_box()
        assert helper_box is not None and parent_box is not None
        assert helper_box['x'] >= parent_box['x'] + 20
        expect(helper).to_contain_text('You are the helper')
        # A branch mark links the run that branched.
        branch.locator('a.mark-run').click()
        expect(page.locator('h1')).to_contain_text(store.runs['regenerated'])
