"""docs/durability.md's "Does this run reproduce?" example runs as shown and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).parents[2] / 'docs' / 'durability.md'


def test_the_rerun_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    text = PAGE.read_text()
    section = text[text.index('## Does this run reproduce?') :]
    example = re.findall(r'```python\n(.*?)```', section, re.S)[0]
    shown = re.findall(r'```text\n(.*?)```', section, re.S)[0].splitlines()
    done = subprocess.run(
        [sys.executable, '-c', example], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ['True None', 'False 1']
    assert lines[2:4] == shown[:2]  # the report's heading and reason, as the page shows them
    assert [line.split('[')[0] for line in lines[4:8]] == [line.split('[')[0] for line in shown[2:6]]
    assert (tmp_path / 'runs.lmdb' / 'data.mdb').exists()
