"""The guide's (docs/guide.md) semantic search example runs as shown, with the packaged model, and prints what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).parents[2] / 'docs' / 'guide.md'


def test_semantic_example_runs_and_finds_the_paraphrase(tmp_path: Path) -> None:
    [block] = [b for b in re.findall(r'```python\n(.*?)```', GUIDE.read_text(), re.S) if 'e5_embedder' in b]
    done = subprocess.run(
        [sys.executable, '-c', block],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
        env={**os.environ, 'PYTHONPATH': str(GUIDE.parents[1])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'Our dog is called Biscuit.'
