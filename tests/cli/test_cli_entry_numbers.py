"""One numbering in every view: a search hit's or a context message's `#seq` can be shown and forked from;
and a search uses the analyzer its index was built with, saying so when it cannot."""

from __future__ import annotations

import json
import re

from clitools import DETAIL, Store, fresh, invoke, shared

__all__ = ['fresh', 'shared']

_LABEL = re.compile(r'^#(\d+)\s+(.*)$')


def _rows(output: str) -> dict[int, str]:
    """The first line of each message row of a view, by its `#seq` label."""
    rows: dict[int, str] = {}
    for line in output.splitlines():
        match = _LABEL.match(line)
        if match:
            rows[int(match[1])] = match[2].rstrip()
    return rows


def test_a_search_hit_can_be_shown_and_forked_from_by_its_number(fresh: Store) -> None:
    found = json.loads(invoke('search', 'quokka archive', '-c', 'alpha', '--json', store=fresh.path).stdout)
    hit = found['results'][0]
    seq = hit['seq']
    assert isinstance(seq, int) and DETAIL in hit['text']
    assert [shown['seq'] for shown in hit['window'] if shown['position'] == hit['position']] == [seq]

    shown = _rows(invoke('show', 'alpha', store=fresh.path).stdout)
    assert DETAIL in shown[seq]
    table = invoke('search', 'quokka archive', '-c', 'alpha', store=fresh.path).stdout
    assert DETAIL in _rows(table)[seq]  # the table labels the same message with the same number

    forked = invoke('fork', 'alpha', '--at', str(seq), '--json', store=fresh.path)
    assert forked.exit_code == 0, forked.output
    child = json.loads(forked.stdout)['conversation_id']
    inherited = _rows(invoke('show', child, store=fresh.path).stdout)
    assert max(inherited) == seq and DETAIL in inherited[seq]  # the fork ends at the hit


def test_every_window_message_is_numbered_like_replay(shared: Store) -> None:
    found = json.loads(invoke('search', 'gizmo', '-c', 'alpha', '--context', '2', '--json', store=shared.path).stdout)
    replayed = json.loads(invoke('replay', shared.alpha_runs[1], '--json', store=shared.path).stdout)
    texts = {entry['seq'] for entry in replayed['entries'] if entry['kind'] == 'message'}
    own = [m for r in found['results'] for m in r['window'] if r['run_id'] == shared.alpha_runs[1]]
    assert own and all(message['seq'] is not None for message in own)
    # Messages the run inherited keep the number of the entry that first stored them (an earlier run's).
    first_run = {
        e['seq']
        for e in json.loads(invoke('replay', shared.alpha_runs[0], '--json', store=shared.path).stdout)['entries']
    }
    assert {message['seq'] for message in own} <= texts | first_run


def test_context_numbers_are_entries_that_show_and_fork_accept(fresh: Store) -> None:
    context = invoke('context', 'alpha', store=fresh.path)
    assert context.exit_code == 0, context.output
    rows = _rows(context.stdout)
    assert rows and not re.search(r'^\[\d+\]', context.stdout, re.M)
    replayed: dict[int, str] = {}
    for run in fresh.alpha_runs:
        for entry in json.loads(invoke('replay', run, '--json', store=fresh.path).stdout)['entries']:
            replayed[entry['seq']] = entry['kind']
    assert set(replayed[seq] for seq in rows) <= {'message', 'compaction'}  # a summary: its compaction's number
    messages = [seq for seq in rows if replayed[seq] == 'message']
    assert messages
    show = _rows(invoke('show', 'alpha', store=fresh.path).stdout)
    assert all(rows[seq] == show[seq] for seq in messages)
    last = max(messages)
    assert invoke('fork', 'alpha', '--at', str(last), store=fresh.path).exit_code == 0


def test_search_uses_the_analyzer_the_index_was_built_with(fresh: Store) -> None:
    assert invoke('reindex', '--analyzer', 'english', store=fresh.path).exit_code == 0
    result = invoke('search', 'remembering', '-c', 'alpha', '--json', store=fresh.path)
    data = json.loads(result.stdout)
    assert data['analyzer'] == 'english' and data['index_analyzer'] == 'english'
    assert data['note'] is None and data['matches'] >= 1  # stemmed: 'remembering' finds 'remember'
    table = invoke('search', 'remembering', '-c', 'alpha', store=fresh.path)
    assert table.exit_code == 0 and table.stderr == '' and DETAIL in table.stdout


def test_another_analyzer_than_the_index_s_says_it_rebuilt_in_memory(fresh: Store) -> None:
    assert invoke('reindex', '--analyzer', 'english', store=fresh.path).exit_code == 0
    data = json.loads(
        invoke('search', 'remember', '-c', 'alpha', '--analyzer', 'default', '--json', store=fresh.path).stdout
    )
    assert data['analyzer'] == 'default' and data['index_analyzer'] == 'english'
    assert "built with the 'english' analyzer" in data['note'] and 'reindex --analyzer default' in data['note']
    assert data['matches'] >= 1 and data['results'][0]['seq'] is not None  # in memory, still numbered
    table = invoke('search', 'remember', '-c', 'alpha', '--analyzer', 'default', store=fresh.path)
    assert table.exit_code == 0 and DETAIL in table.stdout
    assert table.stderr.startswith('eventlog: note: ') and table.stderr.count('\n') == 1
    assert 'in memory' in table.stderr
