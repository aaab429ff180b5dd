"""`eventlog demo`: the offline story runs, recalls the detail, and leaves a store that verifies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from clitools import invoke
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from capability.search import TOOL_NAME, ConversationSearch
from eventlog import LmdbEventLog
from eventlog_cli.commands._common import DEMO_STORE
from eventlog_cli.commands.demo import demo_target
from eventlog_cli.demo import CONVERSATION_ID, DETAIL_PATH, FINAL_QUESTION, SEARCH_QUERY


def test_the_offline_demo_recalls_the_compacted_detail(tmp_path: Path) -> None:
    store = tmp_path / 'demo.lmdb'
    result = invoke('demo', '--store', store, '--exchanges', '40', '--sessions', '2')
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert 'compaction' in out
    assert 'the exact path is NOT in it' in out
    assert f"search_conversation_history(query='{SEARCH_QUERY}')" in out
    assert 'the log recalled, word for word' in out
    assert f'The deploy job reads {DETAIL_PATH}.' in out
    assert 'search time:' in out and 'every hash chain intact' in out
    assert f'eventlog replay --last --store {store}' in out

    assert invoke('verify', store=store).exit_code == 0
    info = json.loads(invoke('info', CONVERSATION_ID, '--json', store=store).stdout)
    assert info['run_count'] == 41 and info['compaction_count'] >= 1
    assert info['title'] == 'Orbit migration planning (demo)'

    async def check() -> None:
        log = LmdbEventLog(store)
        try:
            runs = await log.list_runs(conversation_id=CONVERSATION_ID)
            final = runs[-1]
            assert final.metadata == {'session': 'final'}
            effects = await log.entries(run_id=final.run_id, kinds=['tool_effect'])
            assert [e.payload.count(b'search_conversation_history') for e in effects] == [1, 1]
            # The live context lost the detail; the transcript (the originals) kept it once.
            assert DETAIL_PATH.encode() not in (await log.context_payloads(CONVERSATION_ID))[0]
            transcript = await log.transcript_payloads(CONVERSATION_ID)
            assert sum(DETAIL_PATH.encode() in p for p in transcript) >= 2  # the statement, the answer (+ tool result)
            # The search answers with the fact, not with the question that prompted it (the
            # searching run's own messages are not results).
            answers = [
                part.content
                for message in await log.run_messages(final.run_id)
                if isinstance(message, ModelRequest)
                for part in message.parts
                if isinstance(part, ToolReturnPart) and part.tool_name == TOOL_NAME
            ]
            assert answers and isinstance(answers[0], str)
            first = answers[0].split('\n\n---\n\n')[0]  # the reference's layout: results separated by ---
            assert answers[0].startswith('Found ') and DETAIL_PATH in first
            assert 'One last thing' not in answers[0] and f'run: {final.run_id}' not in answers[0]
            # Asked in the final question's own words, from inside the final run, the search still
            # answers with the stated fact: the question itself (which holds every one of those
            # words) is the searching run's own message, and earlier search calls are not indexed.
            engine = ConversationSearch(log, scope='conversation').build_engine()
            answer = await engine.search(
                FINAL_QUESTION, scope='conversation', conversation_id=CONVERSATION_ID, searching_run_id=final.run_id
            )
            results = answer.split('\n', 1)[1]  # the first line repeats the query
            assert DETAIL_PATH in results.split('\n\n---\n\n')[0] and 'One last thing' not in results, answer[:600]
            assert 'search_conversation_history' not in results and SEARCH_QUERY not in results
            # The same words from outside any run find the question too: only the asking run's own
            # messages are left out.
            outside = await engine.search(FINAL_QUESTION, scope='conversation', conversation_id=CONVERSATION_ID)
            assert 'One last thing' in outside.split('\n', 1)[1]
        finally:
            log.close()

    asyncio.run(check())
    shown = invoke('search', 'deploy job reads', '-c', CONVERSATION_ID, store=store)
    assert DETAIL_PATH in shown.stdout


def test_demo_refuses_an_existing_store_unless_overwrite(tmp_path: Path) -> None:
    store = tmp_path / 'taken.lmdb'
    LmdbEventLog(store).close()
    refused = invoke('demo', '--store', store, '--exchanges', '12')
    assert refused.exit_code == 1
    assert (
        refused.stderr
        == f'eventlog: {store} already exists; pass --overwrite to replace it, or choose another --store\n'
    )
    plain = tmp_path / 'plain'
    plain.mkdir()
    (plain / 'keep.txt').write_text('precious')
    not_a_store = invoke('demo', '--store', plain, '--overwrite', '--exchanges', '12')
    assert not_a_store.exit_code == 1 and 'is not an eventlog store' in not_a_store.stderr
    assert (plain / 'keep.txt').read_text() == 'precious'


def test_demo_overwrite_replaces_a_store(tmp_path: Path) -> None:
    store = tmp_path / 'again.lmdb'
    LmdbEventLog(store).close()
    result = invoke('demo', '--store', store, '--overwrite', '--exchanges', '12', '--sessions', '1')
    assert result.exit_code == 0, result.output
    assert invoke('verify', store=store).exit_code == 0


def test_the_default_demo_store_is_never_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo_target(None, False) == Path(DEMO_STORE)
    Path(DEMO_STORE).mkdir()
    assert demo_target(None, False) == Path('eventlog-demo-2.lmdb')
    Path('eventlog-demo-2.lmdb').mkdir()
    assert demo_target(None, False) == Path('eventlog-demo-3.lmdb')


def test_demo_with_an_unusable_model_fails_in_one_line(tmp_path: Path) -> None:
    result = invoke('demo', '--store', tmp_path / 'd.lmdb', '--model', 'no-such-provider:model-x')
    assert result.exit_code == 1
    assert result.stderr.startswith("eventlog: cannot use model 'no-such-provider:model-x'")
    assert result.stderr.count('\n') == 1
    assert not (tmp_path / 'd.lmdb').exists()
