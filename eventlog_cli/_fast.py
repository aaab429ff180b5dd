"""The fast commands: `eventlog --help`, `conversations`, `info`, `stats`, `verify` and `tail`
answered without importing typer, Rich, asyncio or pydantic-ai, which take most of the full
command line's start-up.

`run` returns `None` for anything it does not answer exactly as the full command line
(`eventlog_cli.cli`) would, which then takes the command: an unusual command line
(`eventlog_cli._fast_args`), a terminal or forced colours for a view Rich would style, a view
that needs wrapping or clipping at the width (`eventlog_cli._plain`), `verify` finding a
problem (its table of findings), `tail --follow`. JSON output never depends on the terminal.
The reads are the views' coroutines (`eventlog_cli._views`), driven without an event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from eventlog.errors import EventLogError
from eventlog_cli import _plain as plain
from eventlog_cli import _text as text
from eventlog_cli import _views as views
from eventlog_cli._fast_args import FastCommand, parse

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
    command = parse(argv)
    if command is None:
        return None
    out: list[str] = []
    try:
        status = drive(_COMMANDS[command.name](command, out))
    except (views.CliError, EventLogError) as exc:
        return _fail(out, str(exc))
    except OSError as exc:
        where = f' ({exc.filename})' if exc.filename else ''
        return _fail(out, f'{exc.strerror or exc}{where}')
    except _Suspended:
        return None
    if status is not None:
        sys.stdout.write(''.join(out))
        sys.stdout.flush()
    return status


def _fail(out: list[str], message: str) -> int:
    """Print what was read before the error (`tail`'s entries), then the error in one line: status 1."""
    _flush(out)
    sys.stderr.write(f'eventlog: {message}\n')
    return 1


def _help() -> int | None:
    import shutil

    if shutil.get_terminal_size().columns < _HELP_COLUMNS:
        return None
    sys.stdout.write(HELP_FILE.read_text(encoding='utf-8'))
    return 0


async def _conversations(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    if width is None and not as_json:
        return None
    async with views.open_store(command.store) as log:
        records, short = await views.read_conversations(
            log, 'include_archived' in command.flags, 'full_ids' in command.flags or as_json
        )
    if as_json:
        out.append(text.json_text([text.conversation_json(c) for c in records]))
        return 0
    if not records:
        out.append('no conversations in this store\n')
        return 0
    shown = len(views.CONVERSATION_HEADERS) - ('include_archived' not in command.flags)
    justify = ('left', 'left', 'right', 'right', 'right', 'left', 'left')[:shown]
    headers = list(zip(views.CONVERSATION_HEADERS[:shown], justify, strict=True))
    rows = [list(zip(views.conversation_row(c, short)[:shown], justify, strict=True)) for c in records]
    return _append(out, plain.table(headers, rows, width or 0))


async def _info(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    if width is None and not as_json:
        return None
    async with views.open_store(command.store) as log:
        record, records = await views.read_info(log, command.arguments[0])
    if as_json:
        out.append(text.json_text(views.info_json(record, records)))
        return 0
    return _append(out, plain.grid([row[:2] for row in views.info_rows(record, records)], width or 0))


async def _stats(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    if width is None and not as_json:
        return None
    async with views.open_store(command.store) as log:
        data = await views.read_stats(log, command.store)
    if as_json:
        out.append(text.json_text(data))
        return 0
    return _append(out, plain.grid([row[:2] for row in views.stats_rows(data)], width or 0))


async def _verify(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    if width is None and not as_json:
        return None
    async with views.open_store(command.store) as log:
        report, live, tombstones = await views.read_verify(log)
    if as_json:
        data = text.to_builtins(report)
        if report.ok:
            data.update(conversations=live, deletion_tombstones=tombstones)
        out.append(text.json_text(data))
        return 0 if report.ok else 1
    line = views.verify_ok_line(report, live, tombstones)
    if not report.ok or len(line) > (width or 0):  # the findings' table, or a line Rich would wrap
        return None
    out.append(line + '\n')
    return 0


async def _tail(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    if not as_json and plain.width() is None:
        return None
    kinds = command.repeated.get('kind')
    limit = command.ints.get('max_entries')
    printed = 0
    async with views.open_store(command.store) as log:
        begun = await views.tail_start(
            log,
            command.ints.get('lines', 10),
            command.values.get('conversation'),
            command.values.get('run'),
            kinds,
            'full_ids' in command.flags or as_json,
        )
        short, start = begun[2], begun[4]
        if start is None:
            return 0
        async for shown in views.tail_backlog(log, begun, kinds, start):
            for entry in shown:
                if as_json:
                    out.append(views.compact_json(text.entry_json(entry)) + '\n')
                else:
                    out.append(''.join(piece for piece, _ in views.tail_parts(entry, short)) + '\n')
                printed += 1
                if limit is not None and printed >= limit:
                    return 0
            _flush(out)
    return 0


def _flush(out: list[str]) -> None:
    """Print what a long output holds so far (`tail` of many entries), so memory stays bounded."""
    sys.stdout.write(''.join(out))
    sys.stdout.flush()
    out.clear()


def _append(out: list[str], laid_out: str | None) -> int | None:
    if laid_out is None:
        return None
    out.append(laid_out)
    return 0


_COMMANDS = {
    'conversations': _conversations,
    'info': _info,
    'stats': _stats,
    'verify': _verify,
    'tail': _tail,
}
