"""Copying a store out and in: `export` (JSON Lines, a lossless copy) and `import` (all or nothing)."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eventlog_cli.commands import _common as common

if TYPE_CHECKING:
    from rich.progress import Progress

    from eventlog.log import EventLogBase
    from eventlog_cli._store import PostgresStore

__all__ = ['progress_bar', 'register']


def register(subparsers: common.Subparsers) -> None:
    """Add `export` and `import` to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'export',
        _export_command,
        'Write entries as JSON Lines (a lossless copy that `import` and auditors read).\n\n'
        'The store is verified first: one that fails `eventlog verify` is refused (an export of it '
        'would not import), unless `--allow-damaged` asks for what can be read.',
        arguments='[CONVERSATIONS]...',
    )
    common.arguments(parser).add_argument(
        'conversations',
        nargs='*',
        metavar='CONVERSATIONS',
        help='Conversations to export (default: all), with the history they use.',
    )
    options = common.options(parser)
    options.add_argument('--output', '-o', type=Path, metavar='<path>', help='Write to this file instead of stdout.')
    options.add_argument(
        '--allow-damaged',
        action='store_true',
        help='Export even when the store fails `verify` (the file may not import).',
    )
    options.add_argument(
        '--signed', action='store_true', help="Add the store's signed checkpoints (`verify-export` checks them)."
    )
    options.add_argument(
        '--key', '-k', type=Path, metavar='<path>', help='With --signed: first sign a new checkpoint with this key.'
    )
    common.store_option(parser)

    parser = common.add_command(
        subparsers,
        'import',
        _import_command,
        'Read an export into the store (created if absent); all or nothing.',
        arguments='FILE',
    )
    common.arguments(parser).add_argument(
        'file', type=Path, metavar='FILE', help="An export (JSON Lines), or '-' for stdin."
    )
    common.options(parser).add_argument(
        '--allow-version-1',
        action='store_true',
        help='Accept an export of format 1 (written before 0.2), which has no closing line: a copy '
        'cut short at a line boundary cannot be told from a whole one.',
    )
    common.store_option(parser)


# --- export -----------------------------------------------------------------------------------


def _export_command(args: argparse.Namespace) -> None:
    if args.key is not None and not args.signed:
        common.fail('--key signs a checkpoint for a signed export: add --signed', 2)
    store = common.store_of(args)
    common.run(
        lambda: _export(
            store,
            args.conversations or None,
            args.output,
            allow_damaged=args.allow_damaged,
            signed=args.signed,
            key=args.key,
        )
    )


async def _export(
    store: str,
    conversation_ids: list[str] | None,
    output: Path | None,
    *,
    allow_damaged: bool = False,
    signed: bool = False,
    key: Path | None = None,
) -> None:
    from eventlog_cli import _render as render
    from eventlog_cli import _views as views
    from eventlog_cli._ids import resolve_conversation

    signing: dict[str, Any] = {}
    if signed:
        from eventlog.checkpoint import Signer

        signing = {'signed': True, 'signer': None if key is None else Signer.from_file(key)}
    async with views.open_store(store, writes=signed) as log:  # a signed export records its checkpoint
        if conversation_ids is not None:
            conversation_ids = [await resolve_conversation(log, c) for c in conversation_ids]
            for conversation_id in conversation_ids:
                await views.conversation_record(log, conversation_id)
        report = await log.verify()
        if not report.ok:
            first = report.problems[0]
            where = f'conversation {first.conversation_id!r}' if first.conversation_id else 'the store'
            if first.seq:
                where += f', entry #{first.seq}'
            problem = render.clean(f'{where}: {first.reason}')
            if not allow_damaged:
                raise views.CliError(
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


# --- import -----------------------------------------------------------------------------------


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


def _import_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _import(store, args.file, allow_version_1=args.allow_version_1))


async def _import(store: str, file: Path, *, allow_version_1: bool = False) -> None:
    """Import `file` (or stdin) into `store`; a store this call had to create (a directory, a
    PostgreSQL schema) is removed again unless the import wrote something into it."""
    from eventlog._files import export_file_size
    from eventlog_cli._store import describe, parse_store

    where = parse_store(store)
    total = None if str(file) == '-' else export_file_size(file)
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
    from eventlog import EventLogError
    from eventlog_cli import _views as views

    async with views.open_store(store, create=True) as log:
        try:
            if total is None:
                return await log.import_(sys.stdin.buffer, allow_version_1=allow_version_1)
            return await _import_file(log, file, total, allow_version_1)
        finally:
            try:
                outcome['empty'] = await log.last_seq() == 0
            except EventLogError:
                outcome['empty'] = False


def progress_bar(*, in_bytes: bool) -> Progress:
    """A transient progress bar on stderr, shown only when stderr is a terminal; counts bytes or items."""
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from eventlog_cli import _render as render

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
    progress = progress_bar(in_bytes=True)
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
    from eventlog_cli._store import PostgresStore, store_exists

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
    import shutil

    from eventlog_cli._store import PostgresStore, drop_schema

    if isinstance(created, PostgresStore):
        drop_schema(created)
        return
    shutil.rmtree(created, ignore_errors=True)
