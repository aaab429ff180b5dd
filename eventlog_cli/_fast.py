"""The fast commands: `eventlog --help`, `conversations`, `info`, `stats`, `verify` and `tail`
answered without importing typer, click, asyncio or pydantic-ai, which take most of the full
command line's start-up.

`run` returns `None` for anything it does not answer exactly as the full command line
(`eventlog_cli.cli`) would, which then takes the command: an unusual command line
(`eventlog_cli._fast_args`), `verify` finding a problem (its table of findings), `tail
--follow`, a PostgreSQL store. Output to a pipe or a file is laid out as plain text without Rich
where `eventlog_cli._plain` can promise Rich's very characters; a terminal, forced colours, or a
view that needs wrapping or narrowing at the width is printed through Rich with the full command
line's own layouts (`eventlog_cli._styled`) on its console. JSON output never depends on the
terminal. The reads are the views' coroutines (`eventlog_cli._views`), driven without an event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

# The parser and the commands (`_fast_args`, `_fast_commands`, `_views`) load dataclasses, msgspec
# and the entry model: imported once a command line is to be read, so that `--help` does not
# wait for them.

__all__ = ['HELP_FILE', 'drive', 'run']

T = TypeVar('T')

HELP_FILE = Path(__file__).with_name('help.txt')
"""`eventlog --help` as the full command line prints it at 80 columns or more (a test keeps it current)."""

_HELP_COLUMNS = 80
"""From this terminal width on, click lays help out at 78 columns: the text of `HELP_FILE`."""


class _Suspended(Exception):
    """A coroutine waited for something: it needs the event loop of the full command line."""


def drive(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its result without an event loop. The log's coroutines never wait while
    asyncio is not loaded (`eventlog._threads`); one that does raises `_Suspended`."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value
    work.close()
    raise _Suspended


def run(argv: list[str]) -> int | None:
    """Answer `eventlog ARGV` and return its exit status, or `None` to leave it to the full command line."""
    if argv == ['--help']:
        return _help()
    from eventlog_cli._fast_args import parse

    command = parse(argv)
    if command is None:
        return None
    from eventlog.errors import EventLogError
    from eventlog_cli import _views as views
    from eventlog_cli._fast_commands import COMMANDS, flush

    out: list[str] = []
    try:
        status = drive(COMMANDS[command.name](command, out))
    except (views.CliError, EventLogError) as exc:
        flush(out)
        return _fail(str(exc))
    except OSError as exc:
        where = f' ({exc.filename})' if exc.filename else ''
        flush(out)
        return _fail(f'{exc.strerror or exc}{where}')
    except _Suspended:
        return None
    if status is not None:
        sys.stdout.write(''.join(out))
        sys.stdout.flush()
    return status


def _fail(message: str) -> int:
    """The error in one line, status 1 (after what was read before it: `tail`'s entries)."""
    sys.stderr.write(f'eventlog: {message}\n')
    return 1


def _help() -> int | None:
    import shutil

    if shutil.get_terminal_size().columns < _HELP_COLUMNS:
        return None
    sys.stdout.write(HELP_FILE.read_text(encoding='utf-8'))
    return 0
