"""`eventlog --help` and each command's help read well in an 80-column terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from eventlog_cli.main import build_parser, commands

COMMANDS = sorted(commands(build_parser()))


def _help(*args: str) -> str:
    """The help as a user's 80-column terminal shows it (a real process, plain output)."""
    env = {**os.environ, 'COLUMNS': '80', 'NO_COLOR': '1'}
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *args, '--help'],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_list_gives_each_command_a_whole_sentence() -> None:
    text = _help()
    listed = re.findall(r'^  ([a-z][a-z-]*)  +\S', text, flags=re.MULTILINE)
    assert sorted(listed) == COMMANDS
    commands = text[text.index('Commands:') :]
    assert '...' not in commands and '…' not in commands
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize('command', COMMANDS)
def test_each_command_help_fits_and_names_its_values(command: str) -> None:
    text = _help(command)
    assert text.startswith(f'Usage: eventlog {command}')
    assert max(len(line) for line in text.splitlines()) <= 80
    # Values are named for what they are, not for their Python type.
    assert not re.search(r'<(str|int range|float range|integer|bool|boolean)>', text), text
