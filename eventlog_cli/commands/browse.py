"""Browsing commands: `conversations`, `runs`, `info`, `show`, `replay`, `context`, `tail`, `stats`.

Commands whose output is data take `--json`. The listings (`conversations`, `runs`, `info`,
`stats`, `tail` without `--follow`) read an LMDB store without an event loop (asyncio is not
imported), and with `--json` without Rich either; the views of messages (`show`, `replay`,
`context`) decode them with pydantic-ai.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from eventlog_cli.commands import _common as common

if TYPE_CHECKING:
    from datetime import datetime

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from eventlog import Entry, EventLogBase, RunRecord
    from eventlog_cli import _render as render
    from eventlog_cli import _tables as tables
    from eventlog_cli._ids import ShortIds
    from eventlog_cli.entries import InstructionsShown
    from eventlog_cli.outline import Mark, Outline

__all__ = ['register']


def register(subparsers: common.Subparsers) -> None:
    """Add the browsing commands to `eventlog`."""
    parser = common.add_command(
        subparsers, 'conversations', _conversations_command, 'List conversations, most recently active first.'
    )
    common.options(parser).add_argument('--include-archived', action='store_true', help='List archived ones too.')
    common.store_option(parser)
    common.full_ids_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'runs',
        _runs_command,
        'List runs in start order: status, agent, parent run, duration, tokens.',
        arguments='[CONVERSATION]',
    )
    common.arguments(parser).add_argument(
        'conversation', nargs='?', metavar='CONVERSATION', help='Only the runs of this conversation.'
    )
    common.store_option(parser)
    common.full_ids_option(parser)
    common.json_option(parser)
    common.options(parser).add_argument(
        '--interrupted',
        action='store_true',
        help='Only the runs that never finished (status running): those a durable run resumes.',
    )

    parser = common.add_command(
        subparsers,
        'info',
        _info_command,
        'One conversation: title, counts, compactions, cumulative token usage, fork origin.',
        arguments='CONVERSATION',
    )
    common.arguments(parser).add_argument('conversation', metavar='CONVERSATION', help='The conversation id.')
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'show',
        _show_command,
        'The transcript: every original message once, in order, with compaction markers.\n\n'
        'With `--json`, the exact pydantic-ai JSON (`ModelMessagesTypeAdapter`) of the messages.',
        arguments='[CONVERSATION]',
    )
    common.arguments(parser).add_argument(
        'conversation', nargs='?', metavar='CONVERSATION', help='The conversation to show.'
    )
    common.options(parser).add_argument('--run', '-r', metavar='<id>', help='Show one run instead.')
    common.options(parser).add_argument(
        '--full', action='store_true', help='With --run: also the history the run inherited.'
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'replay',
        _replay_command,
        'Every entry of a run in order, as recorded: messages, tool effects, compactions, timings.\n\n'
        'Name the run, or pass `--last` for the run started last (`--last --conversation ID`: the '
        'last of that conversation).',
        arguments='[RUN]',
    )
    common.arguments(parser).add_argument('run', nargs='?', metavar='RUN', help='The run id (or pass --last).')
    common.options(parser).add_argument('--last', action='store_true', help='The latest run started in the store.')
    common.options(parser).add_argument(
        '--conversation', '-c', metavar='<id>', help='With --last: the latest run of this conversation.'
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'context',
        _context_command,
        'What an agent continuing the conversation starts from (compaction summaries folded in).\n\n'
        'With `--json`, exactly the pydantic-ai JSON to pass as `message_history`.',
        arguments='CONVERSATION',
    )
    common.arguments(parser).add_argument('conversation', metavar='CONVERSATION', help='The conversation id.')
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers, 'stats', _stats_command, 'Entries, runs, conversations, bytes, and the state of the search index.'
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'tail',
        _tail_command,
        'The latest entries; with --follow, keep printing new ones as other processes append them.',
    )
    options = common.options(parser)
    options.add_argument(
        '--lines',
        '-n',
        type=common.at_least(0),
        default=10,
        metavar='<n>',
        help='Print this many latest entries first.',
    )
    options.add_argument('--follow', '-f', action='store_true', help='Keep printing entries as they are appended.')
    options.add_argument('--conversation', '-c', metavar='<id>', help='Only this conversation.')
    options.add_argument('--run', '-r', metavar='<id>', help='Only this run.')
    options.add_argument(
        '--kind', '-k', action='append', metavar='<kind>', help='Only entries of this kind (repeatable).'
    )
    options.add_argument(
        '--interval',
        type=common.at_least(0.01, kind=float),
        default=0.2,
        metavar='<seconds>',
        help='Seconds between polls with --follow.',
    )
    options.add_argument(
        '--max-entries', type=common.at_least(1), metavar='<n>', help='Stop after printing this many entries.'
    )
    options.add_argument(
        '--timeout',
        type=common.at_least(0, kind=float),
        metavar='<seconds>',
        help='With --follow: stop after this many idle seconds.',
    )
    common.store_option(parser)
    common.full_ids_option(parser)
    common.json_option(parser, 'Print entries as JSON Lines.')


# --- listing ----------------------------------------------------------------------------------


def _conversations_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(
        lambda: _conversations(store, args.include_archived, args.as_json, args.full_ids),
        loop_free=common.is_lmdb(store),
    )


async def _conversations(store: str, include_archived: bool, as_json: bool, full_ids: bool = False) -> None:
    from eventlog_cli import _views as views

    async with views.open_store(store) as log:
        records, short = await views.read_conversations(log, include_archived, full_ids or as_json)
    if as_json:
        from eventlog_cli import _text as text

        text.print_json([text.conversation_json(c) for c in records])
        return
    from eventlog_cli import _render as render
    from eventlog_cli import _styled as styled
    from eventlog_cli import _tables as tables

    out = render.console()
    if not records:
        out.print('no conversations in this store')
        return
    columns = styled.conversation_columns(records, short, include_archived)
    tables.print_table(out, columns, styled.CONVERSATION_STEPS)


def _runs_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(
        lambda: _runs(store, args.conversation, args.as_json, args.full_ids, interrupted=args.interrupted),
        loop_free=common.is_lmdb(store),
    )


async def _runs(
    store: str, conversation: str | None, as_json: bool, full_ids: bool = False, *, interrupted: bool = False
) -> None:
    from collections import Counter

    from eventlog_cli import _views as views
    from eventlog_cli._ids import ShortIds, resolve_conversation

    async with views.open_store(store) as log:
        if conversation is not None:
            conversation = await resolve_conversation(log, conversation)
            await views.conversation_record(log, conversation)
        wanted = views.run_status_filter(views.INTERRUPTED) if interrupted else None  # the viewer's rule
        records = await log.list_runs(conversation_id=conversation, status=wanted)
        short = ShortIds(log, full=full_ids or as_json, uniform=True)
        await short.learn('run', [i for r in records for i in (r.run_id, r.parent_run_id)])
        await short.learn('conversation', (r.conversation_id for r in records))
    if as_json:
        from eventlog_cli import _text as text

        text.print_json([text.run_json(r) for r in records])
        return
    from eventlog_cli import _render as render
    from eventlog_cli import _tables as tables

    out = render.console()
    if not records:
        out.print('no interrupted runs' if interrupted else 'no runs')
        return
    tables.print_table(out, _run_columns(records, short, with_conversation=conversation is None), _run_steps())
    statuses = Counter(r.status for r in records)
    out.print(
        render.clean_text(f'{len(records)} runs: ' + ', '.join(f'{n} {s}' for s, n in statuses.most_common()), 'dim')
    )


def _run_steps() -> list[tables.Step]:
    """What `runs` gives up first as the terminal narrows (docs/cli-views.md)."""
    return [
        ('drop', 'tokens in/out'),
        ('compact', 'started'),
        ('drop', 'messages'),
        ('drop', 'parent run'),
        ('drop', 'duration'),
        ('drop', 'conversation'),
        ('drop', 'agent'),
        ('drop', 'started'),
    ]


_STATUS_STYLES = {'completed': 'green', 'failed': 'red', 'cancelled': 'yellow', 'running': 'cyan'}


def _status(status: str) -> Text:
    from eventlog_cli import _render as render

    return render.clean_text(status, _STATUS_STYLES.get(status, ''))


def _run_columns(records: Sequence[RunRecord], short: ShortIds, *, with_conversation: bool) -> list[tables.Column]:
    from eventlog_cli import _render as render
    from eventlog_cli import _tables as tables

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


def _info_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _info(store, args.conversation, args.as_json), loop_free=common.is_lmdb(store))


async def _info(store: str, conversation_id: str, as_json: bool) -> None:
    from eventlog_cli import _views as views

    async with views.open_store(store) as log:
        record, records, pending = await views.read_info(log, conversation_id)
    if as_json:
        from eventlog_cli import _text as text

        text.print_json(views.info_json(record, records, pending))
        return
    from eventlog_cli import _render as render
    from eventlog_cli import _styled as styled

    render.console().print(styled.rows_grid(views.info_rows(record, records, pending)))


def _stats_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _stats(store, args.as_json), loop_free=common.is_lmdb(store))


async def _stats(store: str, as_json: bool) -> None:
    from eventlog_cli import _views as views

    async with views.open_store(store) as log:
        data = await views.read_stats(log, store)
    if as_json:
        from eventlog_cli import _text as text

        text.print_json(data)
        return
    from eventlog_cli import _render as render
    from eventlog_cli import _styled as styled

    render.console().print(styled.rows_grid(views.stats_rows(data)))


# --- reading ----------------------------------------------------------------------------------


def _heading(out: Console, title: Text) -> None:
    """A view's heading: the title in a rule across the terminal, or, when the title (holding
    whole ids) is too wide for one, the title on its own lines above a plain rule, never cut."""
    from rich.rule import Rule

    if title.cell_len + 6 <= out.width:
        out.print(Rule(title, align='left'))
        return
    out.print(title)
    out.print(Rule())


def _label(text: str) -> Text:
    from rich.text import Text

    return Text(text, style='dim')


_Replaced = tuple[int, int | None]
"""What a compaction replaced, beyond its `seq`s: how many were earlier summaries (compaction
entries), and the message it kept after its summary (merged into the summary's request), if any."""


async def _replaced_notes(log: EventLogBase, entries: Sequence[Entry]) -> dict[int, _Replaced]:
    """For each compaction among `entries`, by `seq`: what it replaced (`_Replaced`), read from the
    replaced entries themselves; a compaction whose entries cannot all be read gets no note."""
    from eventlog import EventLogError
    from eventlog_cli import _render as render

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
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli._views import plural

    info = render.compaction_info(entry)
    if note is None or not info.replaced:
        head = f'summary replaces {render.seq_list(info.replaced)}'
    else:
        # Say what the summary stands for: the messages it summarizes, the earlier summaries it
        # folds in, and the one message (if any) it repeats after the summary, which `replaced`
        # counts too because the request it was merged into is rewritten.
        summaries, kept = note
        messages = len(info.replaced) - summaries - (kept is not None)
        what = plural(messages, 'message', 'messages')
        if summaries:
            what += f' and {plural(summaries, "earlier summary", "earlier summaries")}'
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


_MARK_STYLES = {'branch': 'bold yellow', 'left': 'yellow', 'sub-agent': 'bold cyan', 'fork': 'bold yellow'}
"""How each kind of `eventlog_cli.outline.Mark` is styled on a terminal."""


def _mark_text(mark: Mark) -> Text:
    from eventlog_cli import _render as render

    return render.clean_text(mark.text(), _MARK_STYLES.get(mark.kind, 'bold'))


class _Transcript:
    """Rows of a transcript (`show`, `show --run`): each entry under its entry number, with the
    marks of the conversation's outline before the entries they concern, a sub-agent run's
    messages nested under a `│` per level, and each run's instructions once (`InstructionsShown`)."""

    def __init__(self, out: Console, outline: Outline | None = None) -> None:
        from eventlog_cli.entries import InstructionsShown
        from eventlog_cli.outline import Outline

        self._out = out
        self._outline = outline if outline is not None else Outline()
        self._rows: render.Rows | None = None
        self._depth = 0
        self.instructions = InstructionsShown()
        """What the transcript has shown of each run's instructions."""

    def _at(self, depth: int) -> render.Rows:
        from eventlog_cli import _render as render

        if self._rows is None or depth != self._depth:
            self.flush()
            self._rows = render.Rows(self._out, 7) if depth == 0 else render.Rows(self._out, 7, 2 * depth - 1)
            self._depth = depth
        return self._rows

    def _add(self, depth: int, seq: int | None, body: Text) -> None:
        from rich.text import Text

        label = _label('' if seq is None else f'#{seq}')
        if depth == 0:
            self._at(0).add(label, body)
        else:
            self._at(depth).add(label, Text(' '.join(['│'] * depth), style='dim'), body)

    def messages(self, messages: Sequence[tuple[int, Entry | bytes]]) -> int:
        """Add a row per `(seq, message entry or payload)`; return how many."""
        from eventlog.entries import Entry
        from eventlog_cli import _render as render
        from eventlog_cli.entries import payload_view

        for seq, message in messages:
            if isinstance(message, Entry):
                view, key = render.message_view(message), message.run_id
            else:
                view, key = payload_view(message, where=f'entry {seq}'), None
            self._add(0, seq, render.message_text(self.instructions.show(key, view, seq)))
        return len(messages)

    def entries(self, entries: Sequence[Entry], notes: dict[int, _Replaced] | None = None) -> None:
        """Add the rows of `entries` (messages, compactions, recalls), each after its marks."""
        from rich.text import Text

        from eventlog_cli import _render as render

        for entry in entries:
            depth = self._outline.depth_of(entry.run_id)
            for mark in self._outline.before(entry.seq):
                self._add(depth - 1 if mark.kind == 'sub-agent' else depth, None, _mark_text(mark))
            if entry.kind == 'compaction':
                body = _compaction_body(entry, (notes or {}).get(entry.seq))
            elif entry.kind == 'recall':
                body = Text('recalled into the request: ', style='green')
                body.append(render.entry_headline(entry, limit=400), style='dim')
            else:
                body = render.message_text(self.instructions.show(entry.run_id, render.message_view(entry), entry.seq))
            self._add(depth, entry.seq, body)

    def flush(self) -> None:
        """Print the rows added so far."""
        if self._rows is not None:
            self._rows.flush()


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


def _show_command(args: argparse.Namespace) -> None:
    if (args.conversation is None) == (args.run is None):
        common.fail('give a conversation id, or --run RUN (not both)')
    store = common.store_of(args)
    common.run(lambda: _show(store, args.conversation, args.run, args.full, args.as_json))


async def _show(store: str, conversation_id: str | None, run_id: str | None, full: bool, as_json: bool) -> None:
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation, resolve_run
    from eventlog_cli.outline import conversation_outline, fork_mark

    async with views.open_store(store) as log:
        if run_id is not None:
            await _show_run(log, await resolve_run(log, run_id), full, as_json)
            return
        assert conversation_id is not None
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await views.conversation_record(log, conversation_id)
        origin = await log.history_origin(conversation_id)
        if as_json:
            await _write_json_list(_transcript_payloads(log, conversation_id, origin))
            return
        inherited = await _count_messages(log, origin)
        outline = await conversation_outline(log, conversation_id)
        out = render.console()
        title = f' · {record.title}' if record.title else ''
        _heading(out, render.clean_text(f'{conversation_id}{title} · {record.message_count} messages'))
        fork = fork_mark(record)
        if fork is not None:
            out.print(_mark_text(fork))
        transcript = _Transcript(out, outline)
        if inherited > 0:
            source = record.forked_from.conversation_id if record.forked_from else 'another conversation'
            out.print(render.clean_text(f'{inherited} messages inherited from {source}, by reference:', 'dim italic'))
            async for batch in log.iter_branch(origin, kinds=['message'], batch=_READ_BATCH):
                transcript.messages([(entry.seq, entry) for entry in batch])
            transcript.flush()
            out.print(Text('then this conversation:', style='dim italic'))
        async for batch in _entry_batches(log, conversation_id=conversation_id, kinds=_TRANSCRIPT_KINDS):
            transcript.entries(batch, await _replaced_notes(log, batch))
        transcript.flush()


async def _transcript_payloads(
    log: EventLogBase, conversation_id: str, origin: int | None
) -> AsyncIterator[list[bytes]]:
    """`transcript_payloads` batch by batch: the inherited history, then the conversation's own messages."""
    async for batch in log.iter_branch(origin, kinds=['message'], batch=_READ_BATCH):
        yield [entry.payload for entry in batch]
    async for batch in _entry_batches(log, conversation_id=conversation_id, kinds=['message']):
        yield [entry.payload for entry in batch]


async def _show_run(log: EventLogBase, run_id: str, full: bool, as_json: bool) -> None:
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli.outline import conversation_outline

    record = await views.run_record(log, run_id)
    if as_json:
        await _write_json_list(log.iter_run_message_payloads(run_id, batch=_READ_BATCH))
        return
    out = render.console()
    _heading(out, render.clean_text(f'run {run_id} · conversation {record.conversation_id}'))
    transcript = _Transcript(out)
    if full:
        async for batch in log.iter_branch(record.last_seq, kinds=['message'], batch=_READ_BATCH):
            transcript.messages([(entry.seq, entry) for entry in batch])
        transcript.flush()
        return
    branch = (await conversation_outline(log, record.conversation_id)).branches.get(run_id)
    if branch is not None:
        out.print(_mark_text(branch))
    earlier = await _count_messages(log, record.branch_parent)
    if earlier > 0:
        out.print(Text(f'(continues {earlier} earlier messages; --full shows them)', style='dim italic'))
    async for batch in _entry_batches(log, run_id=run_id, kinds=_TRANSCRIPT_KINDS):
        transcript.entries(batch, await _replaced_notes(log, batch))
    transcript.flush()


def _replay_command(args: argparse.Namespace) -> None:
    if (args.run is None) == (not args.last):
        common.fail('name a run id or pass --last (not both)' if args.last else 'name a run id or pass --last', 2)
    if args.conversation is not None and not args.last:
        common.fail('--conversation goes with --last (a run id already names its conversation)', 2)
    store = common.store_of(args)
    common.run(lambda: _replay(store, args.run, args.as_json, conversation_id=args.conversation))


async def _latest_run(log: EventLogBase, conversation_id: str | None) -> str:
    """The id of the run started last, in the store or in one conversation."""
    from eventlog_cli import _views as views

    if conversation_id is not None:
        await views.conversation_record(log, conversation_id)
    records = await log.list_runs(conversation_id=conversation_id)
    if not records:
        where = f'conversation {conversation_id!r}' if conversation_id is not None else 'this store'
        raise views.CliError(f'no runs in {where} yet')
    return records[-1].run_id


async def _replay(store: str, run_id: str | None, as_json: bool, *, conversation_id: str | None = None) -> None:
    from rich.rule import Rule
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation, resolve_run
    from eventlog_cli.entries import InstructionsShown
    from eventlog_cli.outline import conversation_outline

    async with views.open_store(store) as log:
        if run_id is None:
            if conversation_id is not None:
                conversation_id = await resolve_conversation(log, conversation_id)
            run_id = await _latest_run(log, conversation_id)
        else:
            run_id = await resolve_run(log, run_id)
        record = await views.run_record(log, run_id)
        runs = await log.list_runs(conversation_id=record.conversation_id)
        outline = await conversation_outline(log, record.conversation_id, runs)
        branch = outline.branches.get(run_id)
        children = [r for r in runs if r.parent_run_id == run_id]  # its sub-agents in the conversation
        if as_json:
            head = {'run': render.run_json(record), 'branch': None if branch is None else branch.json()}
            writer = render.JsonListWriter(head, 'entries')
            async for batch in _entry_batches(log, run_id=run_id):
                for entry in batch:
                    writer.add(render.entry_json(entry))
            writer.close()
            return
        out = render.console()
        out.print(_run_header(record, branch))
        out.print(Rule(style='dim'))
        start: datetime | None = None
        tool_started: dict[str, datetime] = {}
        instructions = InstructionsShown()
        rows = render.Rows(out, 7, 11, 12)
        count = 0
        async for batch in _entry_batches(log, run_id=run_id):
            notes = await _replaced_notes(log, batch)
            for entry in batch:
                while children and children[0].start_seq < entry.seq:
                    rows.add(*_sub_agent_row(children.pop(0), outline))
                start = entry.timestamp if start is None else start
                rows.add(*_replay_row(entry, start, tool_started, notes.get(entry.seq), instructions))
            count += len(batch)
        for child in children:
            rows.add(*_sub_agent_row(child, outline))
        rows.flush()
    out.print(Text(f'{count} entries', style='dim'))


def _sub_agent_row(child: RunRecord, outline: Outline) -> tuple[Text, Text, Text, Text]:
    """`replay`'s row for a sub-agent run started inside the replayed run, where it started: its
    mark and the entries it spans (which `replay` of that run shows)."""
    from rich.text import Text

    from eventlog_cli.outline import Mark

    mark = outline.sub_agents.get(child.run_id) or Mark(
        kind='sub-agent', run_id=child.run_id, agent=child.agent_name, status=child.status
    )
    body = _mark_text(mark)
    body.append(f' · its entries #{child.start_seq} to #{child.last_seq} (replay that run for them)', style='dim')
    return _label(''), Text(''), Text('sub-agent', style=_MARK_STYLES['sub-agent']), body


def _replay_row(
    entry: Entry,
    start: datetime,
    tool_started: dict[str, datetime],
    note: _Replaced | None = None,
    instructions: InstructionsShown | None = None,
) -> tuple[Text, Text, Text, Text]:
    """One entry of `replay`: its number, its time since the run's first entry, its kind, what it says
    (for a compaction, `note` says what it replaced; a request shows the run's instructions where
    `instructions` says they are due)."""
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli._views import KIND_STYLES

    offset = f'+{(entry.timestamp - start).total_seconds() * 1000:.1f} ms'
    body = Text()
    if entry.kind == 'message':
        message = render.message_view(entry)
        if instructions is not None:
            instructions.show(entry.run_id, message, entry.seq)
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
    kind = render.clean_text(entry.kind, KIND_STYLES.get(entry.kind, 'bold'))
    return _label(f'#{entry.seq}'), Text(offset, style='dim', justify='right'), kind, body


def _run_header(record: RunRecord, branch: Mark | None = None) -> Table:
    from rich.table import Table

    from eventlog_cli import _render as render

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
    if branch is not None:
        head.add_row('branch', _mark_text(branch))
    if record.usage:
        head.add_row('usage', render.clean_text(', '.join(f'{k} {v}' for k, v in record.usage.items())))
    if record.error:
        head.add_row('error', render.clean_text(record.error, 'red', multiline=True))
    return head


def _context_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _context(store, args.conversation, args.as_json))


async def _context(store: str, conversation_id: str, as_json: bool) -> None:
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    async with views.open_store(store) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await views.conversation_record(log, conversation_id)
        if as_json:
            await _write_json_list(log.iter_context_payloads(conversation_id, batch=_READ_BATCH))
            return
        out = render.console()
        _heading(out, render.clean_text(f'context of {conversation_id}'))
        transcript = _Transcript(out)
        count = 0
        async for batch in log.iter_context_messages(conversation_id, batch=_READ_BATCH):
            count += transcript.messages(batch)
        transcript.flush()
    out.print(Text(f'{views.plural(count, "message", "messages")}', style='dim'))


# --- tail -------------------------------------------------------------------------------------


def _tail_command(args: argparse.Namespace) -> int | None:
    store = common.store_of(args)
    try:
        common.run(
            lambda: _tail(
                store,
                args.lines,
                args.follow,
                args.conversation,
                args.run,
                args.kind or None,
                args.interval,
                args.max_entries,
                args.timeout,
                args.as_json,
                full_ids=args.full_ids,
            ),
            loop_free=not args.follow and common.is_lmdb(store),
        )
    except KeyboardInterrupt:
        return 130
    return 0


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
    import time

    from eventlog_cli import _text as text
    from eventlog_cli import _views as views

    out: Console | None = None
    if not as_json:
        from eventlog_cli import _render as render

        out = render.console()
    printed = 0
    short: ShortIds | None = None

    def emit(batch: Sequence[Entry]) -> bool:
        """Print `batch`; True when `max_entries` is reached."""
        nonlocal printed
        for entry in batch:
            if out is None:
                sys.stdout.write(views.compact_json(text.entry_json(entry)) + '\n')
            else:
                from eventlog_cli._styled import tail_line

                out.print(tail_line(entry, short), soft_wrap=True)
            printed += 1
            if max_entries is not None and printed >= max_entries:
                sys.stdout.flush()
                return True
        sys.stdout.flush()
        return False

    async with views.open_store(store) as log:
        begun = await views.tail_start(log, lines, conversation_id, run_id, kinds, full_ids or as_json)
        conversation_id, run_id, short, cursor, start = begun
        if start is not None:
            async for shown in views.tail_backlog(log, begun, kinds, start):
                if emit(shown):
                    return
        if not follow:
            return
        import asyncio

        idle_since = time.monotonic()
        while True:
            top = await log.last_seq()
            found = False
            async for batch in log.iter_entries(
                conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=cursor, batch=views.TAIL_BATCH
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
