"""The fast commands themselves (see `eventlog_cli._fast`): each reads through the views'
coroutines (`eventlog_cli._views`) and lays its answer out as plain text (`eventlog_cli._plain`)
or JSON into `out`, and returns its exit status, or `None` to leave the command to the full
command line (before anything is printed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

from eventlog_cli import _plain as plain
from eventlog_cli import _text as text
from eventlog_cli import _views as views
from eventlog_cli._fast_args import FastCommand

__all__ = ['COMMANDS', 'flush']


def flush(out: list[str]) -> None:
    """Print what `out` holds so far and empty it (a long `tail` prints batch by batch)."""
    sys.stdout.write(''.join(out))
    sys.stdout.flush()
    out.clear()


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
            flush(out)
    return 0


def _append(out: list[str], laid_out: str | None) -> int | None:
    if laid_out is None:
        return None
    out.append(laid_out)
    return 0


COMMANDS: dict[str, Callable[[FastCommand, list[str]], Coroutine[Any, Any, int | None]]] = {
    'conversations': _conversations,
    'info': _info,
    'stats': _stats,
    'verify': _verify,
    'tail': _tail,
}
"""The fast commands by name."""
