"""Stored text cannot drive the terminal: every human-readable view prints control characters,
bidi controls and markup-looking text visibly escaped, while `--json` keeps the exact strings."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from eventlog import (
    InvalidArgumentError,
    LmdbEventLog,
    NewEntry,
    compaction_entry,
    message_entry,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
)
from eventlog.log import EventLogBase
from eventlog_cli._render import clean
from tests.cli.clitools import invoke

CLEAR = '\x1b[2J'
LINK = '\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\'
TITLE = '\x1b]0;pwned\x07'
C1_CSI = '\x9b31m'
DEL = '\x7f'
RLO = '\u202e'
MARKUP = '[bold red]styled[/] [link=http://evil.example/]x[/link] :smile:'
EVIL = f'{CLEAR}{LINK}{TITLE}{C1_CSI}{DEL}{RLO}{MARKUP}'
"""Every attack at once, at the start of each field so that no clipping hides it."""

RAW = ['\x1b', '\x07', '\x9b', '\x7f', '\u202e']
ESCAPED = ['\\x1b[2J', '\\x1b]8;;http://evil.example/', '\\x1b]0;pwned\\x07', '\\x9b31m', '\\x7f', '\\u202e']

CONV = '[bold]conv[/bold]'
"""Ids cannot hold control characters, but they can look like markup."""
RUN = 'run-[red]1[/red]'


def _store(path: Path) -> None:
    async def build() -> None:
        log = LmdbEventLog(path)
        try:
            first = await log.append(
                run_started_entry(
                    conversation_id=CONV,
                    run_id=RUN,
                    agent_name=f'agent {EVIL}',
                    metadata={f'key {EVIL}': f'value {EVIL}'},
                )
            )
            assert first
            messages = [
                ModelRequest(
                    parts=[SystemPromptPart(content=f'system {EVIL}'), UserPromptPart(content=f'{EVIL} needle')]
                ),
                ModelResponse(
                    parts=[
                        TextPart(content=f'{EVIL}\nsecond line\tafter a tab'),
                        ToolCallPart(tool_name=f'tool{EVIL}', args={'arg': EVIL}, tool_call_id=f'call{EVIL}'),
                    ]
                ),
                ModelRequest(
                    parts=[
                        ToolReturnPart(tool_name=f'tool{EVIL}', content=f'{EVIL} returned', tool_call_id=f'call{EVIL}')
                    ]
                ),
            ]
            seqs = [await log.append(message_entry(m, conversation_id=CONV, run_id=RUN)) for m in messages[:2]]
            for status in ('started', 'failed'):
                await log.append(
                    tool_effect_entry(
                        conversation_id=CONV,
                        run_id=RUN,
                        tool_call_id=f'call{EVIL}',
                        tool_name=f'tool{EVIL}',
                        status=status,  # pyright: ignore[reportArgumentType]
                        error=None if status == 'started' else f'error {EVIL}',
                    )
                )
            await log.append(message_entry(messages[2], conversation_id=CONV, run_id=RUN))
            await log.append(
                compaction_entry(
                    conversation_id=CONV,
                    run_id=RUN,
                    replaced=seqs[:1],
                    summary=[ModelRequest(parts=[UserPromptPart(content=f'summary {EVIL}')])],
                )
            )
            await log.append(
                run_finished_entry(conversation_id=CONV, run_id=RUN, status='failed', error=f'boom {EVIL}')
            )
            await log.set_title(CONV, f'title {EVIL}')
        finally:
            log.close()

    asyncio.run(build())


@pytest.fixture(scope='module')
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('hostile') / 'store.lmdb'
    _store(path)
    return path


def _safe(output: str) -> None:
    for raw in RAW:
        assert raw not in output, f'raw {raw!r} reached the output'


VIEWS = [
    ['conversations'],
    ['runs'],
    ['runs', CONV],
    ['info', CONV],
    ['show', CONV],
    ['show', '--run', RUN],
    ['show', '--run', RUN, '--full'],
    ['replay', RUN],
    ['context', CONV],
    ['search', 'needle', '--all'],
    ['search', 'needle', '--conversation', CONV, '--context', '2'],
    ['tail', '-n', '50'],
    ['stats'],
]


@pytest.mark.parametrize('args', VIEWS, ids=lambda a: ' '.join(a))
def test_views_escape_what_a_terminal_would_act_on(hostile: Path, args: list[str]) -> None:
    result = invoke(*args, store=hostile)
    assert result.exit_code == 0, result.output
    _safe(result.stdout)
    if args[0] != 'stats':
        assert any(form in result.stdout for form in ESCAPED), result.stdout
        assert '\\u202e' in result.stdout
    if args[0] in ('conversations', 'runs', 'info', 'show', 'replay', 'context', 'search', 'tail'):
        assert CONV in result.stdout or RUN in result.stdout  # markup-looking ids printed as they are


@pytest.mark.parametrize(
    ('args', 'shown'),
    [
        (['conversations'], ['title \\x1b[2J', '[bold red]styled[/]']),
        (['runs'], ['agent \\x1b[2J']),
        (['info', CONV], ['title \\x1b[2J', 'agent \\x1b[2J']),
        (['show', CONV], ['title \\x1b[2J', 'tool\\x1b[2J', 'second line', 'summary \\x1b[2J', ':smile:']),
        (
            ['replay', RUN],
            ['agent \\x1b[2J', 'key \\x1b[2J', '=value', 'call\\x1b[2J', '): error', 'boom'],
        ),
        (['context', CONV], ['summary \\x1b[2J', '\\x9b31m\\x7f\\u202e[bold red]styled[/]']),
        (['tail', '-n', '50'], ["'title \\x1b[2J", 'tool\\x1b[2J', 'boom \\x1b[2J']),
    ],
    ids=lambda value: ' '.join(value) if isinstance(value, list) and value and '\\' not in value[0] else '',
)
def test_each_stored_field_is_shown_escaped(hostile: Path, args: list[str], shown: list[str]) -> None:
    out = invoke(*args, store=hostile).stdout
    for text in shown:
        assert text in out, f'{text!r} missing from {out}'


def test_a_message_keeps_its_lines_and_a_one_line_field_does_not(hostile: Path) -> None:
    out = invoke('show', CONV, store=hostile).stdout
    assert '\\x1b]0;pwned\\x07\\x9b31m' in out
    assert 'second line' in out and '\\x0asecond' not in out  # a message body keeps its newlines
    title_line = next(line for line in out.splitlines() if 'title' in line)
    assert '· 3 messages' in title_line
    assert clean('a\nb\tc') == 'a\\x0ab\\x09c'
    assert clean('a\nb\tc', multiline=True) == 'a\nb\tc'
    assert clean('\u2066\u2069\u200e\u200f\u061c\x85\r\ud800') == '\\u2066\\u2069\\u200e\\u200f\\u061c\\x85\\x0d\\ud800'
    assert clean('naïve 日本語 ✓') == 'naïve 日本語 ✓'


def test_json_keeps_the_exact_strings(hostile: Path) -> None:
    async def expected() -> tuple[bytes, bytes]:
        log = LmdbEventLog(hostile)
        try:
            return await log.transcript_json(CONV), ModelMessagesTypeAdapter.dump_json(await log.context(CONV))
        finally:
            log.close()

    transcript, context = asyncio.run(expected())
    assert invoke('show', CONV, '--json', store=hostile).stdout_bytes == transcript + b'\n'
    assert invoke('context', CONV, '--json', store=hostile).stdout_bytes == context + b'\n'
    shown = ModelMessagesTypeAdapter.validate_json(invoke('show', '--run', RUN, '--json', store=hostile).stdout)
    assert shown[1].parts[1].tool_name == f'tool{EVIL}'  # pyright: ignore[reportAttributeAccessIssue]
    conversations = json.loads(invoke('conversations', '--json', store=hostile).stdout)
    assert conversations[0]['title'] == f'title {EVIL}'
    runs = json.loads(invoke('runs', '--json', store=hostile).stdout)
    assert runs[0]['agent_name'] == f'agent {EVIL}' and runs[0]['error'] == f'boom {EVIL}'
    assert runs[0]['metadata'] == {f'key {EVIL}': f'value {EVIL}'}
    info = json.loads(invoke('info', CONV, '--json', store=hostile).stdout)
    assert info['title'] == f'title {EVIL}' and info['agents'] == [f'agent {EVIL}']
    replay = json.loads(invoke('replay', RUN, '--json', store=hostile).stdout)
    effects = [e['payload'] for e in replay['entries'] if e['kind'] == 'tool_effect']
    assert effects[1]['tool_call_id'] == f'call{EVIL}' and effects[1]['error'] == f'error {EVIL}'
    tail = [json.loads(line) for line in invoke('tail', '-n', '50', '--json', store=hostile).stdout.splitlines()]
    assert tail[-1]['payload'] == {'title': f'title {EVIL}'}
    found = json.loads(invoke('search', 'needle', '--all', '--json', store=hostile).stdout)
    assert found['results'][0]['text'].startswith(f'System: system {EVIL}\nUser: {EVIL} needle')


BAD_IDS = ['a\x9bb', 'a\x85', 'a\u202eb', 'a\u2066b', 'a\u2069', '\u200ea', 'a\u200f', 'a\u061cb', 'a\x1bb', 'a\x7f']


@pytest.mark.parametrize('bad', BAD_IDS, ids=ascii)
async def test_ids_refuse_c1_and_bidi_controls(log: EventLogBase, bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.append(run_started_entry(conversation_id=bad, run_id='r'))
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.append(run_started_entry(conversation_id='c', run_id=bad))
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.append(run_started_entry(conversation_id='c', run_id='r', idempotency_key=bad))
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.get_conversation(bad)
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.get_run(bad)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append(message_entry(ModelRequest(parts=[UserPromptPart(content='hi')]), conversation_id='c', run_id='r'))
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.fork('c', new_conversation_id=bad)
    with pytest.raises(InvalidArgumentError, match='control characters'):
        await log.append(NewEntry(conversation_id='c', kind='archived', idempotency_key=bad))
    assert await log.get_conversation('c') is not None
    assert [r.run_id for r in await log.list_runs()] == ['r']


async def test_ids_keep_accepting_printable_unicode(log: EventLogBase) -> None:
    for good in ['naïve', '日本語', 'a b', 'emoji ✓', '[bold]x[/]', 'a\u200db']:
        await log.append(run_started_entry(conversation_id=good, run_id=f'run {good}'))
        assert (await log.get_conversation(good)) is not None


def test_cli_refuses_a_c1_id_in_one_line(hostile: Path) -> None:
    result = invoke('show', 'x\x9by', store=hostile)
    assert result.exit_code == 1
    assert result.stderr.startswith('eventlog: ') and len(result.stderr.splitlines()) == 1
    assert '\x9b' not in result.stderr and '\\x9b' in result.stderr
