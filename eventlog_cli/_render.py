"""How the command line shows entries, messages, records and search hits (rich and JSON).

The plain-text and JSON forms are `eventlog_cli._text`'s (re-exported here); this module adds
what needs Rich: styled text, the console, rows of a transcript, highlighted search hits.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console
from rich.text import Text

from eventlog.entries import Entry, ToolEffectInfo
from eventlog_cli._text import (
    HEADLINES,
    clean,
    clip,
    compaction_info,
    compaction_summary_text,
    conversation_json,
    entry_headline,
    entry_json,
    message_lines,
    print_json,
    run_json,
    seq_list,
    size,
    timestamp,
    to_builtins,
    tokens,
)
from eventlog_cli.entries import INSTRUCTIONS_KIND, message_view, summary_keeps
from search.analyzers import WORD_RE, Analyzer, LocatingAnalyzer

if TYPE_CHECKING:
    from eventlog_cli.entries import MessageView

# Messages are read by `eventlog_cli.entries` (msgspec, never pydantic-ai).

__all__ = [
    'LONG_TEXT',
    'JsonListWriter',
    'Rows',
    'clean',
    'clean_text',
    'compaction_info',
    'compaction_summary_text',
    'console',
    'conversation_json',
    'duration',
    'entry_headline',
    'entry_json',
    'highlight_terms',
    'message_lines',
    'message_text',
    'message_view',
    'print_json',
    'run_json',
    'seq_list',
    'size',
    'summary_keeps',
    'timestamp',
    'to_builtins',
    'tokens',
    'tool_effect',
]

_HEADLINES = HEADLINES
"""What one-line views say of each kind of entry (`eventlog_cli._text.HEADLINES`), where tests read it."""

_LABEL_STYLES = (
    ('User', 'bold green'),
    ('Assistant', 'bold blue'),
    ('Tool Call', 'bold magenta'),
    ('Tool', 'magenta'),
    ('Built-in Tool Call', 'bold magenta'),
    ('Built-in Tool', 'magenta'),
    ('Thinking', 'dim italic'),
    ('File', 'cyan'),
    ('Retry', 'bold red'),
    ('Summary', 'bold yellow'),
    ('System', 'bold cyan'),
    ('Instructions', 'bold cyan'),
    ('Speech', 'cyan'),
)
_BODY_STYLES = {'system-prompt': 'cyan', INSTRUCTIONS_KIND: 'cyan'}
"""What the agent was told (system prompts, instructions) is coloured apart from what users and models said."""
_WIDE = 160
"""Output width when stdout is not a terminal (pipes, files): wide enough not to cut ids."""


def clean_text(value: object, style: str = '', *, multiline: bool = False) -> Text:
    """`clean(value)` as a Rich `Text` (never read as markup) in `style`."""
    return Text(clean(value, multiline=multiline), style=style)


def console(*, stderr: bool = False) -> Console:
    """A console for the current stdout (or stderr), wide when output goes to a pipe or a file.

    Markup and emoji codes are off: a plain string printed through it is shown as is, so stored
    text can never become styling or links.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or 'COLUMNS' in os.environ else _WIDE
    return Console(stderr=stderr, highlight=False, width=width, markup=False, emoji=False)


class JsonListWriter:
    """Prints `{**head, key: [items...]}` exactly as `print_json` would, one item at a time.

    For long outputs (a run's every entry): the document is never held whole in memory. `key`
    comes last in the document, after `head`'s keys.
    """

    def __init__(self, head: dict[str, Any], key: str) -> None:
        """Remember the document's head; nothing is printed before the first item or `close`."""
        empty = json.dumps({**head, key: []}, ensure_ascii=False, indent=2)
        self._prefix = empty[: -len('[]\n}')]
        self._count = 0

    def add(self, item: object) -> None:
        """Print one item of the list."""
        text = json.dumps(item, ensure_ascii=False, indent=2).replace('\n', '\n    ')
        sys.stdout.write((self._prefix + '[\n    ' if self._count == 0 else ',\n    ') + text)
        self._count += 1

    def close(self) -> None:
        """Print the end of the document."""
        sys.stdout.write(self._prefix + '[]\n}\n' if self._count == 0 else '\n  ]\n}\n')


def duration(start: datetime | None, end: datetime | None) -> str:
    """The time between two timestamps, readable; empty when either is missing."""
    if start is None or end is None:
        return ''
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return f'{seconds * 1000:.1f} ms'
    if seconds < 120:
        return f'{seconds:.2f} s'
    return f'{seconds / 60:.1f} min'


def _label_style(label: str) -> str:
    for prefix, style in _LABEL_STYLES:
        if label.startswith(prefix):
            return style
    return 'bold'


def message_text(message: MessageView | Entry | bytes, *, limit: int | None = None) -> Text:
    """A message (its view, its entry, or its stored payload) as labelled lines, a line per part
    (`User: ...`, `Tool Call [name]: {...}`, `Thinking: ...`), each clipped to `limit` characters
    on one line when given, else whole."""
    from eventlog_cli.entries import payload_view

    if isinstance(message, Entry):
        message = message_view(message)
    elif isinstance(message, bytes):
        message = payload_view(message)
    out = Text()
    if not message.parts:
        out.append('(no parts)', style='dim')
        return out
    for index, part in enumerate(message.parts):
        if index:
            out.append('\n')
        body = part.body() if limit is None else clip(part.body(), limit)
        out.append(clean(part.head() + ': '), style=_label_style(part.label))
        out.append(clean(body, multiline=True).replace('\n', '\n  '), style=_BODY_STYLES.get(part.kind, ''))
    return out


def tool_effect(entry: Entry) -> ToolEffectInfo | None:
    """The payload of a `tool_effect` entry, or `None` when it cannot be decoded."""
    try:
        return msgspec.json.decode(entry.payload, type=ToolEffectInfo)
    except msgspec.DecodeError:
        return None


def highlight_terms(text: str, analyzer: Analyzer, terms: Iterable[str], style: str = 'bold reverse') -> Text:
    """`text` with every word whose analyzed form is one of `terms` highlighted."""
    wanted = frozenset(terms)
    if isinstance(analyzer, LocatingAnalyzer):
        spans = [(start, end) for term, start, end in analyzer.token_spans(text) if term in wanted]
    else:
        spans = [
            (match.start(), match.end())
            for match in WORD_RE.finditer(text)
            if any(token in wanted for token in analyzer.tokens(match.group()))
        ]
    out = Text()
    done = 0
    for start, end in sorted(spans):
        if start < done:
            continue
        out.append(clean(text[done:start], multiline=True))
        out.append(clean(text[start:end], multiline=True), style=style)
        done = end
    out.append(clean(text[done:], multiline=True))
    return out


LONG_TEXT = 20_000
"""Characters from which a row's body is printed pre-wrapped by `Rows` rather than laid out by
Rich, whose layout of one huge text costs far more than its size."""


_ROWS_CHARS = 200_000


class Rows:
    """Rows of a borderless grid: gutter columns, then a body column whose wrapped lines stay
    aligned. Rows are laid out and printed every `batch` rows or `_ROWS_CHARS` characters of
    bodies, so that a long transcript is never one giant table; each body is wrapped by Rich
    (`Text.wrap`, folding long words) and the lines assembled here, which costs a fraction of
    a Rich `Table` for the same output.

    A body longer than `LONG_TEXT` is printed at once, cut at the body column's width
    character by character: linear in its size.
    """

    def __init__(self, out: Console, *gutters: int, batch: int = 200) -> None:
        """Rows for `out` with gutter columns at least `gutters` wide."""
        self._out = out
        self._gutters = gutters
        self._batch = batch
        self._rows: list[tuple[Text, ...]] = []
        self._chars = 0

    def add(self, *cells: Text) -> None:
        """One row: a cell per gutter (one short line each), then the body."""
        *gutter, body = cells
        if len(body) > LONG_TEXT:
            self.flush()
            self._print_long(gutter, body)
            return
        self._rows.append(cells)
        self._chars += len(body)
        if len(self._rows) >= self._batch or self._chars >= _ROWS_CHARS:
            self.flush()

    def flush(self) -> None:
        """Print the rows added so far."""
        if not self._rows:
            return
        widths = [
            max(minimum, *(row[index].cell_len for row in self._rows)) for index, minimum in enumerate(self._gutters)
        ]
        indent = sum(widths) + len(widths)
        body_width = max(20, self._out.width - indent)
        block = Text()
        for *gutter, body in self._rows:
            for number, line in enumerate(body.wrap(self._out, body_width, overflow='fold')):
                if number == 0:
                    for cell, width in zip(gutter, widths, strict=True):
                        pad = ' ' * (width - cell.cell_len)
                        if cell.justify == 'right':
                            block.append(pad)
                            block.append_text(cell)
                        else:
                            block.append_text(cell)
                            block.append(pad)
                        block.append(' ')
                else:
                    block.append(' ' * indent)
                block.append_text(line)
                block.append('\n')
        self._out.print(block, end='', no_wrap=True, overflow='ignore', crop=False)
        self._rows = []
        self._chars = 0

    def _print_long(self, gutter: Sequence[Text], body: Text) -> None:
        first = ' '.join(cell.plain.ljust(width) for cell, width in zip(gutter, self._gutters, strict=True))
        indent = ' ' * len(first)
        width = max(20, self._out.width - len(first) - 1)
        lines = _cut(body.plain, width)
        block: list[str] = []
        for number, line in enumerate(lines):
            block.append(f'{first if number == 0 else indent} {line}'.rstrip())
            if len(block) >= 1000:
                self._out.file.write('\n'.join(block) + '\n')
                block.clear()
        if block:
            self._out.file.write('\n'.join(block) + '\n')
        self._out.file.flush()


def _cut(text: str, width: int) -> Iterator[str]:
    """`text`'s lines, each cut into pieces of at most `width` characters."""
    for line in text.split('\n'):
        if len(line) <= width:
            yield line
            continue
        for start in range(0, len(line), width):
            yield line[start : start + width]
