"""`eventlog demo`: writes a demo store (the script is `eventlog_cli.demo`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eventlog_cli.commands import _common as common

__all__ = ['demo_target', 'register']


def register(subparsers: common.Subparsers) -> None:
    """Add `demo` to `eventlog`."""
    parser = common.add_command(
        subparsers,
        'demo',
        _demo_command,
        'A long agent conversation that compacts its context, then recalls an early detail word for word.\n\n'
        'Offline and deterministic unless --model is given. Without --store, an existing '
        f'./{common.DEMO_STORE} is left alone and the demo writes to a fresh name next to it.',
    )
    options = common.options(parser)
    options.add_argument(
        '--store',
        '-s',
        type=Path,
        metavar='<path>',
        help=f'Where to write the demo store (default ./{common.DEMO_STORE}).',
    )
    options.add_argument('--overwrite', action='store_true', help='Replace the store if it exists.')
    options.add_argument(
        '--model', metavar='<model>', help="Ask the final question to this pydantic-ai model (e.g. 'openai:gpt-5')."
    )
    options.add_argument(
        '--exchanges', type=common.at_least(12), default=200, metavar='<n>', help='How long the conversation is.'
    )
    options.add_argument(
        '--sessions', type=common.at_least(1, 7), default=4, metavar='<n>', help='Over how many sessions.'
    )


def _demo_command(args: argparse.Namespace) -> None:
    import asyncio

    from eventlog import EventLogError
    from eventlog_cli import _render as render
    from eventlog_cli.demo import DemoError, run_demo

    store: Path | None = args.store
    if store is not None and str(store).lower().startswith(('postgresql:', 'postgres:')):
        common.fail(
            'the demo writes a new LMDB store directory: give --store a path (then `eventlog import` copies it)'
        )
    target = demo_target(store, args.overwrite)
    try:
        asyncio.run(
            run_demo(
                target, console=render.console(), exchanges=args.exchanges, sessions=args.sessions, model=args.model
            )
        )
    except (DemoError, EventLogError) as exc:
        common.fail(str(exc))


def demo_target(store: Path | None, overwrite: bool) -> Path:
    """Where the demo writes: never over an existing store unless `overwrite`, never over a non-store."""
    import shutil

    target = Path(common.DEMO_STORE) if store is None else store
    if not target.exists():
        return target
    if overwrite:
        if not (target.is_dir() and (target / 'data.mdb').exists()):
            common.fail(f'{target} exists and is not an eventlog store; refusing to replace it')
        shutil.rmtree(target)
        return target
    if store is not None:
        common.fail(f'{target} already exists; pass --overwrite to replace it, or choose another --store')
    for number in range(2, 1000):
        candidate = target.with_name(f'{target.stem}-{number}{target.suffix}')
        if not candidate.exists():
            sys.stderr.write(
                f'{target} exists (an earlier demo); writing to {candidate} instead (--overwrite replaces it)\n'
            )
            return candidate
    common.fail(f'{target} and its numbered alternatives exist; remove some or pass --overwrite')
