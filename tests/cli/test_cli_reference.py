"""docs/cli-reference.md is generated from the parser and kept current; `eventlog --version`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from clitools import invoke

from eventlog_cli.docgen import reference
from eventlog_cli.main import build_parser, commands

REFERENCE = Path(__file__).parents[2] / 'docs' / 'cli-reference.md'


def test_the_committed_reference_is_what_the_parser_generates() -> None:
    assert REFERENCE.read_text(encoding='utf-8') == reference(), (
        'docs/cli-reference.md is out of date: run `python -m eventlog_cli.docgen > docs/cli-reference.md`'
    )


def test_the_generator_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli.docgen'], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout == reference()


def test_every_command_and_every_option_is_in_the_reference() -> None:
    text = REFERENCE.read_text(encoding='utf-8')
    found = commands(build_parser())
    assert len(found) >= 26
    for name, parser in found.items():
        assert f'\n## eventlog {name}\n' in text, name
        section = text.split(f'\n## eventlog {name}\n', 1)[1].split('\n## eventlog ', 1)[0]
        for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
            if isinstance(action, argparse._HelpAction):  # pyright: ignore[reportPrivateUsage]
                continue
            spellings = action.option_strings or [action.metavar or action.dest.upper()]
            for spelling in spellings:
                assert f'`{spelling}`' in section, (name, spelling)
            assert ' '.join((action.help or '').split()).replace('|', '\\|') in section, (name, action.dest)


def test_the_analyzers_the_help_names_are_the_real_ones() -> None:
    """`search --help` names the analyzers without importing them (to build the parser fast)."""
    from eventlog_cli.commands.search import _ANALYZERS  # pyright: ignore[reportPrivateUsage]
    from search.analyzers import ANALYZER_NAMES

    assert ', '.join(ANALYZER_NAMES) == _ANALYZERS


def test_version_prints_the_installed_version() -> None:
    result = invoke('--version')
    assert result.exit_code == 0
    assert result.stdout == f'eventlog {version("pydantic-ai-eventlog")}\n'
    assert result.stderr == ''
