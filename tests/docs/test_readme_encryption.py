"""The README's encryption example runs as shown (docs/encryption.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_encryption_example_runs_as_shown(tmp_path: Path) -> None:
    blocks = re.findall(r'```python\n(.*?)```', (ROOT / 'README.md').read_text(), re.S)
    (block,) = [b for b in blocks if 'FileKeyProvider' in b]
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
    assert done.stdout.splitlines() == ['True', 'False', 'False', 'True']
    assert (tmp_path / 'keyring' / 'kek').exists()
    for path in (tmp_path / 'private.lmdb').iterdir():
        assert b'4111' not in path.read_bytes()
