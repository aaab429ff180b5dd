"""`fork`, `title`, `archive`, `unarchive`, `delete`: changing a store, and refusing to change it wrongly."""

from __future__ import annotations

import asyncio
import json

from clitools import DETAIL, Store, fresh, invoke, open_log

__all__ = ['fresh']


def test_fork_at_an_entry_with_a_chosen_id(fresh: Store) -> None:
    result = invoke('fork', 'alpha', '--at', '3', '--id', 'alpha-b', store=fresh.path)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == 'forked alpha at entry #3 into alpha-b'
    shown = invoke('show', 'alpha-b', store=fresh.path).stdout
    assert 'inherited from alpha' in shown and DETAIL in shown and 'gizmo' not in shown


def test_fork_at_the_latest_context_by_default(fresh: Store) -> None:
    data = json.loads(invoke('fork', 'alpha', '--json', store=fresh.path).stdout)
    assert data['forked_from'] == 'alpha' and data['at_seq'] > 3
    log = open_log(fresh.path)
    try:
        assert asyncio.run(log.context(data['conversation_id'])) == asyncio.run(log.context('alpha'))
    finally:
        log.close()


def test_fork_errors(fresh: Store) -> None:
    unknown = invoke('fork', 'nope', store=fresh.path)
    assert unknown.exit_code == 1 and unknown.stderr == "eventlog: no conversation 'nope' in this store\n"
    foreign = invoke('fork', 'alpha', '--at', '25', store=fresh.path)  # an entry of beta
    assert foreign.exit_code == 1 and 'not an entry of conversation' in foreign.stderr
    taken = invoke('fork', 'alpha', '--id', 'beta', store=fresh.path)
    assert taken.exit_code == 1 and taken.stderr.startswith('eventlog: ')


def test_title(fresh: Store) -> None:
    result = invoke('title', 'beta', 'Beta launch', store=fresh.path)
    assert result.exit_code == 0, result.output
    assert "beta is now titled 'Beta launch'" in result.stdout
    assert 'Beta launch' in invoke('conversations', store=fresh.path).stdout
    assert invoke('title', 'nope', 'x', store=fresh.path).exit_code == 1


def test_archive_and_unarchive(fresh: Store) -> None:
    assert invoke('archive', 'alpha', store=fresh.path).exit_code == 0
    assert 'alpha' not in invoke('conversations', store=fresh.path).stdout
    again = invoke('archive', 'alpha', store=fresh.path)
    assert again.exit_code == 0 and 'already archived' in again.stdout
    # An archived conversation stays readable by id.
    assert invoke('info', 'alpha', store=fresh.path).exit_code == 0
    assert invoke('unarchive', 'alpha', store=fresh.path).exit_code == 0
    assert 'alpha' in invoke('conversations', store=fresh.path).stdout
    assert 'already listed' in invoke('unarchive', 'alpha', store=fresh.path).stdout
    assert invoke('archive', 'nope', store=fresh.path).exit_code == 1


def test_delete_without_yes_explains_and_changes_nothing(fresh: Store) -> None:
    assert invoke('fork', 'alpha', '--id', 'child', store=fresh.path).exit_code == 0
    before = invoke('export', store=fresh.path).stdout
    result = invoke('delete', 'alpha', store=fresh.path)
    assert result.exit_code == 1
    assert 'would remove its 22 entries' in result.stderr
    assert '1 conversation(s) forked from it' in result.stderr
    assert 'Nothing was changed' in result.stderr
    assert invoke('export', store=fresh.path).stdout == before


def test_delete_with_yes(fresh: Store) -> None:
    result = invoke('delete', 'beta', '--yes', store=fresh.path)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == 'deleted beta: 4 entries removed'
    assert 'beta' not in invoke('conversations', store=fresh.path).stdout
    assert invoke('info', 'beta', store=fresh.path).exit_code == 1
    assert invoke('verify', store=fresh.path).exit_code == 0
    again = invoke('delete', 'beta', '--yes', store=fresh.path)
    assert again.exit_code == 1 and "no conversation 'beta'" in again.stderr
