"""`tail`: the latest entries, and `--follow` printing what another process appends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from clitools import Store, fresh, invoke, shared

__all__ = ['fresh', 'shared']

WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry

    async def main(path, go):
        while not Path(go).exists():  # started early, so its imports overlap the follower's
            time.sleep(0.02)
        log = LmdbEventLog(path)
        await log.append(run_started_entry(conversation_id='live', run_id='writer-run'))
        for i in range(3):
            message = ModelRequest(parts=[UserPromptPart(f'appended by the writer process, number {i}')])
            await log.append(message_entry(message, conversation_id='live', run_id='writer-run'))
            await asyncio.sleep(0.05)
        await log.append(run_finished_entry(conversation_id='live', run_id='writer-run', status='completed'))
        log.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_tail_prints_the_last_entries(shared: Store) -> None:
    result = invoke('tail', '-n', '3', store=shared.path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ['#24', '#25', '#26']
    assert 'wombat' in lines[1] and lines[2].split()[4] == 'run_finished'


def test_tail_filters_and_json(shared: Store) -> None:
    runs = invoke('tail', '-n', '50', '--kind', 'run_started', '--json', store=shared.path)
    entries = [json.loads(line) for line in runs.stdout.splitlines()]
    assert [e['run_id'] for e in entries] == shared.alpha_runs + shared.beta_runs
    assert all(e['kind'] == 'run_started' for e in entries)
    alpha = invoke('tail', '-n', '2', '--conversation', 'alpha', '--json', store=shared.path)
    assert [json.loads(line)['seq'] for line in alpha.stdout.splitlines()] == [21, 22]
    one_run = invoke('tail', '-n', '100', '--run', shared.beta_runs[0], store=shared.path)
    assert len(one_run.stdout.splitlines()) == 4
    assert invoke('tail', '-n', '0', store=shared.path).stdout == ''
    assert invoke('tail', '--kind', 'nonsense', store=shared.path).exit_code == 1
    assert invoke('tail', '--conversation', 'nope', store=shared.path).exit_code == 1


def test_tail_follow_stops_when_idle(shared: Store) -> None:
    result = invoke('tail', '-n', '1', '--follow', '--timeout', '0.3', '--interval', '0.05', store=shared.path)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].startswith('#26')


def test_tail_follow_prints_what_another_process_appends(fresh: Store, tmp_path: Path) -> None:
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    go = tmp_path / 'go'
    writer = subprocess.Popen(
        [sys.executable, '-c', WRITER, str(fresh.path), str(go)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    follower = subprocess.Popen(
        [
            sys.executable, '-m', 'eventlog_cli', 'tail', '--follow', '-n', '2', '--max-entries', '7',
            '--interval', '0.05', '--timeout', '30', '--store', str(fresh.path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        backlog = [follower.stdout.readline(), follower.stdout.readline()]
        assert [line.split()[0] for line in backlog] == ['#25', '#26']
        go.touch()
        _, writer_errors = writer.communicate(timeout=60)
        assert writer.returncode == 0, writer_errors
        rest, errors = follower.communicate(timeout=60)
    finally:
        for process in (follower, writer):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert follower.returncode == 0, errors
    lines = rest.splitlines()
    assert len(lines) == 5
    assert all(' live ' in line and 'writer-run' in line for line in lines)
    assert [line.split()[4] for line in lines] == ['run_started', 'message', 'message', 'message', 'run_finished']
    for i in range(3):
        assert f'appended by the writer process, number {i}' in lines[i + 1]


def test_every_kind_of_entry_has_a_headline() -> None:
    from typing import get_args

    from eventlog.entries import Kind
    from eventlog_cli import _render

    assert set(_render._HEADLINES) == set(get_args(Kind))  # pyright: ignore[reportPrivateUsage]
