"""The layout from phone width up, measured in Chromium: at 400 and 1400 px no page is wider than
the window, the header's search box lies inside it, a wide table scrolls in its own box, and no
table header breaks inside a word. Screenshots of each page and width go to `tmp_path`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from webtools import Server, WebStore

_MEASURE = """() => {
  const inner = window.innerWidth;
  const search = document.querySelector('header input[name=q]').getBoundingClientRect();
  const headers = [...document.querySelectorAll('table th')].map(th => {
    const range = document.createRange();
    range.selectNodeContents(th);
    const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
    return {text: th.textContent.trim(), lines: lines.size};
  });
  const tables = [...document.querySelectorAll('table.list')].map(t => ({
    id: t.id, wrapped: t.parentElement.classList.contains('scroll'),
    scrolls: getComputedStyle(t.parentElement).overflowX,
    right: t.parentElement.getBoundingClientRect().right,
  }));
  return {scroll: document.documentElement.scrollWidth, body: document.body.scrollWidth, inner,
          search: {left: search.left, right: search.right, top: search.top, width: search.width, height: search.height},
          headers, tables};
}"""


def _pages(page: Page, server: Server, web_store: WebStore) -> dict[str, str]:
    page.goto(f'{server.base}/runs?c={web_store.demo_conversation}')
    run = page.locator('#runs a.run').first.get_attribute('href')
    assert run is not None
    page.goto(f'{server.base}/c/{web_store.demo_conversation}')
    compaction = page.locator('section.transcript article.kind-compaction').first.get_attribute('id')
    assert compaction is not None
    return {
        'stats': '/stats',
        'conversations': '/',
        'runs': '/runs',
        'transcript': f'/c/{web_store.demo_conversation}',
        'compaction': f'/c/{web_store.demo_conversation}?at={compaction[1:]}',
        'run': run,
        'entry': f'/e/{web_store.seqs["hostile_prompt"]}',
        'search': '/search?q=deploy+path',
        'ambiguous': '/r/' + run.removeprefix('/r/')[:4],  # the demo's run ids share their start
    }


@pytest.mark.parametrize('width', [400, 1400])
def test_every_page_fits_the_window_from_phone_width_up(
    page: Page, server: Server, web_store: WebStore, tmp_path: Path, width: int
) -> None:
    page.set_viewport_size({'width': width, 'height': 900})
    for name, path in _pages(page, server, web_store).items():
        response = page.goto(server.base + path)
        assert response is not None and response.status == (300 if name == 'ambiguous' else 200), path
        page.screenshot(path=str(tmp_path / f'{name}-{width}.png'), full_page=True)
        sizes: dict[str, Any] = page.evaluate(_MEASURE)
        assert sizes['scroll'] <= sizes['inner'] and sizes['body'] <= sizes['inner'], (name, width, sizes)
        box = sizes['search']
        assert box['width'] >= 120 and box['height'] > 0, (name, box)
        assert box['left'] >= 0 and box['right'] <= sizes['inner'], (name, width, box)
        broken = [h['text'] for h in sizes['headers'] if h['lines'] > 1]
        assert not broken, (name, width, broken)
        for table in sizes['tables']:
            assert table['wrapped'] and table['scrolls'] == 'auto', (name, table)
            assert table['right'] <= sizes['inner'] + 0.5, (name, table)
        expect(page.locator('header input[name=q]')).to_be_in_viewport()
    assert (tmp_path / f'runs-{width}.png').stat().st_size > 10_000


def test_a_compaction_shows_its_number_and_run_link_apart(page: Page, server: Server, web_store: WebStore) -> None:
    page.goto(f'{server.base}/c/{web_store.demo_conversation}')
    gutter = page.locator('section.transcript article.kind-compaction .gutter').first
    number = gutter.locator('a.seq').inner_text()
    assert re.fullmatch(r'#\d+', number)
    text = gutter.inner_text()
    assert f'{number}run' not in text and f'{number}\nrun' in text, text
    seq_box = gutter.locator('a.seq').bounding_box()
    run_box = gutter.locator('a.run-link').bounding_box()
    assert seq_box is not None and run_box is not None
    assert run_box['y'] >= seq_box['y'] + seq_box['height'] - 1  # on a line of its own
