"""The guide's (docs/guide.md) audit example runs as shown, in its own process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).parents[2] / 'docs' / 'guide.md'


def test_the_checkpoint_example_runs(tmp_path: Path) -> None:
    [block] = [b for b in re.findall(r'```python\n(.*?)```', GUIDE.read_text(), re.S) if 'log.checkpoint(' in b]
    done = subprocess.run(
        [sys.executable, '-c', block], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'True'
    written = json.loads((tmp_path / 'checkpoint-1.json').read_bytes())
    assert written['type'] == 'checkpoint'
    assert [head[0] for head in written['checkpoint']['conversations']] == ['user-42']
