"""How the command line shows entries, messages, records and search hits (rich and JSON)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console
from rich.text import Text

from eventlog import (
    CompactionInfo,
    ConversationRecord,
    CorruptEntryError,
    Entry,
    ForkInfo,
    RunFinishedInfo,
    RunRecord,
    RunStartedInfo,
    TitleInfo,
    ToolEffectInfo,
    decode_messages,
)
from eventlog.entries import Kind
from search.analyzers import WORD_RE, Analyzer, LocatingAnalyzer

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

# pydantic-ai (and `search.render`, which needs it) are imported inside the functions that
# handle messages, so that commands which never decode one start fast.

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
    'message_role',
    'message_text',
    'print_json',
    'run_json',
    'seq_list',
    'size',
    'timestamp',
    'to_builtins',
    'tokens',
    'tool_effect',
]

_LABEL_STYLES = (
    ('User', 'bold green'),
    ('Assistant', 'bold blue'),
    ('Tool Call', 'bold magenta'),
    ('Tool', 'magenta'),
    ('Retry', 'bold red'),
    ('Summary', 'bold yellow'),
    ('System', 'dim'),
    ('Speech', 'cyan'),
)
_WIDE = 160
"""Output width when stdout is not a terminal (pipes, files): wide enough not to cut ids."""


_UNSAFE = re.compile('[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
"""What a terminal could act on or that reorders text: C0 controls but tab, DEL, C1 controls, bidi
marks and controls, and lone surrogates (which no terminal encoding can write)."""
_UNSAFE_LINE = re.compile('[\t\n]|' + _UNSAFE.pattern)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f'\\x{code:02x}' if code < 0x100 else f'\\u{code:04x}'


def clean(value: object, *, multiline: bool = False) -> str:
    """Stored text made safe to print on a terminal: each control character (C0, DEL, C1), bidi
    control and lone surrogate replaced by its visible escape (`\\x1b`, `\\u202e`).

    Only a `multiline` body keeps its newlines and tabs; in a one-line field (an id, a title, a
    tool name) they are escaped too. Every human-readable view passes stored strings through here.
    """
    text = value if isinstance(value, str) else str(value)
    return (_UNSAFE if multiline else _UNSAFE_LINE).sub(_escape, text)


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


def print_json(data: object) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + '\n')


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


def timestamp(value: datetime | None) -> str:
    """A timestamp to the second, in UTC, or an empty string."""
    return '' if value is None else value.strftime('%Y-%m-%d %H:%M:%S')


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


def size(count: int) -> str:
    """A byte count, readable."""
    value = float(count)
    for unit in ('B', 'KB', 'MB', 'GB', 'TB'):
        if value < 1024 or unit == 'TB':
            return f'{count} B' if unit == 'B' else f'{value:.1f} {unit}'
        value /= 1024
    return f'{count} B'  # pragma: no cover


def tokens(usage: dict[str, int]) -> str:
    """Input/output token counts of a usage mapping, or an empty string."""
    if not usage:
        return ''
    return f'{usage.get("input_tokens", 0)}/{usage.get("output_tokens", 0)}'


def run_json(run: RunRecord) -> dict[str, Any]:
    """A run record as JSON-ready data."""
    return msgspec.to_builtins(run)


def conversation_json(conversation: ConversationRecord) -> dict[str, Any]:
    """A conversation record as JSON-ready data (its internal chain head left out)."""
    data: dict[str, Any] = msgspec.to_builtins(conversation)
    data.pop('head_hash', None)
    return data


def _payload_json(entry: Entry) -> Any:
    """An entry's payload as JSON data (`None` when empty); `CorruptEntryError` when damaged."""
    if not entry.payload:
        return None
    try:
        return json.loads(entry.payload)
    except ValueError:
        raise CorruptEntryError(f'entry {entry.seq} holds a payload that is not JSON; run verify') from None


def entry_json(entry: Entry) -> dict[str, Any]:
    """An entry as JSON-ready data: its payload decoded (every payload is JSON or empty), its hash in hex."""
    return {
        'seq': entry.seq,
        'conversation_id': entry.conversation_id,
        'run_id': entry.run_id,
        'kind': entry.kind,
        'timestamp': entry.timestamp.isoformat(),
        'parent': entry.parent,
        'idempotency_key': entry.idempotency_key,
        'inherited': entry.inherited,
        'payload': _payload_json(entry),
        'hash': entry.hash.hex(),
    }


def _label_style(label: str) -> str:
    for prefix, style in _LABEL_STYLES:
        if label.startswith(prefix):
            return style
    return 'bold'


def message_role(message: ModelMessage) -> str:
    """`request` or `response`."""
    from pydantic_ai.messages import ModelResponse

    return 'response' if isinstance(message, ModelResponse) else 'request'


def message_lines(entry: Entry) -> tuple[str, list[str]]:
    """A message entry's role (`request` or `response`) and its lines (`'User: hi'`).

    Read from the stored JSON where `search.wire_text` can (no pydantic-ai import), else decoded.
    """
    from search.wire_text import wire_lines

    fast = wire_lines(entry.payload)
    if fast is not None:
        role, lines = fast
        return role, [label + text for label, text in lines]
    from search.render import message_segments

    message = entry.message()
    return message_role(message), [segment.full() for segment in message_segments(message)]


def message_text(message: ModelMessage, *, limit: int | None = None) -> Text:
    """A message as labelled lines (`User:`, `Assistant:`, `Tool Call [name]:` ...), each clipped to `limit`."""
    from search.render import message_segments

    out = Text()
    segments = message_segments(message)
    if not segments:
        out.append('(no text)', style='dim')
        return out
    for index, segment in enumerate(segments):
        if index:
            out.append('\n')
        body = segment.text if limit is None else _clip(segment.text, limit)
        out.append(clean(segment.label), style=_label_style(segment.label))
        out.append(clean(body, multiline=True).replace('\n', '\n  '))
    return out


def _clip(text: str, limit: int) -> str:
    flat = ' '.join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + '…'


def compaction_info(entry: Entry) -> CompactionInfo:
    """The payload of a `compaction` entry."""
    return msgspec.json.decode(entry.payload, type=CompactionInfo)


def compaction_summary_text(info: CompactionInfo) -> str:
    """A compaction's summary messages as plain text (not yet `clean`)."""
    from search.wire_text import wire_lines

    texts: list[str] = []
    for raw in info.summary:
        fast = wire_lines(bytes(raw))
        if fast is not None:
            texts.extend(text for _, text in fast[1])
            continue
        from search.render import message_segments

        try:
            message = _decode_message(bytes(raw))
        except Exception:
            texts.append('(unreadable summary)')
            continue
        texts.extend(segment.text for segment in message_segments(message))
    return '\n'.join(texts)


def _decode_message(payload: bytes) -> ModelMessage:
    return decode_messages([payload])[0]


def entry_headline(entry: Entry, *, limit: int = 100) -> str:
    """What one entry says, on one line, safe to print (`clean`)."""
    return clean(_headline(entry, limit))


def _headline(entry: Entry, limit: int) -> str:
    try:
        return _HEADLINES[entry.kind](entry, limit)
    except (msgspec.DecodeError, ValueError):
        return f'(undecodable {entry.kind} payload, {len(entry.payload)} bytes)'


def _message_headline(entry: Entry, limit: int) -> str:
    role, lines = message_lines(entry)
    text = _clip(' | '.join(lines), limit) if lines else '(no text)'
    inherited = ' (inherited)' if entry.inherited else ''
    return f'{role}{inherited}: {text}'


def _run_started_headline(entry: Entry, limit: int) -> str:
    started = msgspec.json.decode(entry.payload, type=RunStartedInfo)
    parts = [f'agent {started.agent_name}' if started.agent_name else 'run started']
    if entry.parent is not None:
        parts.append(f'continues from #{entry.parent}')
    if started.parent_run_id:
        parts.append(f'inside run {started.parent_run_id}')
    parts.extend(f'{key}={value}' for key, value in started.metadata.items())
    return ', '.join(parts)


def _run_finished_headline(entry: Entry, limit: int) -> str:
    finished = msgspec.json.decode(entry.payload, type=RunFinishedInfo)
    parts = [finished.status]
    if finished.usage:
        requests = finished.usage.get('requests', 0)
        plural = 'request' if requests == 1 else 'requests'
        parts.append(f'tokens in/out {tokens(finished.usage)}, {requests} {plural}')
    if finished.error:
        parts.append(_clip(finished.error, limit))
    return ', '.join(parts)


def _tool_effect_headline(entry: Entry, limit: int) -> str:
    effect = msgspec.json.decode(entry.payload, type=ToolEffectInfo)
    error = f': {_clip(effect.error, limit)}' if effect.error else ''
    return f'{effect.tool_name} {effect.status} (call {effect.tool_call_id}){error}'


def _compaction_headline(entry: Entry, limit: int) -> str:
    info = compaction_info(entry)
    return f'summary replaces {seq_list(info.replaced)}: {_clip(compaction_summary_text(info), limit)}'


def _title_headline(entry: Entry, limit: int) -> str:
    return repr(msgspec.json.decode(entry.payload, type=TitleInfo).title)


def _forked_from_headline(entry: Entry, limit: int) -> str:
    fork = msgspec.json.decode(entry.payload, type=ForkInfo)
    return f'forked from {fork.conversation_id} at #{fork.seq}'


_HEADLINES: dict[Kind, Callable[[Entry, int], str]] = {
    'message': _message_headline,
    'run_started': _run_started_headline,
    'run_finished': _run_finished_headline,
    'tool_effect': _tool_effect_headline,
    'compaction': _compaction_headline,
    'title': _title_headline,
    'forked_from': _forked_from_headline,
    'archived': lambda _entry, _limit: 'hidden from listings',
    'unarchived': lambda _entry, _limit: 'listed again',
    'deleted': lambda _entry, _limit: 'entries removed; this tombstone remains',
}
"""One line per kind of entry, for `tail` and `replay`."""


def seq_list(seqs: Sequence[int]) -> str:
    """Entry numbers, shortened to a range when there are many."""
    if not seqs:
        return 'nothing'
    if len(seqs) <= 4:
        return ', '.join(f'#{s}' for s in seqs)
    return f'{len(seqs)} entries (#{seqs[0]}…#{seqs[-1]})'


def tool_effect(entry: Entry) -> ToolEffectInfo | None:
    """The payload of a `tool_effect` entry, or `None` when it cannot be decoded."""
    try:
        return msgspec.json.decode(entry.payload, type=ToolEffectInfo)
    except msgspec.DecodeError:
        return None


def to_builtins(value: object) -> Any:
    """A msgspec struct (a report, a record) as JSON-ready data."""
    return msgspec.to_builtins(value)


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


def is_request(message: ModelMessage) -> bool:
    """Whether `message` is a request (user side)."""
    from pydantic_ai.messages import ModelRequest

    return isinstance(message, ModelRequest)


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
