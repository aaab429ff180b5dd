"""The README's quickstart runs as is, its first screen says how to install, demo and test, and
every documentation page is reachable (`docs/index.md` links each one; no link is broken). The
log-alone example of docs/guide.md runs as shown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / 'README.md'
GUIDE = ROOT / 'docs' / 'guide.md'


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r'```python\n(.*?)```', page.read_text(), re.S)


def _run(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, '-c', block],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
        env={'PYTHONPATH': str(ROOT), 'PATH': '/usr/bin:/bin'},
    )


def test_the_quickstart_runs_as_is(tmp_path: Path) -> None:
    pytest.importorskip('pydantic_ai.conversation_store', reason='the quickstart needs pydantic-ai-slim 2.66+')
    block = _python_blocks(README)[0]
    assert 'await ' not in block.split('async def main', 1)[0]  # no top-level await
    seen: list[int] = []
    for _ in range(3):  # again on the store the first run left: the conversation goes on
        done = _run(block, tmp_path)
        assert done.returncode == 0, done.stderr
        count, *rest = done.stdout.splitlines()
        assert rest == ['True', 'True']
        seen.append(int(count))
    assert seen[0] == 0 < seen[1] < seen[2]
    assert (tmp_path / 'sessions.lmdb' / 'data.mdb').exists()


def test_the_first_screen_says_how_to_install_run_the_demo_and_test() -> None:
    first_screen = '\n'.join(README.read_text().splitlines()[:30])
    assert 'pip install' in first_screen
    assert '$ make demo' in first_screen and '$ make test' in first_screen
    assert README.read_text().index('## Quickstart') < README.read_text().index('## A tour')
    assert len(README.read_text().splitlines()) < 300


def test_every_doc_is_linked_from_the_index_and_no_link_is_broken() -> None:
    index = (ROOT / 'docs' / 'index.md').read_text()
    linked = set(re.findall(r'\]\(([\w.-]+\.md)\)', index))
    assert {page.name for page in (ROOT / 'docs').glob('*.md')} - {'index.md'} <= linked
    for page in [README, *(ROOT / 'docs').glob('*.md')]:
        for target in re.findall(r'\]\(([^)#:]+?\.(?:md|png))(?:#[\w-]+)?\)', page.read_text()):
            assert (page.parent / target).exists(), f'{page.name} links to {target}, which does not exist'


def test_the_log_on_its_own_runs_as_shown(tmp_path: Path) -> None:
    [block] = [
        b
        for b in _python_blocks(GUIDE)
        if "content='Deploy to /srv/app'" not in b and 'InMemoryEventLog()  # or LmdbEventLog(' in b
    ]
    done = _run(block, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "content='Deploy to /srv/app'" in done.stdout
    assert done.stdout.strip().endswith('True')
