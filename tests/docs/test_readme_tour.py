"""The README's tour runs as printed on a fresh demo store: every `$ eventlog ...` line of its
console blocks is run in order, and its output has the shape the README shows (the same lines
once ids, numbers, sizes and times are set aside)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from clirunner import run_cli

README = Path(__file__).parents[2] / 'README.md'

_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}')
_SHORT_ID = re.compile(r'\b[0-9a-f]{8}(?:-[0-9a-f]{1,12})*\b')
"""An id abbreviated as the tables and `tail` show it (`01a22be6-03`)."""
_SIZE = re.compile(r'\d+(?:\.\d+)? (?:B|KB|MB|GB)\b')
_NUMBER = re.compile(r'\d+(?:\.\d+)?')


def shape(line: str) -> str:
    """A line with what differs between two demo stores (ids, numbers, sizes, times) set aside."""
    line = _UUID.sub('<id>', line)
    line = _SHORT_ID.sub('<id>', line)
    line = _SIZE.sub('<size>', line)
    line = _NUMBER.sub('<n>', line)
    return ' '.join(line.split())


def tour() -> list[tuple[str, list[str]]]:
    """Each `$ ` command of the README's console blocks, with the output lines printed under it."""
    section = README.read_text().split('\n## A tour\n', 1)[1].split('\n## ', 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r'```console\n(.*?)```', section, re.S):
        for line in block.splitlines():
            if line.startswith('$ '):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def _compared(lines: list[str]) -> list[str]:
    """The output lines a shape check can hold the README to: not a wrapped continuation
    (indented, it wraps with the terminal's width), not an ellipsis or a rule."""
    return [
        line
        for line in lines
        if line.strip() and not line.startswith('    ') and line.strip() != '…' and set(line.strip()) != {'─'}
    ]


def test_the_tour_is_found() -> None:
    commands = [command for command, _ in tour()]
    assert commands[0] == 'export EVENTLOG_STORE=eventlog-demo.lmdb'
    names = {shlex.split(command)[1] for command in commands[1:]}
    assert {'conversations', 'info', 'search', 'replay', 'verify', 'stats', 'tail', 'export', 'import'} <= names
    # No id of the author's store is needed to follow the tour.
    assert not any(_UUID.search(command) for command in commands)


def test_the_tour_runs_as_printed_on_a_fresh_demo_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env: dict[str, str | None] = {'COLUMNS': '240', 'EVENTLOG_STORE': None}
    made = run_cli(['demo', '--store', 'eventlog-demo.lmdb', '--exchanges', '40', '--sessions', '2'], env=env)
    assert made.exit_code == 0, made.output
    ran: list[str] = []
    for command, printed in tour():
        argv = shlex.split(command)
        if argv[0] == 'export' and '=' in argv[1]:  # the shell's `export NAME=VALUE`
            name, value = argv[1].split('=', 1)
            env[name] = value
            continue
        assert argv[0] == 'eventlog', f'the tour runs a command that is not eventlog: {command}'
        result = run_cli(argv[1:], env=env)
        # `delete` without --yes only says what it would remove, and exits 1 as nothing was done.
        expected_code = 1 if argv[1] == 'delete' and '--yes' not in argv else 0
        assert result.exit_code == expected_code, (command, result.output)
        actual = {shape(line) for line in (result.stdout + result.stderr).splitlines()}
        missing = [line for line in _compared(printed) if shape(line) not in actual]
        assert not missing, (
            f'{command!r} no longer prints, in shape:\n' + '\n'.join(missing) + '\n---\n' + result.output
        )
        ran.append(argv[1])
    assert 'replay' in ran and len(ran) >= 10
    assert (tmp_path / 'orbit.jsonl').exists() and (tmp_path / 'copy.lmdb' / 'data.mdb').exists()


def test_the_first_compaction_marker_counts_what_its_summary_says(tmp_path: Path) -> None:
    """The marker of `show` and the demo's summary agree on how many messages were summarized
    (the message the summary was merged into is counted apart: it is kept after the summary)."""
    env: dict[str, str | None] = {'COLUMNS': '240', 'EVENTLOG_STORE': None}
    store = str(tmp_path / 'demo.lmdb')
    assert run_cli(['demo', '--store', store, '--exchanges', '40', '--sessions', '2'], env=env).exit_code == 0
    out = run_cli(['show', 'orbit-migration', '--store', store], env=env).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if '── compaction:' in line)
    marker = re.search(
        r'summary replaces #(\d+)…#(\d+) \((\d+) messages summarized, #(\d+) kept after the summary\)', lines[at]
    )
    assert marker is not None, lines[at]
    summarized = re.search(r'Summary of the (\d+) earliest messages', lines[at + 1])
    assert summarized is not None, lines[at + 1]
    assert marker.group(3) == summarized.group(1)
    assert marker.group(2) == marker.group(4)  # the last replaced message is the one kept
    later = next(line for line in lines[at + 1 :] if '── compaction:' in line)
    assert 'and 1 earlier summary summarized' in later


def _demo_block() -> list[str]:
    """The lines of the demo's output the tour quotes (its first plain code block)."""
    section = README.read_text().split('\n## A tour\n', 1)[1].split('\n## ', 1)[0]
    found = re.search(r'```\n(.*?)```', section, re.S)
    assert found is not None, 'the tour quotes the demo in a plain code block'
    return [line for line in found.group(1).splitlines() if line.strip()]


def test_the_demo_prints_what_the_tour_quotes(tmp_path: Path) -> None:
    """`make demo` (the default demo) prints every line the tour quotes of it, in shape: the
    question, the search the model makes and its final answer."""
    made = run_cli(['demo', '--store', str(tmp_path / 'demo.lmdb')], env={'COLUMNS': '400'})
    assert made.exit_code == 0, made.output
    printed = {shape(line) for line in made.output.splitlines()}
    quoted = _demo_block()
    assert any(line.startswith('model › ') for line in quoted)
    missing = [line for line in quoted if shape(line) not in printed]
    assert not missing, 'the demo no longer prints, in shape:\n' + '\n'.join(missing) + '\n---\n' + made.output
