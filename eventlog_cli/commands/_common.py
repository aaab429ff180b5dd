"""What every command group shares: the options they all take (`--store`, `--json`,
`--full-ids`), value types that say what they expect, and the runner that turns a command's
coroutine into an exit status with every error a user can cause on one line.

Building the parser imports only this module and `argparse`; what a command needs to run
(the log, Rich, asyncio, pydantic-ai) is imported by the command when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

__all__ = [
    'DEFAULT_STORE',
    'DEMO_STORE',
    'Handler',
    'Subparsers',
    'add_command',
    'arguments',
    'at_least',
    'fail',
    'full_ids_option',
    'is_lmdb',
    'json_option',
    'keys_option',
    'options',
    'read_only_option',
    'run',
    'store_of',
    'store_option',
]

T = TypeVar('T')

DEFAULT_STORE = 'eventlog.lmdb'
"""The store used when neither `--store` nor `$EVENTLOG_STORE` names one."""

DEMO_STORE = 'eventlog-demo.lmdb'
"""Where `eventlog demo` writes unless told otherwise."""

Subparsers = Any
"""What a group module's `register` adds its commands to (argparse's private `_SubParsersAction`)."""

Handler = Callable[[argparse.Namespace], int | None]
"""A command's implementation: reads the parsed arguments, does the work, returns its exit
status (`None`: 0)."""


def add_command(
    subparsers: Subparsers, name: str, handler: Handler, doc: str, *, arguments: str = ''
) -> argparse.ArgumentParser:
    """Add the command `name` to `subparsers` (what `eventlog_cli.main` hands each group's
    `register`): its help is `doc` (the first paragraph's first sentence lists it in
    `eventlog --help`), its usage line `eventlog NAME [OPTIONS] ARGUMENTS`, and `handler` runs it."""
    from eventlog_cli.main import CommandParser, first_sentence

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        prog=f'eventlog {name}',
        help=first_sentence(doc),
        description=doc,
        usage=f'eventlog {name} [OPTIONS]' + (f' {arguments}' if arguments else ''),
        add_help=False,
    )
    assert isinstance(parser, CommandParser)
    parser.set_defaults(handler=handler)
    return parser


def arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:  # pyright: ignore[reportPrivateUsage]
    """The parser's group of positional arguments (shown as `Arguments:` in its help)."""
    from eventlog_cli.main import CommandParser

    assert isinstance(parser, CommandParser)
    return parser.arguments


def options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:  # pyright: ignore[reportPrivateUsage]
    """The parser's group of options (shown as `Options:` in its help)."""
    from eventlog_cli.main import CommandParser

    assert isinstance(parser, CommandParser)
    return parser.options


def store_option(parser: argparse.ArgumentParser) -> None:
    """`--store/-s`: the store a command works on (default `$EVENTLOG_STORE`, else `./eventlog.lmdb`)."""
    options(parser).add_argument(
        '--store',
        '-s',
        metavar='<path|url>',
        default=None,
        help='The store: a directory, or a PostgreSQL URL with the schema after # '
        '(postgresql://user@host/db#schema; schema eventlog when none is given). '
        f'[env var: EVENTLOG_STORE; default: {DEFAULT_STORE}]',
    )
    keys_option(parser)
    read_only_option(parser)


def keys_option(parser: argparse.ArgumentParser, *, dest: str = 'keys') -> None:
    """`--keys`: the keyring of an encrypted store (docs/encryption.md)."""
    options(parser).add_argument(
        '--keys',
        dest=dest,
        metavar='<path>',
        default=None,
        help='The keyring of an encrypted store (from `eventlog keygen --encryption`): needed to read its '
        'messages and to write it; without it an encrypted store opens read-only (records, verify). '
        '[env var: EVENTLOG_KEYS]',
    )


def read_only_option(parser: argparse.ArgumentParser, *, dest: str = 'read_only') -> None:
    """`--read-only`: open the store for reading only (reading commands work, writing ones refuse)."""
    options(parser).add_argument(
        '--read-only',
        dest=dest,
        action='store_true',
        help='Open the store read-only, as a write-protected copy is opened by itself: reading '
        'commands work, writing ones refuse. [env var: EVENTLOG_READ_ONLY=1]',
    )


def json_option(parser: argparse.ArgumentParser, help: str = 'Print JSON instead of a table.') -> None:
    """`--json`."""
    options(parser).add_argument('--json', dest='as_json', action='store_true', help=help)


def full_ids_option(parser: argparse.ArgumentParser) -> None:
    """`--full-ids`."""
    options(parser).add_argument(
        '--full-ids', action='store_true', help='Show run and conversation ids whole instead of abbreviated.'
    )


def store_of(args: argparse.Namespace) -> str:
    """The store a command line names: `--store` after the command, else before it, else
    `$EVENTLOG_STORE`, else the default."""
    named: str | None = getattr(args, 'store', None) or getattr(args, 'global_store', None)
    return named if named is not None else os.environ.get('EVENTLOG_STORE') or DEFAULT_STORE


def at_least(least: float, most: float | None = None, *, kind: type[int] | type[float] = int) -> Callable[[str], Any]:
    """An argparse type: a whole number (or with `kind=float`, a number of seconds) in
    `least..most`, refused in one line otherwise."""
    what = 'a whole number' if kind is int else 'a number'

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'{text!r} is not {what}') from None
        if value < least or (most is not None and value > most):
            bound = f'at least {least}' if most is None else f'from {least} to {most}'
            raise argparse.ArgumentTypeError(f'{text} is not {bound}')
        return value

    convert.__name__ = kind.__name__
    return convert


def fail(message: str, code: int = 1) -> NoReturn:
    """End the command: `message` on one line of stderr, exit status `code`."""
    sys.stderr.write(f'eventlog: {message}\n')
    raise SystemExit(code)


class _Suspended(Exception):
    """A coroutine driven without an event loop waited for something: it needs one."""


def _drive(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its result without an event loop. The log's LMDB coroutines never wait
    while asyncio is not loaded (`eventlog._threads`); one that does raises `_Suspended`."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value
    work.close()
    raise _Suspended


def run(work: Callable[[], Coroutine[Any, Any, T]], *, loop_free: bool = False) -> T:
    """Run the coroutine `work()` makes, turning every error a user can cause into one line and
    status 1. With `loop_free` (an LMDB store, a command that never sleeps), it is driven without
    asyncio, which takes tens of milliseconds to import; should it wait for something after
    all, it runs again under an event loop (before it printed anything: the reads come first)."""
    try:
        if loop_free and 'asyncio' not in sys.modules:
            try:
                return _drive(work())
            except _Suspended:
                pass
        import asyncio

        return asyncio.run(work())
    except Exception as exc:
        from eventlog.errors import EventLogError
        from eventlog_cli._views import CliError

        if isinstance(exc, CliError | EventLogError):
            fail(str(exc))
        if isinstance(exc, OSError):
            where = f' ({exc.filename})' if exc.filename else ''
            fail(f'{exc.strerror or exc}{where}')
        raise


def is_lmdb(store: str) -> bool:
    """Whether `store` names an LMDB directory (not a PostgreSQL URL)."""
    from eventlog_cli._store import is_postgres

    return not is_postgres(store)
