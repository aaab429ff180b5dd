"""The memory of `eventlog serve` showing a conversation that holds one 100 MB message (issue 42):
every page that shows it reads the first bytes of its payload, not the whole of it, and the
server's peak resident memory stays under `RSS_LIMIT` (the original viewer peaked near 700 MB).

A real agent run records the message; a real `eventlog serve` subprocess is asked for every page
over HTTP, and its forked worker's peak resident set (`VmHWM`) is read from /proc. The pages
still say the message is too large to show, show its start, and link its full payload."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from webtools import serving

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog

pytestmark = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')

RSS_LIMIT_KB = 400 * 1024
"""The server's peak resident set may not pass 400 MB (the map's pages of the message included)."""
LINE = 'the quick zebra jumps over the lazy dog near the river bank\n'
BIG_TEXT = 'HEADWORD ' + LINE * (100_000_000 // len(LINE))
"""A prompt of 100 MB."""

_BUILD = """
import asyncio, sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
from test_web_memory import build
asyncio.run(build(Path(sys.argv[1])))
"""


async def build(path: Path) -> None:
    """One run of a real agent whose prompt is `BIG_TEXT` (run in a process of its own, so that
    the test's process does not hold the text)."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('a short answer about zebras')])

    log = LmdbEventLog(path)
    try:
        agent = Agent(FunctionModel(reply), name='big', capabilities=[EventLogPersistence(log)])
        await agent.run(BIG_TEXT, conversation_id='big-conv', run_id='big-run')
    finally:
        log.close()


@pytest.fixture(scope='module')
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('big') / 'store.lmdb'
    script = _BUILD.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, '-c', script, str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return path


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f'/proc/{pid}/task/{pid}/children').read_text().split()]


def _peak_kb(pid: int) -> int:
    """The process's peak resident set (`VmHWM`), in kB."""
    line = next(ln for ln in Path(f'/proc/{pid}/status').read_text().splitlines() if ln.startswith('VmHWM:'))
    return int(line.split()[1])


def _big_seq(path: Path) -> int:
    """The entry of the big prompt: the first after its run's start."""

    async def find() -> int:
        log = LmdbEventLog(path, read_only=True)
        try:
            run = await log.get_run('big-run')
        finally:
            log.close()
        assert run is not None
        return run.start_seq + 1

    return asyncio.run(find())


def test_every_page_showing_a_100_mb_message_stays_under_400_mb(big_store: Path) -> None:
    seq = _big_seq(big_store)
    showing = ['/c/big-conv', '/context/big-conv', '/r/big-run', f'/e/{seq}']
    pages: dict[str, str] = {}
    with serving(big_store) as running:
        (worker,) = _children(running.process.pid)
        for path in ['/', *showing, '/stats']:
            response = httpx.get(running.base + path, timeout=600)
            pages[path] = f'{response.status_code} {response.text}'
        peak = _peak_kb(worker)
    assert peak < RSS_LIMIT_KB, f'the viewer peaked at {peak // 1024} MB'
    assert all(page.startswith('200 ') for page in pages.values()), {p: t[:300] for p, t in pages.items()}
    for path in showing:
        page = pages[path]
        assert 'too large to show on a page: its start only' in page, path
        assert f'/e/{seq}/payload' in page, path
        assert 'HEADWORD the quick zebra jumps' in page, path  # its start is shown
        assert len(page) < 200_000, (path, len(page))
