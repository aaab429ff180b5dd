"""`eventlog serve`: the read-only web viewer (docs/web.md; the `web` extra)."""

from __future__ import annotations

import argparse
import sys

from eventlog_cli.commands import _common as common

__all__ = ['register']


def register(subparsers: common.Subparsers) -> None:
    """Add `serve` to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'serve',
        _serve_command,
        'Serve a read-only web viewer of the store: conversations, transcripts, run timelines, search, verify.\n\n'
        'Every message shows its entry number and every entry has a stable URL (`/e/N`). Listens on '
        '127.0.0.1 unless told otherwise; stop it with Ctrl-C (docs/web.md). Needs the `web` extra.',
    )
    common.store_option(parser)
    options = common.options(parser)
    options.add_argument(
        '--host',
        default='127.0.0.1',
        metavar='<address>',
        help='The address to listen on; any but a loopback address needs a token (one is made if not given).',
    )
    options.add_argument(
        '--port',
        type=common.at_least(0, 65535),
        default=8765,
        metavar='<n>',
        help='The port to listen on (0: any free one).',
    )
    options.add_argument(
        '--token', metavar='<token>', help='Require this token on every request (it is printed in the URL).'
    )


def _serve_command(args: argparse.Namespace) -> None:
    store = common.store_of(args)
    common.run(lambda: _serve(store, args.host, args.port, args.token))


async def _serve(store: str, host: str, port: int, token: str | None) -> None:
    from eventlog_cli._views import CliError

    try:
        from eventlog_cli.web.serve import serve as serve_viewer
    except ImportError as exc:
        raise CliError(
            f"eventlog serve needs the extra 'web' (in a clone of this repository: pip install '.[web]') ({exc})"
        ) from None

    def announce(line: str) -> None:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()

    await serve_viewer(store, host=host, port=port, token=token, announce=announce)
