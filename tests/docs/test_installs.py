"""What the Makefile installs: no CUDA build in any venv, and a demo that needs only `.[cli]`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_GPU_PREFIXES = ('nvidia-', 'nvidia_', 'triton')


def _gpu_distributions(python: Path) -> list[str]:
    """The names of the CUDA-only distributions installed for `python`."""
    script = (
        'import importlib.metadata as m\n'
        'print("\\n".join(sorted({(d.metadata["Name"] or "").lower() for d in m.distributions()})))\n'
    )
    names = subprocess.run([str(python), '-c', script], capture_output=True, text=True, check=True).stdout.split()
    return [name for name in names if name.startswith(_GPU_PREFIXES)]


@pytest.mark.parametrize('venv', ['.venv', '.venv-latest'])
def test_no_cuda_build_in_the_project_venvs(venv: str) -> None:
    """`make test` builds both venvs with the CPU torch: a CUDA build (gigabytes of nvidia-* and
    triton) in either means an install step let the resolver replace it."""
    python = ROOT / venv / 'bin' / 'python'
    if not python.exists():
        # `make test` creates .venv-latest after test-ref: test-latest, its last stage, sees both.
        last_stage = Path(sys.prefix).resolve() == (ROOT / '.venv-latest').resolve()
        if os.environ.get('CI') and last_stage:
            pytest.fail(f'{venv} is missing: `make test` creates it before test-latest')
        pytest.skip(f'{venv} is not installed yet (`make test` creates it; test-latest checks both)')
    assert _gpu_distributions(python) == []


def test_no_cuda_build_in_this_interpreter() -> None:
    """The interpreter running the tests, whichever venv it is."""
    assert _gpu_distributions(Path(sys.executable)) == []


def test_make_demo_installs_only_the_cli_extra() -> None:
    """`make demo` builds its own small venv with `.[cli]`, never the development environment."""
    make = shutil.which('make')
    assert make is not None, 'make is needed to read the Makefile'
    plan = subprocess.run(
        [make, '--no-print-directory', '-n', '-B', 'demo'], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    installs = [line for line in plan if ' install ' in line]
    assert installs, plan
    assert all("'.[cli]'" in line and '.venv-demo/' in line for line in installs), installs
    assert not any(word in '\n'.join(plan) for word in ('torch', 'dev,', 'semantic', '.venv/bin', '.venv-latest'))
    assert plan[-1].endswith('.venv-demo/bin/eventlog demo')
