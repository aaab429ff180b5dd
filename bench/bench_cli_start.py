"""How long the everyday `eventlog` commands take from a cold start, as a user types them.

Runs each command on the demo store (`eventlog demo`: one conversation of 201 runs and 426
messages, with its search index built) in a real subprocess through the console script (crash
guard included), and prints the median wall and CPU time (user + system) with stdout a pipe (as
scripts and tests see it) and with stdout a terminal (a pseudo-terminal of 120 columns, as a user
sees it, where the views are styled by Rich). A figure at or over the target (0.3 s) is marked
`!`. CPU time is what a command costs whatever else the machine is doing; wall time is what a
user waits, and only means that on a quiet machine.

Bytecode: by default the commands run with every module's bytecode cached in a cache of the
bench's own (`PYTHONPYCACHEPREFIX`, filled by one untimed run of each command first), which
ignores whatever bytecode the installs left, so that two installs compare alike. `--as-installed`
runs them with `PYTHONDONTWRITEBYTECODE=1` and no cache of the bench's own: a module whose
install left no bytecode beside it (`make install` compiles it) is compiled on every start.

Usage: python bench/bench_cli_start.py [RUNS] [--eventlog PATH] [--store PATH] [--as-installed]
(`--eventlog` also times another install's console script, e.g. one built from an older commit,
command by command beside this one's, in the same run; `--store` times the commands on an existing
store instead of a fresh demo store.)
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

TARGET = 0.3
"""Seconds a browsing command may take, start to finish (issue 11)."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_time(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float]:
    """Median wall time and median CPU time (user + system) of running `argv` to completion.

    The exit status must be 0. CPU time is what the command costs whatever else the machine is
    doing; wall time is what a user waits on a quiet machine.
    """
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        before = _cpu()
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        walls.append(time.perf_counter() - began)
        cpus.append(_cpu() - before)
    return statistics.median(walls), statistics.median(cpus)


def median_tty_time(argv: list[str], runs: int, env: dict[str, str], columns: int = 120) -> tuple[float, float]:
    """Median wall time and median CPU time of running `argv` with stdout and stderr a
    pseudo-terminal `columns` wide."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack('HHHH', 40, columns, 0, 0))
        before = _cpu()
        began = time.perf_counter()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        while True:  # drain the terminal, or the command blocks once its buffer is full
            try:
                if not os.read(leader, 65536):
                    break
            except OSError:  # EIO: every writer has closed the terminal
                break
        status = child.wait()
        walls.append(time.perf_counter() - began)
        cpus.append(_cpu() - before)
        os.close(leader)
        if status != 0:
            raise subprocess.CalledProcessError(status, argv)
    return statistics.median(walls), statistics.median(cpus)


def _environment(cache: Path | None) -> dict[str, str]:
    """The commands' environment: bytecode cached in `cache`, or (`None`) only as installed, none written."""
    env = {k: v for k, v in os.environ.items() if k not in ('EVENTLOG_STORE', 'COLUMNS', 'FORCE_COLOR', 'NO_COLOR')}
    env.pop('PYTHONPYCACHEPREFIX', None)
    if cache is None:
        env['PYTHONDONTWRITEBYTECODE'] = '1'
    else:
        env.pop('PYTHONDONTWRITEBYTECODE', None)
        env['PYTHONPYCACHEPREFIX'] = str(cache)
    return env


_PROBE = """
import importlib.util, os, sys
import eventlog_cli._views, eventlog_cli._styled, eventlog.lmdb_log, rich.table, rich.console
missing = sorted(
    name
    for name, module in list(sys.modules.items())
    if (path := getattr(module, '__file__', None)) and path.endswith('.py')
    and not os.path.exists(importlib.util.cache_from_source(path))
)
print(' '.join(missing))
"""
"""Lists the modules a browsing command imports (piped or on a terminal) that have no bytecode
beside their source: each of those is compiled again on every start."""


def uncompiled_modules(script: Path) -> list[str]:
    """The modules the browsing commands of `script`'s install import without cached bytecode."""
    python = script.parent / 'python'
    env = _environment(None)
    done = subprocess.run([str(python), '-c', _PROBE], check=True, capture_output=True, text=True, env=env)
    return done.stdout.split()


def _figure(seconds: float) -> str:
    return f'{seconds:>6.3f}s' + ('!' if seconds >= TARGET else ' ')


def main() -> None:
    args = sys.argv[1:]
    if '-h' in args or '--help' in args:
        print(__doc__)
        return
    scripts = [Path(sys.executable).parent / 'eventlog']
    store: Path | None = None
    cached = '--as-installed' not in args
    args = [a for a in args if a != '--as-installed']
    for option in ('--eventlog', '--store'):
        if option in args:
            at = args.index(option)
            if option == '--eventlog':
                scripts.append(Path(args[at + 1]))
            else:
                store = Path(args[at + 1])
            del args[at : at + 2]
    if len(args) > 1 or (args and not args[0].isdigit()):
        raise SystemExit(
            f'usage: python bench/bench_cli_start.py [RUNS] [--eventlog PATH] [--store PATH] [--as-installed]; got {args}'
        )
    runs = int(args[0]) if args else 5
    print(f'load average before the run: {" ".join(f"{n:.2f}" for n in os.getloadavg())}')
    with tempfile.TemporaryDirectory() as tmp:
        env = _environment(Path(tmp) / 'bytecode' if cached else None)
        if store is None:
            store = Path(tmp) / 'demo.lmdb'
            subprocess.run([str(scripts[0]), 'demo', '--store', str(store)], check=True, capture_output=True, env=env)
        listing = subprocess.run(
            [str(scripts[0]), 'conversations', '--json', '--store', str(store)],
            check=True,
            capture_output=True,
            env=env,
        )
        conversation = json.loads(listing.stdout)[0]['conversation_id']
        commands = [
            ['--help'],
            ['--version'],
            ['conversations', '--help'],
            ['conversations', '--store', str(store)],
            ['conversations', '--json', '--store', str(store)],
            ['runs', '--store', str(store)],
            ['info', conversation, '--store', str(store)],
            ['stats', '--store', str(store)],
            ['verify', '--store', str(store)],
            ['tail', '--store', str(store)],
            ['tail', '--json', '--store', str(store)],
            ['show', conversation, '--store', str(store)],
            ['replay', '--last', '--store', str(store)],
            ['context', conversation, '--store', str(store)],
            ['search', 'detail', '--all', '--store', str(store)],
            ['search', 'detail', '--all', '--json', '--store', str(store)],
        ]
        answered: set[tuple[int, int]] = set()
        # fill the bytecode cache (what an installed package has from the start), and learn which
        # commands an install answers at all (an older one may lack `--version`)
        for number, script in enumerate(scripts):
            for index, command in enumerate(commands):
                done = subprocess.run([str(script), *command], capture_output=True, env=env)
                if done.returncode == 0:
                    answered.add((number, index))
        bytecode = 'cached by the bench' if cached else 'as installed, none written'
        print(f'median of {runs} cold starts on {store}; bytecode {bytecode}')
        print(f'target: under {TARGET} s wall on a quiet machine; ! marks a figure at or over it')
        for number, script in enumerate(scripts):
            print(f'  [{number}] {script}')
            if not cached and (missing := uncompiled_modules(script)):
                shown = ', '.join(missing[:8]) + (f' and {len(missing) - 8} more' if len(missing) > 8 else '')
                print(
                    f'      warning: {len(missing)} modules it imports have no bytecode and are compiled on every '
                    f'start ({shown}); `make install` compiles them'
                )
        columns = f' {"wall":>8} {"cpu":>8} {"tty wall":>8} {"tty cpu":>8} '
        print(f'  {"command":<31}' + ''.join(columns for _ in scripts))
        for index, command in enumerate(commands):
            label = ' '.join(part for part in command if part not in (str(store), '--store'))
            row = f'  eventlog {label:<22}'
            for number, script in enumerate(scripts):  # side by side, so that both see the same load
                if (number, index) not in answered:
                    row += f' {"n/a":>8} {"n/a":>8} {"n/a":>8} {"n/a":>8} '
                    continue
                wall, cpu = median_time([str(script), *command], runs, env)
                tty_wall, tty_cpu = median_tty_time([str(script), *command], runs, env)
                row += f' {_figure(wall)} {_figure(cpu)} {_figure(tty_wall)} {_figure(tty_cpu)}'
            print(row, flush=True)
    print(f'load average after the run: {" ".join(f"{n:.2f}" for n in os.getloadavg())}')
    print('(`search` ranks with numpy and shows its hits from their stored payloads, without pydantic-ai;')
    print(' wall and cpu: stdout a pipe; tty: stdout a 120-column pseudo-terminal; n/a: the install does')
    print(' not answer the command)')


if __name__ == '__main__':
    main()
