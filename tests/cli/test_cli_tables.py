"""Every table reads well at 80 columns and uses the room at 120: no header cut, no time
wrapped, every line within the width, columns dropped or shortened by priority, and
generated ids abbreviated to a prefix that names them alone."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import lmdb
import pytest
from clirunner import Result
from clitools import build_store_async, invoke, make_agent
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.cells import cell_len

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog
from eventlog._engine import seq_key
from eventlog_cli._tables import Column, compact_time, compact_times, fitted_widths

LONG_AGENT = 'customer-support-triage-assistant'
LONG_TITLE = 'Quarterly migration of the payment ledger to the new cluster, with rollback drills'
FULL_TIME = re.compile(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d')
COMPACT_TIME = re.compile(r'[A-Z][a-z]{2} [ \d]\d (?:\d\d:\d\d| \d{4})|\b\d\d:\d\d:\d\d\b')
"""A compact start time: `ls -l`'s form, or the time of day when every run started on one day
(the header names the day: `started Nov 30`)."""
UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}')


def at(width: int, *args: str | Path, store: Path) -> Result:
    """`eventlog ARGS --store STORE` on a terminal `width` columns wide."""
    return invoke(*args, store=store, env={'COLUMNS': str(width)})


def _delegating(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls `delegate` once, then answers."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart('delegated')])
    return ModelResponse(parts=[ToolCallPart('delegate', {'task': 'check the ledger'}, tool_call_id='call-1')])


async def _build(path: Path) -> None:
    """The CLI tests' store (`alpha`, `beta`), plus a conversation with a generated id, a long
    title and a long agent name, whose run delegates to a subagent (a run with a parent run)."""
    await build_store_async(path)
    log = LmdbEventLog(path)
    try:
        helper = make_agent(log, 'ledger-checker')
        boss = Agent(FunctionModel(_delegating), name=LONG_AGENT, capabilities=[EventLogPersistence[None](log)])

        @boss.tool_plain
        async def delegate(task: str) -> str:
            """Hand a task to the helper."""
            return (await helper.run(task)).output

        result = await boss.run('start the ledger migration')
        started = next(r for r in await log.list_runs() if r.agent_name == LONG_AGENT)
        await log.set_title(started.conversation_id, LONG_TITLE)
        follow = make_agent(log, LONG_AGENT)
        await follow.run('and the rollback drill', message_history=result.all_messages())
    finally:
        log.close()


@pytest.fixture(scope='module')
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('tables') / 'store.lmdb'
    asyncio.run(_build(path))
    return path


def _json(store: Path, *args: str) -> list[dict[str, object]]:
    return json.loads(at(240, *args, '--json', store=store).stdout)


def _lines(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _check_fits(lines: list[str], width: int) -> None:
    for line in lines:
        assert cell_len(line) <= width, f'{line!r} is wider than {width}'


def _check_header(header: str, expected: list[str]) -> list[str]:
    """The header names exactly `expected`'s columns that are shown, none cut; returns them."""
    assert '…' not in header and '...' not in header, header
    names = [re.sub(r'^started [A-Z][a-z]{2} \d+$', 'started', name) for name in re.split(r'\s{2,}', header.strip())]
    assert names and all(name in expected for name in names), (names, expected)
    assert [name for name in expected if name in names] == names  # in their order
    return names


RUN_HEADERS = [
    'run',
    'conversation',
    'started',
    'duration',
    'status',
    'agent',
    'parent run',
    'messages',
    'tokens in/out',
]


@pytest.mark.parametrize('width', [80, 120])
def test_runs_fit_by_priority(store: Path, width: int) -> None:
    runs = _json(store, 'runs')
    lines = _lines(at(width, 'runs', store=store))
    shown = _check_header(lines[0], RUN_HEADERS)
    rows = lines[1:-1]
    assert len(rows) == len(runs)  # one line per run: nothing wrapped
    assert lines[-1] == f'{len(runs)} runs: {len(runs)} completed'
    _check_fits(lines, width)
    # What matters most is always there.
    assert {'run', 'status', 'started', 'conversation', 'agent'} <= set(shown)
    time = FULL_TIME if width >= 120 else COMPACT_TIME
    assert all(time.search(row) for row in rows), rows
    if width == 120:
        # The room is used: full times, the parent run, agent names whole up to 16 characters
        # and more (a longer one clipped rather than a column dropped).
        assert {'duration', 'parent run', 'messages'} <= set(shown)
        assert any(' ledger-checker ' in row for row in rows)
        assert any(re.search(LONG_AGENT[:20] + r'[-\w]*…', row) for row in rows)
    else:
        assert 'tokens in/out' not in shown
    # Run ids are abbreviated, each to a prefix no other run id starts with.
    every = [str(r['run_id']) for r in runs]
    for row, run in zip(rows, runs, strict=True):
        short = row.split()[0]
        assert 8 <= len(short) < 36 and not short.endswith('-')
        assert [other for other in every if other.startswith(short)] == [run['run_id']]


def test_runs_show_the_parent_run_abbreviated(store: Path) -> None:
    runs = _json(store, 'runs')
    child = next(r for r in runs if r['parent_run_id'])
    lines = _lines(at(160, 'runs', store=store))
    row = next(line for line in lines[1:] if str(child['run_id']).startswith(line.split()[0]))
    parent = str(child['parent_run_id'])
    assert parent not in row and parent[:8] in row


@pytest.mark.parametrize('width', [80, 120])
def test_runs_of_one_conversation_fit(store: Path, width: int) -> None:
    conversation = next(c for c in _json(store, 'conversations') if c['title'] == LONG_TITLE)
    conversation_id = str(conversation['conversation_id'])
    lines = _lines(at(width, 'runs', conversation_id, store=store))
    shown = _check_header(lines[0], RUN_HEADERS)
    assert 'conversation' not in shown
    _check_fits(lines, width)
    # Without the conversation column, there is room for more at 80 than in the full list.
    assert {'duration', 'messages'} <= set(shown)


CONVERSATION_HEADERS = ['conversation', 'title', 'runs', 'messages', 'size', 'last activity', 'archived']


@pytest.mark.parametrize('width', [80, 120])
@pytest.mark.parametrize('archived', [False, True])
def test_conversations_fit_by_priority(store: Path, width: int, archived: bool) -> None:
    flags = ['--include-archived'] if archived else []
    conversations = _json(store, 'conversations', *flags)
    lines = _lines(at(width, 'conversations', *flags, store=store))
    shown = _check_header(lines[0], CONVERSATION_HEADERS)
    assert len(lines) == len(conversations) + 1
    _check_fits(lines, width)
    assert {'conversation', 'title', 'last activity'} <= set(shown)
    assert ('archived' in shown) == archived
    time = FULL_TIME if width >= 120 else re.compile(f'{FULL_TIME.pattern}|{COMPACT_TIME.pattern}')
    assert all(time.search(row) for row in lines[1:])
    titled = next(line for line in lines if 'Quarterly migration' in line)
    assert LONG_TITLE not in titled and '…' in titled  # a title is what gives way, clipped
    generated = next(c for c in conversations if c['title'] == LONG_TITLE)
    assert UUID.fullmatch(str(generated['conversation_id']))
    short = titled.split()[0]
    assert 8 <= len(short) < 36 and str(generated['conversation_id']).startswith(short)
    # Ids a person chose are shown whole.
    assert any(line.split()[0] == 'alpha' for line in lines)


def test_a_wide_terminal_shows_every_column_and_the_whole_title(store: Path) -> None:
    lines = _lines(at(200, 'conversations', store=store))
    assert _check_header(lines[0], CONVERSATION_HEADERS) == CONVERSATION_HEADERS[:-1]
    assert any(LONG_TITLE in line for line in lines)
    runs = _lines(at(200, 'runs', store=store))
    assert _check_header(runs[0], RUN_HEADERS) == RUN_HEADERS


def test_full_ids_show_ids_whole(store: Path) -> None:
    runs = _json(store, 'runs')
    out = at(240, 'runs', '--full-ids', store=store).stdout
    assert all(str(r['run_id']) in out for r in runs)
    conversations = _json(store, 'conversations')
    out = at(240, 'conversations', '--full-ids', store=store).stdout
    assert all(str(c['conversation_id']) in out for c in conversations)
    tail = at(240, 'tail', '-n', '5', '--full-ids', store=store).stdout
    assert UUID.search(tail)
    assert not UUID.search(at(240, 'tail', '-n', '5', store=store).stdout)


def test_json_keeps_full_ids(store: Path) -> None:
    for run in _json(store, 'runs'):
        assert UUID.fullmatch(str(run['run_id']))
    generated = [c for c in _json(store, 'conversations') if c['title'] == LONG_TITLE]
    assert UUID.fullmatch(str(generated[0]['conversation_id']))
    tail = at(80, 'tail', '-n', '3', '--json', store=store).stdout.splitlines()
    assert all(UUID.fullmatch(json.loads(line)['run_id']) for line in tail)


@pytest.mark.parametrize('width', [80, 120])
def test_info_and_stats_fit(store: Path, width: int) -> None:
    conversation = next(c for c in _json(store, 'conversations') if c['title'] == LONG_TITLE)
    for args in (['info', str(conversation['conversation_id'])], ['stats']):
        lines = _lines(at(width, *args, store=store))
        _check_fits(lines, width)
        assert not any('…' in line for line in lines)
    info = _lines(at(width, 'info', str(conversation['conversation_id']), store=store))
    assert any(str(conversation['conversation_id']) in line for line in info)  # a record shows its id whole
    for label in ('created', 'last activity'):
        line = next(line for line in info if line.startswith(label))
        assert FULL_TIME.search(line)


@pytest.mark.parametrize('width', [80, 120])
def test_headings_that_hold_whole_ids_are_never_cut(store: Path, width: int) -> None:
    conversation = next(c for c in _json(store, 'conversations') if c['title'] == LONG_TITLE)
    conversation_id = str(conversation['conversation_id'])
    run_id = str(next(r for r in _json(store, 'runs') if r['conversation_id'] == conversation_id)['run_id'])
    for args, wanted in (
        (['show', conversation_id], [conversation_id, LONG_TITLE]),
        (['show', '--run', run_id], [run_id, conversation_id]),
        (['context', conversation_id], [conversation_id]),
        (['replay', run_id], [run_id, conversation_id]),
    ):
        out = at(width, *args, store=store).stdout
        head = '\n'.join(out.splitlines()[:4])
        flat = ' '.join(head.split())
        for text in wanted:
            assert text in flat or text in head.replace('\n', ''), (args, head)
        assert '…' not in head.split('───')[0], head


def _break(store: Path, tmp_path: Path) -> Path:
    """A copy of `store` with one message of `alpha` altered."""
    copy = tmp_path / 'broken.lmdb'
    copy.mkdir()
    (copy / 'data.mdb').write_bytes((store / 'data.mdb').read_bytes())
    log = LmdbEventLog(copy)
    try:
        target = next(e.seq for e in asyncio.run(log.entries(conversation_id='alpha')) if b'quokka' in e.payload)
    finally:
        log.close()
    env = lmdb.open(str(copy), max_dbs=32)
    with env.begin(write=True) as txn:
        entries = env.open_db(b'entries', txn=txn)
        value = txn.get(seq_key(target), db=entries)
        assert value is not None
        txn.put(seq_key(target), value.replace(b'quokka', b'koala!'), db=entries)
    env.close()
    return copy


@pytest.mark.parametrize('width', [80, 120])
def test_verify_findings_fit(store: Path, tmp_path: Path, width: int) -> None:
    broken = _break(store, tmp_path)
    result = at(width, 'verify', store=broken)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith('conversation'))
    names = _check_header(header, ['conversation', 'first bad entry', 'entry', 'finding', 'reason'])
    assert 'reason' in names and ('first bad entry' in names or 'entry' in names)
    _check_fits(lines[1:], width)
    row = lines[lines.index(header) + 1]
    assert row.startswith('alpha') and re.search(r'#\d+', row)


def test_fitting_gives_up_columns_in_the_order_given() -> None:
    def table() -> list[Column]:
        a = Column('a-column')
        b = Column('bee', flex='clip', min_width=5)
        c = Column('when', compact_header='w')
        d = Column('dropped')
        empty = Column('empty', hide_empty=True)
        for value in ('x' * 10, 'y' * 4):
            a.add(value)
            b.add('long text ' * 3)
            c.add('2026-11-30 10:00:24', 'Nov 30 10:00')
            d.add('1')
            empty.add('')
        return [a, b, c, d, empty]

    steps = [('compact', 'when'), ('drop', 'dropped'), ('drop', 'bee')]
    wide = fitted_widths(table(), steps, 200)
    assert [(c.shown_header, w) for c, w in wide] == [('a-column', 10), ('bee', 30), ('when', 19), ('dropped', 7)]
    # Narrower: the flexible column gives up width first, down to its minimum; then the steps
    # apply in order, each only while the table is still too wide.
    assert [(c.shown_header, w) for c, w in fitted_widths(table(), steps, 50)] == [
        ('a-column', 10),
        ('bee', 8),
        ('when', 19),
        ('dropped', 7),
    ]
    assert [(c.shown_header, w) for c, w in fitted_widths(table(), steps, 42)] == [
        ('a-column', 10),
        ('bee', 7),
        ('w', 12),
        ('dropped', 7),
    ]
    assert [(c.shown_header, w) for c, w in fitted_widths(table(), steps, 36)] == [
        ('a-column', 10),
        ('bee', 10),
        ('w', 12),
    ]
    assert [(c.shown_header, w) for c, w in fitted_widths(table(), steps, 25)] == [('a-column', 10), ('w', 12)]
    # Nothing left to give up: what remains is shown whole rather than cut.
    assert [(c.shown_header, w) for c, w in fitted_widths(table(), steps, 5)] == [('a-column', 10), ('w', 12)]


def test_compact_times_of_one_day_tell_the_rows_apart() -> None:
    one_day = [datetime(2026, 11, 30, 10, 0, second, tzinfo=UTC) for second in (12, 12, 40)]
    assert compact_times(one_day) == ('Nov 30', ['10:00:12', '10:00:12', '10:00:40'])
    now = datetime(2026, 12, 1, tzinfo=UTC)
    two_days = [datetime(2026, 11, 30, 10, 0, tzinfo=UTC), datetime(2026, 12, 1, 9, 5, tzinfo=UTC)]
    assert compact_times(two_days, now) == (None, ['Nov 30 10:00', 'Dec  1 09:05'])


def test_runs_at_80_columns_show_the_time_of_day_of_each_start(store: Path) -> None:
    runs = _json(store, 'runs')
    lines = _lines(at(80, 'runs', store=store))
    days = {str(r['started_at'])[:10] for r in runs}
    assert len(days) == 1  # the store was written in one go
    month_day = datetime.fromisoformat(str(runs[0]['started_at'])).strftime('%b %-d')
    assert f'started {month_day}' in lines[0]
    for row, run in zip(lines[1:-1], runs, strict=True):
        assert str(run['started_at'])[11:19] in row  # HH:MM:SS


def test_compact_time_is_ls_style() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert compact_time(datetime(2026, 11, 30, 10, 0, 24, tzinfo=UTC), now) == 'Nov 30 10:00'
    assert compact_time(datetime(2026, 7, 4, 9, 5, tzinfo=UTC), now) == 'Jul  4 09:05'
    assert compact_time(datetime(2025, 11, 30, 10, 0, tzinfo=UTC), now) == 'Nov 30  2025'
    assert compact_time(None, now) == ''
