"""Every command answers over a store holding deeply nested JSON (issue 42): a tool call 600 levels
deep recorded by a real agent, one 100,000 levels deep stored through the API. Views clip what
lies deeper than `eventlog.nesting.DEPTH_LIMIT` (shown as `…`); `replay --json`, `show --json`
and `export` give the stored bytes as they are."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import invoke, open_log
from deepjson import AFTER, FACT, HUGE_TEXT, NEEDLE, OTHER, DeepStore, build_deep_store, unreadable_payload
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import LmdbEventLog, NewEntry, message_entry, run_started_entry
from eventlog.nesting import CLIPPED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope='module')
def deep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DeepStore]:
    path = tmp_path_factory.mktemp('deep') / 'store.lmdb'
    return path, asyncio.run(build_deep_store(path))


def _ok(*args: str | Path, store: Path) -> str:
    result = invoke(*args, store=store)
    assert result.exception is None, result.exception
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_every_view_of_the_deep_conversations_answers_clipped(deep: tuple[Path, DeepStore]) -> None:
    path, store = deep
    deep_run, after_run = store.deep_runs[1], store.deep_runs[2]
    for args in (['show', 'deep'], ['show', '--run', deep_run], ['context', 'deep'], ['replay', deep_run]):
        out = _ok(*args, store=path)
        assert f'"{CLIPPED}"' in out and AFTER in out, args  # the call clipped, the text after it shown
    out = _ok('show', 'huge', store=path)
    assert f'"{CLIPPED}"' in out and HUGE_TEXT in out
    out = _ok('replay', store.huge_run, store=path)
    assert f'"{CLIPPED}"' in out and HUGE_TEXT in out
    assert HUGE_TEXT in _ok('context', 'huge', store=path)
    assert FACT in _ok('show', '--run', after_run, '--full', store=path)
    tail = _ok('tail', '-n', '100', store=path)
    assert HUGE_TEXT in tail and OTHER in tail
    assert 'ok:' in _ok('verify', store=path)
    assert 'could not be read' not in _ok('stats', store=path)


def test_every_search_answers_and_finds_the_deep_calls(deep: tuple[Path, DeepStore]) -> None:
    path, store = deep
    assert OTHER in _ok('search', 'ferry', '--all', store=path)
    assert AFTER in _ok('search', 'marmot', '--conversation', 'deep', store=path)
    assert FACT in _ok('search', 'heron vault', '--conversation', 'deep', store=path)
    found = _ok('search', NEEDLE, '--all', store=path)
    assert f'#{store.deep_call_seq} ' in found and f'#{store.huge_call_seq} ' in found and CLIPPED in found
    data = json.loads(_ok('search', NEEDLE, '--all', '--json', store=path))
    assert data['unindexed'] == [] and data['matches'] >= 2
    assert HUGE_TEXT in _ok('search', 'giraffe', '--run', store.huge_run, store=path)


def test_replay_show_json_and_export_give_the_stored_bytes(deep: tuple[Path, DeepStore], tmp_path: Path) -> None:
    path, store = deep
    log = open_log(path)
    try:
        stored = asyncio.run(log.get_entry(store.huge_call_seq))
        assert stored is not None
        payloads = asyncio.run(log.run_message_payloads(store.huge_run))
    finally:
        log.close()
    replayed = json.loads(_ok('replay', store.huge_run, '--json', store=path))
    entry = next(e for e in replayed['entries'] if e['seq'] == store.huge_call_seq)
    assert entry['payload'] == json.loads(stored.payload)  # the stored JSON, whole (100,000 levels in the args)
    shown = _ok('show', 'huge', '--json', store=path).encode()
    assert all(payload in shown for payload in payloads)  # the stored JSON of each message, as it is
    target = tmp_path / 'huge.jsonl'
    _ok('export', 'huge', '-o', target, store=path)
    line = next(line for line in target.read_bytes().splitlines() if b'"seq":%d,' % store.huge_call_seq in line)
    assert bytes(stored.payload) in line
    copy = tmp_path / 'copy.lmdb'
    _ok('import', target, store=copy)
    log = open_log(copy)
    try:
        assert asyncio.run(log.run_message_payloads(store.huge_run)) == payloads
    finally:
        log.close()


def test_the_console_script_shows_the_deep_conversation(deep: tuple[Path, DeepStore]) -> None:
    """The real command in a process of its own (its stack, not the test runner's)."""
    path, _ = deep
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    for args in (['show', 'deep'], ['search', NEEDLE, '--all']):
        done = subprocess.run(
            [sys.executable, '-m', 'eventlog_cli', '--store', str(path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0 and done.stderr == '', done.stderr[-2000:]
        assert CLIPPED in done.stdout


def test_a_message_pydantic_ai_cannot_read_is_reported_by_search_and_stats(tmp_path: Path) -> None:
    """As an earlier version could store it (tool arguments 220 levels deep, which pydantic-ai
    writes but does not read back): every view shows it, search goes on and names it, stats counts it."""
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:

        async def fill() -> int:
            await log.append(run_started_entry(conversation_id='old', run_id='run-old'))
            prompt = ModelRequest(parts=[UserPromptPart('the otter swims')])
            await log.append(message_entry(prompt, conversation_id='old', run_id='run-old'))
            return await log.append(
                NewEntry(
                    conversation_id='old',
                    run_id='run-old',
                    kind='message',
                    payload=unreadable_payload(),
                    prevalidated=True,
                )
            )

        bad = asyncio.run(fill())
    finally:
        log.close()
    note = f'1 message could not be read to be indexed, so no search finds them: #{bad}'
    result = invoke('search', 'otter', '--all', store=path)
    assert result.exit_code == 0 and 'the otter swims' in result.stdout
    assert f'eventlog: note: {note}' in result.stderr
    assert json.loads(_ok('search', 'otter', '--all', '--json', store=path))['unindexed'] == [bad]
    assert 'not built yet' in _ok('stats', store=path)  # a reading command writes no index
    _ok('reindex', store=path)
    assert note in _ok('stats', store=path)
    assert json.loads(_ok('search', 'otter', '--all', '--json', store=path))['unindexed'] == [bad]
    assert f'#{bad}' in _ok('show', 'old', store=path)  # shown, clipped like any deep value
