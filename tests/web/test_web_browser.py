"""The viewer in a real browser: Debian's Chromium, headless, over a real `eventlog serve` subprocess."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from playwright.sync_api import Page, expect
from webtools import ESC_TEXT, HOSTILE_TITLE, SCRIPT_TEXT, TOKEN, TOOL_ARG, Server, WebStore, serving


def test_each_page_opens_and_links_to_the_next(page: Page, server: Server, web_store: WebStore) -> None:
    response = page.goto(server.base + '/stats')  # waits for the verify report the list shows
    assert response is not None and response.status == 200
    expect(page.locator('#verify .verdict')).to_contain_text('every hash chain is intact')
    expect(page.locator('#checkpoints')).to_contain_text('no signed checkpoints')
    page.click('#nav-conversations')
    rows = page.locator('#conversations tbody tr')
    expect(rows).to_have_count(4)
    expect(page.locator('#conversations')).to_contain_text('Orbit migration planning (demo)')
    demo_row = rows.filter(has_text='Orbit migration planning (demo)')
    expect(demo_row.locator('td').last).to_have_text('ok')

    page.click(f'a.conversation[href="/c/{web_store.demo_conversation}"]')
    expect(page.locator('h1')).to_contain_text(web_store.demo_conversation)
    transcript = page.locator('section.transcript')
    expect(transcript.locator('article.kind-compaction').first).to_contain_text('the summary below replaces')
    first = transcript.locator('article.entry').first
    expect(first.locator('a.seq')).to_have_text(re.compile(r'^#\d+$'))
    context = page.frame_locator('iframe.context-frame')  # framed: the transcript never waits for it
    expect(context.locator('article.summary').first).to_contain_text('Summary')

    page.locator('section.transcript a.run-link').first.click()
    expect(page.locator('h1')).to_contain_text('Run ')
    timeline = page.locator('ol.timeline')
    expect(timeline.locator('li.kind-run_started .offset')).to_have_text('+0.0 ms')
    expect(timeline.locator('li.kind-run_finished')).to_contain_text('completed')
    expect(page.locator('dl.facts')).to_contain_text('input_tokens')


def test_a_search_hit_leads_to_its_entry(page: Page, server: Server, web_store: WebStore) -> None:
    page.goto(server.url)
    page.fill('header input[name=q]', 'deploy path')
    page.press('header input[name=q]', 'Enter')
    expect(page.locator('p.summary')).to_contain_text('matching messages')
    hit = page.locator('li.hit').first
    expect(hit.locator('mark').first).to_have_text(re.compile('deploy|path', re.IGNORECASE))
    link = hit.locator('a.seq')
    number = link.inner_text().lstrip('#')
    link.click()
    page.wait_for_url(f'**/e/{number}')
    expect(page.locator('h1')).to_contain_text(f'Entry #{number}')
    expect(page.locator('article.entry')).to_contain_text(web_store.detail)
    # From the entry, its place in the transcript: the page holding it, scrolled to it.
    page.click('dl.facts a[href^="/c/"]')
    expect(page.locator(f'#e{number}')).to_be_visible()


def test_stored_markup_and_escapes_stay_text(page: Page, server: Server, web_store: WebStore) -> None:
    dialogs: list[str] = []
    page.on('dialog', lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    response = page.goto(f'{server.base}/c/hostile')
    assert response is not None
    assert "script-src 'none'" in response.headers['content-security-policy']
    prompt = page.locator(f'#e{web_store.seqs["hostile_prompt"]}')
    expect(prompt).to_contain_text(SCRIPT_TEXT)
    expect(prompt).to_contain_text(ESC_TEXT.replace('\x1b', '\\x1b'))
    expect(page.locator(f'#e{web_store.seqs["hostile_call"]}')).to_contain_text(TOOL_ARG)
    expect(page.locator('dd.title')).to_have_text(HOSTILE_TITLE.replace('\x1b', '\\x1b').replace('\x07', '\\x07'))
    assert page.evaluate('window.__pwned') is None
    assert page.title() != 'pwned'
    assert page.locator('main script').count() == 0 and page.locator('main img').count() == 0
    assert dialogs == []
    # The binary part is a download with its media type.
    link = prompt.locator('a.download')
    expect(link).to_have_text('file 0')
    expect(prompt.locator('.file')).to_contain_text('image/png')


def test_the_token_is_checked_on_every_request(page: Page, token_server: Server) -> None:
    response = page.goto(token_server.base + '/')
    assert response is not None and response.status == 401
    response = page.goto(f'{token_server.base}/stats?token=wrong')
    assert response is not None and response.status == 401
    response = page.goto(token_server.url)
    assert token_server.url.endswith(f'?token={TOKEN}')
    assert response is not None and response.status == 200
    assert page.url == token_server.base + '/'  # the token left the address bar for a cookie
    page.click('#nav-stats')
    expect(page.locator('#verify .verdict')).to_contain_text('every hash chain is intact')


def test_a_long_transcript_is_paged(page: Page, server: Server, web_store: WebStore) -> None:
    page.goto(f'{server.base}/c/long')
    entries = page.locator('section.transcript article.entry')
    expect(entries).to_have_count(100)
    expect(entries.first.locator('a.seq')).to_have_text(f'#{web_store.seqs["long_first"]}')
    page.locator('section.transcript a[rel=next]').first.click()
    page.locator('section.transcript a[rel=next]').first.click()
    expect(entries.last.locator('a.seq')).to_have_text(f'#{web_store.seqs["long_last"]}')
    expect(entries).to_have_count(web_store.seqs['long_count'] - 200)
    assert page.locator('section.transcript a[rel=next]').count() == 0
    page.locator('section.transcript a[rel=prev]').first.click()
    expect(entries).to_have_count(100)
    expect(entries.first.locator('a.seq')).to_have_text(f'#{web_store.seqs["long_first"] + 100}')


def _demo_store_link(store: Path) -> Path:
    """`store` reached through `$TMPDIR/demo-store` (a symlink to its directory, replaced atomically),
    so that the header of the screenshots names a store path that reads as one, not pytest's."""
    link = Path(tempfile.gettempdir()) / 'demo-store'
    fresh = link.with_name(f'.demo-store-{os.getpid()}')
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(store.parent, target_is_directory=True)
    os.replace(fresh, link)
    return link / store.name


def test_screenshots_of_each_page(page: Page, web_store: WebStore, tmp_path: Path) -> None:
    """Screenshots of every page (into `$EVENTLOG_SCREENSHOTS` when set, for docs/web), of a server
    over `$TMPDIR/demo-store/eventlog-demo.lmdb`, the path its header shows."""
    target = Path(os.environ.get('EVENTLOG_SCREENSHOTS') or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    store = _demo_store_link(web_store.path)
    with serving(store) as server:
        _screenshots(page, server, web_store, target, str(store))


def _screenshots(page: Page, server: Server, web_store: WebStore, target: Path, store: str) -> None:
    page.goto(f'{server.base}/c/{web_store.demo_conversation}')
    runs = page.locator('details.runs li a')  # the latest first
    final_run = runs.first.get_attribute('href')
    assert final_run is not None
    shots = {
        # The stats page first: it waits for `verify`, whose report the list then shows.
        'stats': '/stats',
        'conversations': '/',
        'runs': '/runs',
        'transcript': f'/c/{web_store.demo_conversation}',
        'run': final_run,
        'search': '/search?q=deploy+path',
        'entry': f'/e/{web_store.seqs["hostile_prompt"]}',
    }
    for name, path in shots.items():
        response = page.goto(server.base + path)
        assert response is not None and response.status == 200, path
        header = page.locator('header .store').inner_text()
        assert header == store and 'pytest' not in header, header
        page.screenshot(path=str(target / f'{name}.png'))
        data = (target / f'{name}.png').read_bytes()
        assert data.startswith(b'\x89PNG') and len(data) > 10_000


def test_the_runs_page_filters_orders_and_opens_runs(page: Page, server: Server, web_store: WebStore) -> None:
    page.goto(server.base + '/')
    page.click('#nav-runs')
    rows = page.locator('#runs tbody tr')
    expect(page.locator('h1')).to_have_text('Runs')
    total = rows.count()
    assert total > 10
    page.select_option('#run-filters select[name=agent]', 'long-agent')
    page.click('#run-filters button[type=submit]')
    expect(rows).to_have_count(2)  # the `long` conversation's run and the odd id's
    expect(page.locator('#runs-summary')).to_contain_text('2 runs: 2 completed')
    page.click('#runs thead a.sort:has-text("started")')  # latest first -> oldest first
    assert 'sort=start' in page.url and 'agent=long-agent' in page.url
    expect(rows.first.locator('td').nth(1)).to_have_text('long')
    page.fill('#run-filters input[name=from]', 'not a date')
    page.click('#run-filters button[type=submit]')
    expect(page.locator('h1')).to_have_text('Bad request')
    expect(page.locator('main .problem')).to_contain_text('from must be a date')
    page.goto(f'{server.base}/runs?c={web_store.demo_conversation[:5]}')  # a prefix, as the CLI takes it
    first = page.locator('#runs a.run').first
    short = first.inner_text()
    assert len(short) < 36
    page.goto(f'{server.base}/r/{short}')  # the abbreviation as shown: redirected to the run
    expect(page.locator('h1')).to_contain_text('Run ')
    assert page.url.startswith(f'{server.base}/r/{short}') and len(page.url) > len(f'{server.base}/r/{short}')
    page.goto(f'{server.base}/r/{short[:4]}')  # shared by every demo run: the matches, as links
    page.locator('#matches a').first.click()
    expect(page.locator('h1')).to_contain_text('Run ')


def test_the_search_tool_call_and_its_answer_show_as_in_the_terminal(
    page: Page, server: Server, web_store: WebStore
) -> None:
    """The parts the terminal shows of the demo's search (`eventlog_cli.entries`), the same labels and texts."""
    page.goto(server.base + f'/context/{web_store.demo_conversation}')
    call = page.locator('.part-tool-call').filter(has_text='search_conversation_history').last
    expect(call.locator('.label')).to_have_text('Tool Call')
    expect(call.locator('pre.json')).to_contain_text('"query": "production config file path"')
    answer = page.locator('.part-tool-return').filter(has_text='search_conversation_history').last
    expect(answer.locator('.label')).to_have_text('Tool')
    expect(answer.locator('pre.text')).to_contain_text("Found 1 match(es) for 'production config file path'")
    expect(answer.locator('pre.text')).to_contain_text(web_store.detail)
