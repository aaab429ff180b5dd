"""The fast commands themselves (see `eventlog_cli._fast`): each reads through the views'
coroutines (`eventlog_cli._views`) and lays its answer out as plain text (`eventlog_cli._plain`)
or JSON into `out`, or, where plain text cannot be promised to match (a terminal, forced
colours, a view to wrap or narrow), prints it through Rich as the full command line does
(`eventlog_cli._styled`). Each returns its exit status, or `None` to leave the command to the
full command line (before anything is printed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from eventlog_cli import _plain as plain
from eventlog_cli import _text as text
from eventlog_cli import _views as views
from eventlog_cli._fast_args import FastCommand

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ['COMMANDS', 'flush']


def flush(out: list[str]) -> None:
    """Print what `out` holds so far and empty it (a long `tail` prints batch by batch)."""
    sys.stdout.write(''.join(out))
    sys.stdout.flush()
    out.clear()


async def _conversations(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    async with views.open_store(command.store) as log:
        records, short = await views.read_conversations(
            log, 'include_archived' in command.flags, 'full_ids' in command.flags or as_json
        )
    if as_json:
        out.append(text.json_text([text.conversation_json(c) for c in records]))
        return 0
    if not records:
        if width is None:
            _console().print('no conversations in this store')
        else:
            out.append('no conversations in this store\n')
        return 0
    shown = len(views.CONVERSATION_HEADERS) - ('include_archived' not in command.flags)
    justify = ('left', 'left', 'right', 'right', 'right', 'left', 'left')[:shown]
    headers = list(zip(views.CONVERSATION_HEADERS[:shown], justify, strict=True))
    rows = [list(zip(views.conversation_row(c, short)[:shown], justify, strict=True)) for c in records]
    if _append(out, None if width is None else plain.table(headers, rows, width)):
        return 0
    from eventlog_cli import _styled as styled
    from eventlog_cli import _tables as tables

    columns = styled.conversation_columns(records, short, 'include_archived' in command.flags)
    tables.print_table(_console(), columns, styled.CONVERSATION_STEPS)
    return 0


async def _info(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    async with views.open_store(command.store) as log:
        record, records, pending = await views.read_info(log, command.arguments[0])
    if as_json:
        out.append(text.json_text(views.info_json(record, records, pending)))
        return 0
    return _grid(out, views.info_rows(record, records, pending), width)


async def _stats(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    async with views.open_store(command.store) as log:
        data = await views.read_stats(log, command.store)
    if as_json:
        out.append(text.json_text(data))
        return 0
    return _grid(out, views.stats_rows(data), width)


async def _verify(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    width = plain.width()
    async with views.open_store(command.store) as log:
        report, live, tombstones = await views.read_verify(log)
    if as_json:
        data = text.to_builtins(report)
        if report.ok:
            data.update(conversations=live, deletion_tombstones=tombstones)
        out.append(text.json_text(data))
        return 0 if report.ok else 1
    if not report.ok:  # the findings' table: the full command line's
        return None
    line = views.verify_ok_line(report, live, tombstones)
    if width is not None and len(line) <= width:
        out.append(line + '\n')
        return 0
    from eventlog_cli import _styled as styled

    _console().print(styled.verify_ok(line))  # styled, or a line Rich wraps
    return 0


async def _tail(command: FastCommand, out: list[str]) -> int | None:
    as_json = 'json' in command.flags
    console = None if as_json or plain.width() is not None else _console()
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
                elif console is not None:
                    from eventlog_cli._styled import tail_line

                    console.print(tail_line(entry, short), soft_wrap=True)
                else:
                    out.append(''.join(piece for piece, _ in views.tail_parts(entry, short)) + '\n')
                printed += 1
                if limit is not None and printed >= limit:
                    return 0
            flush(out)
    return 0


def _console() -> Console:
    """The full command line's console (`eventlog_cli._render.console`): Rich lays the view out
    (styles on a terminal, wrapping at the width) exactly as the full command line would."""
    from eventlog_cli import _render as render

    return render.console()


def _grid(out: list[str], rows: list[views.Row], width: int | None) -> int:
    """A two-column view (`info`, `stats`): as plain text when `eventlog_cli._plain` can lay it
    out, else through Rich."""
    if _append(out, None if width is None else plain.grid([row[:2] for row in rows], width)):
        return 0
    from eventlog_cli import _styled as styled

    _console().print(styled.rows_grid(rows))
    return 0


def _append(out: list[str], laid_out: str | None) -> bool:
    """Add `laid_out` to `out`; whether there was any (`None`: leave the view to Rich)."""
    if laid_out is None:
        return False
    out.append(laid_out)
    return True


COMMANDS: dict[str, Callable[[FastCommand, list[str]], Coroutine[Any, Any, int | None]]] = {
    'conversations': _conversations,
    'info': _info,
    'stats': _stats,
    'verify': _verify,
    'tail': _tail,
}
"""The fast commands by name."""
