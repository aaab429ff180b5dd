"""`search`: ranked excerpts with highlighted terms, scopes that never leak, and its error paths."""

from __future__ import annotations

import json

from clitools import DETAIL, OTHER_DETAIL, Store, invoke, shared

__all__ = ['shared']


def test_search_a_conversation_finds_the_compacted_detail(shared: Store) -> None:
    result = invoke('search', 'quokka archive', '--conversation', 'alpha', store=shared.path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert 'matching messages among' in out and 'conversation alpha' in out
    assert f'User: please remember {DETAIL}' in out
    assert f'run {shared.alpha_runs[0]}' in out
    assert ' 1. score ' in out


def test_search_highlights_the_matched_terms(shared: Store) -> None:
    result = invoke(
        'search',
        'quokka',
        '-c',
        'alpha',
        store=shared.path,
        env={'COLUMNS': '200', 'FORCE_COLOR': '1', 'TERM': 'xterm-256color'},
    )
    assert result.exit_code == 0, result.output
    # The matched word carries a style (an escape sequence right before it); plain text around it does not.
    assert '\x1b[' in result.stdout
    before = result.stdout.split('quokka')[0]
    assert before.endswith('m')


def test_search_json_is_ranked_and_names_runs(shared: Store) -> None:
    result = invoke('search', 'gizmo', '--conversation', 'alpha', '--json', store=shared.path)
    data = json.loads(result.stdout)
    assert data['terms'] == ['gizmo'] and data['analyzer'] == 'default'
    assert data['matches'] >= 2
    scores = [r['score'] for r in data['results']]
    assert scores == sorted(scores, reverse=True)
    assert {r['run_id'] for r in data['results']} == {shared.alpha_runs[1]}
    assert all(r['conversation_id'] == 'alpha' for r in data['results'])
    assert any('Tool Call [lookup]' in r['text'] for r in data['results'])


def test_search_limit_and_context(shared: Store) -> None:
    limited = json.loads(invoke('search', 'gizmo', '-c', 'alpha', '--limit', '1', '--json', store=shared.path).stdout)
    assert len(limited['results']) == 1 and limited['matches'] >= 2
    with_context = invoke('search', 'rollout', '-c', 'alpha', '--context', '1', store=shared.path)
    assert 'Assistant: noted: and the rollout' in with_context.stdout


def test_search_scopes_never_leak(shared: Store) -> None:
    alpha = invoke('search', 'wombat launch code', '--conversation', 'alpha', store=shared.path)
    assert alpha.exit_code == 0
    assert 'wombat' not in alpha.stdout.replace('wombat launch code', '') and '0 matching' in alpha.stdout
    everything = invoke('search', 'wombat', '--all', store=shared.path)
    assert OTHER_DETAIL in everything.stdout and 'every conversation' in everything.stdout
    one_run = json.loads(invoke('search', 'noted', '--run', shared.alpha_runs[0], '--json', store=shared.path).stdout)
    assert {r['run_id'] for r in one_run['results']} == {shared.alpha_runs[0]}


def test_search_with_the_english_analyzer_stems(shared: Store) -> None:
    default = json.loads(invoke('search', 'remembering', '-c', 'alpha', '--json', store=shared.path).stdout)
    english = json.loads(
        invoke('search', 'remembering', '-c', 'alpha', '--analyzer', 'english', '--json', store=shared.path).stdout
    )
    assert default['matches'] == 0
    assert english['matches'] >= 1 and english['analyzer'] == 'english'


def test_search_errors_are_one_line(shared: Store) -> None:
    cases = [
        (['search', 'x'], 'say where to search'),
        (['search', 'x', '--all', '-c', 'alpha'], '--all searches every conversation'),
        (['search', 'x', '-c', 'alpha', '--analyzer', 'klingon'], "unknown analyzer 'klingon'"),
        (['search', '?!', '-c', 'alpha'], 'has no searchable words'),
        (['search', 'x', '-c', 'nope'], "no conversation 'nope'"),
        (['search', 'x', '--run', 'nope'], "no run 'nope'"),
    ]
    for args, message in cases:
        result = invoke(*args, store=shared.path)
        assert result.exit_code == 1, (args, result.output)
        assert message in result.stderr and result.stderr.count('\n') == 1, (args, result.stderr)
    foreign = invoke('search', 'x', '-c', 'alpha', '--run', shared.beta_runs[0], store=shared.path)
    assert foreign.exit_code == 1 and 'no run' in foreign.stderr and 'alpha' in foreign.stderr
    bad_limit = invoke('search', 'x', '-c', 'alpha', '--limit', '0', store=shared.path)
    assert bad_limit.exit_code == 2 and bad_limit.stderr.startswith('eventlog: ') and bad_limit.stderr.count('\n') == 1
