"""The command lines the fast commands take: `eventlog [--store PATH] COMMAND [OPTIONS] [ARG]`
for `conversations`, `info`, `stats`, `verify` and `tail`, read as click reads them.

`parse` recognises only what it can read exactly as the full command line would: anything
else (`--help` after a command, `--`, a clustered short option, a value out of range, an
unknown option or command, `tail --follow`) gives `None`, and the full command line (typer)
takes the whole command, so its errors and help stay its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from eventlog_cli._store import is_postgres
from eventlog_cli.launch import DEFAULT_STORE

__all__ = ['FastCommand', 'parse']


@dataclass
class _Spec:
    flags: dict[str, str]
    """Option spelling -> name, for flags (`--json`)."""
    values: dict[str, str]
    """Option spelling -> name, for options that take a value (`--store PATH`, `-s PATH`)."""
    arguments: int = 0
    """Positional arguments, all required."""
    repeated: frozenset[str] = frozenset()
    """Names of value options that may be given more than once (each value kept)."""


_STORE = {'--store': 'store', '-s': 'store'}
_JSON = {'--json': 'json'}

_SPECS = {
    'conversations': _Spec({**_JSON, '--include-archived': 'include_archived', '--full-ids': 'full_ids'}, _STORE),
    'info': _Spec(_JSON, _STORE, arguments=1),
    'stats': _Spec(_JSON, _STORE),
    'verify': _Spec(_JSON, _STORE),
    'tail': _Spec(
        {**_JSON, '--full-ids': 'full_ids'},
        {
            **_STORE,
            '--lines': 'lines',
            '-n': 'lines',
            '--conversation': 'conversation',
            '-c': 'conversation',
            '--run': 'run',
            '-r': 'run',
            '--kind': 'kind',
            '-k': 'kind',
            '--max-entries': 'max_entries',
        },
        repeated=frozenset({'kind'}),
    ),
}

_INT_MIN = {'lines': 0, 'max_entries': 1}
"""Integer options and their least value (as the full command line declares them)."""


@dataclass
class FastCommand:
    """A command line the fast commands handle."""

    name: str
    store: Path
    arguments: list[str]
    flags: set[str] = field(default_factory=set[str])
    values: dict[str, str] = field(default_factory=dict[str, str])
    ints: dict[str, int] = field(default_factory=dict[str, int])
    repeated: dict[str, list[str]] = field(default_factory=dict[str, list[str]])


def _split(token: str, spec: _Spec) -> tuple[str, str | None] | None:
    """`(option, inline value)` for an option token; `None` when it is not one `spec` knows."""
    if token.startswith('--'):
        name, eq, value = token.partition('=')
        return (name, value if eq else None) if name in spec.flags or name in spec.values else None
    name, value = token[:2], token[2:]
    if name in spec.values:
        return name, value or None
    return (name, None) if name in spec.flags and not value else None


def _global_store(argv: list[str]) -> tuple[str | None, list[str]] | None:
    """The store named before the command (`eventlog --store PATH conversations`) and the rest."""
    store: str | None = None
    while argv and argv[0].startswith('-'):
        split = _split(argv[0], _Spec({}, _STORE))
        if split is None:
            return None
        value = split[1]
        if value is None:
            if len(argv) < 2:
                return None
            value, argv = argv[1], argv[2:]
        else:
            argv = argv[1:]
        store = value
    return store, argv


def parse(argv: list[str]) -> FastCommand | None:
    """The fast command `argv` (the arguments after `eventlog`) asks for, or `None`."""
    found = _global_store(argv)
    if found is None or not found[1] or found[1][0] not in _SPECS:
        return None
    store, (name, *rest) = found
    spec = _SPECS[name]
    command = FastCommand(name, Path(), [])
    while rest:
        token, rest = rest[0], rest[1:]
        if not token.startswith('-') or token == '-':
            command.arguments.append(token)
            continue
        split = _split(token, spec)
        if split is None:
            return None
        option, value = split
        if option in spec.flags:
            if value is not None:
                return None
            command.flags.add(spec.flags[option])
            continue
        if value is None:
            if not rest:
                return None
            value, rest = rest[0], rest[1:]
        key = spec.values[option]
        if key in spec.repeated:
            command.repeated.setdefault(key, []).append(value)
        elif key in _INT_MIN:
            try:
                number = int(value)
            except ValueError:
                return None
            if number < _INT_MIN[key]:
                return None
            command.ints[key] = number
        else:
            command.values[key] = value
    if len(command.arguments) != spec.arguments:
        return None
    store = command.values.pop('store', store)
    if store == '':  # click reads an empty path as `.`: rare enough to leave to it
        return None
    store = store or os.environ.get('EVENTLOG_STORE') or str(DEFAULT_STORE)
    if is_postgres(store):  # a PostgreSQL store: the full command line takes it
        return None
    command.store = Path(store)
    return command
