"""What the everyday read commands (`conversations`, `info`, `stats`, `verify`, `tail`) read and
say, as plain data, which the commands (`eventlog_cli.commands`) print as JSON or lay out with
Rich.

Nothing here imports Rich, typer, asyncio or pydantic-ai. The reads are coroutines over the
log's async API; the listings drive them without an event loop (`eventlog_cli.commands._common.run`).
A row is `(label, text, style)`: `text` already made safe to print (`clean`) where it holds
stored strings, `style` a Rich style for a terminal.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, get_args

from eventlog.entries import RunStatus
from eventlog.errors import InvalidArgumentError
from eventlog_cli._ids import ShortIds, resolve_conversation, resolve_run
from eventlog_cli._store import StoreLog, describe
from eventlog_cli._text import clean, clip, conversation_json, entry_headline, seq_list, size, timestamp

if TYPE_CHECKING:
    from eventlog.entries import ConversationRecord, Entry, RunRecord, VerifyReport
    from eventlog.log import EventLogBase

__all__ = [
    'CONVERSATION_HEADERS',
    'INTERRUPTED',
    'KIND_STYLES',
    'RUN_STATUS_FILTERS',
    'TAIL_BATCH',
    'TAIL_MIN_HEADLINE',
    'CliError',
    'Row',
    'TailStart',
    'compact_json',
    'conversation_record',
    'conversation_row',
    'deleted_or_missing',
    'info_json',
    'info_rows',
    'latest_start',
    'open_store',
    'plural',
    'read_conversations',
    'read_info',
    'read_stats',
    'read_verify',
    'run_counts',
    'run_record',
    'run_status_filter',
    'scrub_note',
    'stats_rows',
    'tail_backlog',
    'tail_parts',
    'tail_start',
    'unindexed_note',
    'verify_ok_line',
]

Row = tuple[str, str, str]
"""A row of a two-column view (`info`, `stats`): label, text, style of the text."""

INTERRUPTED = 'interrupted'
"""The runs that never finished: status `running` (the log cannot tell a run still going from one
whose process died), what `eventlog runs --interrupted` lists and a durable run resumes."""

RUN_STATUS_FILTERS: tuple[str, ...] = (*get_args(RunStatus), INTERRUPTED)
"""What a list of runs may be narrowed to: each status of the log, and `INTERRUPTED`."""


def run_status_filter(name: str) -> RunStatus:
    """The status of the log that the filter `name` (one of `RUN_STATUS_FILTERS`) selects;
    `InvalidArgumentError` for another name."""
    if name == INTERRUPTED:
        return 'running'
    for status in get_args(RunStatus):
        if name == status:
            return status
    raise InvalidArgumentError(f'status must be one of {", ".join(RUN_STATUS_FILTERS)}, got {name!r}')


class CliError(Exception):
    """A mistake the user can fix; reported in one line, exit status 1."""


def open_store(
    store: str | Path, *, create: bool = False, writes: bool = False
) -> AbstractAsyncContextManager[StoreLog]:
    """The store `store` names (a directory, or a PostgreSQL URL: `eventlog_cli._store`); unless
    `create`, refuse one that does not exist yet (`no store at ...`). Opened read-only unless the
    command `writes` (or `create`s): a reading command changes nothing in the store."""
    from eventlog_cli._store import open_store as open_location

    return open_location(store, create=create, writes=writes or create)


async def conversation_record(log: EventLogBase, conversation_id: str) -> ConversationRecord:
    """The conversation's record; `CliError` when there is none."""
    record = await log.get_conversation(conversation_id)
    if record is None:
        raise CliError(f'no conversation {conversation_id!r} in this store')
    return record


async def run_record(log: EventLogBase, run_id: str) -> RunRecord:
    """The run's record; `CliError` when there is none."""
    record = await log.get_run(run_id)
    if record is None:
        raise CliError(f'no run {run_id!r} in this store')
    return record


async def deleted_or_missing(log: EventLogBase, conversation_id: str) -> NoReturn:
    """Fail naming the deletion when only the conversation's tombstone is left, else 'no conversation'."""
    tombstones = await log.entries(conversation_id=conversation_id, kinds=['deleted'])
    if not tombstones:
        raise CliError(f'no conversation {conversation_id!r} in this store')
    last = tombstones[-1]
    raise CliError(
        f'conversation {conversation_id!r} was deleted at {timestamp(last.timestamp)} UTC '
        f'(entry #{last.seq}, its tombstone, is all that is left of it)'
    )


def plural(count: int, one: str, many: str) -> str:
    """`1 entry`, `2 entries`."""
    return f'{count} {one if count == 1 else many}'


def run_counts(total: int, statuses: Counter[str]) -> str:
    """`201 (200 completed, 1 failed)`; `0 (none yet)` when there are no runs."""
    if not total:
        return '0 (none yet)'
    return f'{total} (' + ', '.join(f'{n} {s}' for s, n in statuses.most_common()) + ')'


def compact_json(data: object) -> str:
    """`data` as JSON on one line (JSON Lines)."""
    return json.dumps(data, ensure_ascii=False, separators=(',', ':'))


# --- conversations ----------------------------------------------------------------------------


async def read_conversations(
    log: EventLogBase, include_archived: bool, full_ids: bool
) -> tuple[list[ConversationRecord], ShortIds]:
    """The conversations, most recently active first, and their ids' abbreviations."""
    records = await log.list_conversations(include_archived=include_archived)
    short = ShortIds(log, full=full_ids, uniform=True)
    await short.learn('conversation', (c.conversation_id for c in records))
    records.sort(key=lambda c: (c.updated_at, c.last_seq), reverse=True)
    return records, short


CONVERSATION_HEADERS = ('conversation', 'title', 'runs', 'messages', 'size', 'last activity', 'archived')
"""The columns of `conversations` (`archived` with `--include-archived` only)."""


def conversation_row(record: ConversationRecord, short: ShortIds) -> tuple[str, str, str, str, str, str, str]:
    """A conversation's row of `conversations`, a cell per `CONVERSATION_HEADERS`."""
    return (
        clean(short.conversation(record.conversation_id)),
        clean(record.title or ''),
        str(record.run_count),
        str(record.message_count),
        size(record.payload_bytes),
        timestamp(record.updated_at),
        'yes' if record.archived else '',
    )


# --- info -------------------------------------------------------------------------------------


async def read_info(log: EventLogBase, conversation_id: str) -> tuple[ConversationRecord, list[RunRecord], int | None]:
    """The conversation `conversation_id` names (a unique prefix too), its runs, and the store's
    pending scrub (`EventLogBase.scrub_pending`)."""
    conversation_id = await resolve_conversation(log, conversation_id)
    if await log.get_conversation(conversation_id) is None:
        await deleted_or_missing(log, conversation_id)
    record = await conversation_record(log, conversation_id)
    return record, await log.list_runs(conversation_id=conversation_id), await log.scrub_pending()


def scrub_note(pending: int | None) -> str:
    """What `stats`, `info` and `verify` say of a pending scrub (empty when there is none)."""
    if pending is None:
        return ''
    return (
        f'pending: the store files may still hold the text removed by entry #{pending} '
        "(run 'eventlog compact' once nothing else has the store open)"
    )


def _info_totals(runs: list[RunRecord]) -> tuple[Counter[str], Counter[str], list[str]]:
    usage: Counter[str] = Counter()
    for r in runs:
        usage.update(r.usage)
    return usage, Counter(r.status for r in runs), sorted({r.agent_name for r in runs if r.agent_name})


def info_json(record: ConversationRecord, runs: list[RunRecord], scrub_pending: int | None = None) -> dict[str, Any]:
    """`info --json`."""
    usage, statuses, agents = _info_totals(runs)
    data = conversation_json(record)
    data.update(usage=dict(usage), runs_by_status=dict(statuses), agents=agents, scrub_pending=scrub_pending)
    return data


def info_rows(record: ConversationRecord, runs: list[RunRecord], scrub_pending: int | None = None) -> list[Row]:
    """`info`'s rows."""
    usage, statuses, agents = _info_totals(runs)
    rows: list[Row] = [
        ('conversation', clean(record.conversation_id), ''),
        ('title', clean(record.title or '(none)'), 'italic'),
        ('created', timestamp(record.created_at), ''),
        ('last activity', timestamp(record.updated_at), ''),
        ('archived', 'yes' if record.archived else 'no', ''),
    ]
    if record.forked_from is not None:
        fork = record.forked_from
        rows.append(('forked from', clean(f'{fork.conversation_id} at entry #{fork.seq}'), ''))
    rows += [
        ('entries', f'{record.entry_count} (#{record.first_seq} to #{record.last_seq})', ''),
        ('messages', f'{record.message_count} ({size(record.payload_bytes)} stored)', ''),
        ('runs', clean(run_counts(record.run_count, statuses)), ''),
        ('compactions', str(record.compaction_count), ''),
        ('agents', clean(', '.join(agents) or '(unnamed)'), ''),
        (
            'tokens',
            f'{usage.get("input_tokens", 0)} in, {usage.get("output_tokens", 0)} out, '
            f'{plural(usage.get("requests", 0), "request", "requests")}, '
            f'{plural(usage.get("tool_calls", 0), "tool call", "tool calls")}',
            '',
        ),
    ]
    if scrub_pending is not None:
        rows.append(('scrub', scrub_note(scrub_pending), 'yellow'))
    return rows


# --- stats ------------------------------------------------------------------------------------


async def read_stats(log: StoreLog, store: str | Path) -> dict[str, Any]:
    """`stats --json`: the store's totals and the state of its search index."""
    from eventlog_cli._index import index_state

    records = await log.list_conversations(include_archived=True)
    all_runs = await log.list_runs()
    last_seq = await log.last_seq()
    return {
        'store': describe(store),
        'conversations': len(records),
        'archived': sum(1 for c in records if c.archived),
        'runs': len(all_runs),
        'runs_by_status': dict(Counter(r.status for r in all_runs)),
        'entries': sum(c.entry_count for c in records),
        'messages': sum(c.message_count for c in records),
        'compactions': sum(c.compaction_count for c in records),
        'message_bytes': sum(c.payload_bytes for c in records),
        'last_seq': last_seq,
        'disk_bytes': log.disk_size(),
        'scrub_pending': await log.scrub_pending(),
        'index': index_state(log),
    }


def unindexed_note(seqs: Sequence[int]) -> str:
    """What `search` and `stats` say of messages the index could not read (`SearchResult.unindexed`)."""
    count = plural(len(seqs), 'message', 'messages')
    return f'{count} could not be read to be indexed, so no search finds them: {seq_list(seqs)}'


def stats_rows(data: dict[str, Any]) -> list[Row]:
    """`stats`'s rows, from `read_stats`."""
    index = data['index']
    current = (
        'current'
        if index['current']
        else f"behind (at #{index['position']}; `eventlog reindex` or the application's next search catches it up)"
    )
    built = f'{index["documents"]} documents, {index["analyzer"]} analyzer, {current}'
    if index.get('unindexed'):
        built += f'; {unindexed_note(index["unindexed"])}'
    if index['kind'] == 'memory':
        built = 'none at rest (an encrypted store is indexed in memory, by each process that searches it)'
    return [
        ('store', clean(data['store']), ''),
        ('conversations', f'{data["conversations"]} ({data["archived"]} archived)', ''),
        ('runs', run_counts(data['runs'], Counter(data['runs_by_status'])), ''),
        ('entries', f'{data["entries"]} (last seq #{data["last_seq"]})', ''),
        ('messages', f'{data["messages"]} ({size(data["message_bytes"])})', ''),
        ('compactions', str(data['compactions']), ''),
        ('on disk', size(data['disk_bytes']), ''),
        *([('scrub', scrub_note(data['scrub_pending']), 'yellow')] if data.get('scrub_pending') is not None else []),
        (
            'search index',
            clean(
                built
                if index['analyzer'] is not None or index['kind'] == 'memory'
                else "not built yet (`eventlog reindex` or the application's first search builds it)"
            ),
            '',
        ),
    ]


# --- verify -----------------------------------------------------------------------------------


async def read_verify(
    log: StoreLog, checkpoints: Sequence[Path] | None = None, public_key: Path | None = None
) -> tuple[VerifyReport, int, int]:
    """Verify the log (against signed `checkpoints` when given) and its search index: the report,
    and when it is ok the live conversations and the deletion tombstones (0 and 0 otherwise)."""
    from eventlog._threads import to_thread
    from eventlog._verify import report_of
    from eventlog.entries import VerifyProblem
    from search.persistent_index import PersistentIndex

    if checkpoints is not None and public_key is not None:
        report = await log.verify(checkpoints=checkpoints, public_key=public_key)
    else:
        report = await log.verify()
    if not log.encrypted and not any(p.code == 'structure' for p in report.problems):
        index = PersistentIndex.open_existing(log)
        found = await to_thread(index.verify)
        report = report_of(
            (
                VerifyProblem(
                    f.conversation_id,
                    0,
                    f'{f.reason}; the search index is derived from the log: `eventlog reindex` rebuilds it',
                    code='search-index',
                )
                for f in found
            ),
            report,
        )
    # `conversations_checked` counts every id with entries, a deleted one (its tombstone) too;
    # the ok line says how many of them are conversations `stats` and `conversations` list.
    if not report.ok:
        return report, 0, 0
    live = len(await log.list_conversations(include_archived=True))
    tombstones = sum([len(batch) async for batch in log.iter_entries(kinds=['deleted'], batch=500)])
    return report, live, tombstones


def verify_ok_line(report: VerifyReport, live: int, tombstones: int, checkpoints: int = 0) -> str:
    """What `verify` says of a sound store (checked against `checkpoints` signed checkpoints)."""
    marks = f' ({plural(tombstones, "deletion tombstone", "deletion tombstones")})' if tombstones else ''
    signed = f'; matches {plural(checkpoints, "signed checkpoint", "signed checkpoints")}' if checkpoints else ''
    scrub = f'; scrub {scrub_note(report.scrub_pending)}' if report.scrub_pending is not None else ''
    old = (
        '; the store is in an older format, whose erased entries are taken as given '
        '(open it for writing once to migrate it)'
        if report.chain_from is None and report.entries_checked
        else ''
    )
    return (
        f'ok: {plural(report.entries_checked, "entry", "entries")}{marks} in '
        f'{plural(live, "conversation", "conversations")}; every hash chain is intact{signed}{scrub}{old}'
    )


# --- tail -------------------------------------------------------------------------------------

TAIL_BATCH = 1000
"""Entries `tail` reads per transaction."""

KIND_STYLES = {
    'message': 'bold',
    'run_started': 'cyan',
    'run_finished': 'cyan',
    'tool_effect': 'magenta',
    'durable_step': 'blue',
    'recall': 'green',
    'compaction': 'yellow',
}
"""How each kind of entry is styled in one-line views (other kinds: bold)."""

TailStart = tuple[str | None, str | None, ShortIds, int, int | None]
"""Where `tail` starts: the conversation and run ids resolved, the ids' abbreviations, the last
`seq` when it started, and the `seq` after which its backlog begins (`None`: no backlog)."""


async def tail_start(
    log: EventLogBase,
    lines: int,
    conversation_id: str | None,
    run_id: str | None,
    kinds: list[str] | None,
    full_ids: bool,
) -> TailStart:
    """Resolve `tail`'s ids (`CliError` for an unknown one) and find where its backlog starts."""
    if conversation_id is not None:
        conversation_id = await resolve_conversation(log, conversation_id)
        await conversation_record(log, conversation_id)
    if run_id is not None:
        run_id = await resolve_run(log, run_id)
        await run_record(log, run_id)
    short = ShortIds(log, full=full_ids)
    cursor = await log.last_seq()
    start = await latest_start(log, lines, cursor, conversation_id, run_id, kinds)
    return conversation_id, run_id, short, cursor, start


async def tail_backlog(
    log: EventLogBase, begun: TailStart, kinds: list[str] | None, after: int
) -> AsyncIterator[list[Entry]]:
    """The matching entries after `after` up to where `tail` started, a batch at a time, their
    ids learnt by the start's `ShortIds`."""
    conversation_id, run_id, short, cursor, _ = begun
    async for batch in log.iter_entries(
        conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=after, batch=TAIL_BATCH
    ):
        shown = [entry for entry in batch if entry.seq <= cursor]
        await short.learn_entries(shown)
        yield shown
        if len(shown) < len(batch):
            break


async def latest_start(
    log: EventLogBase,
    count: int,
    last: int,
    conversation_id: str | None,
    run_id: str | None,
    kinds: list[str] | None,
) -> int | None:
    """The `seq` after which the last `count` matching entries up to `last` begin (`None` when
    there are none), reading back in growing windows and keeping only `seq`s."""
    if count == 0:
        return None
    window = max(4 * count, 64)
    while True:
        after = max(0, last - window)
        seqs: list[int] = []
        async for batch in log.iter_entries(
            conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=after, batch=TAIL_BATCH
        ):
            seqs.extend(entry.seq for entry in batch if entry.seq <= last)
            if batch[-1].seq >= last:
                break
        if len(seqs) >= count or after == 0:
            picked = seqs[-count:]
            return picked[0] - 1 if picked else None
        window *= 4


TAIL_MIN_HEADLINE = 32
"""Fewest columns `tail` gives an entry's headline on its line; below that, the headline goes on
a line of its own under the entry's fields."""


def tail_parts(entry: Entry, short: ShortIds | None = None, width: int | None = None) -> list[tuple[str, str]]:
    """One entry as `tail` prints it, as `(text, style)` pieces; ids abbreviated by `short`
    (whole without it). With `width`, the line fits it: the headline is clipped (with `…`) to the
    columns its fields leave, or when they leave fewer than `TAIL_MIN_HEADLINE`, it goes on a line of
    its own, indented, clipped to the width."""
    conversation_id = entry.conversation_id if short is None else short.conversation(entry.conversation_id)
    run_id = entry.run_id if short is None or entry.run_id is None else short.run(entry.run_id)
    parts = [
        (f'#{entry.seq:<7}', 'dim'),
        (entry.timestamp.strftime('%H:%M:%S.%f')[:-3] + '  ', 'dim'),
        (clean(conversation_id) + '  ', 'cyan'),
    ]
    if run_id is not None:
        parts.append((clean(run_id) + '  ', 'dim'))
    parts.append((f'{clean(entry.kind):<13}', KIND_STYLES.get(entry.kind, 'bold')))
    headline = entry_headline(entry)
    if width is not None:
        used = sum(len(text) for text, _ in parts)
        if width - used >= TAIL_MIN_HEADLINE:
            headline = clip(headline, width - used)
        else:
            parts[-1] = (parts[-1][0].rstrip() + '\n' + ' ' * 8, parts[-1][1])
            headline = clip(headline, max(8, width - 8))
    parts.append((headline, ''))
    return parts
