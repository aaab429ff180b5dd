"""Tables that fit the terminal: columns with priorities, shortened or dropped as the width asks.

A table is a list of `Column`s and a list of reductions (`Step`s), least important first:
shorten a column to its compact form (a compact time, a shorter header), or drop it. `print_table`
applies reductions in order only until the columns fit the width with their flexible columns at
their minimum; the flexible columns then share what is left, up to their natural width. So a
wide terminal shows everything in full, and a narrow one loses what matters least.

Headers are never cut. A fixed column (ids, times, numbers, statuses) is always one line at its
full width; a `clip` column (a title, an agent name) is cut to its width with `…`; a `wrap`
column (a reason) wraps onto more lines. A column whose cells are all empty can be left out
(`hide_empty`). Nothing is left to Rich's table layout, which squeezes every column alike
(headers cut to `sta…`, times wrapped) when the table is too wide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from rich.console import Console
from rich.text import Text

__all__ = ['GAP', 'Column', 'Step', 'compact_time', 'compact_times', 'fitted_widths', 'print_table']

GAP = 2
"""Spaces between two columns."""

Step = tuple[Literal['compact', 'drop'], str]
"""A reduction: `('compact', header)` shows a column in its compact form, `('drop', header)` leaves it out."""


@dataclass
class Column:
    """One column: its header, its cells (one per row) and how it may give up width."""

    header: str
    cells: list[Text] = field(default_factory=list[Text])
    justify: Literal['left', 'right'] = 'left'
    flex: Literal['clip', 'wrap'] | None = None
    """`None`: always its full width. `clip`/`wrap`: may be narrower, down to `min_width`."""
    min_width: int = 0
    """For a flexible column: the narrowest it becomes (never narrower than its header)."""
    compact_header: str | None = None
    compact_cells: list[Text] | None = None
    """The compact form, used after a `('compact', header)` step."""
    hide_empty: bool = False
    """Leave the column out when every cell is empty."""
    compact: bool = False

    def add(self, cell: str | Text, compact: str | Text | None = None) -> None:
        """Append a row's cell (and its compact form, for a column that has one)."""
        self.cells.append(cell if isinstance(cell, Text) else Text(cell))
        if compact is not None:
            if self.compact_cells is None:
                self.compact_cells = []
            self.compact_cells.append(compact if isinstance(compact, Text) else Text(compact))

    @property
    def shown_header(self) -> str:
        """The header as printed (compact when compacted)."""
        return self.compact_header if self.compact and self.compact_header else self.header

    @property
    def shown_cells(self) -> list[Text]:
        """The cells as printed (compact when compacted)."""
        return self.compact_cells if self.compact and self.compact_cells is not None else self.cells

    def natural(self) -> int:
        """Its width with nothing cut."""
        return max([len(self.shown_header), *(cell.cell_len for cell in self.shown_cells)])

    def narrowest(self) -> int:
        """The narrowest it may be: its natural width unless flexible."""
        if self.flex is None:
            return self.natural()
        return max(len(self.shown_header), min(self.natural(), self.min_width))


def _total(columns: Sequence[Column], widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(0, len(columns) - 1)


def fitted_widths(columns: Sequence[Column], steps: Sequence[Step], width: int) -> list[tuple[Column, int]]:
    """The columns that are shown at `width` and the width of each (see the module's docstring)."""
    by_header = {column.header: column for column in columns}
    shown = [c for c in columns if not (c.hide_empty and not any(cell.plain.strip() for cell in c.cells))]
    for action, header in steps:
        if _total(shown, [c.narrowest() for c in shown]) <= width:
            break
        column = by_header.get(header)
        if column is None or column not in shown:
            continue
        if action == 'drop':
            shown.remove(column)
        else:
            column.compact = True
    widths = [c.narrowest() for c in shown]
    spare = width - _total(shown, widths)
    for index, column in enumerate(shown):
        if column.flex is not None and spare > 0:
            extra = min(spare, column.natural() - widths[index])
            widths[index] += extra
            spare -= extra
    return list(zip(shown, widths, strict=True))


def _place(cell: Text, width: int, justify: str) -> Text:
    pad = ' ' * max(0, width - cell.cell_len)
    placed = Text(pad) if justify == 'right' else Text()
    placed.append_text(cell)
    if justify != 'right':
        placed.append(pad)
    return placed


def print_table(out: Console, columns: Sequence[Column], steps: Sequence[Step], *, header_style: str = 'bold') -> None:
    """Print the table at `out`'s width: a header line, then each row (see the module's docstring)."""
    fitted = fitted_widths(columns, steps, out.width)
    gap = ' ' * GAP
    header = Text(gap).join(
        _place(Text(column.shown_header, style=header_style), width, column.justify) for column, width in fitted
    )
    header.rstrip()
    lines = [header]
    rows = len(columns[0].cells) if columns else 0
    for row in range(rows):
        cells: list[list[Text]] = []
        for column, width in fitted:
            cell = column.shown_cells[row]
            if column.flex == 'wrap':
                cells.append(list(cell.wrap(out, width, overflow='fold')) or [Text()])
            elif column.flex == 'clip' and cell.cell_len > width:
                clipped = cell.copy()
                clipped.truncate(width, overflow='ellipsis')
                cells.append([clipped])
            else:
                cells.append([cell])
        for number in range(max(len(parts) for parts in cells)):
            line = Text(gap).join(
                _place(parts[number] if number < len(parts) else Text(), width, column.justify)
                for parts, (column, width) in zip(cells, fitted, strict=True)
            )
            line.rstrip()
            lines.append(line)
    for line in lines:
        out.print(line, no_wrap=True, overflow='ignore', crop=False, soft_wrap=True)


_MONTHS = ('Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec')
_RECENT = timedelta(days=182)


def compact_time(value: datetime | None, now: datetime | None = None) -> str:
    """A timestamp in 12 columns as `ls -l` shows one: `Nov 30 10:00` within about six months of
    `now`, else `Nov 30  2025` (UTC, as every time the command line prints)."""
    if value is None:
        return ''
    value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    now = datetime.now(UTC) if now is None else now
    month = _MONTHS[value.month - 1]
    if abs(now - value) < _RECENT:
        return f'{month} {value.day:2d} {value:%H:%M}'
    return f'{month} {value.day:2d}  {value.year}'


def compact_times(values: Sequence[datetime], now: datetime | None = None) -> tuple[str | None, list[str]]:
    """The compact form of a column of timestamps that still tells its rows apart: when they all
    fall on one day (UTC), the time of day to the second (`10:00:12`), and the day (`Nov 30`) for
    the column's header to name; otherwise each as `compact_time` shows it, and no day."""
    utc = [value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC) for value in values]
    days = {value.date() for value in utc}
    if len(days) == 1:
        day = utc[0]
        return f'{_MONTHS[day.month - 1]} {day.day}', [f'{value:%H:%M:%S}' for value in utc]
    return None, [compact_time(value, now) for value in utc]
