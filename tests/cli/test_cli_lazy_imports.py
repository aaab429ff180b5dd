"""The everyday commands start without importing pydantic-ai or numpy (what makes them slow to start).

Each check runs in a fresh interpreter and reads `sys.modules` afterwards; how long the
commands take is shown by `bench/bench_cli_start.py`, not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from clitools import Store, build_store, invoke, run_on_terminal, shared

import capability
import eventlog
import search

__all__ = ['shared']

HEAVY = ('pydantic_ai', 'numpy')
"""Top-level packages the fast commands must not import."""

RUN_COMMAND = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli.cli import app
    try:
        app(sys.argv[2:], prog_name='eventlog')
    except SystemExit as exc:
        status = exc.code or 0
    else:
        status = 0
    loaded = sorted({name.split('.')[0] for name in sys.modules})
    with open(sys.argv[1], 'w') as out:
        json.dump({'status': status, 'modules': loaded}, out)
    """
)


def _run(tmp_path: Path, *args: str) -> tuple[int, str, list[str]]:
    """Run `eventlog ARGS` in a fresh interpreter: exit status, stdout, top-level modules loaded."""
    report = tmp_path / 'report.json'
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    done = subprocess.run(
        [sys.executable, '-c', RUN_COMMAND, str(report), *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stderr == '', done.stderr
    data = json.loads(report.read_text())
    return data['status'], done.stdout, data['modules']


@pytest.mark.parametrize(
    'command',
    [
        ['--help'],
        ['conversations'],
        ['conversations', '--json'],
        ['info', 'alpha'],
        ['stats'],
        ['verify'],
        ['runs'],
        ['tail', '--kind', 'run_started', '--kind', 'run_finished', '--kind', 'tool_effect'],
        ['tail', '--lines', '40'],
    ],
    ids=' '.join,
)
def test_fast_commands_do_not_import_pydantic_ai(shared: Store, tmp_path: Path, command: list[str]) -> None:
    args = command if command == ['--help'] else [*command, '--store', str(shared.path)]
    status, stdout, modules = _run(tmp_path, *args)
    assert status == 0, stdout
    assert stdout.strip()
    assert [name for name in HEAVY if name in modules] == []


def test_the_fast_commands_still_say_what_they_said(shared: Store, tmp_path: Path) -> None:
    """Nothing the lazy imports skipped was needed: the answers are the real ones."""
    _, listing, _ = _run(tmp_path, 'conversations', '--json', '--store', str(shared.path))
    rows = json.loads(listing)
    assert {row['conversation_id'] for row in rows} == {'alpha', 'beta'}
    _, info, _ = _run(tmp_path, 'info', 'alpha', '--store', str(shared.path))
    assert 'Alpha planning' in info
    status, verdict, _ = _run(tmp_path, 'verify', '--store', str(shared.path))
    assert status == 0 and verdict.startswith('ok')


def test_the_views_of_messages_read_them_without_pydantic_ai(shared: Store, tmp_path: Path) -> None:
    """`show`, `replay` and `context` read stored messages with msgspec (`eventlog_cli.entries`);
    `search` still decodes them with pydantic-ai (and numpy), and the lazy import really happens."""
    for view in (['show', 'alpha'], ['replay', '--last'], ['context', 'alpha']):
        status, stdout, modules = _run(tmp_path, *view, '--store', str(shared.path))
        assert status == 0 and stdout.strip()
        assert [name for name in HEAVY if name in modules] == [], view
    status, stdout, modules = _run(tmp_path, 'show', 'alpha', '--store', str(shared.path))
    assert 'quokka-archive-7731' in stdout
    status, stdout, modules = _run(tmp_path, 'search', 'quokka', '--all', '--store', str(shared.path))
    assert status == 0 and 'quokka' in stdout
    assert 'pydantic_ai' in modules and 'numpy' in modules


def test_the_console_script_still_forks_and_answers(shared: Store) -> None:
    """`main` (the crash guard that runs the command in a forked child) works with the lazy imports."""
    script = 'import sys\nfrom eventlog_cli.cli import main\nsys.argv[0] = "eventlog"\nmain()\n'
    done = subprocess.run(
        [sys.executable, '-c', script, 'conversations', '--json', '--store', str(shared.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert {row['conversation_id'] for row in json.loads(done.stdout)} == {'alpha', 'beta'}


def test_importing_the_packages_does_not_import_pydantic_ai() -> None:
    code = 'import sys, eventlog, search, capability, eventlog_cli.cli; print(sorted({m.split(".")[0] for m in sys.modules}))'
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120)
    loaded = eval(done.stdout)  # a printed list of module names
    assert [name for name in HEAVY if name in loaded] == []


@pytest.mark.parametrize('package', [eventlog, search, capability], ids=lambda p: p.__name__)
def test_every_public_name_still_resolves(package: ModuleType) -> None:
    """The lazily resolved names are the submodules' own objects, and `dir` lists them all."""
    names: list[str] = package.__all__
    where: dict[str, str] = package._SUBMODULE
    assert sorted(where) == sorted(names)
    for name in names:
        assert getattr(package, name) is getattr(sys.modules[where[name]], name)
    assert set(names) <= set(dir(package))
    with pytest.raises(AttributeError, match='no_such_name'):
        getattr(package, 'no_such_name')  # noqa: B009 (the attribute is looked up on purpose)


def test_the_library_packages_do_not_import_the_command_line() -> None:
    """The command line is its own package: the library's layers load neither it nor typer.

    (rich may still arrive with pydantic-ai's HTTP client, which is not ours to change.)"""
    code = (
        'import sys, eventlog, search, capability\n'
        'from capability import ConversationSearch, EventLogPersistence\n'
        'print(sorted({m.split(".")[0] for m in sys.modules}))'
    )
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120)
    loaded = eval(done.stdout)  # a printed list of module names
    assert [name for name in ('eventlog_cli', 'typer') if name in loaded] == []


@pytest.fixture(scope='module')
def unindexed(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store no search has built an index in."""
    return build_store(tmp_path_factory.mktemp('unindexed') / 'store.lmdb')


FAST_COMMAND = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli._fast import run
    status = run(sys.argv[2:])
    loaded = sorted({name.split('.')[0] for name in sys.modules})
    with open(sys.argv[1], 'w') as out:
        json.dump({'status': status, 'modules': loaded}, out)
    """
)


@pytest.mark.parametrize(
    'command',
    [
        ['--help'],
        ['conversations'],
        ['conversations', '--json'],
        ['info', 'alpha'],
        ['stats'],
        ['verify'],
        ['tail', '--lines', '40'],
        ['tail', '--json'],
    ],
    ids=' '.join,
)
def test_the_console_scripts_fast_commands_load_no_typer_rich_or_asyncio(
    unindexed: Store, tmp_path: Path, command: list[str]
) -> None:
    """What the console script runs first (`eventlog_cli._fast`) answers these alone, with none
    of the command line's heavy start-up: typer, click, Rich, asyncio, pydantic(-ai), numpy.
    (A store with a search index: `test_the_fast_commands_never_load_the_heavy_modules`.)"""
    args = command if command == ['--help'] else [*command, '--store', str(unindexed.path)]
    report = tmp_path / 'report.json'
    env = {k: v for k, v in os.environ.items() if k not in ('EVENTLOG_STORE', 'COLUMNS', 'FORCE_COLOR')}
    done = subprocess.run(
        [sys.executable, '-c', FAST_COMMAND, str(report), *args], capture_output=True, text=True, env=env, timeout=120
    )
    data = json.loads(report.read_text())
    assert data['status'] == 0, done.stderr
    assert done.stdout.strip()
    slow = ('typer', 'click', 'rich', 'asyncio', 'pydantic', 'pydantic_ai', 'numpy')
    assert [name for name in slow if name in data['modules']] == []


NEVER_LOADED = ('typer', 'click', 'asyncio', 'pydantic', 'pydantic_ai', 'numpy', 'search.render', 'eventlog_cli.cli')
"""What the fast commands must never import, on a pipe or a terminal, whatever the store holds:
the full command line and its parser, the event loop, pydantic(-ai) and the search engine's
message rendering (which needs it), numpy. Each costs from tens of milliseconds to a second."""

NOT_ON_A_PIPE = ('rich',)
"""What they must not import either when plain text is enough (stdout a pipe)."""


@pytest.fixture(scope='module')
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store whose search index is built, which `verify` derives again to check it."""
    store = build_store(tmp_path_factory.mktemp('indexed') / 'store.lmdb')
    result = invoke('reindex', '--json', store=store.path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)['documents'] > 0
    return store


PINNED = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli._fast import run
    status = run(sys.argv[2:])
    sys.stdout.flush()
    with open(sys.argv[1], 'w') as out:
        json.dump({'status': status, 'modules': sorted(sys.modules)}, out)
    """
)


@pytest.mark.parametrize('terminal', [False, True], ids=['pipe', 'terminal'])
@pytest.mark.parametrize(
    'command',
    [
        ['--help'],
        ['conversations'],
        ['conversations', '--include-archived', '--full-ids'],
        ['conversations', '--json'],
        ['info', 'alpha'],
        ['info', 'alpha', '--json'],
        ['stats'],
        ['stats', '--json'],
        ['verify'],
        ['verify', '--json'],
        ['tail', '--lines', '40'],
        ['tail', '--json'],
    ],
    ids=' '.join,
)
def test_the_fast_commands_never_load_the_heavy_modules(
    indexed: Store, tmp_path: Path, command: list[str], terminal: bool
) -> None:
    """Pins the fast commands' imports on a store with a search index (`verify` derives the index
    again from the stored messages, reading them without pydantic-ai): the modules of
    `NEVER_LOADED`, and Rich too when stdout is a pipe, stay unloaded; the command answers."""
    args = command if command == ['--help'] else [*command, '--store', str(indexed.path)]
    report = tmp_path / 'report.json'
    env = {k: v for k, v in os.environ.items() if k not in ('EVENTLOG_STORE', 'COLUMNS', 'FORCE_COLOR')}
    argv = [sys.executable, '-c', PINNED, str(report), *args]
    if terminal:
        _, written = run_on_terminal(argv, {**env, 'TERM': 'xterm-256color'}, columns=120)
    else:
        written = subprocess.run(argv, capture_output=True, env=env, timeout=120).stdout
    data = json.loads(report.read_text())
    assert data['status'] == 0
    assert written.strip()
    loaded = set(data['modules'])
    never = NEVER_LOADED if terminal or command == ['--help'] or '--json' in command else NEVER_LOADED + NOT_ON_A_PIPE
    assert sorted(name for name in never if name in loaded) == []
    assert 'lmdb' in loaded or command == ['--help']  # it really read the store
