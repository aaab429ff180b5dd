"""The `eventlog` command line: one `argparse` parser, built from the command groups.

Each group module of `eventlog_cli.commands` (`GROUPS`) has a `register(subparsers)` that adds
its commands, each with the function that runs it. Building the parser imports only those
modules and `argparse`: a command imports what it needs (the log, Rich, asyncio, pydantic-ai)
when it runs, so `eventlog --help` and the listing commands start fast.

`run(argv)` runs a command line in this process and returns its exit status; the console script
(`eventlog_cli.launch.main`) runs it in a forked child behind a crash guard. Usage errors (an
unknown option or command, a bad value, a missing argument) are one line on stderr and status 2;
errors a user can cause while the command runs are one line and status 1; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import IO, Any, NoReturn, cast

__all__ = ['GROUPS', 'CommandParser', 'build_parser', 'first_sentence', 'run', 'version']

GROUPS = ('browse', 'search', 'manage', 'transfer', 'audit', 'serve', 'demo')
"""The modules of `eventlog_cli.commands`, in the order their commands are listed."""

DESCRIPTION = 'Browse, replay, search, verify and export an event log of pydantic-ai agent runs.'

_HELP_WIDTH = 80
"""Help is wrapped to the terminal, at most this wide (as click and git do)."""


def first_sentence(text: str) -> str:
    """The first sentence of a help text (up to its first full stop or blank line), on one line."""
    paragraph = ' '.join(text.strip().split('\n\n', 1)[0].split())
    stop = paragraph.find('. ')
    return (paragraph if stop < 0 else paragraph[:stop]).rstrip('.')


def _width() -> int:
    return max(40, min(shutil.get_terminal_size().columns, _HELP_WIDTH) - 2)


class _Formatter(argparse.HelpFormatter):
    """Help as `Usage: ...`, paragraphs rewrapped to the terminal, defaults shown as `[default: X]`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=26, width=_width())

    def add_usage(
        self,
        usage: str | None,
        actions: Any,
        groups: Any,
        prefix: str | None = None,
    ) -> None:
        """The usage line, headed `Usage: `."""
        super().add_usage(usage, actions, groups, 'Usage: ' if prefix is None else prefix)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        # `-s, --store <path|url>`: the short spelling first, the value named once (as click writes it).
        text = ', '.join(sorted(action.option_strings, key=lambda option: option.startswith('--')))
        if action.nargs != 0:
            text += ' ' + self._format_args(action, action.dest.upper())
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [' '.join(p.split()) for p in textwrap.dedent(text).strip().split('\n\n')]
        return '\n\n'.join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent) for p in paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ''
        default = action.default
        if (
            action.option_strings
            and default not in (None, False, True, argparse.SUPPRESS)
            and not isinstance(default, list)
            and '[default' not in help
            and '%(default)' not in help
        ):
            help += ' [default: %(default)s]'
        return help


class CommandParser(argparse.ArgumentParser):
    """A parser whose help lists `Arguments:` then `Options:`, and whose usage errors are one line
    on stderr naming the help to read, with exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault('formatter_class', _Formatter)
        kwargs['add_help'] = False
        super().__init__(*args, **kwargs)
        self.arguments = self.add_argument_group('Arguments')
        self.options = self.add_argument_group('Options')
        self.options.add_argument('-h', '--help', action='help', help='Show this message and exit.')

    def error(self, message: str) -> NoReturn:
        """Report a usage error in one line and exit with status 2."""
        if message.startswith('argument COMMAND: invalid choice: '):
            message = 'no such command ' + message.removeprefix('argument COMMAND: invalid choice: ').split(' (')[0]
        sys.stderr.write(f"eventlog: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


class _MainParser(CommandParser):
    """`eventlog` itself: its help lists each command with the first sentence of its help."""

    commands: dict[str, str]

    def format_help(self) -> str:
        """The usage, the description, the options, then `Commands:` each with its first sentence."""
        text = super().format_help().rstrip('\n') + '\n\nCommands:\n'
        width = _width()
        names = max(len(name) for name in self.commands)
        for name, summary in self.commands.items():
            lines = textwrap.wrap(summary, max(20, width - names - 4)) or ['']
            text += f'  {name.ljust(names)}  {lines[0]}\n'
            text += ''.join(f'  {" " * names}  {line}\n' for line in lines[1:])
        return text


def version() -> str:
    """The installed package's version (`eventlog --version`)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed('pydantic-ai-eventlog')
    except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        return 'unknown (not installed)'


class _Version(argparse.Action):
    """`--version`: print the version and exit (the metadata is read only then)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        sys.stdout.write(f'eventlog {version()}\n')
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: `eventlog [--store STORE] COMMAND ...`, every group's commands on it."""
    parser = _MainParser(
        prog='eventlog',
        usage='eventlog [OPTIONS] COMMAND [ARGS]...',
        description=DESCRIPTION,
    )
    parser.options.add_argument(
        '--store',
        '-s',
        dest='global_store',
        metavar='<path|url>',
        help='The store (a directory, or postgresql://user@host/db#schema), for any command '
        '(as if given after it, where it can also go).',
    )
    from eventlog_cli.commands._common import keys_option, read_only_option

    keys_option(parser, dest='global_keys')
    read_only_option(parser, dest='global_read_only')
    parser.options.add_argument('--version', action=_Version, nargs=0, help='Print the version and exit.')
    subparsers = parser.add_subparsers(
        title='Commands', dest='command', metavar='COMMAND', parser_class=CommandParser, help=argparse.SUPPRESS
    )
    for group in GROUPS:
        importlib.import_module(f'eventlog_cli.commands.{group}').register(subparsers)
    parser.commands = {name: first_sentence(p.description or '') for name, p in subparsers.choices.items()}
    return parser


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser by name, in the order `eventlog --help` lists them."""
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
            return cast('dict[str, argparse.ArgumentParser]', dict(action.choices))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return {}


def run(argv: Sequence[str]) -> int:
    """Run `eventlog ARGV` (the arguments after `eventlog`) in this process; its exit status."""
    argv = list(argv)
    if any('\x00' in arg for arg in argv):  # only in-process callers can pass one
        sys.stderr.write('eventlog: an argument holds a NUL character, which no path or URL can hold\n')
        return 2
    parser = build_parser()
    try:
        if not argv:  # bare `eventlog`: the help is the answer
            sys.stdout.write(parser.format_help())
            return 0
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error('name a command')
        keys = getattr(args, 'keys', None) or args.global_keys
        if keys is not None:
            return _with_keys(args, keys)
        if getattr(args, 'read_only', False) or args.global_read_only:
            return _read_only(args)
        return args.handler(args) or 0
    except SystemExit as exc:
        return _status(exc.code, sys.stderr)
    except KeyboardInterrupt:
        return 130


def _with_keys(args: argparse.Namespace, keys: str) -> int:
    """Run the command with every store it opens opened with the keyring `keys` (`--keys`), through
    the variable `eventlog_cli._store.open_store` reads, restored afterwards."""
    from eventlog_cli._store import KEYS_ENV

    before = os.environ.get(KEYS_ENV)
    os.environ[KEYS_ENV] = keys
    try:
        if getattr(args, 'read_only', False) or args.global_read_only:
            return _read_only(args)
        return args.handler(args) or 0
    finally:
        if before is None:
            del os.environ[KEYS_ENV]
        else:
            os.environ[KEYS_ENV] = before


def _read_only(args: argparse.Namespace) -> int:
    """Run the command with every store it opens opened read-only (`--read-only`), through the
    variable `eventlog_cli._store.open_store` reads, restored afterwards."""
    from eventlog_cli._store import READ_ONLY_ENV

    before = os.environ.get(READ_ONLY_ENV)
    os.environ[READ_ONLY_ENV] = '1'
    try:
        return args.handler(args) or 0
    finally:
        if before is None:
            del os.environ[READ_ONLY_ENV]
        else:
            os.environ[READ_ONLY_ENV] = before


def _status(code: object, stderr: IO[str]) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    stderr.write(f'{code}\n')
    return 1


def main() -> NoReturn:
    """Run the command line on `sys.argv` in this process (no crash guard: `eventlog_cli.launch`)."""
    sys.exit(run(sys.argv[1:]))


if __name__ == '__main__':
    main()
