"""The viewer's application through Starlette's TestClient (and httpx against the real server):
tokens and 401s, the Host check, no write endpoints, escaping, downloads, paging, stable entry URLs."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from starlette.testclient import TestClient
from webtools import BINARY, ESC_TEXT, IMG_TEXT, ODD_ID, REPLY_TEXT, SCRIPT_TEXT, TOKEN, Server, WebStore, serving

from eventlog import LmdbEventLog
from eventlog_cli.web import CONTENT_SECURITY_POLICY, TOKEN_COOKIE, create_app
from eventlog_cli.web.reads import PAGE


@pytest.fixture(scope='module')
def log(web_store: WebStore) -> Iterator[LmdbEventLog]:
    opened = LmdbEventLog(web_store.path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope='module')
def client(log: LmdbEventLog, web_store: WebStore) -> TestClient:
    return TestClient(create_app(log, store=str(web_store.path)))


def test_without_a_token_every_request_is_401(log: LmdbEventLog, web_store: WebStore) -> None:
    guarded = TestClient(create_app(log, store='s', token=TOKEN), follow_redirects=False)
    for path in [
        '/',
        '/stats',
        '/c/hostile',
        f'/e/{web_store.seqs["hostile_prompt"]}',
        '/search?q=x',
        '/static/style.css',
        '/nope',
    ]:
        response = guarded.get(path)
        assert response.status_code == 401, path
        assert response.headers['www-authenticate'] == 'Bearer'
        assert response.headers['content-security-policy'] == CONTENT_SECURITY_POLICY
        assert 'hostile' not in response.text
    assert guarded.get('/', params={'token': TOKEN + 'x'}).status_code == 401
    assert guarded.get('/', headers={'authorization': 'Bearer nope'}).status_code == 401
    guarded.cookies.set(TOKEN_COOKIE, 'nope')
    assert guarded.get('/').status_code == 401


def test_the_token_opens_every_page_by_query_cookie_or_header(log: LmdbEventLog) -> None:
    guarded = TestClient(create_app(log, store='s', token=TOKEN), follow_redirects=False)
    response = guarded.get('/c/long', params={'after': '5', 'token': TOKEN})
    assert response.status_code == 303
    assert response.headers['location'] == '/c/long?after=5'  # the token leaves the URL
    cookie = response.headers['set-cookie']
    assert f'{TOKEN_COOKIE}={TOKEN}' in cookie and 'HttpOnly' in cookie and 'SameSite=strict' in cookie
    assert guarded.get('/stats').status_code == 200  # the client keeps the cookie
    odd = guarded.get('/c/team/a%20b%20%3Ci%3E%3F%23', params={'token': TOKEN})
    assert odd.headers['location'] == '/c/team/a%20b%20%3Ci%3E%3F%23'  # the path as requested
    fresh = TestClient(create_app(log, store='s', token=TOKEN))
    assert fresh.get('/stats', headers={'authorization': f'Bearer {TOKEN}'}).status_code == 200


def test_the_server_outlives_clients_that_leave_before_the_page_is_written(web_store: WebStore) -> None:
    """A browser that closes its connection while a long page is being written (a tab closed, a
    link clicked while loading) makes the server's next write to it fail: that is an error of
    the connection (EPIPE), never SIGPIPE ending the whole viewer."""
    with serving(web_store.path) as running:
        port = int(running.base.rsplit(':', 1)[1])
        for attempt in range(60):
            with socket.create_connection(('127.0.0.1', port), timeout=10) as client:
                client.sendall(b'GET /c/long HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
                time.sleep(0.001 * (attempt % 10))
            assert running.process.poll() is None, (
                f'the server ended ({running.process.returncode}) after {attempt + 1}'
            )
        response = httpx.get(running.base + '/c/long', timeout=60)
        assert response.status_code == 200 and 'long answer number' in response.text


def test_the_real_server_checks_its_token(token_server: Server) -> None:
    assert httpx.get(token_server.base + '/').status_code == 401
    assert httpx.get(token_server.base + '/stats', headers={'authorization': 'Bearer wrong'}).status_code == 401
    response = httpx.get(token_server.base + '/stats', headers={'authorization': f'Bearer {TOKEN}'}, timeout=120)
    assert response.status_code == 200 and 'every hash chain is intact' in response.text


def test_without_a_token_only_loopback_host_names_are_answered(log: LmdbEventLog) -> None:
    app = create_app(log, store='s', allowed_hosts={'localhost', '127.0.0.1', '[::1]'})
    assert TestClient(app, base_url='http://127.0.0.1:8765').get('/').status_code == 200
    assert TestClient(app, base_url='http://localhost').get('/').status_code == 200
    assert TestClient(app, base_url='http://[::1]:9').get('/').status_code == 200
    assert TestClient(app, base_url='http://evil.example:8765').get('/').status_code == 400


def test_nothing_but_reading_is_routed(client: TestClient, log: LmdbEventLog, web_store: WebStore) -> None:
    import asyncio

    before = asyncio.run(log.last_seq())
    for method in ['POST', 'PUT', 'DELETE', 'PATCH']:
        for path in ['/', '/c/hostile', f'/e/{web_store.seqs["hostile_prompt"]}', '/search', '/stats']:
            assert client.request(method, path).status_code == 405, (method, path)
    assert asyncio.run(log.last_seq()) == before


def test_stored_markup_is_escaped_and_controls_shown(client: TestClient, web_store: WebStore) -> None:
    response = client.get('/c/hostile')
    assert response.status_code == 200
    html = response.text
    for stored in (SCRIPT_TEXT, IMG_TEXT, REPLY_TEXT):
        assert stored not in html
    assert '&lt;script&gt;window.__pwned = 1; document.title = &#34;pwned&#34;&lt;/script&gt;' in html
    assert '&lt;/pre&gt;&lt;script&gt;window.__pwned = 3&lt;/script&gt; done' in html
    assert '\x1b' not in html and '\x07' not in html
    assert ESC_TEXT.replace('\x1b', '\\x1b') in html
    assert '<script' not in html.lower()
    assert response.headers['content-security-policy'] == CONTENT_SECURITY_POLICY
    assert response.headers['x-content-type-options'] == 'nosniff'


def test_tool_calls_and_returns_are_formatted_json(client: TestClient, web_store: WebStore) -> None:
    html = client.get(f'/e/{web_store.seqs["hostile_call"]}').text
    assert '&#34;key&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;,\n  &#34;nested&#34;: {' in html
    replay = client.get(f'/r/{web_store.hostile_run}').text
    assert '&#34;found&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;' in replay  # the tool return
    assert 'lookup started' in replay and 'lookup completed' in replay


def test_a_binary_part_downloads_exactly(client: TestClient, web_store: WebStore) -> None:
    seq = web_store.seqs['hostile_prompt']
    html = client.get(f'/e/{seq}').text
    assert f'href="/e/{seq}/file/0"' in html and 'image/png' in html and '264 B' in html
    response = client.get(f'/e/{seq}/file/0')
    assert response.status_code == 200
    assert response.content == BINARY
    assert response.headers['content-type'] == 'image/png'
    assert response.headers['content-disposition'].startswith('attachment;')
    assert client.get(f'/e/{seq}/file/1').status_code == 404
    stored = client.get(f'/e/{seq}/payload')
    assert stored.headers['content-type'] == 'application/json'
    assert json.loads(stored.content)['parts'][0]['content'][0].startswith(SCRIPT_TEXT)


def test_every_entry_has_a_stable_url_and_its_transcript_page(client: TestClient, web_store: WebStore) -> None:
    seq = web_store.seqs['long_first'] + 150
    page = client.get(f'/e/{seq}').text
    assert f'Entry #{seq}' in page and f'href="/c/long?at={seq}#e{seq}"' in page
    transcript = client.get('/c/long', params={'at': str(seq)}).text
    numbers = [int(n) for n in re.findall(r'<article class="entry kind-\w+" id="e(\d+)"', transcript)]
    assert numbers[0] == seq and len(numbers) == PAGE
    assert client.get('/e/0').status_code == 404
    assert client.get('/e/99999999').status_code == 404


def test_transcript_pages_follow_each_other(client: TestClient, web_store: WebStore) -> None:
    seen: list[int] = []
    url: str | None = '/c/long'
    pages = 0
    while url is not None:
        html = client.get(url).text
        seen += [int(n) for n in re.findall(r'<article class="entry kind-\w+" id="e(\d+)"', html)]
        found = re.search(r'<a rel="next" href="([^"]+)"', html)
        url = found.group(1).replace('&amp;', '&') if found else None
        pages += 1
    assert pages == 3
    assert len(seen) == web_store.seqs['long_count'] == len(set(seen)) and seen == sorted(seen)
    back = client.get(f'/c/long?after={seen[199]}').text
    prev = re.search(r'<a rel="prev" href="([^"]+)"', back)
    assert prev is not None
    again = client.get(prev.group(1)).text
    assert [int(n) for n in re.findall(r'id="e(\d+)"', again)][:1] == [seen[100]]


def test_conversations_and_search_are_paged(client: TestClient, web_store: WebStore) -> None:
    listing = client.get('/').text
    assert listing.count('class="conversation"') == 4
    assert 'rel="next"' not in listing
    first = client.get('/search', params={'q': 'long question number', 'c': 'long'}).text
    assert first.count('class="hit"') == 20 and '<mark>long</mark>' in first
    assert 'rel="next"' in first
    second = client.get('/search', params={'q': 'long question number', 'c': 'long', 'page': '2'}).text
    assert '<span class="rank">21.</span>' in second
    assert client.get('/search', params={'q': 'x', 'c': 'no-such'}).status_code == 404
    assert client.get('/', params={'page': 'two'}).status_code == 400


def test_a_run_timeline_names_parent_usage_and_offsets(client: TestClient, web_store: WebStore) -> None:
    html = client.get(f'/r/{web_store.long_run}').text
    assert 'long-agent' in html and 'completed' in html
    offsets = [float(n) for n in re.findall(r'<div class="offset">\+([\d.]+) ms</div>', html)]
    assert offsets and offsets == sorted(offsets) and offsets[0] == 0.0
    assert client.get('/r/no-such-run').status_code == 404


def test_the_context_view_folds_compactions_and_is_framed_beside_the_transcript(
    client: TestClient, web_store: WebStore
) -> None:
    conversation = web_store.demo_conversation
    transcript = client.get(f'/c/{conversation}').text
    assert f'<iframe class="context-frame" src="/context/{conversation}"' in transcript
    assert 'kind-compaction' in transcript and 'the summary below replaces' in transcript
    context = client.get(f'/context/{conversation}')
    assert context.status_code == 200 and '<base target="_top">' in context.text
    assert context.headers['x-frame-options'] == 'SAMEORIGIN'
    assert context.text.count('<article class="entry summary">') == 1  # the latest summary, folded in
    assert context.text.count('<article class="entry') < transcript.count('<article class="entry')
    long_context = client.get('/context/long').text
    assert long_context.count('<article class="entry') == PAGE and 'rel="next"' in long_context
    rest = client.get('/context/long', params={'ctx': str(PAGE * 2)}).text
    assert rest.count('<article class="entry') == web_store.seqs['long_count'] - 2 * PAGE


def test_an_id_with_a_slash_and_url_syntax_opens_its_pages(client: TestClient) -> None:
    from urllib.parse import quote

    listing = client.get('/').text
    link = re.search(r'<a class="conversation" href="([^"]+)"><code>team/', listing)
    assert link is not None
    href = link.group(1).replace('&amp;', '&')
    assert href == '/c/' + quote(ODD_ID, safe='')
    page = client.get(href)
    assert page.status_code == 200 and 'team/a b &lt;i&gt;?#' in page.text
    assert client.get('/context/' + quote(ODD_ID, safe='')).status_code == 200
    run = re.search(r'href="(/r/[^"#?]+)', page.text)
    assert run is not None and client.get(run.group(1)).status_code == 200
    found = client.get('/search', params={'q': 'odd id', 'c': ODD_ID})
    assert found.status_code == 200 and '<mark>odd</mark>' in found.text


def test_the_search_tool_parts_show_on_the_run_and_context_pages(
    client: TestClient, log: LmdbEventLog, web_store: WebStore
) -> None:
    last = asyncio.run(log.list_runs(conversation_id=web_store.demo_conversation))[-1]
    for path in (f'/context/{web_store.demo_conversation}', f'/r/{last.run_id}'):
        page = client.get(path).text
        call = page.index('<code class="tool">search_conversation_history</code>')
        opened = page.rfind('class="part part-', 0, call)  # the part the tool name heads
        assert page.startswith('class="part part-tool-call"', opened)
        assert '&#34;query&#34;: &#34;production config file path&#34;' in page
        assert 'Found 1 match(es) for' in page and web_store.detail in page
        assert '(no text)' not in page
