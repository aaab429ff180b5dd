"""`eventlog keygen --encryption`, `eventlog encrypt`, `--keys` and `eventlog shred`, run as real
processes on a store built by real agent runs (docs/encryption.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from clitools import Store, fresh  # noqa: F401  (the fixture)


def run(*args: str | Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`eventlog ARGS [--store STORE]` in a child process."""
    env = {**os.environ, 'COLUMNS': '240', 'NO_COLOR': '1'}
    env.pop('EVENTLOG_STORE', None)
    env.pop('EVENTLOG_KEYS', None)
    tail = [] if store is None else ['--store', str(store)]
    return subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *map(str, args), *tail],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def store_bytes(path: Path) -> bytes:
    return b''.join(p.read_bytes() for p in sorted(path.iterdir()) if p.is_file())


def test_encrypt_read_search_and_shred_from_the_command_line(fresh: Store, tmp_path: Path) -> None:  # noqa: F811
    ring = tmp_path / 'ring'
    made = run('keygen', '--encryption', ring)
    assert made.returncode == 0, made.stderr
    assert (ring / 'kek').stat().st_size == 32
    again = run('keygen', '--encryption', ring)
    assert again.returncode == 1 and 'exists' in again.stderr

    assert run('search', 'wombat', '--all', store=fresh.path).returncode == 0  # builds the index at rest
    assert b'wombat' in store_bytes(fresh.path)
    refused = run('encrypt', store=fresh.path)
    assert refused.returncode == 1 and '--keys PATH' in refused.stderr
    done = run('encrypt', '--keys', ring, '--json', store=fresh.path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report['sealed'] > 0 and report['scrub_pending'] is False
    on_disk = store_bytes(fresh.path)
    assert b'wombat' not in on_disk and b'quokka-archive-7731' not in on_disk
    assert run('encrypt', '--keys', ring, store=fresh.path).returncode == 1  # encrypted already

    # Without the keyring: records and verify work; messages and writes refuse in one line.
    verify = run('verify', store=fresh.path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert run('conversations', store=fresh.path).returncode == 0
    stats = run('stats', store=fresh.path)
    assert stats.returncode == 0 and 'none at rest' in stats.stdout
    shown = run('show', 'beta', store=fresh.path)
    assert shown.returncode == 1 and '--keys' in shown.stderr and len(shown.stderr.splitlines()) == 1
    titled = run('title', 'beta', 'New', store=fresh.path)
    assert titled.returncode == 1 and 'no keyring was given (--keys)' in titled.stderr

    shown = run('show', 'beta', '--keys', ring, store=fresh.path)
    assert shown.returncode == 0 and 'wombat-4242' in shown.stdout
    found = run('search', 'wombat', '--all', '--keys', ring, store=fresh.path)
    assert found.returncode == 0 and 'wombat' in found.stdout
    stats = run('stats', '--keys', ring, store=fresh.path)
    assert 'none at rest' in stats.stdout

    asked = run('shred', 'beta', '--keys', ring, store=fresh.path)
    assert asked.returncode == 0 and 'Nothing was changed' in asked.stderr
    shredded = run('shred', 'beta', '--yes', '--reason', 'ticket 9', '--keys', ring, '--json', store=fresh.path)
    assert shredded.returncode == 0, shredded.stderr
    assert json.loads(shredded.stdout)['conversation_id'] == 'beta'
    shown = run('show', 'beta', '--keys', ring, store=fresh.path)
    assert shown.returncode == 0 and 'wombat' not in shown.stdout and '[shredded:' in shown.stdout
    found = run('search', 'wombat', '--all', '--keys', ring, store=fresh.path)
    assert 'wombat' not in found.stdout
    assert 'quokka' in run('search', 'quokka', '--all', '--keys', ring, store=fresh.path).stdout
    assert run('verify', store=fresh.path).returncode == 0
    twice = run('shred', 'beta', '--yes', '--keys', ring, store=fresh.path)
    assert twice.returncode == 1 and 'was shredded' in twice.stderr


def test_shred_refuses_a_plain_store(fresh: Store) -> None:  # noqa: F811
    result = run('shred', 'beta', '--yes', store=fresh.path)
    assert result.returncode == 1 and 'not encrypted' in result.stderr
