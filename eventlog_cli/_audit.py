"""The audit commands: `keygen`, `checkpoint` and `verify-export` (docs/audit.md).

`register` adds them to the `eventlog` application; the store is opened and errors are turned
into one line by the functions `cli` hands over, so this module holds only what is new.
`cryptography` (the `audit` extra) is imported only when a key is made or used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from eventlog.log import EventLogBase

__all__ = ['register']

T = TypeVar('T')

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
"""`cli._run`: runs a command's coroutine, turning every error a user can cause into one line."""
Opener = Callable[[str], AbstractAsyncContextManager[EventLogBase]]
"""`cli._open`: the store a path or PostgreSQL URL names, refusing one that does not exist."""


def register(app: typer.Typer, *, run: Runner, open_store: Opener) -> None:
    """Add `keygen`, `checkpoint` and `verify-export` to `app`."""

    @app.command()
    def keygen(  # pyright: ignore[reportUnusedFunction]
        output: Annotated[
            Path, typer.Option('--output', '-o', help='The private key file to write (the public key: FILE.pub).')
        ],
        force: Annotated[bool, typer.Option('--force', help='Replace key files that exist.')] = False,
    ) -> None:
        """Make an Ed25519 key pair for signing checkpoints: a private key (PEM, 0600) and FILE.pub.

        Keep the private key away from the store and from whoever can write it; give auditors
        the .pub file (docs/audit.md).
        """
        run(_keygen(output, force))

    @app.command()
    def checkpoint(  # pyright: ignore[reportUnusedFunction]
        key: Annotated[Path, typer.Option('--key', '-k', help='The private key (from `eventlog keygen`).')],
        output: Annotated[
            Path, typer.Option('--output', '-o', help='Write the signed checkpoint here (outside the store).')
        ],
        full: Annotated[
            bool, typer.Option('--full', help='List every entry, not only those since the last checkpoint.')
        ] = False,
        store: Annotated[
            str,
            typer.Option(
                '--store', '-s', envvar='EVENTLOG_STORE', help='The store: a directory, or postgresql://...#schema.'
            ),
        ] = 'eventlog.lmdb',
        force: Annotated[bool, typer.Option('--force', help='Replace the checkpoint file if it exists.')] = False,
    ) -> None:
        """Sign the head of every conversation; record the checkpoint in the store and write it to a file.

        `eventlog verify --checkpoint FILE --public-key KEY.pub` later proves that nothing up to
        it was altered, removed or reordered, even with recomputed hashes. Keep every checkpoint
        file: an existing one is never replaced without `--force`.
        """
        if not force and (output.exists() or output.is_symlink()):  # before anything is signed or recorded
            run(
                _refuse(
                    f'{output} exists; refusing to replace a checkpoint (keep every one: pass another -o, or --force)'
                )
            )
        run(_checkpoint(open_store, store, key, output, full=full))

    @app.command(name='verify-export')
    def verify_export(  # pyright: ignore[reportUnusedFunction]
        file: Annotated[Path, typer.Argument(help='A signed export (`eventlog export --signed`).')],
        public_key: Annotated[
            Path, typer.Option('--public-key', '-p', help='The public key (KEY.pub) that signed its checkpoints.')
        ],
        as_json: Annotated[bool, typer.Option('--json', help='Print the report as JSON.')] = False,
    ) -> None:
        """Check a signed export without its store: chains, closing line and every signed checkpoint.

        Exit status 0 only when everything matches; the first entry of each conversation that
        differs from the signed history is named.
        """
        ok = run(_verify_export(file, public_key, as_json=as_json))
        if not ok:
            raise typer.Exit(1)


async def _keygen(output: Path, force: bool) -> None:
    from eventlog.checkpoint import write_key_pair

    private, public, signer = write_key_pair(output, overwrite=force)
    sys.stdout.write(
        f'wrote the private key {private} (keep it secret, away from the store) and the public key {public}\n'
        f'fingerprint {signer.public_key.fingerprint}\n'
    )


async def _refuse(message: str) -> None:
    from eventlog.errors import InvalidArgumentError

    raise InvalidArgumentError(message)


async def _checkpoint(open_store: Opener, store: str, key: Path, output: Path, *, full: bool) -> None:
    from eventlog.checkpoint import Signer

    signer = Signer.from_file(key)  # a bad key is refused before the store is opened
    async with open_store(store) as log:
        made = await log.checkpoint(signer, path=output, full=full)
    listed = sum(len(head.entries) for head in made.body.conversations)
    sys.stdout.write(
        f'checkpoint of {len(made.body.conversations)} conversations up to entry #{made.last_seq} '
        f'({listed} entries listed since #{made.body.since}), signed by {made.key_fingerprint}, '
        f'written to {output}\nstore head {made.store_head}\n'
    )


async def _verify_export(file: Path, public_key: Path, *, as_json: bool) -> bool:
    import asyncio

    from eventlog.checkpoint import PublicKey, verify_export
    from eventlog_cli import _render as render

    key = PublicKey.from_file(public_key)
    report = await asyncio.to_thread(verify_export, file, key)
    if as_json:
        render.print_json(render.to_builtins(report))
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
            render.clean(f'{problem.conversation_id or "(store)"} {where} {problem.code}: {problem.reason}') + '\n'
        )
    return False
