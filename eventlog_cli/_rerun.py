"""`eventlog rerun RUN_ID --agent module:attribute`: does this run reproduce with today's agent?

The command re-executes a recorded run with the agent `--agent` names, hermetically
(`capability.rerun.check`: no model request is sent, no tool runs, nothing is written), prints the
report and exits 0 when the run reproduces, 1 when it diverges (the first unit that differs, both
sides shown) and 2 when it could not be checked (a bad `--agent`, an unknown run id, a missing
store...), with one line on stderr. pydantic-ai's agent machinery is imported only here.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from eventlog.errors import EventLogError

if TYPE_CHECKING:
    from capability.rerun import RerunReport

__all__ = ['EXIT_COULD_NOT_CHECK', 'EXIT_DIVERGES', 'EXIT_REPRODUCES', 'run_rerun']

EXIT_REPRODUCES = 0
EXIT_DIVERGES = 1
EXIT_COULD_NOT_CHECK = 2
"""A usage error or a run that cannot be checked: one line on stderr."""


class _Unusable(Exception):
    """What makes the command unable to check the run; its text is the one line printed."""


def run_rerun(store_spec: str, run_id: str, agent_spec: str, *, json: bool = False) -> int:
    """Check run `run_id` (an id or a unique prefix) of the store `store_spec` names by re-executing
    it with the agent `agent_spec` (`module:attribute`) names; print the report (as JSON with
    `json`) and return the exit status (`EXIT_REPRODUCES`, `EXIT_DIVERGES`, `EXIT_COULD_NOT_CHECK`)."""
    try:
        agent = load_agent(agent_spec)
        report = asyncio.run(_check(store_spec, run_id, agent))
    except (_Unusable, EventLogError) as error:
        sys.stderr.write(f'eventlog: {error}\n')
        return EXIT_COULD_NOT_CHECK
    except OSError as error:
        where = f' ({error.filename})' if error.filename else ''
        sys.stderr.write(f'eventlog: {error.strerror or error}{where}\n')
        return EXIT_COULD_NOT_CHECK
    if json:
        import msgspec

        sys.stdout.write(msgspec.json.encode(report).decode() + '\n')
    else:
        sys.stdout.write(report.render() + '\n')
    return EXIT_REPRODUCES if report.reproduces else EXIT_DIVERGES


def load_agent(spec: str) -> Any:
    """The pydantic-ai agent `module:attribute` names (the current directory is importable, as
    for `python -m`); `_Unusable` saying what is wrong otherwise."""
    module_name, colon, attribute = spec.partition(':')
    if not colon or not module_name or not attribute:
        raise _Unusable(f'--agent takes module:attribute (such as myapp.agents:support), not {spec!r}')
    if os.getcwd() not in sys.path and '' not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):
            raise _Unusable(f'--agent {spec}: no module named {module_name!r}') from None
        raise _Unusable(f'--agent {spec}: importing {module_name!r} failed: {error}') from None
    except Exception as error:  # the module's own code failed: one line, as any user error
        raise _Unusable(f'--agent {spec}: importing {module_name!r} failed: {type(error).__name__}: {error}') from None
    found: Any = module
    for name in attribute.split('.'):
        if not hasattr(found, name):
            raise _Unusable(f'--agent {spec}: {module_name!r} has no attribute {attribute!r}')
        found = getattr(found, name)
    from pydantic_ai.agent.abstract import AbstractAgent

    if not isinstance(found, AbstractAgent):
        raise _Unusable(f'--agent {spec}: {attribute!r} is a {type(found).__name__}, not a pydantic-ai Agent')
    return found  # pyright: ignore[reportUnknownVariableType]


async def _check(store_spec: str, run_id: str, agent: Any) -> RerunReport:
    from capability.rerun import check
    from eventlog_cli._ids import resolve_run
    from eventlog_cli._store import open_store

    async with open_store(store_spec) as log:
        resolved = await resolve_run(log, run_id)
        return await check(agent, resolved, log=log)
