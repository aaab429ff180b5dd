"""Stored data as plain text and JSON, the same for every view: safe-to-print strings, sizes and
times, an entry's one-line headline, records and entries as JSON-ready data.

Nothing here imports Rich or pydantic-ai (messages are read by `eventlog_cli.entries`), so
a command printing JSON loads neither.
`eventlog_cli._render` re-exports every name.
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from eventlog.entries import (
    CompactionInfo,
    ConversationRecord,
    DurableStepInfo,
    Entry,
    ErasureInfo,
    ForkInfo,
    Kind,
    RecallInfo,
    RunFinishedInfo,
    RunRecord,
    RunStartedInfo,
    SavedInfo,
    TitleInfo,
    ToolEffectInfo,
)
from eventlog.errors import CorruptEntryError

__all__ = [
    'HEADLINES',
    'clean',
    'clip',
    'compaction_info',
    'compaction_summary_text',
    'conversation_json',
    'entry_headline',
    'entry_json',
    'json_text',
    'message_lines',
    'print_json',
    'run_json',
    'seq_list',
    'size',
    'timestamp',
    'to_builtins',
    'tokens',
]


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


def json_text(data: object) -> str:
    """`data` as indented JSON, with its final newline: what `print_json` prints."""
    return json.dumps(data, ensure_ascii=False, indent=2) + '\n'


def print_json(data: object) -> None:
    """Print `data` as indented JSON on stdout."""
    sys.stdout.write(json_text(data))


def timestamp(value: datetime | None) -> str:
    """A timestamp to the second, in UTC, or an empty string."""
    return '' if value is None else value.strftime('%Y-%m-%d %H:%M:%S')


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


def message_lines(entry: Entry) -> tuple[str, list[str]]:
    """A message entry's role (`request` or `response`) and its parts' lines (`'User: hi'`), as
    every view shows them (`eventlog_cli.entries`)."""
    from eventlog_cli.entries import message_view

    view = message_view(entry)
    return view.role, view.lines()


def clip(text: str, limit: int) -> str:
    """`text` on one line (runs of whitespace made one space), cut to `limit` characters with `…`."""
    flat = ' '.join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + '…'


def compaction_info(entry: Entry) -> CompactionInfo:
    """The payload of a `compaction` entry."""
    return msgspec.json.decode(entry.payload, type=CompactionInfo)


def compaction_summary_text(info: CompactionInfo) -> str:
    """A compaction's summary messages as plain text (not yet `clean`): each part's text, as
    every view shows it."""
    from eventlog_cli.entries import payload_view

    texts: list[str] = []
    for raw in info.summary:
        try:
            view = payload_view(bytes(raw))
        except CorruptEntryError:
            texts.append('(unreadable summary)')
            continue
        texts.extend(part.body() for part in view.parts)
    return '\n'.join(texts)


def entry_headline(entry: Entry, *, limit: int = 100) -> str:
    """What one entry says, on one line, safe to print (`clean`)."""
    return clean(_headline(entry, limit))


def _headline(entry: Entry, limit: int) -> str:
    try:
        return HEADLINES[entry.kind](entry, limit)
    except (msgspec.DecodeError, ValueError):
        return f'(undecodable {entry.kind} payload, {len(entry.payload)} bytes)'


def _message_headline(entry: Entry, limit: int) -> str:
    role, lines = message_lines(entry)
    text = clip(' | '.join(lines), limit) if lines else '(no parts)'
    inherited = ' (inherited)' if entry.inherited else ''
    if entry.erased:
        return f'{role}{inherited} (erased): content removed'
    return f'{role}{inherited}: {text}'


def _erasure_headline(entry: Entry, limit: int) -> str:
    info = msgspec.json.decode(entry.payload, type=ErasureInfo)
    parts = [f'erased {len(info.seqs)} entries ({seq_list(info.seqs)})']
    if info.run_id:
        parts.append(f'of run {info.run_id}')
    if info.by:
        parts.append(f'by {info.by}')
    if info.reason:
        parts.append(f'reason: {info.reason}')
    return clip(', '.join(parts), limit)


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
        parts.append(clip(finished.error, limit))
    return ', '.join(parts)


def _tool_effect_headline(entry: Entry, limit: int) -> str:
    effect = msgspec.json.decode(entry.payload, type=ToolEffectInfo)
    error = f': {clip(effect.error, limit)}' if effect.error else ''
    return f'{effect.tool_name} {effect.status} (call {effect.tool_call_id}){error}'


def _durable_step_headline(entry: Entry, limit: int) -> str:
    info = msgspec.json.decode(entry.payload, type=DurableStepInfo)
    if info.step == 0:
        return f'durable run input ({size(len(info.result))})'
    return f'durable step {info.step} {clip(info.name, limit)} ({size(len(info.result))} result)'


_RECALLED_MESSAGE = re.compile(r'<message [^>]*>\n(.*?)\n</message>', re.S)
"""One recalled message's (escaped) text inside a `recall` entry's block."""


def _recall_headline(entry: Entry, limit: int) -> str:
    info = msgspec.json.decode(entry.payload, type=RecallInfo)
    count = len(info.hits)
    recalled = [f'#{hit.seq}' if hit.seq is not None else f'{hit.run_id}[{hit.position}]' for hit in info.hits]
    what = f'{count} {"message" if count == 1 else "messages"} ({", ".join(recalled)})' if recalled else 'nothing'
    head = f'{what} for {clip(repr(info.query), 80)} ({info.mode}, {info.tokens}/{info.max_tokens} tokens)'
    quoted = [html.unescape(text) for text in _RECALLED_MESSAGE.findall(info.text)]  # without the framing
    shown = ' | '.join(quoted) if quoted else info.text
    return f'{head}: {clip(shown, limit)}' if shown else head


def _compaction_headline(entry: Entry, limit: int) -> str:
    info = compaction_info(entry)
    return f'summary replaces {seq_list(info.replaced)}: {clip(compaction_summary_text(info), limit)}'


def _title_headline(entry: Entry, limit: int) -> str:
    return repr(msgspec.json.decode(entry.payload, type=TitleInfo).title)


def _forked_from_headline(entry: Entry, limit: int) -> str:
    fork = msgspec.json.decode(entry.payload, type=ForkInfo)
    return f'forked from {fork.conversation_id} at #{fork.seq}'


def _saved_headline(entry: Entry, limit: int) -> str:
    info = msgspec.json.decode(entry.payload, type=SavedInfo)
    if info.deleted:
        return f'conversation store: deleted ({len(info.released)} entries released)'
    added = len(info.links)
    parts = [f'conversation store: saved, {added} {"entry" if added == 1 else "entries"} added']
    if info.links:
        parts.append(f'linking {seq_list([link.seq for link in info.links])}')
    if info.scope is not None:
        parts.append(f'scope {clip(repr(info.scope), limit)}')
    if info.forked_from is not None and info.expected is None:
        parts.append(f'forked from {info.forked_from}')
    if info.branches:
        parts.append(f'{len(info.branches)} {"branch" if len(info.branches) == 1 else "branches"} left')
    if info.deferred is not None:
        parts.append('waiting on deferred tool calls')
    return ', '.join(parts)


HEADLINES: dict[Kind, Callable[[Entry, int], str]] = {
    'message': _message_headline,
    'run_started': _run_started_headline,
    'run_finished': _run_finished_headline,
    'tool_effect': _tool_effect_headline,
    'durable_step': _durable_step_headline,
    'recall': _recall_headline,
    'compaction': _compaction_headline,
    'title': _title_headline,
    'forked_from': _forked_from_headline,
    'archived': lambda _entry, _limit: 'hidden from listings',
    'unarchived': lambda _entry, _limit: 'listed again',
    'deleted': lambda _entry, _limit: 'entries removed; this tombstone remains',
    'erasure': _erasure_headline,
    'shred': lambda _entry, _limit: "data key destroyed: the conversation's content is unreadable everywhere",
    'saved': _saved_headline,
}
"""One line per kind of entry, for `tail` and `replay`."""


def seq_list(seqs: Sequence[int]) -> str:
    """Entry numbers, shortened to a range when there are many."""
    if not seqs:
        return 'nothing'
    if len(seqs) <= 4:
        return ', '.join(f'#{s}' for s in seqs)
    return f'{len(seqs)} entries (#{seqs[0]}…#{seqs[-1]})'


def to_builtins(value: object) -> Any:
    """A msgspec struct (a report, a record) as JSON-ready data."""
    return msgspec.to_builtins(value)
