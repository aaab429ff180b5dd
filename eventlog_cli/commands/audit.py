"""Proving a store intact: `verify` (every hash chain, optionally against signed checkpoints),
`keygen`, `checkpoint`, `verify-export` (docs/audit.md), and `rerun`, whether a recorded run
reproduces (docs/durability.md). `cryptography` (the `audit` extra)
is imported only when a key is made or used."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventlog_cli.commands import _common as common

if TYPE_CHECKING:
    from eventlog_cli import _tables as tables

__all__ = ['register']


def register(subparsers: common.Subparsers) -> None:
    """Add `verify`, `keygen`, `checkpoint`, `verify-export` and `rerun` to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'verify',
        _verify_command,
        'Walk every hash chain; exit status 0 only when all are intact (names the first bad entry).\n\n'
        'With `--checkpoint FILE --public-key KEY.pub`, also prove that nothing up to each checkpoint '
        'was altered, removed or reordered, even with recomputed hashes (docs/audit.md).',
    )
    common.store_option(parser)
    common.json_option(parser)
    options = common.options(parser)
    options.add_argument(
        '--checkpoint',
        '-c',
        action='append',
        type=Path,
        metavar='<path>',
        help='Also compare with this signed checkpoint file (repeatable).',
    )
    options.add_argument(
        '--public-key', '-p', type=Path, metavar='<path>', help='The public key (KEY.pub) that signed the checkpoints.'
    )

    parser = common.add_command(
        subparsers,
        'keygen',
        _keygen_command,
        'Make an Ed25519 key pair for signing checkpoints, or with --encryption a keyring for an encrypted store.\n\n'
        'Signing: a private key (PEM, 0600) and FILE.pub; keep the private key away from the store '
        'and from whoever can write it, give auditors the .pub file (docs/audit.md). Encryption: a '
        'keyring directory holding a new key-encryption key, where the data keys of an encrypted '
        "store's conversations will be kept; keep it apart from the store and its backups "
        '(docs/encryption.md).',
    )
    options = common.options(parser)
    options.add_argument(
        '--output',
        '-o',
        type=Path,
        metavar='<path>',
        help='The private key file to write (the public key: FILE.pub).',
    )
    options.add_argument(
        '--encryption',
        type=Path,
        metavar='<path>',
        help='Make a keyring for encrypted stores at this new directory instead (for --keys).',
    )
    options.add_argument('--force', action='store_true', help='Replace key files that exist.')

    parser = common.add_command(
        subparsers,
        'checkpoint',
        _checkpoint_command,
        'Sign the head of every conversation; record the checkpoint in the store and write it to a file.\n\n'
        '`eventlog verify --checkpoint FILE --public-key KEY.pub` later proves that nothing up to '
        'it was altered, removed or reordered, even with recomputed hashes. Keep every checkpoint '
        'file: an existing one is never replaced without `--force`.',
    )
    options = common.options(parser)
    options.add_argument(
        '--key',
        '-k',
        type=Path,
        required=True,
        metavar='<path>',
        help='The private key (from `eventlog keygen`). [required]',
    )
    options.add_argument(
        '--output',
        '-o',
        type=Path,
        required=True,
        metavar='<path>',
        help='Write the signed checkpoint here (outside the store). [required]',
    )
    options.add_argument(
        '--full', action='store_true', help='List every entry, not only those since the last checkpoint.'
    )
    common.store_option(parser)
    options.add_argument('--force', action='store_true', help='Replace the checkpoint file if it exists.')

    parser = common.add_command(
        subparsers,
        'verify-export',
        _verify_export_command,
        'Check a signed export without its store: chains, closing line and every signed checkpoint.\n\n'
        'Exit status 0 only when everything matches; the first entry of each conversation that '
        'differs from the signed history is named.',
        arguments='FILE',
    )
    common.arguments(parser).add_argument(
        'file', type=Path, metavar='FILE', help='A signed export (`eventlog export --signed`).'
    )
    options = common.options(parser)
    options.add_argument(
        '--public-key',
        '-p',
        type=Path,
        required=True,
        metavar='<path>',
        help='The public key (KEY.pub) that signed its checkpoints. [required]',
    )
    common.json_option(parser, 'Print the report as JSON.')

    parser = common.add_command(
        subparsers,
        'rerun',
        _rerun_command,
        "Re-execute a recorded run with today's agent, sending nothing to a model and running no "
        'tool; exit status 0 when it reproduces, 1 when it diverges (both sides shown).\n\n'
        'A durable run is checked against its journal, any other run against its recorded '
        'messages (docs/durability.md). Exit status 2 when the run cannot be checked.',
        arguments='RUN',
    )
    common.arguments(parser).add_argument('run_id', metavar='RUN', help='The run: its id or a unique prefix of it.')
    common.options(parser).add_argument(
        '--agent',
        '-a',
        required=True,
        metavar='<module:attribute>',
        help='The agent to re-execute it with (the current directory is importable). [required]',
    )
    common.store_option(parser)
    common.json_option(parser, 'Print the report as JSON.')


# --- rerun ------------------------------------------------------------------------------------


def _rerun_command(args: argparse.Namespace) -> int:
    from eventlog_cli._rerun import run_rerun

    return run_rerun(common.store_of(args), args.run_id, args.agent, json=args.as_json)


# --- verify -----------------------------------------------------------------------------------


def _verify_command(args: argparse.Namespace) -> int:
    if (args.checkpoint is None) != (args.public_key is None):
        common.fail('--checkpoint and --public-key go together', 2)
    store = common.store_of(args)
    ok = common.run(
        lambda: _verify(store, args.as_json, args.checkpoint, args.public_key),
        loop_free=common.is_lmdb(store),
    )
    return 0 if ok else 1


async def _verify(
    store: str, as_json: bool, checkpoints: list[Path] | None = None, public_key: Path | None = None
) -> bool:
    from eventlog_cli import _views as views
    from eventlog_cli._store import is_postgres

    async with views.open_store(store) as log:
        report, live, tombstones = await views.read_verify(log, checkpoints, public_key)
    if as_json:
        from eventlog_cli import _text as text

        data = text.to_builtins(report)
        if report.ok:
            data.update(conversations=live, deletion_tombstones=tombstones)
        text.print_json(data)
        return report.ok
    if is_postgres(store):
        sys.stderr.write(
            "eventlog: note: the walk of the LMDB file's B-trees does not apply to a PostgreSQL store "
            '(PostgreSQL checks its own pages); every hash chain and derived record was checked\n'
        )
    from rich.text import Text

    from eventlog_cli import _render as render
    from eventlog_cli import _styled as styled
    from eventlog_cli import _tables as tables

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
        header += f'; {views.plural(store_wide, "finding", "findings")} about the store as a whole'
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
    tables.print_table(out, [conversation, entry, finding, reason], _verify_steps())
    return False


def _verify_steps() -> list[tables.Step]:
    """What `verify`'s table of findings gives up first as the terminal narrows; its ids are shown
    whole, as `git fsck` names objects (docs/cli-views.md)."""
    return [('compact', 'first bad entry'), ('drop', 'finding')]


# --- keys and checkpoints ---------------------------------------------------------------------


def _keygen_command(args: argparse.Namespace) -> None:
    if args.encryption is not None:
        if args.output is not None:
            common.fail('give either --output (a signing key) or --encryption (a keyring), not both')
        common.run(lambda: _keyring(args.encryption))
        return
    if args.output is None:
        common.fail('name the key file to write: --output PATH (or --encryption PATH for a keyring)')
    common.run(lambda: _keygen(args.output, args.force))


async def _keyring(path: Path) -> None:
    from eventlog.encryption import FileKeyProvider

    FileKeyProvider.create(path)
    sys.stdout.write(
        f'wrote the keyring {path} (its key-encryption key is {path / "kek"}): keep it apart from the store '
        'and its backups; open the store with --keys ' + str(path) + '\n'
    )


async def _keygen(output: Path, force: bool) -> None:
    from eventlog.checkpoint import write_key_pair

    private, public, signer = write_key_pair(output, overwrite=force)
    sys.stdout.write(
        f'wrote the private key {private} (keep it secret, away from the store) and the public key {public}\n'
        f'fingerprint {signer.public_key.fingerprint}\n'
    )


def _checkpoint_command(args: argparse.Namespace) -> None:
    output: Path = args.output
    if not args.force and (output.exists() or output.is_symlink()):  # before anything is signed or recorded
        common.fail(f'{output} exists; refusing to replace a checkpoint (keep every one: pass another -o, or --force)')
    store = common.store_of(args)
    common.run(lambda: _checkpoint(store, args.key, output, full=args.full))


async def _checkpoint(store: str, key: Path, output: Path, *, full: bool) -> None:
    from eventlog.checkpoint import Signer
    from eventlog_cli import _views as views

    signer = Signer.from_file(key)  # a bad key is refused before the store is opened
    async with views.open_store(store, writes=True) as log:
        made = await log.checkpoint(signer, path=output, full=full)
    listed = sum(len(head.entries) for head in made.body.conversations)
    sys.stdout.write(
        f'checkpoint of {len(made.body.conversations)} conversations up to entry #{made.last_seq} '
        f'({listed} entries listed since #{made.body.since}), signed by {made.key_fingerprint}, '
        f'written to {output}\nstore head {made.store_head}\n'
    )


def _verify_export_command(args: argparse.Namespace) -> int:
    ok = common.run(lambda: _verify_export(args.file, args.public_key, as_json=args.as_json))
    return 0 if ok else 1


async def _verify_export(file: Path, public_key: Path, *, as_json: bool) -> bool:
    import asyncio

    from eventlog.checkpoint import PublicKey, verify_export
    from eventlog_cli import _text as text

    key = PublicKey.from_file(public_key)
    report = await asyncio.to_thread(verify_export, file, key)
    if as_json:
        text.print_json(text.to_builtins(report))
        return report.ok
    if report.ok:
        sys.stdout.write(
            f'ok: {report.entries_checked} entries in {report.conversations_checked} conversations match '
            f'the checkpoints signed by {key.fingerprint}\n'
        )
        return True
    sys.stdout.write(f'BROKEN: {len(report.problems)} conversations differ from the signed checkpoints\n')
    for problem in report.problems:
        where = f'#{problem.seq}' if problem.seq else ''
        sys.stdout.write(
            text.clean(f'{problem.conversation_id or "(store)"} {where} {problem.code}: {problem.reason}') + '\n'
        )
    return False
