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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def exported(ref: str) -> Iterator[Path]:
    """The packages of git ref `ref` of this repository, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix='bench-baseline-') as tmp:
        archive = subprocess.run(['git', '-C', str(HERE), 'archive', ref, *PACKAGES], capture_output=True, check=False)
        if archive.returncode:
            raise SystemExit(f'git archive {ref} failed: {archive.stderr.decode(errors="replace").strip()}')
        subprocess.run(['tar', '-x', '-C', tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def run_child(script: Path, tree: Path, args: list[str]) -> Any:
    """Run `script` with `args` measuring `tree`'s packages; the JSON it prints last.

    The child's working directory is `tree` and `PYTHONPATH` names only `tree`, so no path of
    this process (a `PYTHONPATH` naming this tree, its working directory) leaks into it."""
    result = subprocess.run(
        [sys.executable, str(script), *args],
        env={**os.environ, 'PYTHONPATH': str(tree), TREE_VARIABLE: str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f'{script.name} {" ".join(args)} measuring {tree} failed:\n{result.stderr[-3000:]}')
    found = json.loads(result.stdout.strip().splitlines()[-1])
    module = Path(found.get('module', ''))
    if tree.resolve() not in module.resolve().parents:
        raise SystemExit(f'the child measuring {tree} imported the project from {module}')
    return found


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (/proc/loadavg), as printed with every figure."""
    one, five, fifteen = os.getloadavg()
    return f'{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)'


_use_measured_tree()
