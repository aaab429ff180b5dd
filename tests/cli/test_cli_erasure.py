"""`eventlog erase` and `eventlog retain`, run as real processes on stores built by real agent runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from clitools import Store, fresh  # noqa: F401  (the fixture)

_HOLDER = 'import sys\nfrom eventlog import LmdbEventLog\nlog = LmdbEventLog(sys.argv[1])\nprint("open", flush=True)\nsys.stdin.readline()\n'


def run(*args: str | Path, store: Path) -> subprocess.CompletedProcess[str]:
    """`eventlog ARGS --store STORE` in a child process."""
    env = {**os.environ, 'COLUMNS': '240', 'NO_COLOR': '1'}
    env.pop('EVENTLOG_STORE', None)
    return subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *map(str, args), '--store', str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def store_bytes(path: Path) -> bytes:
    return b''.join(p.read_bytes() for p in sorted(path.iterdir()) if p.is_file())


def test_erase_explains_first_then_erases_and_scrubs(fresh: Store) -> None:  # noqa: F811
    assert run('search', 'wombat', '--all', store=fresh.path).returncode == 0  # builds the persistent index
    before = store_bytes(fresh.path)
    assert b'wombat' in before

    asked = run('erase', 'beta', store=fresh.path)
    assert asked.returncode == 1 and asked.stdout == ''
    assert 'Erasing would remove the content of 2 entries of beta' in asked.stderr
    assert 'Nothing was changed' in asked.stderr
    assert b'wombat' in store_bytes(fresh.path)

    done = run('erase', 'beta', '--yes', '--reason', 'ticket 7', '--by', 'dpo', '--json', store=fresh.path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report['conversation_id'] == 'beta' and len(report['erased']) == 2 and report['scrubbed'] is True
    assert 'the removed text is gone from its files' in done.stderr
    on_disk = store_bytes(fresh.path)
    assert b'wombat' not in on_disk
    assert b'quokka-archive-7731' in on_disk  # the other conversation is untouched

    verify = run('verify', store=fresh.path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    search = run('search', 'wombat', '--all', store=fresh.path)
    assert 'wombat' not in search.stdout
    tail = run('tail', store=fresh.path)
    assert tail.returncode == 0
    assert '(erased): content removed' in tail.stdout
    assert f'erased 2 entries (#{report["erased"][0]}, #{report["erased"][1]}), by dpo, reason: ticket 7' in tail.stdout
    replay = run('show', 'beta', store=fresh.path)
    assert replay.returncode == 0 and 'wombat' not in replay.stdout and '[erased:' in replay.stdout


def test_erase_one_run_and_entries_by_text(fresh: Store) -> None:  # noqa: F811
    first = fresh.alpha_runs[0]
    done = run('erase', 'alpha', '--run', first, '--contains', 'quokka', '--yes', store=fresh.path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('erased 2 entries of alpha (#')
    assert b'quokka-archive-7731' not in store_bytes(fresh.path)
    again = run('erase', 'alpha', '--contains', 'quokka', '--yes', store=fresh.path)
    assert again.returncode == 0 and again.stdout.startswith('nothing to erase in alpha')
    assert run('verify', store=fresh.path).returncode == 0


def test_erase_and_retain_bad_input_one_line(fresh: Store) -> None:  # noqa: F811
    cases = [
        (('erase', 'nope', '--yes'), "no conversation 'nope'"),
        (('erase', 'beta', '--run', fresh.alpha_runs[0], '--yes'), 'no run'),
        (
            ('erase', 'beta', '--seq', '1', '--yes'),
            "entry 1 of conversation 'beta' is not one whose content erase removes",
        ),
        (('erase', 'beta', '--contains', '', '--yes'), '--contains needs some text'),
        (('retain', '--max-age', '3x'), "'3x' is not an age"),
        (('retain', '--max-age', '0d'), 'is zero'),
        (('retain',), 'give --max-age'),
        (('retain', '--max-age', '1d', '--delete', '--erase'), 'exclude each other'),
        (('retain', '--conversation-age', 'beta'), 'takes ID=AGE'),
    ]
    before = fresh.path.parent / 'before.jsonl'
    assert run('export', '-o', before, store=fresh.path).returncode == 0
    for args, message in cases:
        result = run(*args, store=fresh.path)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.count('\n') == 1 and result.stderr.startswith('eventlog: '), (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert 'Traceback' not in result.stderr
    after = fresh.path.parent / 'after.jsonl'
    assert run('export', '-o', after, store=fresh.path).returncode == 0
    assert after.read_bytes() == before.read_bytes()


def test_retain_dry_run_erase_and_delete(fresh: Store) -> None:  # noqa: F811
    time.sleep(1.1)  # every entry is now more than a second old (not a timing assertion: the data's age)
    dry = run('retain', '--max-age', '1s', '--dry-run', '--json', store=fresh.path)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned['dry_run'] is True and planned['action'] == 'erase'
    assert set(planned['conversations']) == {'alpha', 'beta'} and planned['conversations']['beta'] == 2
    assert b'wombat' in store_bytes(fresh.path)

    done = run('retain', '--max-age', '1s', '--conversation-age', 'beta=3650d', store=fresh.path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f'alpha: {planned["conversations"]["alpha"]} entries erased'
    assert lines[-1] == f'{planned["conversations"]["alpha"]} entries in 1 conversations erased'
    on_disk = store_bytes(fresh.path)
    assert b'quokka-archive-7731' not in on_disk and b'wombat' in on_disk
    assert run('verify', store=fresh.path).returncode == 0

    deleted = run('retain', '--max-age', '3650d', '--conversation-age', 'beta=1s', '--delete', store=fresh.path)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines()[0] == 'beta: deleted (4 entries)'
    assert b'wombat' not in store_bytes(fresh.path)
    listing = run('conversations', '--json', store=fresh.path)
    assert [c['conversation_id'] for c in json.loads(listing.stdout)] == ['alpha']


def test_erase_while_the_store_is_open_elsewhere_says_to_compact_later(fresh: Store) -> None:  # noqa: F811
    holder = subprocess.Popen(
        [sys.executable, '-c', _HOLDER, str(fresh.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == 'open\n'
        result = run('erase', 'beta', '--yes', store=fresh.path)
        assert result.returncode == 0, result.stderr
        assert result.stderr.count('\n') == 1 and "Run 'eventlog compact'" in result.stderr
        assert b'wombat' in store_bytes(fresh.path)
    finally:
        assert holder.stdin is not None
        holder.stdin.write('\n')
        holder.stdin.close()
        holder.wait(timeout=60)
    assert run('compact', store=fresh.path).returncode == 0
    assert b'wombat' not in store_bytes(fresh.path)


def test_erase_and_retain_on_a_postgres_store(fresh: Store, pg_dsn: str, pg_schemas: list[str]) -> None:  # noqa: F811
    from pgserver import fresh_schema

    schema = fresh_schema()
    pg_schemas.append(schema)
    url = f'{pg_dsn}#{schema}'
    export = fresh.path.parent / 'store.jsonl'
    assert run('export', '-o', export, store=fresh.path).returncode == 0
    imported = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'import', str(export), '--store', url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr

    def pg(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, 'COLUMNS': '240', 'NO_COLOR': '1'}
        env.pop('EVENTLOG_STORE', None)
        done = subprocess.run(
            [sys.executable, '-m', 'eventlog_cli', *args, '--store', url],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert 'Traceback' not in done.stderr
        return done

    done = pg('erase', 'beta', '--yes', '--json')
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)['erased']) == 2
    assert 'vacuumed (VACUUM FULL)' in done.stderr and 'gone from its files' in done.stderr
    assert pg('verify').returncode == 0
    shown = pg('show', 'beta')
    assert 'wombat' not in shown.stdout and '[erased:' in shown.stdout
    bad = pg('retain', '--max-age', 'soon')
    assert bad.returncode == 1 and bad.stderr.count('\n') == 1 and 'is not an age' in bad.stderr
    kept = pg('retain', '--max-age', '3650d', '--json')
    assert kept.returncode == 0 and json.loads(kept.stdout)['total'] == 0
