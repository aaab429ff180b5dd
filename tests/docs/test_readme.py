"""The README's code runs as shown (the model swapped for an offline one)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / 'README.md'


def _python_blocks() -> list[str]:
    return re.findall(r'```python\n(.*?)```', README.read_text(), re.S)


def test_standalone_log_example_runs(tmp_path: Path) -> None:
    block = _python_blocks()[1]
    done = subprocess.run(
        [sys.executable, '-c', block], capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "content='Deploy to /srv/app'" in done.stdout
    assert done.stdout.strip().endswith('True')


def test_capability_example_runs_with_an_offline_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = _python_blocks()[0]
    assert "'openai:gpt-5'" in block
    body = block.replace("'openai:gpt-5'", 'TestModel()').replace(
        'result = await agent.run(', 'result = agent.run_sync('
    )
    code = 'from pydantic_ai.models.test import TestModel\n' + body + '\nprint(result.output)\n'
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, 'README.md', 'exec'), namespace)  # the README's own code
    log = namespace['log']
    result = namespace['result']
    replayed = asyncio.run(log.run_messages(result.run_id))  # type: ignore[attr-defined]
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    assert ModelMessagesTypeAdapter.dump_json(replayed) == ModelMessagesTypeAdapter.dump_json(result.all_messages())  # type: ignore[attr-defined]
    log.close()  # type: ignore[attr-defined]
    assert (tmp_path / 'sessions.lmdb' / 'data.mdb').exists()
