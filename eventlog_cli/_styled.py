"""The styled (Rich) layouts of the everyday read views: `conversations`, `info`, `stats`, the
ok line of `verify` and `tail`'s lines.

Used by the browsing commands (`eventlog_cli.commands.browse`, `...audit`), printed on the
console of `eventlog_cli._render.console`. Nothing here imports more than Rich and the views.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from eventlog_cli import _tables as tables
from eventlog_cli import _views as views

if TYPE_CHECKING:
    from eventlog.entries import ConversationRecord, Entry
    from eventlog_cli._ids import ShortIds

__all__ = ['CONVERSATION_STEPS', 'conversation_columns', 'rows_grid', 'tail_line', 'verify_ok']

CONVERSATION_STEPS: list[tables.Step] = [
    ('compact', 'last activity'),
    ('drop', 'size'),
    ('drop', 'runs'),
    ('drop', 'messages'),
    ('drop', 'last activity'),
]
"""What `conversations` gives up first as the terminal narrows (docs/cli-views.md)."""


def conversation_columns(
    records: Sequence[ConversationRecord], short: ShortIds, include_archived: bool
) -> list[tables.Column]:
    """The columns of `conversations`' table: one row per record, ids abbreviated by `short`."""
    conversation = tables.Column('conversation')
    title = tables.Column('title', flex='clip', min_width=20)
    counts = [tables.Column(header, justify='right') for header in ('runs', 'messages', 'size')]
    activity = tables.Column('last activity')
    archived = tables.Column('archived')
    for c in records:
        name, shown_title, runs, messages, stored, last, archived_mark = views.conversation_row(c, short)
        conversation.add(Text(name))
        title.add(Text(shown_title, style='italic'))
        for column, value in zip(counts, (runs, messages, stored), strict=True):
            column.add(value)
        activity.add(last, tables.compact_time(c.updated_at))
        archived.add(archived_mark)
    return [conversation, title, *counts, activity, *([archived] if include_archived else [])]


def rows_grid(rows: Sequence[views.Row]) -> Table:
    """A two-column view (`info`, `stats`): dim labels, then the text of each row."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style='dim')
    grid.add_column()
    for label, text, style in rows:
        grid.add_row(label, Text(text, style=style))
    return grid


def verify_ok(line: str) -> Text:
    """`verify`'s line for a sound store (`eventlog_cli._views.verify_ok_line`), in green."""
    return Text(line, style='green')


def tail_line(entry: Entry, short: ShortIds | None = None, width: int | None = None) -> Text:
    """One entry as `tail` prints it, fitted to `width` columns (`eventlog_cli._views.tail_parts`);
    ids abbreviated by `short` (whole without it). Without `width`: the terminal's width when
    stdout is one, else not fitted."""
    if width is None and sys.stdout.isatty():
        width = shutil.get_terminal_size().columns
    return Text.assemble(*views.tail_parts(entry, short, width))
