"""One presentation of entries (`eventlog_cli.entries`): every part of every message shows in every
view, terminal (`show`, `replay`, `context`, `tail`) and web alike, with the same labels and texts;
the search tool's calls and returns included; unknown part kinds shown generically; nothing of it
needing pydantic-ai.

The store holds one message per part of `every_part_kind` (every part class pydantic-ai-slim has),
written through the real log, so that each part is a message of its own and even `tail`'s one
line per entry shows it.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import run_on_terminal
from pydantic_ai.messages import ModelRequest, ModelResponse
from rich.cells import cell_len
from starlette.testclient import TestClient

from eventlog import LmdbEventLog, ReplayHistorySource, message_entry, run_finished_entry, run_started_entry
from eventlog.entries import Entry, encode_message
from eventlog_cli import entries
from eventlog_cli._render import message_text
from eventlog_cli.entries import hit_lines
from eventlog_cli.web import create_app
from search.analyzers import DefaultAnalyzer
from search.engine import SearchEngine, SearchOptions
from search.excerpt import make_locator
from search.persistent_index import PersistentIndex
from search.render import index_text
from search.result import WindowMessage
from tests.clirunner import Result, run_cli
from tests.search.searchtools import every_part_kind

CONV = 'parts'
RUN = 'run-parts'
WIDE = 2000
"""Columns wide enough that nothing wraps: each part's line is one line of output."""


def _loaded_capability_content() -> str:
    """What the installed pydantic-ai stores as a `load_capability` return's content (2.62 keeps
    `{}`, newer versions the content given), as the views show it."""
    from datetime import UTC, datetime

    from pydantic_ai.messages import LoadCapabilityReturnPart

    part = LoadCapabilityReturnPart(content={'id': 'capability_x'}, timestamp=datetime(2026, 1, 1, tzinfo=UTC))  # pyright: ignore[reportArgumentType]
    stored = json.loads(encode_message(ModelRequest(parts=[part])))['parts'][0]['content']
    return json.dumps(stored, ensure_ascii=False)


_LOADED = _loaded_capability_content()

EXPECTED = [
    'System: You are a careful archivist of llamas.',
    'User: What did we decide about the Kraków office? Café naïve ÉTÉ',
    'User: Look at this picture of a heron please',
    '<url https://example.com/cat.png>',
    '(image/png, 4 B)>',
    'System: Summary of previous conversation:',
    'Assistant: The Kraków office opens in March; 東京 follows.',
    'Thinking: secret reasoning about badgers',
    'Tool Call [lookup_office]: {"city": "Kraków", "floors": 3, "tags": ["a", "ß"]}',
    'Tool Call [raw_args]: {"q": "json string args"}',
    'Tool Call [bad_args]: {not json',
    'Tool Call [no_args]: {}',
    'Tool [lookup_office]: {"address": "Rynek 1", "floors": 3}',
    'Tool [raw_args]: plain text return',
    'Tool [bad_args]: ["see the chart", "<url https://example.com/cat.png>"]',
    'Tool [no_args]: <url https://example.com/cat.png>',
    'Tool failed [failing]: it exploded',
    'Tool denied [denied_tool]: not allowed',
    'Retry [retry_str]: try a smaller number',
    'Retry [retry_errors]: [{"type": "missing", "loc": ["x"]',
    'Instructions: Always answer in French',
    'Instructions: (removed)',
    'Instructions: {"instructions": []}',
    'Tools: {"tools_added": ["alpha_tool"]',
    'Settings: {"settings": {"thinking": "high"}',
    'Retry: output was bad',
    'Retry: [{"type": "missing", "loc": ["answer"]',
    'Retry [fixme]: please fix the zebra',
    'Retry: general quokka fix',
    'Retry [old_tool]: legacy retry walrus',
    'Retry: [{"type": "int_parsing"',
    'Summary: Earlier we agreed the budget is 4200 euros.',
    'Summary: provider compaction text',
    'File: <file 0',
    'Speech [user]: spoken question about the pelican',
    'Speech [user]: (no transcript)',
    'Speech [assistant]: spoken answer about the pelican',
    'Built-in Tool Call [web_search]: {"query": "native search"}',
    'Built-in Tool [web_search]: {"results": ["native result"]}',
    'Built-in Tool Call [tool_search]: {"queries": ["native tool search"]}',
    'Built-in Tool [tool_search]: {"discovered_tools": []}',
    'Tool Call [search_tools]: {"queries": ["find tool"]}',
    'Tool [search_tools]: {"discovered_tools": []}',
    'Tool Call [load_capability]: {"id": "capability_x"}',
    f'Tool [load_capability]: {_LOADED}',
    'Thinking: only thinking here',
]
"""What the views say of the parts of `every_part_kind`, written out by hand (not derived from
the code under test)."""


def _one_part_messages() -> list[ModelRequest | ModelResponse]:
    """`every_part_kind`, each part a message of its own (the same kind of message); a message
    without parts stays one."""
    split: list[ModelRequest | ModelResponse] = []
    for message in every_part_kind():
        if not message.parts:
            split.append(message)
        for part in message.parts:
            if isinstance(message, ModelRequest):
                split.append(ModelRequest(parts=[part], timestamp=message.timestamp))  # pyright: ignore[reportArgumentType]
            else:
                split.append(ModelResponse(parts=[part], timestamp=message.timestamp))  # pyright: ignore[reportArgumentType]
    return split


async def _build(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        await log.append(run_started_entry(conversation_id=CONV, run_id=RUN, agent_name='parts'))
        await log.append_many([message_entry(m, conversation_id=CONV, run_id=RUN) for m in _one_part_messages()])
        await log.append(run_finished_entry(conversation_id=CONV, run_id=RUN, status='completed'))
    finally:
        log.close()


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('parts') / 'store.lmdb'
    asyncio.run(_build(path))
    return path


@pytest.fixture(scope='module')
def messages(store: Path) -> list[Entry]:
    async def read() -> list[Entry]:
        log = LmdbEventLog(store)
        try:
            return await log.entries(conversation_id=CONV, kinds=['message'])
        finally:
            log.close()

    return asyncio.run(read())


def _at(width: int, *args: str | Path, store: Path) -> Result:
    result = run_cli([str(a) for a in args] + ['--store', str(store)], env={'COLUMNS': str(width)})
    assert result.exit_code == 0, result.output
    return result


VIEWS = [['show', CONV], ['show', '--run', RUN], ['replay', RUN], ['context', CONV], ['tail', '-n', '1000']]


@pytest.mark.parametrize('view', VIEWS, ids=' '.join)
def test_every_part_kind_shows_in_every_terminal_view(store: Path, view: list[str]) -> None:
    output = _at(WIDE, *view, store=store).stdout
    missing = [expected for expected in EXPECTED if expected not in output]
    assert not missing, '\n'.join(missing) + '\n---\n' + output
    assert '(no text)' not in output
    assert '(no parts)' in output  # the request with no part at all says so


def test_every_part_shows_in_every_view_as_the_model_says(store: Path, messages: list[Entry]) -> None:
    """Each part's label, name and text (its `Part.line`) is in each terminal view: one
    presentation, not a rule per view."""
    lines = [line for entry in messages for line in entries.message_view(entry).lines()]
    assert len(lines) == sum(len(m.parts) for m in every_part_kind())
    for view in VIEWS[:4]:
        output = _at(WIDE, *view, store=store).stdout
        for line in lines:
            assert line.split('\n')[0] in output, (view, line)
    tail = _at(WIDE, 'tail', '-n', '1000', store=store).stdout
    for entry in messages:
        view = entries.message_view(entry)
        shown = next(row for row in tail.splitlines() if row.startswith(f'#{entry.seq} '))
        assert f'{view.role}: ' in shown
        if view.parts:
            assert view.parts[0].head() + ': ' in shown


def _web_text(page: str) -> str:
    """A page's text as a reader sees it: tags removed, entities decoded."""
    return html.unescape(re.sub(r'<[^>]+>', ' ', page))


def test_the_web_pages_show_the_same_labels_and_texts_as_the_terminal(store: Path, messages: list[Entry]) -> None:
    log = LmdbEventLog(store)
    try:
        client = TestClient(create_app(log, store=str(store)))
        run_page = client.get(f'/r/{RUN}').text
        transcript = client.get(f'/c/{CONV}').text
        context = client.get(f'/context/{CONV}').text
        replay = _at(WIDE, 'replay', RUN, store=store).stdout
        for entry in messages:
            page = client.get(f'/e/{entry.seq}').text
            shown = ' '.join(_web_text(page).split())
            for part in entries.message_view(entry).parts:
                # The terminal prints the part's line (JSON on one line) ...
                assert part.line().split('\n')[0] in replay
                # ... the web page the same label, name and text (JSON indented: the same value).
                assert f'{part.label} {part.name}' in shown if part.name is not None else part.label in shown
                body = part.main(pretty=True)
                if part.structured:
                    blocks = [html.unescape(b) for b in re.findall(r'<pre class="json">(.*?)</pre>', page, re.S)]
                    assert any(json.loads(block) == json.loads(part.main()) for block in blocks), (part, blocks)
                elif body:
                    assert ' '.join(body.split()) in shown, (part, shown)
                for item in part.files:
                    assert f'href="/e/{entry.seq}/file/{item.index}"' in page
                for url in part.urls:
                    assert url in shown
        for page in (run_page, transcript, context):
            text = ' '.join(_web_text(page).split())
            for expected in (
                'Thinking secret reasoning about badgers',
                'Tool failed failing',
                'Built-in Tool Call web_search',
            ):
                assert expected in text
    finally:
        log.close()


def test_an_unknown_part_kind_shows_as_its_kind_and_json() -> None:
    payload = json.dumps(
        {
            'kind': 'response',
            'parts': [
                {'part_kind': 'hologram', 'depth': 3, 'scene': {'kind': 'binary', 'data': 'AAAA', 'media_type': 'x/y'}},
                'not an object',
                {'content': 'no part kind'},
            ],
        }
    ).encode()
    view = entries.payload_view(payload)
    assert [part.label for part in view.parts] == ['hologram', 'Part', '?']
    assert view.parts[0].line() == 'hologram: {"depth": 3, "scene": "<file 0 (x/y, 3 B)>"}'
    assert view.parts[1].line() == 'Part: "not an object"'
    assert 'hologram: {"depth": 3' in message_text(payload).plain
    assert entries.payload_view(b'[1, 2]').lines() == ['Stored: [1, 2]']
    assert entries.payload_view(b'{"kind": "request", "parts": 5}').role == 'unknown'


# --- the search tool ---------------------------------------------------------------------------


@pytest.fixture(scope='module')
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('demo') / 'demo.lmdb'
    made = run_cli(['demo', '--store', str(path), '--exchanges', '12', '--sessions', '1'])
    assert made.exit_code == 0, made.output
    return path


@pytest.mark.parametrize('view', [['replay', '--last'], ['show', 'orbit-migration'], ['context', 'orbit-migration']])
def test_the_search_tool_call_and_its_answer_show(demo: Path, view: list[str]) -> None:
    output = _at(WIDE, *view, store=demo).stdout
    assert 'Tool Call [search_conversation_history]: {"query": "production config file path"}' in output
    assert "Tool [search_conversation_history]: Found 1 match(es) for 'production config file path'" in output
    assert '/srv/orbit/config/prod-east.toml' in output.split('Tool [search_conversation_history]')[1]
    assert '(no text)' not in output and '(no parts)' not in output


# --- fitted to the terminal --------------------------------------------------------------------


_ANSI = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')


@pytest.mark.parametrize('width', [80, 100])
def test_tail_fits_the_terminal(store: Path, demo: Path, width: int) -> None:
    """On a terminal (the console script, as a user runs it) each entry fits the width; its
    headline goes under its fields, indented, when they leave it too little room."""
    env = {**os.environ, 'PYTHONPATH': str(Path(__file__).resolve().parents[2])}
    env.pop('COLUMNS', None)
    for where in (store, demo):
        argv = [sys.executable, '-m', 'eventlog_cli', 'tail', '-n', '60', '--store', str(where)]
        code, written = run_on_terminal(argv, env, columns=width)
        lines = _ANSI.sub('', written.decode()).replace('\r\n', '\n').splitlines()
        assert code == 0 and len(lines) >= 40, lines  # both stores hold more than 40 entries
        assert all(cell_len(line) <= width for line in lines), [line for line in lines if cell_len(line) > width]
        assert all(re.match(r'#\d+ ', line) or line.startswith(' ' * 8) for line in lines), lines
        if where == demo and width == 80:
            assert any(line.startswith(' ' * 8 + 'response: Assistant: ') for line in lines)
            assert any(line.endswith('…') for line in lines)


def test_search_fits_80_columns(demo: Path) -> None:
    lines = _at(80, 'search', 'production config', '--all', '--context', '1', store=demo).stdout.splitlines()
    assert any(re.match(r' 1\. score', line) for line in lines)
    assert all(cell_len(line) <= 80 for line in lines), lines
    heading = next(index for index, line in enumerate(lines) if line.startswith(' 1. score'))
    assert lines[heading + 1].startswith('    ') and 'position' in lines[heading + 1]  # its wrap is indented


def test_the_demo_shows_no_pydantic_ai_banner_on_a_terminal(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ('CI', 'PYTEST_VERSION', 'PYDANTIC_AI_NO_BANNER')}
    env['PYTHONPATH'] = str(Path(__file__).resolve().parents[2])
    argv = [sys.executable, '-m', 'eventlog_cli', 'demo', '--store', str(tmp_path / 'd.lmdb')]
    code, written = run_on_terminal([*argv, '--exchanges', '12', '--sessions', '1'], env, columns=80)
    text = written.decode(errors='replace')
    assert code == 0, text
    assert 'Session 1' in text
    assert 'Logfire' not in text and 'PYDANTIC_AI_NO_BANNER' not in text


# --- no pydantic-ai -----------------------------------------------------------------------------

_RUN = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli.main import run
    run(sys.argv[2:])
    with open(sys.argv[1], 'w') as out:
        json.dump(sorted({name.split('.')[0] for name in sys.modules}), out)
    """
)


def _modules(tmp_path: Path, *args: str) -> Iterator[str]:
    report = tmp_path / 'modules.json'
    env = {**os.environ, 'COLUMNS': '200'}
    done = subprocess.run(
        [sys.executable, '-c', _RUN, str(report), *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stderr == '', done.stderr
    assert done.stdout.strip()
    return iter(json.loads(report.read_text()))


@pytest.mark.parametrize(
    'view',
    [['show', CONV], ['show', '--run', RUN, '--full'], ['replay', RUN], ['context', CONV], ['tail', '-n', '200']],
    ids=' '.join,
)
def test_the_browsing_views_do_not_import_pydantic_ai(store: Path, tmp_path: Path, view: list[str]) -> None:
    assert 'pydantic_ai' not in set(_modules(tmp_path, *view, '--store', str(store)))


@pytest.mark.parametrize('view', [['replay', '--last'], ['show', 'orbit-migration']], ids=' '.join)
def test_the_views_of_a_compacted_demo_do_not_import_pydantic_ai(demo: Path, tmp_path: Path, view: list[str]) -> None:
    assert 'pydantic_ai' not in set(_modules(tmp_path, *view, '--store', str(demo)))


def test_search_hits_show_their_neighbours_parts_too(demo: Path) -> None:
    """A hit's window shows each message through the same presentation: the search tool's
    answer next to the final reply is shown, not `(no text)`."""
    output = _at(WIDE, 'search', 'production config file path', '--all', '--context', '1', store=demo).stdout
    assert "Tool [search_conversation_history]: Found 1 match(es) for 'production config file path'" in output
    assert '(no text)' not in output and '(no parts)' not in output


@pytest.mark.parametrize('where', [['--all'], ['-c', CONV, '--context', '100']], ids=' '.join)
def test_search_of_every_part_kind_does_not_import_pydantic_ai(store: Path, tmp_path: Path, where: list[str]) -> None:
    """Once the index is current, a search shows its hits, every part kind among them, from their
    stored payloads. (Bringing the index up to date, `eventlog reindex` here since a search writes
    nothing, decodes the messages `search.wire_text` cannot read, so it may import pydantic-ai; so
    do `--json`, whose indexed text of such a message is `search.render.index_text` of it decoded,
    and `--run`, which indexes the run's texts in memory on every search.)"""
    assert run_cli(['reindex', '--store', str(store)]).exit_code == 0
    assert 'pydantic_ai' not in set(_modules(tmp_path, 'search', 'pelican', *where, '--store', str(store)))


def _windows(store: Path, *, decode: bool, in_memory: bool = False, run_id: str | None = None) -> list[WindowMessage]:
    """Every message of the store, as the window of one search hit (`find(decode=...)`)."""

    async def read() -> list[WindowMessage]:
        log = LmdbEventLog(store)
        try:
            analyzer = DefaultAnalyzer()
            source = ReplayHistorySource(log) if in_memory else PersistentIndex.for_log(log, analyzer)
            engine = SearchEngine(source, SearchOptions(max_matches=1, context_lines=1000, analyzer=analyzer))
            result = await engine.find(
                'pelican', scope='conversation', conversation_id=CONV, run_id=run_id, decode=decode
            )
            return [shown for hit in result.hits for shown in hit.window]
        finally:
            log.close()

    return asyncio.run(read())


@pytest.mark.parametrize(
    ('in_memory', 'run_id'),
    [(False, None), (False, RUN), (True, None)],
    ids=['persistent index', 'one run from its payloads', 'in memory'],
)
def test_a_hits_lines_from_its_payload_are_the_decoding_paths(
    store: Path, messages: list[Entry], in_memory: bool, run_id: str | None
) -> None:
    """`search` shows a hit's window from the stored payloads (`find(decode=False)`): its lines and
    `--json`'s text are those the decoding path gives (the message decoded, then encoded again), for
    every part kind; the persistent index hands out the very bytes the log stored, decoding nothing."""
    decoded = _windows(store, decode=True, in_memory=in_memory, run_id=run_id)
    stored = _windows(store, decode=False, in_memory=in_memory, run_id=run_id)
    assert len(decoded) == len(stored) == len(messages)
    payloads = {entry.seq: entry.payload for entry in messages}
    locate = make_locator(DefaultAnalyzer(), frozenset({'pelican', 'zebra'}))
    for old, new in zip(decoded, stored, strict=True):
        assert (new.position, new.seq, new.repeated) == (old.position, old.seq, old.repeated)
        assert old.decoded is not None and old.payload is None
        assert new.payload is not None
        assert (new.decoded is None) is not in_memory
        if not in_memory:
            assert new.payload == payloads[new.seq]
        assert hit_lines(new.stored(), locate) == hit_lines(encode_message(old.message), locate)
        assert new.text() == index_text(old.message)
        assert new.message == old.message
