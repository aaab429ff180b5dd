"""The guide's (docs/guide.md) erasure, retention and redaction example runs as shown and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).parents[2] / 'docs' / 'guide.md'


def test_erasure_example_runs(tmp_path: Path) -> None:
    blocks = [b for b in re.findall(r'```python\n(.*?)```', GUIDE.read_text(), re.S) if 'redact=redact_cards' in b]
    assert len(blocks) == 1
    done = subprocess.run(
        [sys.executable, '-c', blocks[0]], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    transcript, erased, replay, retained = done.stdout.splitlines()
    assert '"content":"Pay with [CARD]"' in transcript and '"eventlog_redacted":"redact_cards"' in transcript
    assert '4111' not in transcript
    assert erased == '[2, 3] True'
    assert replay.count('[erased: the content of this message was removed by erasure entry 5]') == 2
    assert 'Pay with' not in replay
    assert retained == '{}'
