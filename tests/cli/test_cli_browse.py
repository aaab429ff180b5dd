"""`conversations`, `runs`, `info`, `show`, `replay`, `context`: reading a store recorded by real agent runs."""

from __future__ import annotations

import asyncio
import json
import re

from clitools import DETAIL, Store, fresh, invoke, open_log, shared
from pydantic_ai.messages import ModelMessagesTypeAdapter

__all__ = ['fresh', 'shared']


def test_conversations_lists_titles_counts_and_sorts_by_last_activity(shared: Store) -> None:
    result = invoke('conversations', store=shared.path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert 'conversation' in lines[0] and 'last activity' in lines[0]
    # beta was written last, so it comes first.
    assert lines[1].split()[0] == 'beta'
    assert lines[2].split()[0] == 'alpha' and 'Alpha planning' in lines[2]
    data = json.loads(invoke('conversations', '--json', store=shared.path).stdout)
    assert [c['conversation_id'] for c in data] == ['beta', 'alpha']
    alpha = data[1]
    assert alpha['title'] == 'Alpha planning'
    assert alpha['run_count'] == 4 and alpha['compaction_count'] == 1
    assert 'head_hash' not in alpha


def test_conversations_include_archived(fresh: Store) -> None:
    assert invoke('archive', 'beta', store=fresh.path).exit_code == 0
    listed = invoke('conversations', '--json', store=fresh.path)
    assert [c['conversation_id'] for c in json.loads(listed.stdout)] == ['alpha']
    everything = invoke('conversations', '--include-archived', store=fresh.path)
    assert 'beta' in everything.stdout and 'archived' in everything.stdout


def test_conversations_of_an_empty_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from eventlog import LmdbEventLog

    LmdbEventLog(tmp_path / 'empty').close()
    result = invoke('conversations', store=tmp_path / 'empty')
    assert result.exit_code == 0
    assert 'no conversations' in result.stdout
    assert json.loads(invoke('conversations', '--json', store=tmp_path / 'empty').stdout) == []


def test_runs_of_a_conversation(shared: Store) -> None:
    result = invoke('runs', 'alpha', store=shared.path)
    assert result.exit_code == 0, result.output
    # Run ids are abbreviated as git abbreviates hashes: each row's is a prefix of its run's id alone.
    shown = [line.split()[0] for line in result.stdout.splitlines()[1:-1]]
    assert len(shown) == len(shared.alpha_runs)
    for short, run_id in zip(shown, shared.alpha_runs, strict=True):
        assert [r for r in shared.alpha_runs + shared.beta_runs if r.startswith(short)] == [run_id]
    full = invoke('runs', 'alpha', '--full-ids', store=shared.path).stdout
    assert all(run_id in full for run_id in shared.alpha_runs) and shared.beta_runs[0] not in full
    assert 'completed' in result.stdout and 'planner' in result.stdout
    assert '4 runs: 4 completed' in result.stdout
    data = json.loads(invoke('runs', 'alpha', '--json', store=shared.path).stdout)
    assert [r['run_id'] for r in data] == shared.alpha_runs
    assert data[1]['usage']['tool_calls'] == 1
    every = json.loads(invoke('runs', '--json', store=shared.path).stdout)
    assert [r['run_id'] for r in every] == shared.alpha_runs + shared.beta_runs


def test_runs_of_an_unknown_conversation(shared: Store) -> None:
    result = invoke('runs', 'nope', store=shared.path)
    assert result.exit_code == 1
    assert result.stderr == "eventlog: no conversation 'nope' in this store\n"


def test_info_counts_compactions_and_tokens(shared: Store) -> None:
    result = invoke('info', 'alpha', store=shared.path)
    assert result.exit_code == 0, result.output
    assert 'Alpha planning' in result.stdout
    assert 'compactions    1' in result.stdout
    assert '4 (4 completed)' in result.stdout
    data = json.loads(invoke('info', 'alpha', '--json', store=shared.path).stdout)
    runs = json.loads(invoke('runs', 'alpha', '--json', store=shared.path).stdout)
    assert data['usage']['input_tokens'] == sum(r['usage']['input_tokens'] for r in runs)
    assert data['usage']['tool_calls'] == 1
    assert data['runs_by_status'] == {'completed': 4}
    assert data['agents'] == ['planner']
    assert data['forked_from'] is None


def test_info_names_the_fork_origin(fresh: Store) -> None:
    forked = invoke('fork', 'alpha', '--at', '3', '--id', 'alpha-2', store=fresh.path)
    assert forked.exit_code == 0, forked.output
    result = invoke('info', 'alpha-2', store=fresh.path)
    assert 'forked from    alpha at entry #3' in result.stdout
    data = json.loads(invoke('info', 'alpha-2', '--json', store=fresh.path).stdout)
    assert data['forked_from'] == {'conversation_id': 'alpha', 'seq': 3}


def test_show_conversation_is_the_readable_transcript(shared: Store) -> None:
    result = invoke('show', 'alpha', store=shared.path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    order = [
        f'User: please remember {DETAIL}',
        'Tool Call [lookup]: {"key": "gizmo"}',
        'Tool [lookup]: value-of-gizmo',
        '── compaction: summary replaces',
        'Summary: summary of',
        'User: and the rollout',
    ]
    positions = [out.index(text) for text in order]
    assert positions == sorted(positions)
    assert 'wombat' not in out


def test_show_json_is_the_exact_transcript(shared: Store) -> None:
    result = invoke('show', 'alpha', '--json', store=shared.path)
    log = open_log(shared.path)
    try:
        expected = asyncio.run(log.transcript_json('alpha'))
    finally:
        log.close()
    assert result.stdout.encode() == expected + b'\n'
    assert ModelMessagesTypeAdapter.validate_json(result.stdout)


def test_show_run_shows_what_it_added_and_full_shows_its_record(shared: Store) -> None:
    last = shared.alpha_runs[-1]
    result = invoke('show', '--run', last, store=shared.path)
    assert result.exit_code == 0, result.output
    assert 'User: and the rollout' in result.stdout
    assert 'continues 8 earlier messages' in result.stdout
    assert DETAIL not in result.stdout
    full = invoke('show', '--run', last, '--full', store=shared.path)
    assert DETAIL in full.stdout and '[9]' not in full.stdout
    assert re.search(r'^#2 +User: please remember', full.stdout, re.M)  # numbered by entry, as `show` numbers it
    as_json = invoke('show', '--run', last, '--json', store=shared.path)
    log = open_log(shared.path)
    try:
        assert as_json.stdout.encode() == asyncio.run(log.run_messages_json(last)) + b'\n'
    finally:
        log.close()


def test_show_needs_exactly_one_target(shared: Store) -> None:
    neither = invoke('show', store=shared.path)
    assert neither.exit_code == 1 and neither.stderr.startswith('eventlog: give a conversation id')
    both = invoke('show', 'alpha', '--run', shared.alpha_runs[0], store=shared.path)
    assert both.exit_code == 1
    unknown = invoke('show', '--run', 'no-such-run', store=shared.path)
    assert unknown.exit_code == 1 and unknown.stderr == "eventlog: no run 'no-such-run' in this store\n"


def test_replay_shows_every_entry_with_timings_and_tool_effects(shared: Store) -> None:
    run_id = shared.alpha_runs[1]
    result = invoke('replay', run_id, store=shared.path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    kinds = ['run_started', 'message', 'message', 'tool_effect', 'tool_effect', 'message', 'message', 'run_finished']
    found = [line.split()[3] for line in out.splitlines() if line.startswith('#')]
    assert found == kinds
    assert 'lookup started (call call-lookup-1)' in out
    assert 'lookup completed (call call-lookup-1) after' in out
    assert 'continues from entry #' in out and 'tool_calls 1' in out
    assert '+0.0 ms' in out


def test_replay_json_holds_every_entry_as_recorded(shared: Store) -> None:
    run_id = shared.alpha_runs[1]
    data = json.loads(invoke('replay', run_id, '--json', store=shared.path).stdout)
    log = open_log(shared.path)
    try:
        entries = asyncio.run(log.entries(run_id=run_id))
    finally:
        log.close()
    assert data['run']['run_id'] == run_id
    assert [e['seq'] for e in data['entries']] == [e.seq for e in entries]
    assert [e['hash'] for e in data['entries']] == [e.hash.hex() for e in entries]
    effects = [e['payload'] for e in data['entries'] if e['kind'] == 'tool_effect']
    assert [p['status'] for p in effects] == ['started', 'completed']
    assert data['entries'][-1]['payload']['status'] == 'completed'


def test_replay_of_an_unknown_run(shared: Store) -> None:
    result = invoke('replay', 'ghost', store=shared.path)
    assert result.exit_code == 1
    assert result.stderr == "eventlog: no run 'ghost' in this store\n"


def test_context_is_what_the_agent_continues_from(shared: Store) -> None:
    result = invoke('context', 'alpha', store=shared.path)
    assert result.exit_code == 0, result.output
    assert 'Summary: summary of' in result.stdout
    assert DETAIL not in result.stdout
    as_json = invoke('context', 'alpha', '--json', store=shared.path)
    log = open_log(shared.path)
    try:
        expected = asyncio.run(log.context('alpha'))
    finally:
        log.close()
    assert as_json.stdout.encode() == ModelMessagesTypeAdapter.dump_json(expected) + b'\n'
    missing = invoke('context', 'nope', store=shared.path)
    assert missing.exit_code == 1 and 'no conversation' in missing.stderr
