"""The guide's (docs/guide.md) durable-run example runs as shown, twice in one directory (the second time the
finished run is replayed from the journal, not executed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).parents[2] / 'docs' / 'guide.md'


def test_durability_example_runs(tmp_path: Path) -> None:
    blocks = [b for b in re.findall(r'```python\n(.*?)```', GUIDE.read_text(), re.S) if 'EventLogDurability' in b]
    assert len(blocks) == 1
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, '-c', blocks[0]], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ['True True']
    assert (tmp_path / 'runs.lmdb' / 'data.mdb').exists()
