"""The viewer's `verify`: run once per store position (the stats page and the list reuse the report
until entries are appended, then it runs again and covers them), and the messages' validator built
before the first request rather than inside the first `verify`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog
from eventlog.entries import VerifyReport, message_entry, run_finished_entry, run_started_entry
from eventlog_cli.web.app import Viewer


async def _one_run(log: LmdbEventLog, run_id: str) -> None:
    await log.append_many(
        [
            run_started_entry(conversation_id='c', run_id=run_id),
            message_entry(ModelRequest(parts=[UserPromptPart(f'q {run_id}')]), conversation_id='c', run_id=run_id),
            message_entry(ModelResponse(parts=[TextPart(f'a {run_id}')]), conversation_id='c', run_id=run_id),
            run_finished_entry(conversation_id='c', run_id=run_id, status='completed'),
        ]
    )


def test_verify_runs_once_per_store_position_and_again_after_an_append(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = LmdbEventLog(tmp_path / 'store.lmdb')
        try:
            await _one_run(log, 'r1')
            viewer = Viewer(log=log, store='store', verify_interval=0)
            first = await viewer.verify()
            again = await viewer.verify()
            assert again is first  # the same report object: not verified a second time
            assert first[0] == 4 and first[1].ok and first[1].entries_checked == 4
            await _one_run(log, 'r2')
            moved = await viewer.verify()
            assert moved is not first and moved[0] == 8 and moved[1].ok and moved[1].entries_checked == 8
            assert await viewer.verify() is moved
        finally:
            log.close()

    asyncio.run(scenario())


def test_requests_under_a_writer_start_at_most_one_verify_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer appends between every two requests: the pages show the latest report and the
    store is walked once per interval, not once per request."""
    from starlette.testclient import TestClient

    import eventlog_cli.web.app as web_app

    walks: list[int] = []
    real = web_app.read_verify

    async def counted(log: LmdbEventLog) -> tuple[VerifyReport, int, int]:
        walks.append(await log.last_seq())
        return await real(log)

    monkeypatch.setattr(web_app, 'read_verify', counted)
    clock = [1000.0]
    monkeypatch.setattr(web_app, 'monotonic', lambda: clock[0], raising=False)
    log = LmdbEventLog(tmp_path / 'store.lmdb')
    try:
        asyncio.run(_one_run(log, 'r0'))
        client = TestClient(web_app.create_app(log, store='store'))
        assert client.get('/stats').status_code == 200  # the first report is waited for
        for i in range(12):
            asyncio.run(_one_run(log, f'r{i + 1}'))
            page = '/stats' if i % 3 == 0 else '/'
            answer = client.get(page)
            assert answer.status_code == 200
            if page == '/stats':
                assert 'as of entry #4;' in answer.text
        assert walks == [4]  # twelve requests, each after an append, inside one interval: no new walk
        clock[0] += web_app.VERIFY_INTERVAL
        assert client.get('/').status_code == 200  # the interval passed: one walk starts, in the background
        deadline = time.monotonic() + 60
        while len(walks) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(5):
            assert client.get('/').status_code == 200
        assert walks == [4, 52]
    finally:
        log.close()


def test_the_messages_validator_is_built_before_the_first_request(tmp_path: Path) -> None:
    """In a fresh process (this one's agents built it long ago): `create_app` leaves pydantic's
    validator of stored messages built, so the first `verify` does not build it."""
    store = tmp_path / 'store.lmdb'

    async def build() -> None:
        log = LmdbEventLog(store)
        try:
            await _one_run(log, 'r1')
        finally:
            log.close()

    asyncio.run(build())
    code = (
        'import sys\n'
        'from eventlog import LmdbEventLog\n'
        'from eventlog_cli.web import create_app\n'
        'from pydantic_ai.messages import ModelMessagesTypeAdapter as adapter\n'
        'before = adapter.pydantic_complete\n'
        'log = LmdbEventLog(sys.argv[1])\n'
        'create_app(log, store="s")\n'
        'print(before, adapter.pydantic_complete)\n'
        'log.close()\n'
    )
    done = subprocess.run(
        [sys.executable, '-c', code, str(store)], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['False', 'True']
