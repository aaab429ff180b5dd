"""docs/conversations.md's example runs as shown (pydantic-ai-slim 2.66+), and the README's
quickstart continues its conversation the same way."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip('pydantic_ai.conversation_store', reason='conversations need pydantic-ai-slim 2.66+')

ROOT = Path(__file__).parents[2]
PAGE = ROOT / 'docs' / 'conversations.md'


def test_continuing_a_conversation_runs_as_shown(tmp_path: Path) -> None:
    [block] = [b for b in re.findall(r'```python\n(.*?)```', PAGE.read_text(), re.S) if 'store.load(' in b]
    done = subprocess.run(
        [sys.executable, '-c', block],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
        env={'PYTHONPATH': str(ROOT), 'PATH': '/usr/bin:/bin'},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['4', '4', 'True']
