"""The `eventlog` command: browse, replay, search, verify and export a store; and the demo.

Every command works on one LMDB store (`--store PATH`, default `$EVENTLOG_STORE`, else
`./eventlog.lmdb`) and refuses to create one by accident: only `import` and `demo` write
into a path that does not exist yet. Commands whose output is data take `--json`.

Errors a user can cause (no store at the path, an unknown id, a store written by a newer
version, a bad option) print one line on stderr and exit with status 1 (2 for a bad option);
never a traceback. A store so damaged that reading it crashes the storage engine ends the
command with one line and status 3 (`EXIT_STORE_CRASHED`, see `main`).
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from eventlog import Entry, EventLogBase, EventLogError, RunRecord
from eventlog.lmdb_log import CompactResult, LmdbEventLog
from eventlog_cli import _audit
from eventlog_cli import _render as render
from eventlog_cli import _styled as styled
from eventlog_cli import _tables as tables
from eventlog_cli import _views as views
from eventlog_cli._ids import ShortIds, resolve_conversation, resolve_run
from eventlog_cli._index import index_analyzer, rebuild_index
from eventlog_cli._store import PostgresStore, describe, drop_schema, is_postgres, parse_store, store_exists
from eventlog_cli._views import KIND_STYLES as _KIND_STYLES
from eventlog_cli._views import TAIL_BATCH as _TAIL_BATCH
from eventlog_cli._views import CliError
from eventlog_cli._views import compact_json as _compact_json
from eventlog_cli._views import conversation_record as _conversation
from eventlog_cli._views import open_store as _open
from eventlog_cli._views import plural as _plural
from eventlog_cli._views import run_record as _run_record
from eventlog_cli.launch import DEFAULT_STORE, DEMO_STORE, EXIT_STORE_CRASHED, main
from search.analyzers import ANALYZER_NAMES, Analyzer, get_analyzer

if TYPE_CHECKING:
    from rich.progress import Progress

    from search.result import SearchResult

# pydantic-ai, numpy and the search engine are imported by the commands that use them, so that
# `--help`, `conversations`, `info`, `stats`, `verify` and `tail` start fast.

__all__ = ['EXIT_STORE_CRASHED', 'CliError', 'app', 'main', 'run_app']

T = TypeVar('T')

_DEFAULT_STORE = str(DEFAULT_STORE)


class _Group(TyperGroup):
    """Reports usage errors (unknown option, bad value, missing argument) in one line on stderr."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The parameters, with the plain metavars of `_plain_metavars`."""
        return _plain_metavars(super().get_params(ctx))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with the first sentence of its help, wrapped to the terminal rather than cut off."""
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, _first_sentence(command.help or '')))
        if rows:
            with formatter.section('Commands'):
                formatter.write_dl(rows)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; in standalone mode, exit with its status."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        if args is not None and any('\x00' in arg for arg in args):  # only in-process callers can pass one
            sys.stderr.write('eventlog: an argument holds a NUL character, which no path or URL can hold\n')
            sys.exit(2)
        try:
            status = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except Exception as exc:
            if type(exc).__name__ == 'NoArgsIsHelpError':
                sys.stdout.write(f'{exc}\n')  # bare `eventlog`: the help is the answer
                sys.exit(0)
            format_message = getattr(exc, 'format_message', None)
            code = getattr(exc, 'exit_code', None)
            if not callable(format_message) or not isinstance(code, int):
                raise
            ctx = getattr(exc, 'ctx', None)
            path = getattr(ctx, 'command_path', None)
            hint = f" (see '{path} --help')" if path else ''
            sys.stderr.write(f'eventlog: {format_message()}{hint}\n')
            sys.exit(code)
        sys.exit(status if isinstance(status, int) else 0)


def _first_sentence(text: str) -> str:
    """The first sentence of a help text (up to its first full stop or blank line), on one line."""
    paragraph = ' '.join(text.strip().split('\n\n', 1)[0].split())
    stop = paragraph.find('. ')
    return (paragraph if stop < 0 else paragraph[:stop]).rstrip('.')


_OPTION_METAVARS = {
    'conversation': '<id>',
    'run': '<id>',
    'new_id': '<id>',
    'analyzer': '<name>',
    'kind': '<kind>',
    'model': '<model>',
    'store': '<path|url>',
    'host': '<address>',
    'token': '<token>',
}
"""Metavars that say what an option's text is (`--run <id>`), where its type alone says `<str>`."""


def _plain_metavars(params: list[Any]) -> list[Any]:
    """Help that names an argument as `QUERY`, shows no `<bool>` next to a flag, and writes
    `<n>`, `<seconds>` or `<id>` where the types alone would say `<int range>` or `<str>`."""
    for param in params:
        if isinstance(param, TyperArgument) and param.metavar is None and param.name:
            param.metavar = param.name.upper()
        elif isinstance(param, TyperOption) and param.metavar is None:
            if param.is_flag:
                param.metavar = ''
            elif param.name in _OPTION_METAVARS:
                param.metavar = _OPTION_METAVARS[param.name]
            elif param.type.name.startswith('int'):
                param.metavar = '<n>'
            elif param.type.name.startswith('float'):
                param.metavar = '<seconds>'
            elif param.type.name in ('str', 'text'):
                param.metavar = '<text>'
    return params


class _Command(TyperCommand):
    """A command whose usage line reads `eventlog search [OPTIONS] QUERY`, as `git` and `gh` write it."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The parameters, with the plain metavars of `_plain_metavars`."""
        return _plain_metavars(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """`[OPTIONS]`, then each argument: `NAME` when required, `[NAME]` when not, `...` when repeated."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or (param.name or '').upper()
                name = name if param.required else f'[{name}]'
                pieces.append(name + ('...' if param.nargs != 1 else ''))
        return pieces


app = typer.Typer(
    cls=_Group,
    name='eventlog',
    help='Browse, replay, search, verify and export an event log of pydantic-ai agent runs.',
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _main(
    store: Annotated[
        str | None,
        typer.Option(
            '--store',
            '-s',
            help='The store (a directory, or postgresql://user@host/db#schema), for any command '
            '(as if given after it, where it can also go).',
            show_default=False,
        ),
    ] = None,
) -> None:
    """Browse, replay, search, verify and export an event log of pydantic-ai agent runs."""
    if store is not None:
        # The commands read their store from `--store` or else $EVENTLOG_STORE; a store named
        # before the command stands in for the variable, so one given after it still wins.
        os.environ['EVENTLOG_STORE'] = store


StoreOption = Annotated[
    str,
    typer.Option(
        '--store',
        '-s',
        envvar='EVENTLOG_STORE',
        help='The store: a directory, or a PostgreSQL URL with the schema after # '
        '(postgresql://user@host/db#schema; schema eventlog when none is given).',
        show_default=True,
    ),
]
JsonOption = Annotated[bool, typer.Option('--json', help='Print JSON instead of a table.')]
FullIdsOption = Annotated[
    bool, typer.Option('--full-ids', help='Show run and conversation ids whole instead of abbreviated.')
]


# --- plumbing ---------------------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f'eventlog: {message}\n')
    raise typer.Exit(code)


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine, turning every error a user can cause into one line and status 1."""
    try:
        return asyncio.run(work)
    except (CliError, EventLogError) as exc:
        _fail(str(exc))
    except OSError as exc:
        where = f' ({exc.filename})' if exc.filename else ''
        _fail(f'{exc.strerror or exc}{where}')


def _analyzer(name: str) -> Analyzer:
    try:
        return get_analyzer(name)
    except ValueError:
        raise CliError(f'unknown analyzer {name!r}; choose one of {", ".join(ANALYZER_NAMES)}') from None
    except ImportError as exc:
        raise CliError(f'the {name!r} analyzer needs an optional dependency: {exc}') from None


_STATUS_STYLES = {'completed': 'green', 'failed': 'red', 'cancelled': 'yellow', 'running': 'cyan'}


def _status(status: str) -> Text:
    return render.clean_text(status, _STATUS_STYLES.get(status, ''))


# --- listing ----------------------------------------------------------------------------------


@app.command()
def conversations(
    store: StoreOption = _DEFAULT_STORE,
    include_archived: Annotated[bool, typer.Option('--include-archived', help='List archived ones too.')] = False,
    full_ids: FullIdsOption = False,
    as_json: JsonOption = False,
) -> None:
    """List conversations, most recently active first."""
    _run(_conversations(store, include_archived, as_json, full_ids))


async def _conversations(store: str, include_archived: bool, as_json: bool, full_ids: bool = False) -> None:
    async with _open(store) as log:
        records, short = await views.read_conversations(log, include_archived, full_ids or as_json)
    if as_json:
        render.print_json([render.conversation_json(c) for c in records])
        return
    out = render.console()
    if not records:
        out.print('no conversations in this store')
        return
    columns = styled.conversation_columns(records, short, include_archived)
    tables.print_table(out, columns, styled.CONVERSATION_STEPS)


@app.command()
def runs(
    conversation: Annotated[str | None, typer.Argument(help='Only the runs of this conversation.')] = None,
    store: StoreOption = _DEFAULT_STORE,
    full_ids: FullIdsOption = False,
    as_json: JsonOption = False,
    interrupted: Annotated[
        bool,
        typer.Option(
            '--interrupted',
            help='Only the runs that never finished (status running): those a durable run resumes.',
        ),
    ] = False,
) -> None:
    """List runs in start order: status, agent, parent run, duration, tokens."""
    _run(_runs(store, conversation, as_json, full_ids, interrupted=interrupted))


async def _runs(
    store: str, conversation: str | None, as_json: bool, full_ids: bool = False, *, interrupted: bool = False
) -> None:
    async with _open(store) as log:
        if conversation is not None:
            conversation = await resolve_conversation(log, conversation)
            await _conversation(log, conversation)
        records = await log.list_runs(conversation_id=conversation, status='running' if interrupted else None)
        short = ShortIds(log, full=full_ids or as_json, uniform=True)
        await short.learn('run', [i for r in records for i in (r.run_id, r.parent_run_id)])
        await short.learn('conversation', (r.conversation_id for r in records))
    if as_json:
        render.print_json([render.run_json(r) for r in records])
        return
    out = render.console()
    if not records:
        out.print('no interrupted runs' if interrupted else 'no runs')
        return
    tables.print_table(out, _run_columns(records, short, with_conversation=conversation is None), _RUN_STEPS)
    statuses = Counter(r.status for r in records)
    out.print(
        render.clean_text(f'{len(records)} runs: ' + ', '.join(f'{n} {s}' for s, n in statuses.most_common()), 'dim')
    )


_RUN_STEPS: list[tables.Step] = [
    ('drop', 'tokens in/out'),
    ('compact', 'started'),
    ('drop', 'messages'),
    ('drop', 'parent run'),
    ('drop', 'duration'),
    ('drop', 'conversation'),
    ('drop', 'agent'),
    ('drop', 'started'),
]
"""What `runs` gives up first as the terminal narrows (docs/cli-views.md)."""


def _run_columns(records: Sequence[RunRecord], short: ShortIds, *, with_conversation: bool) -> list[tables.Column]:
    run = tables.Column('run')
    conversation = tables.Column('conversation')
    day, compact_starts = tables.compact_times([r.started_at for r in records])
    started = tables.Column('started', compact_header=None if day is None else f'started {day}')
    duration = tables.Column('duration', justify='right', hide_empty=True)
    status = tables.Column('status')
    agent = tables.Column('agent', flex='clip', min_width=16, hide_empty=True)
    parent = tables.Column('parent run', hide_empty=True)
    messages = tables.Column('messages', justify='right')
    usage = tables.Column('tokens in/out', justify='right', hide_empty=True)
    for index, r in enumerate(records):
        run.add(render.clean_text(short.run(r.run_id)))
        conversation.add(render.clean_text(short.conversation(r.conversation_id)))
        started.add(render.timestamp(r.started_at), compact_starts[index])
        duration.add(render.duration(r.started_at, r.finished_at))
        status.add(_status(r.status))
        agent.add(render.clean_text(r.agent_name or ''))
        parent.add(render.clean_text(short.run(r.parent_run_id)))
        messages.add(str(r.message_count))
        usage.add(render.tokens(r.usage))
    shown = [run, conversation, started, duration, status, agent, parent, messages, usage]
    return shown if with_conversation else [c for c in shown if c is not conversation]


@app.command()
def info(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """One conversation: title, counts, compactions, cumulative token usage, fork origin."""
    _run(_info(store, conversation, as_json))


async def _info(store: str, conversation_id: str, as_json: bool) -> None:
    async with _open(store) as log:
        record, records, pending = await views.read_info(log, conversation_id)
    if as_json:
        render.print_json(views.info_json(record, records, pending))
        return
    render.console().print(styled.rows_grid(views.info_rows(record, records, pending)))


# --- reading ----------------------------------------------------------------------------------


def _heading(out: Console, title: Text) -> None:
    """A view's heading: the title in a rule across the terminal, or, when the title (holding
    whole ids) is too wide for one, the title on its own lines above a plain rule, never cut."""
    if title.cell_len + 6 <= out.width:
        out.print(Rule(title, align='left'))
        return
    out.print(title)
    out.print(Rule())


def _label(text: str) -> Text:
    return Text(text, style='dim')


_Replaced = tuple[int, int | None]
"""What a compaction replaced, beyond its `seq`s: how many were earlier summaries (compaction
entries), and the message it kept after its summary (merged into the summary's request), if any."""


async def _replaced_notes(log: EventLogBase, entries: Sequence[Entry]) -> dict[int, _Replaced]:
    """For each compaction among `entries`, by `seq`: what it replaced (`_Replaced`), read from the
    replaced entries themselves; a compaction whose entries cannot all be read gets no note."""
    notes: dict[int, _Replaced] = {}
    for entry in entries:
        if entry.kind != 'compaction':
            continue
        try:
            info = render.compaction_info(entry)
            replaced = [await log.get_entry(seq) for seq in info.replaced]
            if not replaced or any(r is None for r in replaced):
                continue
            summaries = sum(1 for r in replaced if r is not None and r.kind == 'compaction')
            kept: int | None = None
            last = replaced[-1]
            if (
                last is not None
                and last.kind == 'message'
                and info.summary
                and render.summary_keeps(last.payload, bytes(info.summary[-1]))
            ):
                kept = last.seq
            notes[entry.seq] = (summaries, kept)
        except (EventLogError, ValueError):  # a damaged entry: the marker says less, the view goes on
            continue
    return notes


def _span(seqs: Sequence[int]) -> str:
    return ', '.join(f'#{s}' for s in seqs) if len(seqs) <= 4 else f'#{seqs[0]}…#{seqs[-1]}'


def _compaction_body(entry: Entry, note: _Replaced | None = None) -> Text:
    info = render.compaction_info(entry)
    if note is None or not info.replaced:
        head = f'summary replaces {render.seq_list(info.replaced)}'
    else:
        # Say what the summary stands for: the messages it summarizes, the earlier summaries it
        # folds in, and the one message (if any) it repeats after the summary, which `replaced`
        # counts too because the request it was merged into is rewritten.
        summaries, kept = note
        messages = len(info.replaced) - summaries - (kept is not None)
        what = _plural(messages, 'message', 'messages')
        if summaries:
            what += f' and {_plural(summaries, "earlier summary", "earlier summaries")}'
        head = f'summary replaces {_span(info.replaced)} ({what} summarized'
        head += f', #{kept} kept after the summary)' if kept is not None else ')'
    out = Text(f'── compaction: {head} ──', style='yellow')
    summary = render.compaction_summary_text(info)
    if summary:
        out.append('\n' + render.clean(summary, multiline=True), style='yellow')
    return out


_TRANSCRIPT_KINDS = ['message', 'compaction', 'recall']
"""What `show` lists: the messages, with markers where a compaction replaced some and where
`AutoRecall` added stored messages to a request (docs/recall.md)."""


def _entry_rows(rows: render.Rows, entries: Sequence[Entry], notes: dict[int, _Replaced] | None = None) -> None:
    for entry in entries:
        if entry.kind == 'compaction':
            body = _compaction_body(entry, (notes or {}).get(entry.seq))
        elif entry.kind == 'recall':
            body = Text('recalled into the request: ', style='green')
            body.append(render.entry_headline(entry, limit=400), style='dim')
        else:
            body = render.message_text(entry)
        rows.add(_label(f'#{entry.seq}'), body)


def _message_rows(rows: render.Rows, messages: Sequence[tuple[int, Entry | bytes]]) -> int:
    """Add a row per `(seq, message entry or payload)`, labelled with its entry number `#seq`; return how many."""
    for seq, message in messages:
        rows.add(_label(f'#{seq}'), render.message_text(message))
    return len(messages)


_READ_BATCH = 500
"""Entries read, decoded and printed at a time by the views that stream (show, replay, context)."""


async def _entry_batches(
    log: EventLogBase, *, conversation_id: str | None = None, run_id: str | None = None, kinds: list[str] | None = None
) -> AsyncIterator[list[Entry]]:
    """Matching entries in `seq` order, a bounded batch at a time, each batch in its own transaction."""
    async for batch in log.iter_entries(conversation_id=conversation_id, run_id=run_id, kinds=kinds, batch=_READ_BATCH):
        yield batch


async def _count_messages(log: EventLogBase, tip: int | None) -> int:
    """How many messages the branch ending at `tip` holds (read in batches, nothing kept)."""
    count = 0
    async for batch in log.iter_branch(tip, kinds=['message'], batch=_READ_BATCH):
        count += len(batch)
    return count


async def _write_json_list(batches: AsyncIterator[list[bytes]]) -> None:
    """Print stored message payloads as one JSON list (the bytes `ModelMessagesTypeAdapter.dump_json`
    gives), batch by batch."""
    sys.stdout.flush()
    sink = sys.stdout.buffer
    sink.write(b'[')
    first = True
    async for batch in batches:
        if batch:
            sink.write((b'' if first else b',') + b','.join(batch))
            first = False
    sink.write(b']\n')
    sink.flush()


@app.command()
def show(
    conversation: Annotated[str | None, typer.Argument(help='The conversation to show.')] = None,
    run: Annotated[str | None, typer.Option('--run', '-r', help='Show one run instead.')] = None,
    full: Annotated[bool, typer.Option('--full', help='With --run: also the history the run inherited.')] = False,
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """The transcript: every original message once, in order, with compaction markers.

    With `--json`, the exact pydantic-ai JSON (`ModelMessagesTypeAdapter`) of the messages.
    """
    if (conversation is None) == (run is None):
        _fail('give a conversation id, or --run RUN (not both)')
    _run(_show(store, conversation, run, full, as_json))


async def _show(store: str, conversation_id: str | None, run_id: str | None, full: bool, as_json: bool) -> None:
    async with _open(store) as log:
        if run_id is not None:
            await _show_run(log, await resolve_run(log, run_id), full, as_json)
            return
        assert conversation_id is not None
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await _conversation(log, conversation_id)
        origin = await log.history_origin(conversation_id)
        if as_json:
            await _write_json_list(_transcript_payloads(log, conversation_id, origin))
            return
        inherited = await _count_messages(log, origin)
        out = render.console()
        title = f' · {record.title}' if record.title else ''
        _heading(out, render.clean_text(f'{conversation_id}{title} · {record.message_count} messages'))
        if inherited > 0:
            source = record.forked_from.conversation_id if record.forked_from else 'another conversation'
            out.print(render.clean_text(f'{inherited} messages inherited from {source}, by reference:', 'dim italic'))
            rows = render.Rows(out, 7)
            async for batch in log.iter_branch(origin, kinds=['message'], batch=_READ_BATCH):
                _message_rows(rows, [(entry.seq, entry) for entry in batch])
            rows.flush()
            out.print(Text('then this conversation:', style='dim italic'))
        rows = render.Rows(out, 7)
        async for batch in _entry_batches(log, conversation_id=conversation_id, kinds=_TRANSCRIPT_KINDS):
            _entry_rows(rows, batch, await _replaced_notes(log, batch))
        rows.flush()


async def _transcript_payloads(
    log: EventLogBase, conversation_id: str, origin: int | None
) -> AsyncIterator[list[bytes]]:
    """`transcript_payloads` batch by batch: the inherited history, then the conversation's own messages."""
    async for batch in log.iter_branch(origin, kinds=['message'], batch=_READ_BATCH):
        yield [entry.payload for entry in batch]
    async for batch in _entry_batches(log, conversation_id=conversation_id, kinds=['message']):
        yield [entry.payload for entry in batch]


async def _show_run(log: EventLogBase, run_id: str, full: bool, as_json: bool) -> None:
    record = await _run_record(log, run_id)
    if as_json:
        await _write_json_list(log.iter_run_message_payloads(run_id, batch=_READ_BATCH))
        return
    out = render.console()
    _heading(out, render.clean_text(f'run {run_id} · conversation {record.conversation_id}'))
    rows = render.Rows(out, 7)
    if full:
        async for batch in log.iter_branch(record.last_seq, kinds=['message'], batch=_READ_BATCH):
            _message_rows(rows, [(entry.seq, entry) for entry in batch])
        rows.flush()
        return
    earlier = await _count_messages(log, record.branch_parent)
    if earlier > 0:
        out.print(Text(f'(continues {earlier} earlier messages; --full shows them)', style='dim italic'))
    async for batch in _entry_batches(log, run_id=run_id, kinds=_TRANSCRIPT_KINDS):
        _entry_rows(rows, batch, await _replaced_notes(log, batch))
    rows.flush()


@app.command()
def replay(
    run: Annotated[str | None, typer.Argument(help='The run id (or pass --last).', show_default=False)] = None,
    last: Annotated[bool, typer.Option('--last', help='The latest run started in the store.')] = False,
    conversation: Annotated[
        str | None, typer.Option('--conversation', '-c', help='With --last: the latest run of this conversation.')
    ] = None,
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Every entry of a run in order, as recorded: messages, tool effects, compactions, timings.

    Name the run, or pass `--last` for the run started last (`--last --conversation ID`: the
    last of that conversation).
    """
    if (run is None) == (not last):
        _fail('name a run id or pass --last (not both)' if last else 'name a run id or pass --last', 2)
    if conversation is not None and not last:
        _fail('--conversation goes with --last (a run id already names its conversation)', 2)
    _run(_replay(store, run, as_json, conversation_id=conversation))


async def _latest_run(log: EventLogBase, conversation_id: str | None) -> str:
    """The id of the run started last, in the store or in one conversation."""
    if conversation_id is not None:
        await _conversation(log, conversation_id)
    records = await log.list_runs(conversation_id=conversation_id)
    if not records:
        where = f'conversation {conversation_id!r}' if conversation_id is not None else 'this store'
        raise CliError(f'no runs in {where} yet')
    return records[-1].run_id


async def _replay(store: str, run_id: str | None, as_json: bool, *, conversation_id: str | None = None) -> None:
    async with _open(store) as log:
        if run_id is None:
            if conversation_id is not None:
                conversation_id = await resolve_conversation(log, conversation_id)
            run_id = await _latest_run(log, conversation_id)
        else:
            run_id = await resolve_run(log, run_id)
        record = await _run_record(log, run_id)
        if as_json:
            writer = render.JsonListWriter({'run': render.run_json(record)}, 'entries')
            async for batch in _entry_batches(log, run_id=run_id):
                for entry in batch:
                    writer.add(render.entry_json(entry))
            writer.close()
            return
        out = render.console()
        out.print(_run_header(record))
        out.print(Rule(style='dim'))
        start: datetime | None = None
        tool_started: dict[str, datetime] = {}
        rows = render.Rows(out, 7, 11, 12)
        count = 0
        async for batch in _entry_batches(log, run_id=run_id):
            notes = await _replaced_notes(log, batch)
            for entry in batch:
                start = entry.timestamp if start is None else start
                rows.add(*_replay_row(entry, start, tool_started, notes.get(entry.seq)))
            count += len(batch)
        rows.flush()
    out.print(Text(f'{count} entries', style='dim'))


def _replay_row(
    entry: Entry, start: datetime, tool_started: dict[str, datetime], note: _Replaced | None = None
) -> tuple[Text, Text, Text, Text]:
    """One entry of `replay`: its number, its time since the run's first entry, its kind, what it says
    (for a compaction, `note` says what it replaced)."""
    offset = f'+{(entry.timestamp - start).total_seconds() * 1000:.1f} ms'
    body = Text()
    if entry.kind == 'message':
        message = render.message_view(entry)
        body.append(message.role + (' (inherited)' if entry.inherited else ''), style='dim')
        body.append('\n')
        body.append_text(render.message_text(message))
    elif entry.kind == 'compaction':
        body = _compaction_body(entry, note)
    else:
        headline = render.entry_headline(entry, limit=400)
        effect = render.tool_effect(entry) if entry.kind == 'tool_effect' else None
        if effect is not None and effect.status == 'started':
            tool_started[effect.tool_call_id] = entry.timestamp
        elif effect is not None and effect.tool_call_id in tool_started:
            headline += f' after {render.duration(tool_started.pop(effect.tool_call_id), entry.timestamp)}'
        body.append(headline)
    kind = render.clean_text(entry.kind, _KIND_STYLES.get(entry.kind, 'bold'))
    return _label(f'#{entry.seq}'), Text(offset, style='dim', justify='right'), kind, body


def _run_header(record: RunRecord) -> Table:
    head = Table.grid(padding=(0, 2))
    head.add_column(style='dim')
    head.add_column()
    head.add_row('run', render.clean_text(record.run_id))
    head.add_row('conversation', render.clean_text(record.conversation_id))
    head.add_row('agent', render.clean_text(record.agent_name or '(unnamed)'))
    if record.parent_run_id:
        head.add_row('inside run', render.clean_text(record.parent_run_id))
    if record.metadata:
        head.add_row('metadata', render.clean_text(', '.join(f'{k}={v}' for k, v in record.metadata.items())))
    head.add_row('status', _status(record.status))
    head.add_row('started', render.timestamp(record.started_at))
    head.add_row('duration', render.duration(record.started_at, record.finished_at) or '(not finished)')
    if record.branch_parent is not None:
        head.add_row('history', f'continues from entry #{record.branch_parent} (by reference, not copied)')
    if record.usage:
        head.add_row('usage', render.clean_text(', '.join(f'{k} {v}' for k, v in record.usage.items())))
    if record.error:
        head.add_row('error', render.clean_text(record.error, 'red', multiline=True))
    return head


@app.command()
def context(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """What an agent continuing the conversation starts from (compaction summaries folded in).

    With `--json`, exactly the pydantic-ai JSON to pass as `message_history`.
    """
    _run(_context(store, conversation, as_json))


async def _context(store: str, conversation_id: str, as_json: bool) -> None:
    async with _open(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await _conversation(log, conversation_id)
        if as_json:
            await _write_json_list(log.iter_context_payloads(conversation_id, batch=_READ_BATCH))
            return
        out = render.console()
        _heading(out, render.clean_text(f'context of {conversation_id}'))
        rows = render.Rows(out, 7)
        count = 0
        async for batch in log.iter_context_messages(conversation_id, batch=_READ_BATCH):
            count += _message_rows(rows, batch)
        rows.flush()
    out.print(Text(f'{_plural(count, "message", "messages")}', style='dim'))


# --- search -----------------------------------------------------------------------------------


@app.command()
def search(
    query: Annotated[str, typer.Argument(help='The words to look for; rare words weigh most.')],
    conversation: Annotated[str | None, typer.Option('--conversation', '-c', help='Search this conversation.')] = None,
    run: Annotated[str | None, typer.Option('--run', '-r', help='Search this run only.')] = None,
    everything: Annotated[bool, typer.Option('--all', help='Search every conversation in the store.')] = False,
    analyzer: Annotated[
        str | None,
        typer.Option(
            '--analyzer',
            help=f'How text becomes terms: {", ".join(ANALYZER_NAMES)} (default: the one the index was built with).',
            show_default=False,
        ),
    ] = None,
    limit: Annotated[int, typer.Option('--limit', '-n', min=1, help='Show at most this many matches.')] = 10,
    context_lines: Annotated[
        int, typer.Option('--context', min=0, help='Also show this many neighbouring messages.')
    ] = 0,
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Ranked BM25 search over stored messages, with the matched terms highlighted.

    Say where to search: `--conversation ID`, `--run ID` (optionally with `--conversation`), or `--all`.
    Each message is numbered by its entry (`#N`), the number `show`, `replay` and `fork --at` use.
    """
    if everything and (conversation is not None or run is not None):
        _fail('--all searches every conversation: drop it, or drop --conversation and --run')
    if not everything and conversation is None and run is None:
        _fail('say where to search: --conversation ID, --run ID, or --all')
    chosen = _analyzer_or_fail(analyzer) if analyzer is not None else None
    _run(_search(store, query, conversation, run, chosen, limit, context_lines, as_json))


def _analyzer_or_fail(name: str) -> Analyzer:
    try:
        return _analyzer(name)
    except CliError as exc:
        _fail(str(exc))


async def _search(
    store: str,
    query: str,
    conversation_id: str | None,
    run_id: str | None,
    analyzer: Analyzer | None,
    limit: int,
    context_lines: int,
    as_json: bool,
) -> None:
    from capability.search import backend_for
    from search.engine import MAX_QUERY_TERMS, SearchEngine, SearchOptions
    from search.persistent_index import PersistentIndex

    async with _open(store) as log:
        if conversation_id is not None:
            conversation_id = await resolve_conversation(log, conversation_id)
            await _conversation(log, conversation_id)
        if run_id is not None:
            run_id = await resolve_run(log, run_id)
            run = await _run_record(log, run_id)
            if conversation_id is not None and run.conversation_id != conversation_id:
                raise CliError(f'no run {run_id!r} in conversation {conversation_id!r}')
        built = index_analyzer(log)
        if analyzer is None:
            analyzer = _analyzer(built or 'default')
        backend = backend_for(log, analyzer, fallback=True)
        note = None
        if not isinstance(backend, PersistentIndex):
            note = (
                f'the search index was built with the {built!r} analyzer, so this search rebuilt a corpus in '
                f'memory with {analyzer.name!r} (slower); `eventlog reindex --analyzer {analyzer.name}` '
                'rebuilds the index for it'
            )
        engine = SearchEngine(backend, SearchOptions(max_matches=limit, context_lines=context_lines, analyzer=analyzer))
        result = await engine.find(
            query,
            scope='all' if conversation_id is None else 'conversation',
            conversation_id=conversation_id,
            run_id=run_id,
        )
    if result.outcome == 'no_terms':
        raise CliError(f'the query {query!r} has no searchable words')
    if result.outcome == 'too_many_terms':
        raise CliError(f'the query has {len(result.terms)} distinct words; a search takes at most {MAX_QUERY_TERMS}')
    if as_json:
        # The index's analyzer as it stands after the search (a first search builds the index).
        render.print_json(_search_json(result, analyzer, analyzer.name if note is None else built, note))
        return
    if note is not None:
        sys.stderr.write(f'eventlog: note: {note}\n')
    _print_search(result, analyzer, conversation_id, run_id)


def _search_json(result: SearchResult, analyzer: Analyzer, built: str | None, note: str | None) -> dict[str, object]:
    """`search --json`: the totals, then each hit with its entry number (`seq`) and its window."""
    from search.render import index_text

    return {
        'query': result.query,
        'terms': list(result.terms),
        'analyzer': analyzer.name,
        'index_analyzer': built,
        'note': note,
        'documents': result.documents,
        'matches': result.matches,
        'seconds': round(result.timings.total, 6),
        'results': [
            {
                'rank': hit.rank,
                'score': round(hit.score, 6),
                'run_id': hit.run_id,
                'conversation_id': hit.conversation_id,
                'position': hit.position,
                'seq': hit.seq,
                'text': next((index_text(shown.message) for shown in hit.window if shown.position == hit.position), ''),
                'window': [
                    {'position': shown.position, 'seq': shown.seq, 'text': index_text(shown.message)}
                    for shown in hit.window
                ],
            }
            for hit in result.hits
        ],
    }


def _print_search(result: SearchResult, analyzer: Analyzer, conversation_id: str | None, run_id: str | None) -> None:
    """`search` as text: a summary line, then each hit's heading and its messages, each by entry number."""
    from eventlog_cli.entries import hit_lines
    from search.render import make_locator

    out = render.console()
    scope = (
        f'run {run_id}' if run_id else f'conversation {conversation_id}' if conversation_id else 'every conversation'
    )
    out.print(
        render.clean_text(
            f'{result.matches} matching messages among {result.documents} in {scope} '
            f'({result.timings.total * 1000:.0f} ms); showing {len(result.hits)}',
            'dim',
        )
    )
    locate = make_locator(analyzer, frozenset(result.terms))
    for hit in result.hits:
        out.print()
        heading = Text(f'{hit.rank:>2}. ', style='bold')
        heading.append(f'score {hit.score:.2f}', style='bold cyan')
        heading.append(
            render.clean(f' · conversation {hit.conversation_id} · run {hit.run_id} · position {hit.position}'),
            style='dim',
        )
        head = render.Rows(out, 3)
        head.add(heading[:3], heading[4:])
        head.flush()
        rows = render.Rows(out, 7)
        for shown in hit.window:
            if shown.repeated:
                continue
            matched = shown.position == hit.position
            lines = hit_lines(shown.message, locate) or ['(no parts)']
            body = Text('\n').join(
                render.highlight_terms(line, analyzer, result.terms)
                if matched
                else render.clean_text(line, 'dim', multiline=True)
                for line in lines
            )
            rows.add(_label(_entry_number(shown.seq, shown.position)), body)
        rows.flush()


def _entry_number(seq: int | None, position: int) -> str:
    """A message's label in every view: its entry number `#N` (a run position `[N]` only where the
    source cannot tell the entry)."""
    return f'#{seq}' if seq is not None else f'[{position}]'


# --- management -------------------------------------------------------------------------------


@app.command()
def fork(
    conversation: Annotated[str, typer.Argument(help='The conversation to fork.')],
    at: Annotated[
        int | None, typer.Option('--at', min=1, help='Fork at this entry (default: its latest context).')
    ] = None,
    new_id: Annotated[str | None, typer.Option('--id', help='The new conversation id (default: a fresh uuid).')] = None,
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Start a new conversation whose history is this one's up to an entry (by reference)."""
    _run(_fork(store, conversation, at, new_id, as_json))


async def _fork(store: str, conversation_id: str, at: int | None, new_id: str | None, as_json: bool) -> None:
    async with _open(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await _conversation(log, conversation_id)
        created = await log.fork(conversation_id, at_seq=at, new_conversation_id=new_id)
        record = await _conversation(log, created)
    point = record.forked_from.seq if record.forked_from is not None else at
    if as_json:
        render.print_json({'conversation_id': created, 'forked_from': conversation_id, 'at_seq': point})
        return
    render.console().print(f'forked {conversation_id} at entry #{point} into {created}')


@app.command()
def title(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    text: Annotated[str, typer.Argument(help='The new title.')],
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """Give a conversation a title."""
    _run(_title(store, conversation, text))


async def _title(store: str, conversation_id: str, text: str) -> None:
    async with _open(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await _conversation(log, conversation_id)
        seq = await log.set_title(conversation_id, text)
    render.console().print(Text(f'{conversation_id} is now titled {text!r} (entry #{seq})'))


@app.command()
def archive(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """Hide a conversation from listings; its entries stay and stay searchable by id."""
    _run(_archive(store, conversation, archived=True))


@app.command()
def unarchive(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """List an archived conversation again."""
    _run(_archive(store, conversation, archived=False))


async def _archive(store: str, conversation_id: str, *, archived: bool) -> None:
    async with _open(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await _conversation(log, conversation_id)
        if record.archived == archived:
            render.console().print(f'{conversation_id} is already {"archived" if archived else "listed"}')
            return
        seq = await (log.archive(conversation_id) if archived else log.unarchive(conversation_id))
    render.console().print(f'{conversation_id} {"archived" if archived else "unarchived"} (entry #{seq})')


@app.command()
def delete(
    conversation: Annotated[str, typer.Argument(help='The conversation id.')],
    yes: Annotated[bool, typer.Option('--yes', help='Really delete (without it, only explain).')] = False,
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """Remove a conversation's entries for good, leaving a tombstone, then compact. Needs --yes.

    When another process has the store open, the compaction is left for `eventlog compact`.
    """
    _run(_delete(store, conversation, yes))


async def _delete(store: str, conversation_id: str, yes: bool) -> None:
    async with _open(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await _conversation(log, conversation_id)
        if not yes:
            everything = await log.list_conversations(include_archived=True)
            forks = [
                c.conversation_id
                for c in everything
                if c.forked_from is not None and c.forked_from.conversation_id == conversation_id
            ]
            title = f' ({record.title!r})' if record.title else ''
            lines = [
                f'Deleting {conversation_id}{title} would remove its {record.entry_count} entries '
                f'({record.message_count} messages, {record.run_count} runs) for good, leaving only a tombstone.',
            ]
            if forks:
                lines.append(f'{len(forks)} conversation(s) forked from it would lose the history they reference.')
            lines.append('Nothing was changed. Run again with --yes to delete (export it first to keep a copy).')
            sys.stderr.write('\n'.join(lines) + '\n')
            raise typer.Exit(1)
        removed = await log.delete_conversation(conversation_id)
        render.console().print(f'deleted {conversation_id}: {removed} entries removed')
        problem = await log.scrub()  # never raises: the deletion is committed
        _erasure.report_scrub(store, isinstance(log, LmdbEventLog), True, problem is None, problem)


@app.command()
def compact(store: StoreOption = _DEFAULT_STORE, as_json: JsonOption = False) -> None:
    """Rewrite the store without its free pages, so deleted text is gone from the disk.

    Refused while another process has the store open. Finishes a scrub an erasure or deletion
    left pending. On PostgreSQL it runs the scrub (VACUUM FULL of the log's tables).
    """
    _run(_compact(store, as_json))


async def _compact(store: str, as_json: bool) -> None:
    async with _open(store) as log:
        if not isinstance(log, LmdbEventLog):
            problem = await log.scrub()
            if problem is not None:
                raise CliError(problem)
            if as_json:
                render.print_json({'store': describe(store), 'vacuumed': True})
            else:
                render.console().print(f'vacuumed (VACUUM FULL) {describe(store)}: the removed text is gone')
            return
        result = await log.compact()
    if as_json:
        render.print_json(
            {'store': describe(store), 'bytes_before': result.bytes_before, 'bytes_after': result.bytes_after}
        )
        return
    render.console().print(f'compacted {describe(store)}: {_compaction(result)}')


def _compaction(result: CompactResult) -> str:
    return f'{render.size(result.bytes_before)} before, {render.size(result.bytes_after)} after'


# --- export, import, verify, stats, index --------------------------------------------------------


@app.command()
def export(
    conversations: Annotated[
        list[str] | None, typer.Argument(help='Conversations to export (default: all), with the history they use.')
    ] = None,
    output: Annotated[Path | None, typer.Option('--output', '-o', help='Write to this file instead of stdout.')] = None,
    allow_damaged: Annotated[
        bool,
        typer.Option('--allow-damaged', help='Export even when the store fails `verify` (the file may not import).'),
    ] = False,
    signed: Annotated[
        bool,
        typer.Option('--signed', help="Add the store's signed checkpoints (`verify-export` checks them)."),
    ] = False,
    key: Annotated[
        Path | None, typer.Option('--key', '-k', help='With --signed: first sign a new checkpoint with this key.')
    ] = None,
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """Write entries as JSON Lines (a lossless copy that `import` and auditors read).

    The store is verified first: one that fails `eventlog verify` is refused (an export of it
    would not import), unless `--allow-damaged` asks for what can be read.
    """
    if key is not None and not signed:
        _fail('--key signs a checkpoint for a signed export: add --signed', 2)
    _run(_export(store, conversations or None, output, allow_damaged=allow_damaged, signed=signed, key=key))


async def _export(
    store: str,
    conversation_ids: list[str] | None,
    output: Path | None,
    *,
    allow_damaged: bool = False,
    signed: bool = False,
    key: Path | None = None,
) -> None:
    signing: dict[str, Any] = {}
    if signed:
        from eventlog.checkpoint import Signer

        signing = {'signed': True, 'signer': None if key is None else Signer.from_file(key)}
    async with _open(store) as log:
        if conversation_ids is not None:
            conversation_ids = [await resolve_conversation(log, c) for c in conversation_ids]
            for conversation_id in conversation_ids:
                await _conversation(log, conversation_id)
        report = await log.verify()
        if not report.ok:
            first = report.problems[0]
            where = f'conversation {first.conversation_id!r}' if first.conversation_id else 'the store'
            if first.seq:
                where += f', entry #{first.seq}'
            problem = render.clean(f'{where}: {first.reason}')
            if not allow_damaged:
                raise CliError(
                    f'the store fails verification ({problem}), so its export would not import; '
                    '`eventlog verify` lists every problem, `--allow-damaged` exports anyway'
                )
            sys.stderr.write(
                f'eventlog: warning: the store fails verification ({problem}); the export may not import\n'
            )
        if output is None:
            stream = sys.stdout.buffer
            count = await log.export(stream, conversation_ids=conversation_ids, **signing)
            stream.flush()
        else:
            count = await _export_file(log, output, conversation_ids, **signing)
    where = f' to {output}' if output is not None else ''
    sys.stderr.write(f'exported {count} entries{where}\n')


async def _export_file(log: EventLogBase, output: Path, conversation_ids: list[str] | None, **signing: Any) -> int:
    """Export to `output` through the library's one destination rule (`eventlog._files`): a new
    0600 file renamed into place when complete, a device or FIFO written in place, a symlink followed."""
    return await log.export(output, conversation_ids=conversation_ids, **signing)


class _CountingReader(io.BufferedReader):
    """A file reader that reports how many bytes were read, for a progress bar."""

    def __init__(self, raw: io.FileIO, report: Callable[[int], None]) -> None:
        super().__init__(raw)
        self._report = report
        self._seen = 0

    def _count(self, data: bytes) -> bytes:
        self._seen += len(data)
        self._report(self._seen)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        """One line, counted."""
        return self._count(super().readline(-1 if size is None else size))

    def read(self, size: int | None = -1) -> bytes:
        """Up to `size` bytes, counted."""
        return self._count(super().read(size))

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __iter__(self) -> _CountingReader:
        return self


@app.command(name='import')
def import_(
    file: Annotated[Path, typer.Argument(help="An export (JSON Lines), or '-' for stdin.")],
    allow_version_1: Annotated[
        bool,
        typer.Option(
            '--allow-version-1',
            help='Accept an export of format 1 (written before 0.2), which has no closing line: a copy '
            'cut short at a line boundary cannot be told from a whole one.',
        ),
    ] = False,
    store: StoreOption = _DEFAULT_STORE,
) -> None:
    """Read an export into the store (created if absent); all or nothing."""
    _run(_import(store, file, allow_version_1=allow_version_1))


async def _import(store: str, file: Path, *, allow_version_1: bool = False) -> None:
    """Import `file` (or stdin) into `store`; a store this call had to create (a directory, a
    PostgreSQL schema) is removed again unless the import wrote something into it."""
    where = parse_store(store)
    total = None if str(file) == '-' else _file_size(file)
    created = _first_missing(where)
    outcome: dict[str, bool] = {'empty': True}
    try:
        count = await _import_into(store, file, total, outcome, allow_version_1)
    except BaseException:
        if created is not None and outcome['empty']:
            _discard_created(created)
        raise
    if count == 0 and created is not None and outcome['empty']:
        _discard_created(created)
        sys.stderr.write(f'imported 0 entries (the export holds none); no store was created at {describe(where)}\n')
        return
    source = '' if total is None else f' from {file}'
    sys.stderr.write(f'imported {count} entries{source} into {describe(where)}\n')


async def _import_into(
    store: str, file: Path, total: int | None, outcome: dict[str, bool], allow_version_1: bool
) -> int:
    """Run the import; `outcome['empty']` ends False when the store holds entries afterwards
    (written by this import or, racing it, by another process)."""
    async with _open(store, create=True) as log:
        try:
            if total is None:
                return await log.import_(sys.stdin.buffer, allow_version_1=allow_version_1)
            return await _import_file(log, file, total, allow_version_1)
        finally:
            try:
                outcome['empty'] = await log.last_seq() == 0
            except EventLogError:
                outcome['empty'] = False


def _progress_bar(*, in_bytes: bool) -> Progress:
    """A transient progress bar on stderr, shown only when stderr is a terminal; counts bytes or items."""
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    errors = render.console(stderr=True)
    return Progress(
        TextColumn('{task.description}'),
        BarColumn(),
        DownloadColumn() if in_bytes else MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
        disable=not errors.is_terminal,
    )


async def _import_file(log: EventLogBase, file: Path, total: int, allow_version_1: bool) -> int:
    progress = _progress_bar(in_bytes=True)
    with progress:
        task = progress.add_task('reading and checking', total=total)

        def report(done: int) -> None:
            progress.update(task, completed=done, description='writing' if done >= total else 'reading and checking')

        reader = _CountingReader(io.FileIO(file, 'rb'), report)
        try:
            return await log.import_(reader, allow_version_1=allow_version_1)
        finally:
            reader.close()


def _first_missing(store: Path | PostgresStore) -> Path | PostgresStore | None:
    """The outermost directory opening `store` would create, or its PostgreSQL schema when that
    holds no log yet (`None` when the store exists)."""
    if isinstance(store, PostgresStore):
        return None if store_exists(store) else store
    if os.path.lexists(store):
        return None
    missing = store
    while not os.path.lexists(missing.parent) and missing.parent != missing:
        missing = missing.parent
    return missing


def _discard_created(created: Path | PostgresStore) -> None:
    """Remove a directory (or PostgreSQL schema) this command created for a store that stayed empty."""
    if isinstance(created, PostgresStore):
        drop_schema(created)
        return
    shutil.rmtree(created, ignore_errors=True)


def _file_size(file: Path) -> int:
    if not file.is_file():
        raise CliError(f'no file {file}')
    return file.stat().st_size


@app.command()
def verify(
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option('--checkpoint', '-c', help='Also compare with this signed checkpoint file (repeatable).'),
    ] = None,
    public_key: Annotated[
        Path | None, typer.Option('--public-key', '-p', help='The public key (KEY.pub) that signed the checkpoints.')
    ] = None,
) -> None:
    """Walk every hash chain; exit status 0 only when all are intact (names the first bad entry).

    With `--checkpoint FILE --public-key KEY.pub`, also prove that nothing up to each checkpoint
    was altered, removed or reordered, even with recomputed hashes (docs/audit.md).
    """
    if (checkpoint is None) != (public_key is None):
        _fail('--checkpoint and --public-key go together', 2)
    ok = _run(_verify(store, as_json, checkpoint, public_key))
    if not ok:
        raise typer.Exit(1)


async def _verify(
    store: str, as_json: bool, checkpoints: list[Path] | None = None, public_key: Path | None = None
) -> bool:
    async with _open(store) as log:
        report, live, tombstones = await views.read_verify(log, checkpoints, public_key)
    if as_json:
        data = render.to_builtins(report)
        if report.ok:
            data.update(conversations=live, deletion_tombstones=tombstones)
        render.print_json(data)
        return report.ok
    if is_postgres(store):
        sys.stderr.write(
            "eventlog: note: the walk of the LMDB file's B-trees does not apply to a PostgreSQL store "
            '(PostgreSQL checks its own pages); every hash chain and derived record was checked\n'
        )
    out = render.console()
    if report.ok:
        out.print(styled.verify_ok(views.verify_ok_line(report, live, tombstones, len(checkpoints or ()))))
        return True
    broken = {p.conversation_id for p in report.problems if p.conversation_id}
    store_wide = sum(1 for p in report.problems if not p.conversation_id)
    header = (
        f'BROKEN: {len(broken)} of {report.conversations_checked} conversations fail verification '
        f'({report.entries_checked} entries checked)'
    )
    if store_wide:
        header += f'; {_plural(store_wide, "finding", "findings")} about the store as a whole'
    out.print(Text(header, style='bold red'))
    conversation = tables.Column('conversation')
    entry = tables.Column('first bad entry', justify='right', compact_header='entry')
    finding = tables.Column('finding')
    reason = tables.Column('reason', flex='wrap', min_width=24)
    for problem in report.problems:
        conversation.add(render.clean_text(problem.conversation_id or '(store)'))
        entry.add(f'#{problem.seq}' if problem.seq else '')
        finding.add(render.clean_text(problem.code))
        reason.add(render.clean_text(problem.reason))
    tables.print_table(out, [conversation, entry, finding, reason], _VERIFY_STEPS)
    return False


_VERIFY_STEPS: list[tables.Step] = [('compact', 'first bad entry'), ('drop', 'finding')]
"""What `verify`'s table of findings gives up first as the terminal narrows; its ids are shown
whole, as `git fsck` names objects (docs/cli-views.md)."""


@app.command()
def stats(store: StoreOption = _DEFAULT_STORE, as_json: JsonOption = False) -> None:
    """Entries, runs, conversations, bytes, and the state of the search index."""
    _run(_stats(store, as_json))


async def _stats(store: str, as_json: bool) -> None:
    async with _open(store) as log:
        data = await views.read_stats(log, store)
    if as_json:
        render.print_json(data)
        return
    render.console().print(styled.rows_grid(views.stats_rows(data)))


@app.command()
def serve(
    store: StoreOption = _DEFAULT_STORE,
    host: Annotated[
        str,
        typer.Option(
            '--host',
            help='The address to listen on; any but a loopback address needs a token (one is made if not given).',
        ),
    ] = '127.0.0.1',
    port: Annotated[
        int, typer.Option('--port', min=0, max=65535, help='The port to listen on (0: any free one).')
    ] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            '--token', help='Require this token on every request (it is printed in the URL).', show_default=False
        ),
    ] = None,
) -> None:
    """Serve a read-only web viewer of the store: conversations, transcripts, run timelines, search, verify.

    Every message shows its entry number and every entry has a stable URL (`/e/N`). Listens on
    127.0.0.1 unless told otherwise; stop it with Ctrl-C (docs/web.md). Needs the `web` extra.
    """
    _run(_serve(store, host, port, token))


async def _serve(store: str, host: str, port: int, token: str | None) -> None:
    try:
        from eventlog_cli.web.serve import serve as serve_viewer
    except ImportError as exc:
        raise CliError(
            f"eventlog serve needs the optional dependencies of 'pydantic-ai-eventlog[web]' ({exc})"
        ) from None

    def announce(line: str) -> None:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()

    await serve_viewer(store, host=host, port=port, token=token, announce=announce)


@app.command()
def reindex(
    analyzer: Annotated[
        str, typer.Option('--analyzer', help=f'How text becomes terms: {", ".join(ANALYZER_NAMES)}.')
    ] = 'default',
    store: StoreOption = _DEFAULT_STORE,
    as_json: JsonOption = False,
) -> None:
    """Drop the persistent search index and build it again from the log (optionally with another analyzer)."""
    _run(_reindex(store, _analyzer_or_fail(analyzer), as_json))


async def _reindex(store: str, analyzer: Analyzer, as_json: bool) -> None:
    progress = _progress_bar(in_bytes=False)
    async with _open(store) as log:
        with progress:
            task = progress.add_task('indexing runs', total=None)

            def report(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            result = await rebuild_index(log, analyzer, report)
    if as_json:
        render.print_json(result)
        return
    render.console().print(
        f'rebuilt the search index with the {result["analyzer"]} analyzer: {result["documents"]} documents '
        f'from {result["entries_read"]} entries'
    )


# --- tail -------------------------------------------------------------------------------------


@app.command()
def tail(
    lines: Annotated[int, typer.Option('--lines', '-n', min=0, help='Print this many latest entries first.')] = 10,
    follow: Annotated[bool, typer.Option('--follow', '-f', help='Keep printing entries as they are appended.')] = False,
    conversation: Annotated[str | None, typer.Option('--conversation', '-c', help='Only this conversation.')] = None,
    run: Annotated[str | None, typer.Option('--run', '-r', help='Only this run.')] = None,
    kind: Annotated[
        list[str] | None, typer.Option('--kind', '-k', help='Only entries of this kind (repeatable).')
    ] = None,
    interval: Annotated[float, typer.Option('--interval', min=0.01, help='Seconds between polls with --follow.')] = 0.2,
    max_entries: Annotated[
        int | None, typer.Option('--max-entries', min=1, help='Stop after printing this many entries.')
    ] = None,
    timeout: Annotated[
        float | None, typer.Option('--timeout', min=0, help='With --follow: stop after this many idle seconds.')
    ] = None,
    store: StoreOption = _DEFAULT_STORE,
    full_ids: FullIdsOption = False,
    as_json: Annotated[bool, typer.Option('--json', help='Print entries as JSON Lines.')] = False,
) -> None:
    """The latest entries; with --follow, keep printing new ones as other processes append them."""
    try:
        _run(
            _tail(
                store,
                lines,
                follow,
                conversation,
                run,
                kind or None,
                interval,
                max_entries,
                timeout,
                as_json,
                full_ids=full_ids,
            )
        )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


async def _tail(
    store: str,
    lines: int,
    follow: bool,
    conversation_id: str | None,
    run_id: str | None,
    kinds: list[str] | None,
    interval: float,
    max_entries: int | None,
    idle_timeout: float | None,
    as_json: bool,
    *,
    full_ids: bool = False,
) -> None:
    out = render.console()
    printed = 0
    short: ShortIds | None = None

    def emit(batch: Sequence[Entry]) -> bool:
        """Print `batch`; True when `max_entries` is reached."""
        nonlocal printed
        for entry in batch:
            if as_json:
                sys.stdout.write(_compact_json(render.entry_json(entry)) + '\n')
            else:
                out.print(styled.tail_line(entry, short), soft_wrap=True)
            printed += 1
            if max_entries is not None and printed >= max_entries:
                sys.stdout.flush()
                return True
        sys.stdout.flush()
        return False

    async with _open(store) as log:
        begun = await views.tail_start(log, lines, conversation_id, run_id, kinds, full_ids or as_json)
        conversation_id, run_id, short, cursor, start = begun
        if start is not None:
            async for shown in views.tail_backlog(log, begun, kinds, start):
                if emit(shown):
                    return
        if not follow:
            return
        idle_since = time.monotonic()
        while True:
            top = await log.last_seq()
            found = False
            async for batch in log.iter_entries(
                conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=cursor, batch=_TAIL_BATCH
            ):
                await short.learn_entries(batch)
                if emit(batch):
                    return
                cursor = batch[-1].seq
                found = True
            # Below `top`, whatever did not come back does not match: skip past it.
            cursor = max(top, cursor)
            if found:
                idle_since = time.monotonic()
                continue
            if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                return
            await asyncio.sleep(interval)


# --- demo -------------------------------------------------------------------------------------


@app.command()
def demo(
    store: Annotated[
        Path | None,
        typer.Option(
            '--store', '-s', metavar='<path>', help=f'Where to write the demo store (default ./{DEMO_STORE}).'
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option('--overwrite', help='Replace the store if it exists.')] = False,
    model: Annotated[
        str | None,
        typer.Option('--model', help="Ask the final question to this pydantic-ai model (e.g. 'openai:gpt-5')."),
    ] = None,
    exchanges: Annotated[int, typer.Option('--exchanges', min=12, help='How long the conversation is.')] = 200,
    sessions: Annotated[int, typer.Option('--sessions', min=1, max=7, help='Over how many sessions.')] = 4,
) -> None:
    """A long agent conversation that compacts its context, then recalls an early detail word for word.

    Offline and deterministic unless --model is given. Without --store, an existing
    ./eventlog-demo.lmdb is left alone and the demo writes to a fresh name next to it.
    """
    from eventlog_cli.demo import DemoError, run_demo

    if store is not None and str(store).lower().startswith(('postgresql:', 'postgres:')):
        _fail('the demo writes a new LMDB store directory: give --store a path (then `eventlog import` copies it)')
    target = _demo_target(store, overwrite)
    try:
        asyncio.run(run_demo(target, console=render.console(), exchanges=exchanges, sessions=sessions, model=model))
    except (DemoError, EventLogError) as exc:
        _fail(str(exc))


def _demo_target(store: Path | None, overwrite: bool) -> Path:
    """Where the demo writes: never over an existing store unless `overwrite`, never over a non-store."""
    target = DEMO_STORE if store is None else store
    if not target.exists():
        return target
    if overwrite:
        if not (target.is_dir() and (target / 'data.mdb').exists()):
            _fail(f'{target} exists and is not an eventlog store; refusing to replace it')
        shutil.rmtree(target)
        return target
    if store is not None:
        _fail(f'{target} already exists; pass --overwrite to replace it, or choose another --store')
    for number in range(2, 1000):
        candidate = target.with_name(f'{target.stem}-{number}{target.suffix}')
        if not candidate.exists():
            sys.stderr.write(
                f'{target} exists (an earlier demo); writing to {candidate} instead (--overwrite replaces it)\n'
            )
            return candidate
    _fail(f'{target} and its numbered alternatives exist; remove some or pass --overwrite')


_audit.register(app, run=_run, open_store=_open)
from eventlog_cli import _erasure  # noqa: E402  (its commands share this module's plumbing)

_erasure.register(app)


def _use_plain_metavars() -> None:
    """Every command's help names its arguments `QUERY` and shows no type next to a flag (`_Command`)."""
    for command_info in app.registered_commands:
        if command_info.cls in (None, TyperCommand):
            command_info.cls = _Command


_use_plain_metavars()


def run_app(argv: list[str]) -> int:
    """Run the typer app on `argv` (the arguments after `eventlog`) in this process; its exit
    status (a `SystemExit` from typer passes through). What `main` falls back to when the fast
    commands (`eventlog_cli._fast`) leave a command line to the full one."""
    try:
        app(argv, prog_name='eventlog')
    except typer.Abort:
        return 130
    return 0


if __name__ == '__main__':
    main()
