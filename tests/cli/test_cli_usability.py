"""What a new user meets: `replay --last`, the counts after a delete, `info` on a deleted
conversation, exporting a damaged store, a store with no runs, and the help's usage lines."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import lmdb
import pytest
from clitools import Store, fresh, invoke, open_log, shared

from eventlog._engine import seq_key
from eventlog_cli.main import build_parser, commands

__all__ = ['fresh', 'shared']


def test_replay_last_is_the_latest_run_of_the_store_or_of_a_conversation(shared: Store) -> None:
    latest = invoke('replay', '--last', '--json', store=shared.path)
    assert latest.exit_code == 0, latest.output
    last_of_all = shared.beta_runs[-1] if shared.beta_runs[-1] > shared.alpha_runs[-1] else shared.alpha_runs[-1]
    assert json.loads(latest.stdout)['run']['run_id'] == last_of_all
    alpha = invoke('replay', '--last', '--conversation', 'alpha', store=shared.path)
    assert alpha.exit_code == 0, alpha.output
    assert alpha.stdout.splitlines()[0].split() == ['run', shared.alpha_runs[-1]]
    beta = json.loads(invoke('replay', '--last', '-c', 'beta', '--json', store=shared.path).stdout)
    assert beta['run']['run_id'] == shared.beta_runs[-1]
    # Exactly one of a run id and --last; --conversation only with --last; unknown ids are named.
    for args, message in [
        ((), 'eventlog: name a run id or pass --last\n'),
        ((shared.alpha_runs[0], '--last'), 'eventlog: name a run id or pass --last (not both)\n'),
        (
            (shared.alpha_runs[0], '-c', 'alpha'),
            'eventlog: --conversation goes with --last (a run id already names its conversation)\n',
        ),
        (('--last', '-c', 'nope'), "eventlog: no conversation 'nope' in this store\n"),
    ]:
        result = invoke('replay', *args, store=shared.path)
        assert result.exit_code in (1, 2) and result.stderr == message, (args, result.stderr)


def test_replay_last_in_a_store_without_runs(tmp_path: Path) -> None:
    from eventlog import LmdbEventLog

    LmdbEventLog(tmp_path / 'empty.lmdb').close()
    result = invoke('replay', '--last', store=tmp_path / 'empty.lmdb')
    assert result.exit_code == 1 and result.stderr == 'eventlog: no runs in this store yet\n'


def test_after_a_delete_verify_stats_and_info_agree(fresh: Store) -> None:
    assert invoke('delete', 'beta', '--yes', store=fresh.path).exit_code == 0
    assert invoke('delete', 'alpha', '--yes', store=fresh.path).exit_code == 0
    verify = invoke('verify', store=fresh.path)
    assert verify.exit_code == 0, verify.output
    assert (
        verify.stdout.strip() == 'ok: 2 entries (2 deletion tombstones) in 0 conversations; every hash chain is intact'
    )
    data = json.loads(invoke('verify', '--json', store=fresh.path).stdout)
    assert data['ok'] is True and data['entries_checked'] == 2
    assert data['conversations'] == 0 and data['deletion_tombstones'] == 2
    stats = invoke('stats', store=fresh.path)
    assert 'conversations  0 (0 archived)' in stats.stdout
    assert re.search(r'^runs +0 \(none yet\)', stats.stdout, re.M), stats.stdout
    assert json.loads(invoke('stats', '--json', store=fresh.path).stdout)['conversations'] == 0
    info = invoke('info', 'alpha', store=fresh.path)
    assert info.exit_code == 1
    assert re.fullmatch(
        r"eventlog: conversation 'alpha' was deleted at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
        r'\(entry #\d+, its tombstone, is all that is left of it\)\n',
        info.stderr,
    ), info.stderr
    assert (
        invoke('info', 'never-was', store=fresh.path).stderr == "eventlog: no conversation 'never-was' in this store\n"
    )


def test_verify_with_one_deleted_and_one_live_conversation(fresh: Store) -> None:
    assert invoke('delete', 'beta', '--yes', store=fresh.path).exit_code == 0
    verify = invoke('verify', store=fresh.path)
    assert re.fullmatch(
        r'ok: \d+ entries \(1 deletion tombstone\) in 1 conversation; every hash chain is intact\n', verify.stdout
    ), verify.stdout


def test_info_of_a_conversation_without_runs_is_readable(fresh: Store) -> None:
    forked = invoke('fork', 'alpha', '--id', 'alpha-copy', store=fresh.path)
    assert forked.exit_code == 0, forked.output
    info = invoke('info', 'alpha-copy', store=fresh.path)
    assert info.exit_code == 0, info.output
    assert re.search(r'^runs +0 \(none yet\) *$', info.stdout, re.M), info.stdout
    assert '()' not in info.stdout


def _damage(store: Path) -> int:
    """Alter one stored message of `alpha` in place (its hash no longer matches); its `seq`."""
    log = open_log(store)
    try:
        target = next(e.seq for e in asyncio.run(log.entries(conversation_id='alpha')) if b'quokka' in e.payload)
    finally:
        log.close()
    env = lmdb.open(str(store), max_dbs=32)
    entries = env.open_db(b'entries')
    with env.begin(write=True) as txn:
        value = txn.get(seq_key(target), db=entries)
        assert value is not None
        txn.put(seq_key(target), value.replace(b'quokka', b'koala!'), db=entries)
    env.close()
    return target


def test_export_refuses_a_store_that_fails_verify(fresh: Store, tmp_path: Path) -> None:
    target = _damage(fresh.path)
    out = tmp_path / 'out.jsonl'
    refused = invoke('export', '-o', out, store=fresh.path)
    assert refused.exit_code == 1
    assert refused.stderr.count('\n') == 1
    assert refused.stderr.startswith(f"eventlog: the store fails verification (conversation 'alpha', entry #{target}: ")
    assert '--allow-damaged' in refused.stderr
    assert not out.exists()
    to_stdout = invoke('export', store=fresh.path)
    assert to_stdout.exit_code == 1 and to_stdout.stdout == ''
    # Asked for, the export is written, with a warning; and, as the refusal said, it does not import.
    forced = invoke('export', '-o', out, '--allow-damaged', store=fresh.path)
    assert forced.exit_code == 0, forced.output
    assert forced.stderr.startswith(
        f"eventlog: warning: the store fails verification (conversation 'alpha', entry #{target}: "
    )
    assert forced.stderr.endswith('exported 26 entries to ' + str(out) + '\n')
    imported = invoke('import', out, store=tmp_path / 'copy.lmdb')
    assert imported.exit_code == 1 and imported.stderr.count('\n') == 1


def test_export_of_an_intact_store_is_unchanged(shared: Store, tmp_path: Path) -> None:
    result = invoke('export', '-o', tmp_path / 'ok.jsonl', store=shared.path)
    assert result.exit_code == 0 and result.stderr == f'exported 26 entries to {tmp_path / "ok.jsonl"}\n'


@pytest.mark.parametrize('command', [*commands(build_parser()), None])
def test_help_names_arguments_in_capitals_and_shows_no_type_for_flags(command: str | None) -> None:
    name = command or ''
    result = invoke(*([name] if name else []), '--help')
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert '<bool>' not in out
    usage = next(line for line in out.splitlines() if 'Usage:' in line)
    assert '{' not in usage and not re.search(r'\b[a-z_]+\]?\.{0,3}$', usage.split('[OPTIONS]')[-1].strip() or 'X')


def test_help_usage_lines() -> None:
    def usage(*args: str) -> str:
        out = invoke(*args, '--help').stdout
        return ' '.join(next(line for line in out.splitlines() if 'Usage:' in line).split())

    assert usage('search') == 'Usage: eventlog search [OPTIONS] QUERY'
    assert usage('replay') == 'Usage: eventlog replay [OPTIONS] [RUN]'
    assert usage('export') == 'Usage: eventlog export [OPTIONS] [CONVERSATIONS]...'
    assert usage('info') == 'Usage: eventlog info [OPTIONS] CONVERSATION'
    search = invoke('search', '--help').stdout
    assert re.search(r'--all +Search every conversation', search), search
    missing = invoke('info')
    assert missing.exit_code == 2 and 'the following arguments are required: CONVERSATION' in missing.stderr
