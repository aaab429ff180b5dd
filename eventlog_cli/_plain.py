"""Plain-text layout for the fast commands: the very characters Rich prints for the same views
when stdout is not a terminal, or `None` where this module cannot promise that.

Rich writes no styles to a pipe or a file (unless told to with `FORCE_COLOR` or
`TTY_COMPATIBLE`), lays out at the width `eventlog_cli._render.console` gives it, and measures
text in terminal cells. So a layout here is only made when: stdout is not a terminal and no
variable forces one (`width`); every character is one cell wide in Rich's measure (`SIMPLE`,
checked against Rich's own table by the tests); and nothing needs wrapping, clipping or
compacting at that width. Otherwise the caller leaves the view to the full command line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

__all__ = ['PIPE_WIDTH', 'Cell', 'grid', 'is_simple', 'table', 'width']

PIPE_WIDTH = 160
"""The width Rich lays out at when stdout is not a terminal and `COLUMNS` is not set
(`eventlog_cli._render.console`)."""

_NOT_SIMPLE = re.compile('[^\x20-\x7e\xa0-\u02ff\u0370-\u0482\u048a-\u052f\u2010-\u2027\u2030-\u205e]')
"""Characters outside the ranges where each one takes exactly one cell in Rich's measure:
printable ASCII, Latin, Greek and Cyrillic letters without combining marks, and punctuation
(dashes, quotes, `…`)."""

GAP = 2
"""Spaces between two columns, of a table (`eventlog_cli._tables.GAP`) and of a grid."""

Cell = tuple[str, str]
"""A table cell: its text and how it is justified (`left` or `right`)."""


def width() -> int | None:
    """The width the full command line lays text out at on stdout, when it prints plain text
    there; `None` when it may print styles (a terminal, `FORCE_COLOR`, `TTY_COMPATIBLE`) or when
    the width comes from the terminal, an unusual encoding or an unusual `COLUMNS`."""
    if 'FORCE_COLOR' in os.environ or 'TTY_COMPATIBLE' in os.environ:
        return None
    try:
        if sys.stdout.isatty():
            return None
    except ValueError:
        return None
    if (sys.stdout.encoding or '').lower().replace('-', '') != 'utf8':
        return None
    columns = os.environ.get('COLUMNS')
    if columns is None:
        return PIPE_WIDTH
    return int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else None


def is_simple(text: str) -> bool:
    """Whether every character of `text` takes one terminal cell, as Rich measures it."""
    return _NOT_SIMPLE.search(text) is None


def grid(rows: Sequence[tuple[str, str]], at: int) -> str | None:
    """A borderless two-column grid (`Table.grid(padding=(0, 2))`): each cell padded to its
    column's width, the columns two spaces apart. `None` when it needs more than `at` cells."""
    if not rows or not all(is_simple(label) and is_simple(text) for label, text in rows):
        return None
    first = max(len(label) for label, _ in rows)
    second = max(len(text) for _, text in rows)
    if first + GAP + second > at:
        return None
    return ''.join(f'{label.ljust(first)}{" " * GAP}{text.ljust(second)}\n' for label, text in rows)


def table(headers: Sequence[Cell], rows: Sequence[Sequence[Cell]], at: int) -> str | None:
    """A table as `eventlog_cli._tables.print_table` prints it when every column fits at its
    natural width: a header line, then a line per row, each stripped of trailing spaces. `None`
    when the columns need more than `at` cells (the full table shortens or drops some)."""
    cells = [*rows, headers]
    if not all(is_simple(text) for row in cells for text, _ in row):
        return None
    widths = [max(len(row[index][0]) for row in cells) for index in range(len(headers))]
    if sum(widths) + GAP * max(0, len(widths) - 1) > at:
        return None
    lines: list[str] = []
    for row in [headers, *rows]:
        placed = (
            text.rjust(w) if justify == 'right' else text.ljust(w)
            for (text, justify), w in zip(row, widths, strict=True)
        )
        lines.append((' ' * GAP).join(placed).rstrip() + '\n')
    return ''.join(lines)
