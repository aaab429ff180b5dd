"""Measuring another tree's code side by side with this one: the `--baseline REF` of the benches.

A bench that compares the old way with the new one exports the old tree (`git archive REF` of
the packages) into a temporary directory and runs the same measurement in child processes, one
per tree, each child importing the packages of its own tree: the tree named by the environment
variable `EVENTLOG_BENCH_TREE`, which importing this module puts first on `sys.path` (so a bench
imports it before anything of the project). The bench scripts themselves (the workload) are this tree's, so
both trees run exactly the same workload.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent.parent
"""This tree: the repository the bench scripts belong to."""

PACKAGES = ('eventlog', 'search', 'capability', 'eventlog_cli')
"""What an exported tree holds."""

TREE_VARIABLE = 'EVENTLOG_BENCH_TREE'


def measured_tree() -> Path:
    """The tree whose packages this process measures (this one unless a parent said otherwise)."""
    return Path(os.environ.get(TREE_VARIABLE) or HERE)


def _use_measured_tree() -> None:
    """Put the measured tree first on `sys.path`, before any of its packages is imported."""
    tree = str(measured_tree())
    if sys.path[:1] != [tree]:
        sys.path.insert(0, tree)


def export(ref: str, into: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """Write `packages` as they are at git ref `ref` of this repository under `into`; returns `into`."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(['git', '-C', str(HERE), 'archive', ref, *packages], capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(f'git archive {ref} failed: {archive.stderr.decode(errors="replace").strip()}')
    subprocess.run(['tar', '-x', '-C', str(into)], input=archive.stdout, check=True)
    return into


@contextlib.contextmanager
def exported(ref: str) -> Iterator[Path]:
    """The packages of git ref `ref` of this repository, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix='bench-baseline-') as tmp:
        yield export(ref, Path(tmp))


def _check_module(tree: Path, found: dict[str, Any]) -> None:
    module = Path(found.get('module', ''))
    if tree.resolve() not in module.resolve().parents:
        raise SystemExit(f'the child measuring {tree} imported the project from {module}')


def _child_env(tree: Path) -> dict[str, str]:
    return {**os.environ, 'PYTHONPATH': str(tree), TREE_VARIABLE: str(tree)}


class LockStep:
    """Children measuring one tree each, driven in lock step: the parent sends each a step in
    turn and waits for its answer, so the trees' measurements alternate step by step and see
    the same machine state (a noisy neighbour, a busy disk) at the same moments.

    A child runs `serve`; `step` sends it one line and returns the JSON it answers; `close`
    ends every child and returns what each answered last (with the `module` it measured)."""

    def __init__(
        self, script: Path, trees: dict[str, Path], args: list[str], extra: dict[str, list[str]] | None = None
    ) -> None:
        """Start one child per tree: `script` with `args` and the tree's `extra` arguments."""
        self._trees = trees
        self._errors: dict[str, IO[str]] = {}
        self._children: dict[str, subprocess.Popen[str]] = {}
        for label, tree in trees.items():
            errors = self._errors[label] = tempfile.TemporaryFile('w+')  # noqa: SIM115 - closed in close()
            self._children[label] = subprocess.Popen(
                [sys.executable, str(script), *args, *(extra or {}).get(label, [])],
                env=_child_env(tree),
                cwd=tree,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )

    def step(self, label: str, message: str) -> Any:
        """Send `message` to the child measuring `label`'s tree; its answer."""
        child = self._children[label]
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(message + '\n')
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            child.wait()
            errors = self._errors[label]
            errors.seek(0)
            raise SystemExit(f'the child measuring {self._trees[label]} failed:\n{errors.read()[-3000:]}')
        return json.loads(line)

    def close(self) -> dict[str, Any]:
        """End every child; what each answered last."""
        last = {label: self.step(label, 'end') for label in self._children}
        for label, child in self._children.items():
            child.wait()
            self._errors[label].close()
            _check_module(self._trees[label], last[label])
        return last


async def serve(step: Callable[[str], Awaitable[Any]], finish: Callable[[], Any]) -> None:
    """The child's side of `LockStep`: answer each line of stdin with `step(line)` as JSON, and
    the line `end` with `finish()`."""
    while True:
        line = sys.stdin.readline().strip()  # blocking, between steps: nothing else runs meanwhile
        if not line or line == 'end':
            print(json.dumps(finish()), flush=True)
            return
        print(json.dumps(await step(line)), flush=True)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (/proc/loadavg), as printed with every figure."""
    one, five, fifteen = os.getloadavg()
    return f'{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)'


_use_measured_tree()
