"""Commands that change a store: `fork`, `title`, `archive`, `unarchive`, `delete`, `compact`,
`erase` and `retain` (docs/erasure.md says what the last two guarantee). Those that remove
anything explain first and act only with `--yes`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from eventlog_cli.commands import _common as common

if TYPE_CHECKING:
    from eventlog import Entry, Erased, RetentionReport
    from eventlog.lmdb_log import CompactResult
    from eventlog.log import EventLogBase

__all__ = ['register', 'report_scrub']


def _conversation_argument(parser: argparse.ArgumentParser, help: str = 'The conversation id.') -> None:
    common.arguments(parser).add_argument('conversation', metavar='CONVERSATION', help=help)


def register(subparsers: common.Subparsers) -> None:
    """Add the commands that change a store to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'fork',
        _fork_command,
        "Start a new conversation whose history is this one's up to an entry (by reference).",
        arguments='CONVERSATION',
    )
    _conversation_argument(parser, 'The conversation to fork.')
    common.options(parser).add_argument(
        '--at', type=common.at_least(1), metavar='<n>', help='Fork at this entry (default: its latest context).'
    )
    common.options(parser).add_argument(
        '--id', dest='new_id', metavar='<id>', help='The new conversation id (default: a fresh uuid).'
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers, 'title', _title_command, 'Give a conversation a title.', arguments='CONVERSATION TEXT'
    )
    _conversation_argument(parser)
    common.arguments(parser).add_argument('text', metavar='TEXT', help='The new title.')
    common.store_option(parser)

    parser = common.add_command(
        subparsers,
        'archive',
        _archive_command,
        'Hide a conversation from listings; its entries stay and stay searchable by id.',
        arguments='CONVERSATION',
    )
    _conversation_argument(parser)
    common.store_option(parser)
    parser.set_defaults(archived=True)

    parser = common.add_command(
        subparsers, 'unarchive', _archive_command, 'List an archived conversation again.', arguments='CONVERSATION'
    )
    _conversation_argument(parser)
    common.store_option(parser)
    parser.set_defaults(archived=False)

    parser = common.add_command(
        subparsers,
        'delete',
        _delete_command,
        "Remove a conversation's entries for good, leaving a tombstone, then compact. Needs --yes.\n\n"
        'When another process has the store open, the compaction is left for `eventlog compact`.',
        arguments='CONVERSATION',
    )
    _conversation_argument(parser)
    common.options(parser).add_argument('--yes', action='store_true', help='Really delete (without it, only explain).')
    common.store_option(parser)

    parser = common.add_command(
        subparsers,
        'compact',
        _compact_command,
        'Rewrite the store without its free pages, so deleted text is gone from the disk.\n\n'
        'Refused while another process has the store open. Finishes a scrub an erasure or deletion '
        "left pending. On PostgreSQL it runs the scrub (VACUUM FULL of the log's tables).",
    )
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'erase',
        _erase_command,
        "Remove the content of a conversation's messages for good, keeping their place in the chain. Needs --yes.\n\n"
        'The erased messages replay as placeholders, an erasure entry records what was erased, and '
        '`eventlog verify` still proves the order and the rest of the content. The store is then '
        'compacted so the erased text is gone from its files (when another process has it open, '
        'that is left for `eventlog compact`).',
        arguments='CONVERSATION',
    )
    _conversation_argument(parser, 'The conversation id (or a unique prefix).')
    options = common.options(parser)
    options.add_argument('--run', metavar='<id>', help='Erase only this run of it.')
    options.add_argument(
        '--seq', action='append', type=int, metavar='<n>', help='Erase only these entries (repeat the option).'
    )
    options.add_argument(
        '--contains', metavar='<text>', help='Erase only entries whose stored JSON contains this text.'
    )
    options.add_argument('--reason', metavar='<text>', help='Why (recorded in the erasure entry).')
    options.add_argument('--by', metavar='<text>', help='Who asked (recorded in the erasure entry).')
    options.add_argument('--yes', action='store_true', help='Really erase (without it, only explain).')
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'retain',
        _retain_command,
        'Apply a retention limit: erase (or delete) what is older, and report per conversation.\n\n'
        'With --erase (the default) every message older than its limit has its content erased, as '
        '`eventlog erase` does; with --delete every conversation whose latest entry is older is '
        'deleted. The store is compacted afterwards so the removed text is gone from its files.',
    )
    options = common.options(parser)
    options.add_argument('--max-age', metavar='<text>', help='Keep content this long (30d, 12h, 2w, 1d12h).')
    options.add_argument(
        '--conversation-age',
        action='append',
        metavar='<text>',
        help='ID=AGE: another limit for one conversation (repeatable).',
    )
    options.add_argument('--delete', action='store_true', help='Delete whole conversations older than the limit.')
    options.add_argument(
        '--erase', dest='erase_', action='store_true', help='Erase the content of older entries (the default).'
    )
    options.add_argument('--dry-run', action='store_true', help='Only report what would be done.')
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'shred',
        _shred_command,
        "Destroy an encrypted conversation's data key: its content becomes unreadable everywhere. Needs --yes.\n\n"
        "Every copy of the store (backups, replicas, PostgreSQL's WAL) holds only sealed payloads, so "
        'destroying the key erases the content from all of them at once (and from backups of the keyring '
        'once they expire). The messages replay as placeholders keeping their role, a shred entry '
        'records it, `eventlog verify` still passes, and nothing more can be appended to the '
        'conversation (docs/encryption.md). Needs --keys.',
        arguments='CONVERSATION',
    )
    _conversation_argument(parser, 'The conversation id (or a unique prefix).')
    options = common.options(parser)
    options.add_argument('--reason', metavar='<text>', help='Why (recorded in the shred entry).')
    options.add_argument('--by', metavar='<text>', help='Who asked (recorded in the shred entry).')
    options.add_argument('--yes', action='store_true', help='Really shred (without it, only explain).')
    common.store_option(parser)
    common.json_option(parser)

    parser = common.add_command(
        subparsers,
        'encrypt',
        _encrypt_command,
        'Make a plain store encrypted: seal every message under a data key per conversation. Needs --keys.\n\n'
        'All or nothing, in one transaction: a failure leaves the plain store as it was. Every chain '
        'is recomputed over the sealed bytes (make a new signed checkpoint afterwards), the search '
        'index is dropped (an encrypted store is searched in memory), and the store is compacted so '
        "the clear text leaves its files; PostgreSQL's WAL and older backups still hold it "
        '(docs/encryption.md).',
    )
    common.store_option(parser)
    common.json_option(parser)


# --- fork, title, archive ---------------------------------------------------------------------


def _fork_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _fork(store, args.conversation, args.at, args.new_id, args.as_json))


async def _fork(store: str, conversation_id: str, at: int | None, new_id: str | None, as_json: bool) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    async with views.open_store(store, writes=True) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await views.conversation_record(log, conversation_id)
        created = await log.fork(conversation_id, at_seq=at, new_conversation_id=new_id)
        record = await views.conversation_record(log, created)
    point = record.forked_from.seq if record.forked_from is not None else at
    if as_json:
        render.print_json({'conversation_id': created, 'forked_from': conversation_id, 'at_seq': point})
        return
    render.console().print(f'forked {conversation_id} at entry #{point} into {created}')


def _title_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _title(store, args.conversation, args.text))


async def _title(store: str, conversation_id: str, text: str) -> None:
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    async with views.open_store(store, writes=True) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        await views.conversation_record(log, conversation_id)
        seq = await log.set_title(conversation_id, text)
    render.console().print(Text(f'{conversation_id} is now titled {text!r} (entry #{seq})'))


def _archive_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _archive(store, args.conversation, archived=args.archived))


async def _archive(store: str, conversation_id: str, *, archived: bool) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    async with views.open_store(store, writes=True) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await views.conversation_record(log, conversation_id)
        if record.archived == archived:
            render.console().print(f'{conversation_id} is already {"archived" if archived else "listed"}')
            return
        seq = await (log.archive(conversation_id) if archived else log.unarchive(conversation_id))
    render.console().print(f'{conversation_id} {"archived" if archived else "unarchived"} (entry #{seq})')


# --- delete, compact --------------------------------------------------------------------------


def _delete_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _delete(store, args.conversation, args.yes))


async def _delete(store: str, conversation_id: str, yes: bool) -> None:
    from eventlog.lmdb_log import LmdbEventLog
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    async with views.open_store(store, writes=True) as log:
        conversation_id = await resolve_conversation(log, conversation_id)
        record = await views.conversation_record(log, conversation_id)
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
            raise SystemExit(1)
        removed = await log.delete_conversation(conversation_id)
        render.console().print(f'deleted {conversation_id}: {removed} entries removed')
        problem = await log.scrub()  # never raises: the deletion is committed
        report_scrub(store, isinstance(log, LmdbEventLog), True, problem is None, problem)


def _compact_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _compact(store, args.as_json))


async def _compact(store: str, as_json: bool) -> None:
    from eventlog.lmdb_log import LmdbEventLog
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._store import describe

    async with views.open_store(store, writes=True) as log:
        if not isinstance(log, LmdbEventLog):
            problem = await log.scrub()
            if problem is not None:
                raise views.CliError(problem)
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
    from eventlog_cli import _render as render

    return f'{render.size(result.bytes_before)} before, {render.size(result.bytes_after)} after'


# --- shred, encrypt ---------------------------------------------------------------------------


def _shred_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _shred(store, args.conversation, args.reason, args.by, args.yes, args.as_json))


async def _shred(store: str, conversation: str, reason: str | None, by: str | None, yes: bool, as_json: bool) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation
    from eventlog_cli._store import describe

    async with views.open_store(store, writes=True) as log:
        if not log.encrypted:
            raise views.CliError(f'{describe(store)} is not encrypted: there is no key to shred (see eventlog encrypt)')
        conversation_id = await resolve_conversation(log, conversation)
        record = await views.conversation_record(log, conversation_id)
        if not yes:
            sys.stderr.write(
                f'Shredding would destroy the data key of {conversation_id} ({record.message_count} messages): '
                'their content would be unreadable in this store and in every copy of it, for good.\n'
                'Nothing was changed. Run again with --yes to shred.\n'
            )
            return
        seq = await log.shred(conversation_id, reason=reason, by=by)
    if as_json:
        render.print_json({'conversation_id': conversation_id, 'shred_seq': seq})
        return
    render.console().print(f'shredded {conversation_id}: its data key is destroyed (shred entry #{seq})')


def _encrypt_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _encrypt(store, args.as_json))


async def _encrypt(store: str, as_json: bool) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._store import describe, keys_wanted

    keys = keys_wanted()
    if keys is None:
        raise views.CliError(
            'name the keyring that will hold the data keys: --keys PATH (eventlog keygen --encryption PATH)'
        )
    from eventlog_cli._store import open_store as open_location

    async with open_location(store, read_only=False, with_keys=False, writes=True) as log:
        sealed = await log.encrypt(keys)
        pending = await log.scrub_pending()
    if as_json:
        render.print_json({'sealed': sealed, 'scrub_pending': pending is not None})
        return
    render.console().print(
        f'encrypted {describe(store)}: {sealed} payloads sealed'
        + ('' if pending is None else '; the clear text is still in its files until `eventlog compact` runs')
    )


# --- erase, retain ----------------------------------------------------------------------------


def _erase_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(
        lambda: _erase(
            store, args.conversation, args.run, args.seq, args.contains, args.reason, args.by, args.yes, args.as_json
        )
    )


async def _erase(
    store: str,
    conversation: str,
    run: str | None,
    seqs: list[int] | None,
    contains: str | None,
    reason: str | None,
    by: str | None,
    yes: bool,
    as_json: bool,
) -> None:
    from eventlog import LmdbEventLog
    from eventlog.entries import ERASABLE_KINDS
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation, resolve_run

    async with views.open_store(store, writes=True) as log:
        conversation_id = await resolve_conversation(log, conversation)
        await views.conversation_record(log, conversation_id)
        run_id = None if run is None else await resolve_run(log, run)
        if contains is not None and not contains:
            raise views.CliError('--contains needs some text')
        wanted = None if seqs is None else set(seqs)
        if wanted is not None:
            await _check_seqs(log, conversation_id, wanted)
        needle = None if contains is None else contains.encode()

        def where(entry: Entry) -> bool:
            return (wanted is None or entry.seq in wanted) and (needle is None or needle in entry.payload)

        if not yes:
            found = [
                e
                for e in await log.entries(conversation_id=conversation_id, run_id=run_id, kinds=ERASABLE_KINDS)
                if not e.erased and where(e)
            ]
            sys.stderr.write(
                f'Erasing would remove the content of {len(found)} entries of {conversation_id} for good '
                '(they would replay as placeholders; the chain stays verifiable).\n'
                'Nothing was changed. Run again with --yes to erase (export it first to keep a copy).\n'
            )
            raise SystemExit(1)
        done = await log.erase(conversation_id, run_id=run_id, where=where, reason=reason, by=by)
        lmdb = isinstance(log, LmdbEventLog)
    _report_erased(store, lmdb, done, as_json)


async def _check_seqs(log: EventLogBase, conversation_id: str, wanted: set[int]) -> None:
    from eventlog.entries import ERASABLE_KINDS
    from eventlog_cli._views import CliError

    held = {e.seq for e in await log.entries(conversation_id=conversation_id, kinds=ERASABLE_KINDS)}
    missing = sorted(wanted - held)
    if missing:
        raise CliError(
            f'entry {missing[0]} of conversation {conversation_id!r} is not one whose content erase removes '
            f'({", ".join(sorted(ERASABLE_KINDS))})'
        )


def _report_erased(store: str, lmdb: bool, done: Erased, as_json: bool) -> None:
    from eventlog_cli import _render as render

    if as_json:
        render.print_json(
            {
                'conversation_id': done.conversation_id,
                'erased': done.seqs,
                'erasure_seq': done.erasure_seq,
                'payload_bytes': done.payload_bytes,
                'scrubbed': done.scrubbed,
                'scrub_error': done.scrub_error,
            }
        )
    elif not done.seqs:
        render.console().print(f'nothing to erase in {done.conversation_id}: no entry matched (or all were erased)')
    else:
        render.console().print(
            f'erased {len(done.seqs)} entries of {done.conversation_id} ({render.seq_list(done.seqs)}), '
            f'recorded as entry #{done.erasure_seq}'
        )
    report_scrub(store, lmdb, bool(done.seqs), done.scrubbed, done.scrub_error)


def report_scrub(store: str, lmdb: bool, changed: bool, scrubbed: bool, problem: str | None) -> None:
    """Say on stderr whether the text an erasure, deletion or retention removed is gone from the
    store's files (the removal itself is committed either way)."""
    from eventlog_cli._store import describe

    if not changed:
        return
    if scrubbed:
        done = 'compacted' if lmdb else 'vacuumed (VACUUM FULL)'
        sys.stderr.write(f'{done} {describe(store)}: the removed text is gone from its files\n')
    else:
        sys.stderr.write(f"eventlog: {problem}. Run 'eventlog compact' once nothing else has the store open.\n")


def _retain_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(
        lambda: _retain(
            store, args.max_age, args.conversation_age or [], args.delete, args.erase_, args.dry_run, args.as_json
        )
    )


async def _retain(
    store: str,
    max_age: str | None,
    conversation_ages: list[str],
    delete: bool,
    erase: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    from eventlog import LmdbEventLog, RetentionPolicy
    from eventlog.retention import RetentionAction
    from eventlog_cli import _views as views

    if delete and erase:
        raise views.CliError('--delete and --erase exclude each other')
    ages: dict[str, str] = {}
    for item in conversation_ages:
        conv_id, sep, age = item.partition('=')
        if not sep or not conv_id or not age:
            raise views.CliError(f'--conversation-age takes ID=AGE (e.g. c1=7d), got {item!r}')
        ages[conv_id] = age
    if max_age is None and not ages:
        raise views.CliError('give --max-age (e.g. --max-age 30d) or --conversation-age ID=AGE')
    action: RetentionAction = 'delete' if delete else 'erase'
    policy = RetentionPolicy(max_age=max_age, conversations=ages, action=action)
    async with views.open_store(store, writes=True) as log:
        report = await log.retain(policy, dry_run=dry_run)
        lmdb = isinstance(log, LmdbEventLog)
    _report_retention(store, lmdb, report, as_json)


def _report_retention(store: str, lmdb: bool, report: RetentionReport, as_json: bool) -> None:
    from eventlog_cli import _render as render

    counts = report.erased if report.action == 'erase' else report.deleted
    if as_json:
        render.print_json(
            {
                'action': report.action,
                'dry_run': report.dry_run,
                'conversations': counts,
                'total': report.total,
                'scrubbed': report.scrubbed,
                'scrub_error': report.scrub_error,
            }
        )
    else:
        out = render.console()
        would = 'would be ' if report.dry_run else ''
        for conversation_id, count in counts.items():
            if report.action == 'erase':
                out.print(f'{conversation_id}: {count} entries {would}erased')
            else:
                out.print(f'{conversation_id}: {would}deleted ({count} entries)')
        done = f'{would}{"erased" if report.action == "erase" else "deleted"}'
        if counts:
            out.print(f'{report.total} entries in {len(counts)} conversations {done}')
        else:
            out.print(f'nothing is older than the limit: nothing {done}')
    if not report.dry_run:
        report_scrub(store, lmdb, bool(counts), report.scrubbed, report.scrub_error)
