"""The `erase` and `retain` commands: remove message content for good, keeping the chain provable.

Registered on the `eventlog` app by `register` (called from `eventlog_cli.cli`); they share its
plumbing (`--store`, one-line errors, `--json`). docs/erasure.md describes what they guarantee.
"""

import sys
from typing import Annotated

import typer

from eventlog import Entry, Erased, LmdbEventLog, RetentionPolicy, RetentionReport
from eventlog.entries import ERASABLE_KINDS
from eventlog.log import EventLogBase
from eventlog.retention import RetentionAction

__all__ = ['register']


def register(app: typer.Typer) -> None:
    """Add `erase` and `retain` to `app` (the `eventlog` command).

    The commands' annotations name `eventlog_cli.cli`'s option types, evaluated here (this
    module does not postpone annotations), once `cli` has defined them.
    """
    from eventlog_cli import cli

    @app.command()
    def erase(
        conversation: Annotated[str, typer.Argument(help='The conversation id (or a unique prefix).')],
        run: Annotated[str | None, typer.Option('--run', help='Erase only this run of it.')] = None,
        seq: Annotated[
            list[int] | None, typer.Option('--seq', help='Erase only these entries (repeat the option).')
        ] = None,
        contains: Annotated[
            str | None, typer.Option('--contains', help='Erase only entries whose stored JSON contains this text.')
        ] = None,
        reason: Annotated[str | None, typer.Option('--reason', help='Why (recorded in the erasure entry).')] = None,
        by: Annotated[str | None, typer.Option('--by', help='Who asked (recorded in the erasure entry).')] = None,
        yes: Annotated[bool, typer.Option('--yes', help='Really erase (without it, only explain).')] = False,
        store: cli.StoreOption = cli._DEFAULT_STORE,  # pyright: ignore[reportPrivateUsage]
        as_json: cli.JsonOption = False,
    ) -> None:
        """Remove the content of a conversation's messages for good, keeping their place in the chain. Needs --yes.

        The erased messages replay as placeholders, an erasure entry records what was erased, and
        `eventlog verify` still proves the order and the rest of the content. The store is then
        compacted so the erased text is gone from its files (when another process has it open,
        that is left for `eventlog compact`).
        """
        cli._run(_erase(store, conversation, run, seq, contains, reason, by, yes, as_json))  # pyright: ignore[reportPrivateUsage]

    @app.command()
    def retain(
        max_age: Annotated[
            str | None, typer.Option('--max-age', help='Keep content this long (30d, 12h, 2w, 1d12h).')
        ] = None,
        conversation_age: Annotated[
            list[str] | None,
            typer.Option('--conversation-age', help='ID=AGE: another limit for one conversation (repeatable).'),
        ] = None,
        delete: Annotated[
            bool, typer.Option('--delete', help='Delete whole conversations older than the limit.')
        ] = False,
        erase_: Annotated[
            bool, typer.Option('--erase', help='Erase the content of older entries (the default).')
        ] = False,
        dry_run: Annotated[bool, typer.Option('--dry-run', help='Only report what would be done.')] = False,
        store: cli.StoreOption = cli._DEFAULT_STORE,  # pyright: ignore[reportPrivateUsage]
        as_json: cli.JsonOption = False,
    ) -> None:
        """Apply a retention limit: erase (or delete) what is older, and report per conversation.

        With --erase (the default) every message older than its limit has its content erased, as
        `eventlog erase` does; with --delete every conversation whose latest entry is older is
        deleted. The store is compacted afterwards so the removed text is gone from its files.
        """
        cli._run(_retain(store, max_age, conversation_age or [], delete, erase_, dry_run, as_json))  # pyright: ignore[reportPrivateUsage]


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
    from eventlog_cli import cli
    from eventlog_cli._ids import resolve_conversation, resolve_run

    async with cli._open(store) as log:  # pyright: ignore[reportPrivateUsage]
        conversation_id = await resolve_conversation(log, conversation)
        await cli._conversation(log, conversation_id)  # pyright: ignore[reportPrivateUsage]
        run_id = None if run is None else await resolve_run(log, run)
        if contains is not None and not contains:
            raise cli.CliError('--contains needs some text')
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
            raise typer.Exit(1)
        done = await log.erase(conversation_id, run_id=run_id, where=where, reason=reason, by=by)
        lmdb = isinstance(log, LmdbEventLog)
    _report_erased(store, lmdb, done, as_json)


async def _check_seqs(log: EventLogBase, conversation_id: str, wanted: set[int]) -> None:
    from eventlog_cli import cli

    held = {e.seq for e in await log.entries(conversation_id=conversation_id, kinds=ERASABLE_KINDS)}
    missing = sorted(wanted - held)
    if missing:
        raise cli.CliError(
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


async def _retain(
    store: str,
    max_age: str | None,
    conversation_ages: list[str],
    delete: bool,
    erase: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    from eventlog_cli import cli

    if delete and erase:
        raise cli.CliError('--delete and --erase exclude each other')
    ages: dict[str, str] = {}
    for item in conversation_ages:
        conv_id, sep, age = item.partition('=')
        if not sep or not conv_id or not age:
            raise cli.CliError(f'--conversation-age takes ID=AGE (e.g. c1=7d), got {item!r}')
        ages[conv_id] = age
    if max_age is None and not ages:
        raise cli.CliError('give --max-age (e.g. --max-age 30d) or --conversation-age ID=AGE')
    action: RetentionAction = 'delete' if delete else 'erase'
    policy = RetentionPolicy(max_age=max_age, conversations=ages, action=action)
    async with cli._open(store) as log:  # pyright: ignore[reportPrivateUsage]
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
