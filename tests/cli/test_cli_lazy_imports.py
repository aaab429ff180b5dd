"""The everyday commands start without importing what makes a command slow to start: building
the parser imports no command's implementation, the listings read an LMDB store without asyncio,
pydantic-ai or numpy, and their `--json` without Rich either.

Each check runs in a fresh interpreter and reads `sys.modules` afterwards; how long the
commands take is shown by `bench/bench_cli_start.py`, not asserted here.
"""

from __future__ import annotations

import importlib.util
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
"""Top-level packages the listing commands must not import."""

NEVER_LOADED = ('typer', 'click', 'asyncio', 'pydantic', 'pydantic_ai', 'numpy', 'search.render')
"""What the listing commands never import, on a pipe or a terminal: the event loop,
pydantic(-ai) and the search engine's message rendering (which needs it), numpy; and no other
command-line parser. Each costs from tens of milliseconds to a second."""

WITHOUT_RICH = ('rich',)
"""What `--json` and `--help` do not import either: they print no table."""

RUN_COMMAND = textwrap.dedent(
    """
    import json, sys
    from eventlog_cli.main import run
    status = run(sys.argv[2:])
    sys.stdout.flush()
    with open(sys.argv[1], 'w') as out:
        json.dump({'status': status, 'modules': sorted(sys.modules)}, out)
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
    return data['status'], done.stdout, sorted({name.split('.')[0] for name in data['modules']})


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
def test_the_listings_do_not_import_pydantic_ai(shared: Store, tmp_path: Path, command: list[str]) -> None:
    args = command if command == ['--help'] else [*command, '--store', str(shared.path)]
    status, stdout, modules = _run(tmp_path, *args)
    assert status == 0, stdout
    assert stdout.strip()
    assert [name for name in HEAVY if name in modules] == []


def test_the_listings_still_say_what_they_said(shared: Store, tmp_path: Path) -> None:
    """Nothing the lazy imports skipped was needed: the answers are the real ones."""
    _, listing, _ = _run(tmp_path, 'conversations', '--json', '--store', str(shared.path))
    rows = json.loads(listing)
    assert {row['conversation_id'] for row in rows} == {'alpha', 'beta'}
    _, info, _ = _run(tmp_path, 'info', 'alpha', '--store', str(shared.path))
    assert 'Alpha planning' in info
    status, verdict, _ = _run(tmp_path, 'verify', '--store', str(shared.path))
    assert status == 0 and verdict.startswith('ok')


def test_the_views_of_messages_read_them_without_pydantic_ai(shared: Store, tmp_path: Path) -> None:
    """`show`, `replay` and `context` read stored messages with msgspec (`eventlog_cli.entries`)."""
    for view in (['show', 'alpha'], ['replay', '--last'], ['context', 'alpha']):
        status, stdout, modules = _run(tmp_path, *view, '--store', str(shared.path))
        assert status == 0 and stdout.strip()
        assert [name for name in HEAVY if name in modules] == [], view
    status, stdout, modules = _run(tmp_path, 'show', 'alpha', '--store', str(shared.path))
    assert 'quokka-archive-7731' in stdout


@pytest.mark.parametrize(
    'where',
    [['--all'], ['--all', '--json'], ['--conversation', 'alpha'], ['-c', 'alpha', '--context', '2']],
    ids=' '.join,
)
def test_search_shows_hits_without_pydantic_ai(shared: Store, tmp_path: Path, where: list[str]) -> None:
    """A search of the persistent index ranks with numpy and shows its hits from their stored
    payloads (`SearchEngine.find(decode=False)`): pydantic-ai is never imported, and the lazy
    import of numpy really happens. (A search writes nothing: `reindex` makes the index current.)"""
    assert invoke('reindex', store=shared.path).exit_code == 0
    status, stdout, modules = _run(tmp_path, 'search', 'quokka', *where, '--store', str(shared.path))
    assert status == 0 and 'quokka' in stdout
    assert 'pydantic_ai' not in modules and 'pydantic' not in modules
    assert 'numpy' in modules


def test_a_search_of_one_run_indexes_its_payloads_without_pydantic_ai(shared: Store, tmp_path: Path) -> None:
    """A search of one run indexes that run in memory from its stored payloads
    (`search.index_corpus.RunPayloadCorpus`): no pydantic-ai, and the same hit text."""
    _, listing, _ = _run(tmp_path, 'search', 'quokka', '--all', '--json', '--store', str(shared.path))
    hit = json.loads(listing)['results'][0]
    for shown in (['--json'], ['--context', '1']):
        status, stdout, modules = _run(
            tmp_path, 'search', 'quokka', '--run', hit['run_id'], *shown, '--store', str(shared.path)
        )
        assert status == 0 and 'quokka' in stdout
        assert 'pydantic_ai' not in modules
    status, stdout, _ = _run(
        tmp_path, 'search', 'quokka', '--run', hit['run_id'], '--json', '--store', str(shared.path)
    )
    assert json.loads(stdout)['results'][0]['text'] == hit['text']


def test_the_console_script_still_forks_and_answers(shared: Store) -> None:
    """`main` (the crash guard that runs the command in a forked child) works with the lazy imports."""
    script = 'import sys\nfrom eventlog_cli.launch import main\nsys.argv[0] = "eventlog"\nmain()\n'
    done = subprocess.run(
        [sys.executable, '-c', script, 'conversations', '--json', '--store', str(shared.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert {row['conversation_id'] for row in json.loads(done.stdout)} == {'alpha', 'beta'}


def test_importing_the_packages_does_not_import_pydantic_ai() -> None:
    code = 'import sys, eventlog, search, capability, eventlog_cli.main; print(sorted({m.split(".")[0] for m in sys.modules}))'
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
        if name == 'EventLogConversationStore' and importlib.util.find_spec('pydantic_ai.conversation_store') is None:
            # Needs pydantic-ai-slim 2.66+: on an older one, reading it says so (test_conversation_store_version.py).
            with pytest.raises(ImportError, match=r'needs pydantic-ai-slim 2\.66 or newer'):
                getattr(package, name)
            continue
        assert getattr(package, name) is getattr(sys.modules[where[name]], name)
    assert set(names) <= set(dir(package))
    with pytest.raises(AttributeError, match='no_such_name'):
        getattr(package, 'no_such_name')  # noqa: B009 (the attribute is looked up on purpose)


def test_the_library_packages_do_not_import_the_command_line() -> None:
    """The command line is its own package: the library's layers do not load it.

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
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store whose search index is built, which `verify` derives again to check it."""
    store = build_store(tmp_path_factory.mktemp('indexed') / 'store.lmdb')
    result = invoke('reindex', '--json', store=store.path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)['documents'] > 0
    return store


@pytest.mark.parametrize('terminal', [False, True], ids=['pipe', 'terminal'])
@pytest.mark.parametrize(
    'command',
    [
        ['--help'],
        ['--version'],
        ['conversations', '--help'],
        ['conversations'],
        ['conversations', '--include-archived', '--full-ids'],
        ['conversations', '--json'],
        ['runs'],
        ['runs', '--json'],
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
def test_the_listings_never_load_the_heavy_modules(
    indexed: Store, tmp_path: Path, command: list[str], terminal: bool
) -> None:
    """Pins the listings' imports on a store with a search index (`verify` derives the index
    again from the stored messages, reading them without pydantic-ai): the modules of
    `NEVER_LOADED` stay unloaded, and Rich too for `--json` and the help; the command answers."""
    answers_alone = '--help' in command or '--version' in command
    args = command if answers_alone else [*command, '--store', str(indexed.path)]
    report = tmp_path / 'report.json'
    env = {k: v for k, v in os.environ.items() if k not in ('EVENTLOG_STORE', 'COLUMNS', 'FORCE_COLOR')}
    argv = [sys.executable, '-c', RUN_COMMAND, str(report), *args]
    if terminal:
        _, written = run_on_terminal(argv, {**env, 'TERM': 'xterm-256color'}, columns=120)
    else:
        written = subprocess.run(argv, capture_output=True, env=env, timeout=120).stdout
    data = json.loads(report.read_text())
    assert data['status'] == 0
    assert written.strip()
    loaded = set(data['modules'])
    never = NEVER_LOADED + WITHOUT_RICH if answers_alone or '--json' in command else NEVER_LOADED
    assert sorted(name for name in never if name in loaded) == []
    assert ('lmdb' in loaded) != answers_alone  # it really read the store (and the help did not)


def test_building_the_parser_imports_no_command() -> None:
    """`eventlog_cli.main.build_parser` imports the group modules and `argparse`, nothing a
    command needs to run: not the log, the storage engine, Rich, msgspec or asyncio."""
    code = 'import sys\nfrom eventlog_cli.main import build_parser\nbuild_parser()\nprint(sorted(sys.modules))'
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120)
    loaded = set(eval(done.stdout))  # a printed list of module names
    assert {'eventlog_cli.commands.browse', 'eventlog_cli.commands.audit'} <= loaded
    heavy = ('eventlog', 'eventlog_cli._views', 'lmdb', 'rich', 'msgspec', 'asyncio', 'pydantic', 'typer')
    assert sorted(name for name in heavy if name in loaded) == []
