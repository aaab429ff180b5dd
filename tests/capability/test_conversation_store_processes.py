"""Several processes save one conversation of a shared store at once; one is killed mid-run.

The revision check and the save's entries commit in one transaction of the store, so a save
that lost the race writes nothing and retries: every save a process was told succeeded is in
the history exactly once, nothing else is, and `verify` passes. A process killed with SIGKILL
at a random moment loses at most the save it was making.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip('pydantic_ai.conversation_store', reason='the conversation store needs pydantic-ai-slim 2.66+')

from backends import make_log, postgres_dsn
from pydantic_ai.messages import ModelRequest, UserPromptPart

from capability import EventLogConversationStore

WORKER = Path(__file__).with_name('_store_worker.py')


@pytest.mark.parametrize('backend', ['lmdb', 'postgres'])
async def test_racing_and_killed_savers_lose_no_acknowledged_save(backend: str, tmp_path: Path) -> None:
    env = dict(os.environ)
    if backend == 'postgres':
        env['EVENTLOG_TEST_DSN'] = postgres_dsn()
    make_log(backend, tmp_path).close()  # created once, before the racers open it
    acks = tmp_path / 'acks.txt'
    turns = 30
    names = ['w0', 'w1', 'w2']
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(WORKER), backend, str(tmp_path), name, str(turns), str(acks)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for name in names
    }
    rng = random.Random(os.getpid())
    victim = procs['w2']
    start = time.monotonic()
    while time.monotonic() - start < 120:  # once the victim saved a few turns, at a random moment
        if acks.exists() and sum(line.startswith('w2 ') for line in acks.read_text().splitlines()) >= 3:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(rng.uniform(0, 0.05))
    victim.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 240
    for name, proc in procs.items():
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        stderr = proc.stderr.read().decode() if proc.stderr else ''
        if name == 'w2':
            assert code in (0, -signal.SIGKILL), stderr
        else:
            assert code == 0, stderr
    acknowledged = [tuple(line.split()) for line in acks.read_text().splitlines()]
    assert 3 <= sum(name == 'w2' for name, _ in acknowledged) < turns  # killed mid-run
    log = make_log(backend, tmp_path)
    try:
        store = EventLogConversationStore(log)
        loaded = await store.load('shared')
        assert loaded is not None
        prompts = [
            part.content
            for message in loaded.messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]
        assert len(prompts) == len(set(prompts))  # no save landed twice
        for name, turn in acknowledged:
            assert f'{name} turn {turn}' in prompts
        assert sum(1 for name, _ in acknowledged if name in ('w0', 'w1')) == 2 * turns
        # Every turn in the history was acknowledged, but for the one the victim was killed making.
        unacknowledged = set(prompts) - {f'{name} turn {turn}' for name, turn in acknowledged}
        assert len(unacknowledged) <= 1 and all(p.startswith('w2 ') for p in unacknowledged)
        # Each message once: the log holds no message but the history's.
        assert len(await log.entries(conversation_id='shared', kinds=['message'])) == len(loaded.messages)
        report = await log.verify()
        assert report.ok, report.problems
    finally:
        log.close()
