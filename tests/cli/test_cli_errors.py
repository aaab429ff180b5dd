"""User errors, for every command: one line on stderr, a non-zero status, no traceback, no store created."""

from __future__ import annotations

import json
from pathlib import Path

import lmdb
import pytest
from clitools import Store, fresh, invoke

from eventlog._storage import Table

__all__ = ['fresh']

READERS = [
    ['conversations'],
    ['runs'],
    ['info', 'c'],
    ['show', 'c'],
    ['replay', 'r'],
    ['context', 'c'],
    ['search', 'x', '--all'],
    ['fork', 'c'],
    ['title', 'c', 't'],
    ['archive', 'c'],
    ['unarchive', 'c'],
    ['delete', 'c', '--yes'],
    ['export'],
    ['verify'],
    ['stats'],
    ['reindex'],
    ['tail'],
]


@pytest.mark.parametrize('args', READERS, ids=lambda args: args[0])
def test_no_store_at_the_path_is_one_line_and_creates_nothing(args: list[str], tmp_path: Path) -> None:
    missing = tmp_path / 'missing.lmdb'
    result = invoke(*args, store=missing)
    assert result.exit_code == 1
    assert result.stdout == ''
    assert result.stderr == f'eventlog: no store at {missing} (pass --store PATH or set EVENTLOG_STORE)\n'
    assert not missing.exists()


def test_the_store_comes_from_the_environment(tmp_path: Path) -> None:

    missing = tmp_path / 'from-env.lmdb'
    result = invoke('stats', env={'EVENTLOG_STORE': str(missing)})
    assert result.exit_code == 1 and str(missing) in result.stderr


def test_a_directory_that_is_not_a_store_is_refused_untouched(tmp_path: Path) -> None:
    plain = tmp_path / 'plain'
    plain.mkdir()
    result = invoke('stats', store=plain)
    assert result.exit_code == 1
    assert result.stderr == f'eventlog: {plain} is not an eventlog store (it holds no data.mdb)\n'
    assert list(plain.iterdir()) == []


def test_a_file_is_not_a_store(tmp_path: Path) -> None:
    file = tmp_path / 'file'
    file.write_text('x')
    result = invoke('verify', store=file)
    assert result.exit_code == 1
    assert result.stderr.startswith('eventlog: ') and 'not a directory' in result.stderr
    assert result.stderr.count('\n') == 1


def test_a_store_of_a_newer_format(fresh: Store) -> None:
    env = lmdb.open(str(fresh.path), max_dbs=32)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.put(bytes([Table.META]) + b'format', b'99', db=index)
    env.close()
    for args in (['conversations'], ['verify'], ['import', '-']):
        result = invoke(*args, store=fresh.path, input='')
        assert result.exit_code == 1, args
        assert 'format 99' in result.stderr and 'upgrade pydantic-ai-eventlog' in result.stderr
        assert result.stderr.count('\n') == 1 and 'Traceback' not in result.output


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (['conversations', '--bogus'], 'unrecognized arguments: --bogus'),
        (['tail', '-n', 'many'], "argument --lines/-n: 'many' is not a whole number"),
        (['info'], 'the following arguments are required: CONVERSATION'),
        (['frobnicate'], "no such command 'frobnicate' (see 'eventlog --help')"),
    ],
)
def test_a_bad_option_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:

    result = invoke(*([*args, '--store', str(tmp_path / 's')] if args[0] != 'frobnicate' else args))
    assert result.exit_code == 2
    assert result.stdout == ''
    assert result.stderr.startswith('eventlog: ') and message in result.stderr
    assert result.stderr.count('\n') == 1


def test_help_works() -> None:

    result = invoke('--help')
    assert result.exit_code == 0
    for command in ('conversations', 'replay', 'search', 'verify', 'tail', 'demo', 'import'):
        assert command in result.stdout


def test_bare_eventlog_prints_its_help_and_succeeds() -> None:
    result = invoke()
    assert result.exit_code == 0
    assert 'Usage: eventlog' in result.stdout and 'conversations' in result.stdout
    assert 'eventlog:' not in result.stderr


def test_store_may_come_before_the_command(fresh: Store, tmp_path: Path) -> None:
    before = invoke('--store', fresh.path, 'conversations', '--json')
    assert before.exit_code == 0, before.output
    assert {c['conversation_id'] for c in json.loads(before.stdout)} == {'alpha', 'beta'}
    # Given after the command too, the later one wins; given before, it beats $EVENTLOG_STORE.
    missing = tmp_path / 'missing.lmdb'
    both = invoke('--store', fresh.path, 'stats', '--store', missing)
    assert both.exit_code == 1 and f'no store at {missing}' in both.stderr
    over_env = invoke('--store', fresh.path, 'stats', '--json', env={'EVENTLOG_STORE': str(missing)})
    assert over_env.exit_code == 0, over_env.output
    assert json.loads(over_env.stdout)['conversations'] == 2
