"""The fast commands (`eventlog_cli._fast`) say exactly what the full command line says.

Each command line runs twice in fresh interpreters over the same store: through the fast
commands alone (which report whether they answered or left it to the full command line), and
through the typer app. Standard output, standard error and the exit status must be the same;
and the cases the fast commands are for must really be answered by them, without typer, click,
asyncio or pydantic-ai loaded, and without Rich where plain text is enough (a pipe).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import lmdb
import pytest
from clitools import Store, run_on_terminal, shared
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from rich.cells import cell_len

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry, tool_effect_entry
from eventlog._keys import seq_key
from eventlog_cli import _plain as plain
from eventlog_cli import _views as views
from eventlog_cli._fast import HELP_FILE

__all__ = ['shared']

UUID = '0f3c9a52-7d4e-4b1a-9c2e-5a6b7c8d9e0f'
"""A generated conversation id: shown abbreviated."""

SLOW_MODULES = ('typer', 'rich', 'click', 'asyncio', 'pydantic_ai', 'pydantic', 'numpy')
"""What the fast commands exist to leave unloaded when they print plain text."""

STYLED_SLOW_MODULES = tuple(name for name in SLOW_MODULES if name != 'rich')
"""What they leave unloaded when Rich lays the view out (a terminal, forced colours, wrapping)."""

FAST = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli._fast import run
    status = run(sys.argv[2:])
    sys.stdout.flush()
    loaded = sorted({name.split('.')[0] for name in sys.modules})
    with open(sys.argv[1], 'w') as out:
        json.dump({'status': status, 'modules': loaded}, out)
    """
)

FULL = 'import sys\nfrom eventlog_cli.cli import run_app\nsys.exit(run_app(sys.argv[1:]))\n'


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ('EVENTLOG_STORE', 'COLUMNS', 'FORCE_COLOR', 'TTY_COMPATIBLE')
    }
    return {**env, **(extra or {})}


def _fast(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> tuple[int | None, Outcome, list[str]]:
    """`args` through the fast commands alone: their answer (`None`: left to the full command
    line), what they printed, and the top-level modules loaded."""
    report = tmp_path / 'fast.json'
    done = subprocess.run(
        [sys.executable, '-c', FAST, str(report), *args], capture_output=True, text=True, env=_env(env), timeout=120
    )
    data = json.loads(report.read_text())
    status = data['status']
    return status, Outcome(status or 0, done.stdout, done.stderr), data['modules']


def _full(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    done = subprocess.run(
        [sys.executable, '-c', FULL, *args], capture_output=True, text=True, env=_env(env), timeout=120
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def _same(
    tmp_path: Path, args: list[str], env: dict[str, str] | None = None, *, rich: bool | None = False
) -> int | None:
    """Assert the fast commands print what the full command line prints (when they answer),
    with Rich loaded when `rich` says so (`None`: either way); return their answer."""
    answer, fast, modules = _fast(tmp_path, args, env)
    if answer is None:
        assert (fast.stdout, fast.stderr) == ('', ''), 'left to the full command line after printing'
        return None
    assert fast == _full(args, env), args
    assert [name for name in STYLED_SLOW_MODULES if name in modules] == [], args
    if rich is not None:
        assert ('rich' in modules) == rich, args
    return answer


async def _build_odd(path: Path) -> None:
    """Conversations the views treat specially: generated, archived, deleted, titled oddly."""
    log = LmdbEventLog(path)
    try:
        for conversation in (UUID, 'plain', 'archived-one', 'gone', 'accents', 'wide', 'long', 'nasty'):
            run = f'{conversation}-run'
            await log.append(run_started_entry(conversation_id=conversation, run_id=run, agent_name='helper'))
            await log.append(
                message_entry(
                    ModelRequest(parts=[UserPromptPart(content=f'hello {conversation}\twith a tab\nand a line')]),
                    conversation_id=conversation,
                    run_id=run,
                )
            )
            await log.append(
                message_entry(ModelResponse(parts=[TextPart(content='hi')]), conversation_id=conversation, run_id=run)
            )
            await log.append(
                tool_effect_entry(
                    conversation_id=conversation,
                    run_id=run,
                    tool_call_id='c1',
                    tool_name='lookup',
                    status='failed',
                    error='no such key',
                )
            )
            await log.append(run_finished_entry(conversation_id=conversation, run_id=run, status='failed', error='x'))
        await log.set_title('accents', 'Réunion à Zürich — ŝtato')
        await log.set_title('wide', '会議の記録')
        await log.set_title('long', 'a long title ' * 20)
        await log.set_title('nasty', 'red \x1b[31m alert \u202e reversed')
        for hidden in ('archived-one', 'wide', 'long'):  # `conversations` lists the rest in plain text
            await log.archive(hidden)
        await log.delete_conversation('gone')
        assert await log.scrub() is None  # else the first command to open the store would finish it
        await views.read_stats(log, path)  # creates the index's tables, as the first `stats` would
    finally:
        log.close()


@pytest.fixture(scope='module')
def odd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('odd') / 'store.lmdb'
    asyncio.run(_build_odd(path))
    return path


ANSWERED = [
    ['conversations'],
    ['conversations', '--json'],
    ['conversations', '--include-archived'],
    ['conversations', '--full-ids', '--include-archived', '--json'],
    ['info', 'alpha'],
    ['info', 'alpha', '--json'],
    ['info', 'alph'],
    ['info', 'nope'],
    ['info', 'nope', '--json'],
    ['stats'],
    ['stats', '--json'],
    ['verify'],
    ['verify', '--json'],
    ['tail'],
    ['tail', '--json'],
    ['tail', '-n', '3'],
    ['tail', '--lines=0'],
    ['tail', '--lines', '1000'],
    ['tail', '-c', 'alpha', '--kind', 'message', '-k', 'compaction'],
    ['tail', '--max-entries', '2', '--full-ids'],
    ['tail', '--conversation', 'nope'],
    ['tail', '--run', 'nope'],
    ['tail', '--kind', 'no-such-kind'],
]


@pytest.mark.parametrize('args', ANSWERED, ids=' '.join)
def test_the_fast_commands_answer_as_the_full_command_line(shared: Store, tmp_path: Path, args: list[str]) -> None:
    assert _same(tmp_path, [*args, '--store', str(shared.path)]) is not None


def test_a_run_prefix_and_the_ways_to_name_a_store(shared: Store, tmp_path: Path) -> None:
    store = str(shared.path)
    for args, env in (
        (['tail', '-r', shared.alpha_runs[1][:8], '--json'], {'EVENTLOG_STORE': store}),
        (['--store', store, 'conversations'], None),
        (['-s', store, 'info', 'beta'], None),
        ([f'--store={store}', 'stats', '--json'], None),
        (['conversations', f'-s{store}'], None),
        (['--store', '/nowhere', 'conversations', '--store', store], None),
        (['stats'], {'EVENTLOG_STORE': store}),
    ):
        assert _same(tmp_path, args, env) is not None, args


@pytest.mark.parametrize(
    'args',
    [
        ['conversations'],
        ['conversations', '--include-archived', '--json'],
        ['info', 'accents'],
        ['info', 'nasty'],
        ['info', 'gone'],
        ['info', UUID[:6]],
        ['info', UUID, '--json'],
        ['stats'],
        ['verify'],
        ['tail', '-n', '100'],
        ['tail', '-n', '100', '--json'],
        ['tail', '--conversation', 'gone'],
    ],
    ids=' '.join,
)
def test_odd_stores_read_the_same(odd: Path, tmp_path: Path, args: list[str]) -> None:
    assert _same(tmp_path, [*args, '--store', str(odd)]) is not None


@pytest.mark.parametrize(
    ('args', 'env'),
    [
        (['conversations', '--include-archived'], None),  # a wide title: Rich measures it
        (['info', 'wide'], None),
        (['info', 'long'], {'COLUMNS': '80'}),  # wraps at 80 columns
        (['conversations', '--include-archived'], {'COLUMNS': '80'}),  # a title clipped
        (['stats'], {'FORCE_COLOR': '1'}),  # Rich would write colours to the pipe
        (['verify'], {'TTY_COMPATIBLE': '1'}),
        (['conversations'], {'COLUMNS': 'wide'}),
    ],
)
def test_what_only_rich_lays_out_is_printed_through_it(
    odd: Path, tmp_path: Path, args: list[str], env: dict[str, str] | None
) -> None:
    """Plain text cannot promise Rich's characters here: the fast commands print the full
    command line's own Rich layouts (`eventlog_cli._styled`), still without typer or asyncio."""
    assert _same(tmp_path, [*args, '--store', str(odd)], env, rich=True) is not None


TERMINAL_CASES = [
    ('shared', ['conversations']),
    ('shared', ['conversations', '--full-ids']),
    ('shared', ['info', 'alpha']),
    ('shared', ['info', 'nope']),
    ('shared', ['stats']),
    ('shared', ['verify']),
    ('shared', ['tail']),
    ('shared', ['tail', '-n', '3', '--full-ids']),
    ('odd', ['conversations', '--include-archived']),
    ('odd', ['info', 'nasty']),
    ('odd', ['info', 'long']),
    ('odd', ['tail', '-n', '100']),
]
"""Views printed on a terminal, where Rich styles them: the fast commands print them through Rich too."""


@pytest.mark.parametrize(('store', 'args'), TERMINAL_CASES, ids=[' '.join(a) for _, a in TERMINAL_CASES])
@pytest.mark.parametrize('columns', [60, 120])
def test_a_terminal_gets_the_full_command_lines_styled_views(
    shared: Store, odd: Path, tmp_path: Path, store: str, args: list[str], columns: int
) -> None:
    """On a terminal the fast commands answer (without typer, click or asyncio) with the very
    bytes the full command line writes there: styles, wrapping and narrowing included."""
    argv = [*args, '--store', str(shared.path if store == 'shared' else odd)]
    env = _env({'TERM': 'xterm-256color'})
    report = tmp_path / 'fast.json'
    _, fast = run_on_terminal([sys.executable, '-c', FAST, str(report), *argv], env, columns)
    data = json.loads(report.read_text())
    assert data['status'] is not None, 'left to the full command line'
    assert [name for name in STYLED_SLOW_MODULES if name in data['modules']] == []
    status, full = run_on_terminal([sys.executable, '-c', FULL, *argv], env, columns)
    assert status != 0 or b'\x1b[' in full  # styled: Rich saw a terminal
    assert (data['status'], fast) == (status, full)


@pytest.mark.parametrize('columns', ['40', '100', '200'])
def test_the_width_comes_from_columns(odd: Path, tmp_path: Path, columns: str) -> None:
    for args in (['stats'], ['conversations'], ['info', 'plain'], ['verify'], ['tail', '-n', '5']):
        assert _same(tmp_path, [*args, '--store', str(odd)], {'COLUMNS': columns}, rich=None) is not None
    assert _same(tmp_path, ['tail', '--store', str(odd)], {'COLUMNS': columns}) is not None


@pytest.mark.parametrize(
    'args',
    [
        ['conversations', '--bogus'],
        ['info'],
        ['info', 'a', 'b'],
        ['info', '--help'],
        ['tail', '--lines', '-1'],
        ['tail', '--lines', 'many'],
        ['tail', '--follow', '--timeout', '0'],
        ['tail', '-fn3', '--timeout', '0'],
        ['stats', '--json=yes'],
        ['stats', '--'],
        ['stats', '--store'],
        ['stats', '--store', ''],
        ['runs'],
        [],
    ],
    ids=lambda a: ' '.join(a) or '(nothing)',
)
def test_unusual_command_lines_are_left_to_the_full_command_line(tmp_path: Path, args: list[str]) -> None:
    assert _fast(tmp_path, args)[0] is None


def test_missing_and_foreign_stores(tmp_path: Path) -> None:
    missing = tmp_path / 'missing.lmdb'
    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    for command in (['conversations'], ['info', 'x'], ['stats', '--json'], ['verify'], ['tail']):
        for store in (missing, foreign):
            assert _same(tmp_path, [*command, '--store', str(store)]) == 1
    assert not missing.exists()
    assert list(foreign.iterdir()) == []


def _break(store: Path, tmp_path: Path) -> Path:
    """A copy of `store` whose first message of `alpha` is altered after it was hashed."""
    copy = tmp_path / 'broken.lmdb'
    copy.mkdir()
    (copy / 'data.mdb').write_bytes((store / 'data.mdb').read_bytes())
    log = LmdbEventLog(copy)
    try:
        target = next(e.seq for e in asyncio.run(log.entries(conversation_id='alpha', kinds=['message'])))
    finally:
        log.close()
    env = lmdb.open(str(copy), max_dbs=32)
    with env.begin(write=True) as txn:
        entries = env.open_db(b'entries', txn=txn)
        value = txn.get(seq_key(target), db=entries)
        assert value is not None and b'remember' in value
        txn.put(seq_key(target), value.replace(b'remember', b'remembor'), db=entries)
    env.close()
    return copy


def test_a_broken_store(shared: Store, tmp_path: Path) -> None:
    """`verify --json` reports the finding (status 1); the findings' table is the full command line's."""
    broken = _break(shared.path, tmp_path)
    assert _same(tmp_path, ['verify', '--json', '--store', str(broken)]) == 1
    assert _same(tmp_path, ['verify', '--store', str(broken)]) is None
    script = 'import sys\nfrom eventlog_cli.launch import main\nsys.argv[0] = "eventlog"\nmain()\n'
    done = subprocess.run(
        [sys.executable, '-c', script, 'verify', '--store', str(broken)],
        capture_output=True,
        text=True,
        env=_env(None),
        timeout=120,
    )
    assert Outcome(done.returncode, done.stdout, done.stderr) == _full(['verify', '--store', str(broken)])
    assert done.returncode == 1 and done.stdout.startswith('BROKEN')


@pytest.mark.parametrize('columns', ['80', '200'])
def test_the_help_is_the_full_command_lines(tmp_path: Path, columns: str) -> None:
    """`help.txt` is what typer prints: when a command's help changes, regenerate it with
    `COLUMNS=200 python -c "from eventlog_cli.cli import app; app(['--help'], prog_name='eventlog')" > eventlog_cli/help.txt`."""
    assert _same(tmp_path, ['--help'], {'COLUMNS': columns}) == 0
    assert _full(['--help'], {'COLUMNS': columns}).stdout == HELP_FILE.read_text(encoding='utf-8')
    assert _fast(tmp_path, ['--help'], {'COLUMNS': '79'})[0] is None  # click lays it out narrower


def test_the_console_script_answers_fast_and_through_the_crash_guard(shared: Store, tmp_path: Path) -> None:
    """`python -m eventlog_cli` (as the console script) forks, and the child answers without typer."""
    code = textwrap.dedent(
        """
        import os, sys
        from eventlog_cli import launch
        launch._command = (lambda real: lambda argv: (real(argv), print(
            ','.join(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1].split(',')))),
            file=sys.stderr))[0])(launch._command)
        sys.argv = ['eventlog', *sys.argv[2:]]
        launch.main()
        """
    )
    done = subprocess.run(
        [sys.executable, '-c', code, ','.join(SLOW_MODULES), 'conversations', '--store', str(shared.path)],
        capture_output=True,
        text=True,
        env=_env(None),
        timeout=120,
    )
    assert done.returncode == 0
    assert done.stderr == '\n'  # no slow module was loaded
    assert done.stdout == _full(['conversations', '--store', str(shared.path)]).stdout


def test_one_cell_per_simple_character_as_rich_measures() -> None:
    simple = [chr(code) for code in range(0x10000) if plain.is_simple(chr(code))]
    assert len(simple) > 1000
    assert [c for c in simple if cell_len(c) != 1] == []
    assert not plain.is_simple('会') and not plain.is_simple('e\u0301') and not plain.is_simple('\t')
