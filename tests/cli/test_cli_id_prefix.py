"""Every command that takes a run or conversation id takes a unique prefix of it, as `git` takes
an abbreviated hash: an exact id always wins, an ambiguous prefix fails in one line naming
candidates, a prefix of nothing fails as an unknown id does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import Store, fresh, invoke, shared

__all__ = ['fresh', 'shared']


def _short_run(store: Store, run_id: str) -> str:
    """The abbreviation `eventlog runs` shows for `run_id` (what a user copies)."""
    for line in invoke('runs', store=store.path).stdout.splitlines()[1:-1]:
        short = line.split()[0]
        if run_id.startswith(short):
            return short
    raise AssertionError(f'{run_id} is not listed')


def _same(args_full: list[str], args_short: list[str], store: Store) -> str:
    full = invoke(*args_full, store=store.path)
    short = invoke(*args_short, store=store.path)
    assert full.exit_code == 0, full.output
    assert short.exit_code == 0, short.output
    if args_full[0] == 'search':  # the same results, found in another time
        assert {**json.loads(short.stdout), 'seconds': 0} == {**json.loads(full.stdout), 'seconds': 0}
    else:
        assert short.stdout == full.stdout
    return short.stdout


def test_an_abbreviated_run_id_is_shorter_and_names_its_run_alone(shared: Store) -> None:
    every = shared.alpha_runs + shared.beta_runs
    for run_id in every:
        short = _short_run(shared, run_id)
        assert 8 <= len(short) < len(run_id)
        assert [other for other in every if other.startswith(short)] == [run_id]


@pytest.mark.parametrize(
    'command',
    [
        ['runs', '{c}'],
        ['info', '{c}'],
        ['info', '{c}', '--json'],
        ['show', '{c}'],
        ['show', '{c}', '--json'],
        ['show', '--run', '{r}'],
        ['show', '--run', '{r}', '--full'],
        ['replay', '{r}', '--json'],
        ['replay', '--last', '--conversation', '{c}', '--json'],
        ['context', '{c}'],
        ['search', 'gizmo', '--conversation', '{c}', '--json'],
        ['search', 'gizmo', '--run', '{r}', '--json'],
        ['search', 'gizmo', '--run', '{r}', '--conversation', '{c}', '--json'],
        ['tail', '-n', '5', '--conversation', '{c}', '--json'],
        ['tail', '-n', '5', '--run', '{r}', '--json'],
    ],
    ids=lambda command: ' '.join(command),
)
def test_a_unique_prefix_reads_what_the_whole_id_reads(shared: Store, command: list[str]) -> None:
    run_id = shared.alpha_runs[1]
    short_run = _short_run(shared, run_id)
    full = [part.format(c='alpha', r=run_id) for part in command]
    short = [part.format(c='alph', r=short_run) for part in command]
    out = _same(full, short, shared)
    if '--json' in command and command[0] != 'search':
        assert 'alph"' not in out and f'{short_run}"' not in out  # JSON names ids whole


def test_replay_and_export_take_a_prefix(shared: Store, tmp_path: Path) -> None:
    run_id = shared.alpha_runs[-1]
    replayed = invoke('replay', _short_run(shared, run_id), store=shared.path)
    assert replayed.exit_code == 0, replayed.output
    assert f'run           {run_id}' in replayed.stdout  # the header names the run whole
    exported = invoke('export', 'alph', 'beta', '-o', tmp_path / 'out.jsonl', store=shared.path)
    assert exported.exit_code == 0, exported.output
    conversations = {
        json.loads(line).get('conversation_id') for line in (tmp_path / 'out.jsonl').read_text().splitlines()
    }
    assert {'alpha', 'beta'} <= conversations


def test_commands_that_change_a_store_take_a_prefix_and_name_the_whole_id(fresh: Store) -> None:
    forked = invoke('fork', 'alph', '--at', '3', '--id', 'gamma', store=fresh.path)
    assert forked.stdout.strip() == 'forked alpha at entry #3 into gamma'
    as_json = json.loads(invoke('fork', 'gamm', '--json', store=fresh.path).stdout)
    assert as_json['forked_from'] == 'gamma'
    assert "gamma is now titled 'G'" in invoke('title', 'gamm', 'G', store=fresh.path).stdout
    assert invoke('archive', 'gamm', store=fresh.path).stdout.startswith('gamma archived')
    assert invoke('unarchive', 'gamm', store=fresh.path).stdout.startswith('gamma unarchived')
    explained = invoke('delete', 'gamm', store=fresh.path)
    assert explained.exit_code == 1 and explained.stderr.startswith("Deleting gamma ('G') would remove")
    deleted = invoke('delete', 'gamm', '--yes', store=fresh.path)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.startswith('deleted gamma: ')
    assert invoke('info', 'gamma', store=fresh.path).stderr.startswith("eventlog: conversation 'gamma' was deleted")


def test_an_ambiguous_prefix_fails_in_one_line_naming_candidates(shared: Store) -> None:
    prefix = shared.alpha_runs[0][:8]  # run ids made in the same second share their first 8 characters
    assert all(run_id.startswith(prefix) for run_id in shared.alpha_runs)
    for args in (['replay', prefix], ['show', '--run', prefix], ['tail', '--run', prefix]):
        result = invoke(*args, store=shared.path)
        assert result.exit_code == 1 and result.stdout == ''
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"eventlog: run id prefix '{prefix}' is ambiguous: it starts ")
        named = [run_id for run_id in shared.alpha_runs if run_id in lines[0]]
        assert len(named) >= 2  # whole ids: copy one to go on
        assert lines[0].endswith('give more of the id')


def test_the_exact_id_wins_over_a_prefix_of_another(fresh: Store) -> None:
    assert invoke('fork', 'alpha', '--at', '3', '--id', 'alpha-2', store=fresh.path).exit_code == 0
    # 'alpha' is an id and a prefix of 'alpha-2': it names alpha.
    data = json.loads(invoke('info', 'alpha', '--json', store=fresh.path).stdout)
    assert data['conversation_id'] == 'alpha' and data['forked_from'] is None
    assert json.loads(invoke('info', 'alpha-', '--json', store=fresh.path).stdout)['conversation_id'] == 'alpha-2'
    ambiguous = invoke('info', 'alph', store=fresh.path)
    assert ambiguous.exit_code == 1
    assert ambiguous.stderr == (
        "eventlog: conversation id prefix 'alph' is ambiguous: it starts alpha, alpha-2; give more of the id\n"
    )


def test_a_prefix_of_nothing_fails_as_an_unknown_id_does(shared: Store) -> None:
    assert invoke('info', 'zzzz', store=shared.path).stderr == "eventlog: no conversation 'zzzz' in this store\n"
    assert invoke('replay', 'zzzz', store=shared.path).stderr == "eventlog: no run 'zzzz' in this store\n"
    assert invoke('runs', 'nope', store=shared.path).stderr == "eventlog: no conversation 'nope' in this store\n"
    # Fewer than 4 characters are never taken as a prefix (as git wants 4 hex digits).
    assert invoke('info', 'alp', store=shared.path).stderr == "eventlog: no conversation 'alp' in this store\n"
    assert invoke('info', 'beta', store=shared.path).exit_code == 0


def test_the_run_id_tail_shows_can_be_copied_back(shared: Store) -> None:
    line = invoke('tail', '-n', '1', store=shared.path).stdout.split()
    short = line[3]  # #seq, time, conversation, run
    assert short != shared.beta_runs[0] and shared.beta_runs[0].startswith(short)
    replayed = json.loads(invoke('replay', short, '--json', store=shared.path).stdout)
    assert replayed['run']['run_id'] == shared.beta_runs[0]
