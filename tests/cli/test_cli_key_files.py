"""Key files and checkpoint files handled as ssh handles keys: a private key others may read is
refused, no key file is read past a small bound, and a checkpoint file is never replaced
without `--force`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import Store, fresh

from eventlog.checkpoint import PublicKey, Signer
from eventlog.errors import KeyFileError

__all__ = ['fresh']


def eventlog(*args: str | Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, '-m', 'eventlog_cli', *map(str, args)]
    if store is not None:
        argv += ['--store', str(store)]
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def _one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith('eventlog: ') and done.stderr.count('\n') == 1, done.stderr
    assert expected in done.stderr, done.stderr


def test_a_private_key_open_to_others_is_refused(tmp_path: Path) -> None:
    key = tmp_path / 'signing.key'
    assert eventlog('keygen', '-o', key).returncode == 0
    assert Signer.from_file(key)  # 0600 as made
    for mode in (0o644, 0o640, 0o602):
        key.chmod(mode)
        with pytest.raises(KeyFileError, match=f'mode {mode:04o}.*chmod 600'):
            Signer.from_file(key)
    assert PublicKey.from_file(f'{key}.pub')  # a public key is for everyone (0644)


def test_no_key_file_is_read_past_the_bound(tmp_path: Path) -> None:
    sparse = tmp_path / 'sparse.key'
    with sparse.open('wb') as fh:
        fh.truncate(1 << 30)  # 1 GB, no block written
    sparse.chmod(0o600)
    for path in (sparse, Path('/dev/zero')):
        for read in (Signer.from_file, PublicKey.from_file):
            with pytest.raises(KeyFileError, match=r'more than \d+ bytes'):
                read(path)
    # The command line likewise, in a process whose memory cannot hold the file.
    script = (
        'import resource, sys\n'
        'resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n'
        'from eventlog_cli.launch import main\nsys.argv[0] = "eventlog"\nmain()\n'
    )
    for path in (sparse, Path('/dev/zero')):
        done = subprocess.run(
            [sys.executable, '-c', script, 'checkpoint', '-k', str(path), '-o', str(tmp_path / 'cp.json')],
            capture_output=True,
            text=True,
            timeout=120,
        )
        _one_line(done, 'is not a key')
        done = subprocess.run(
            [sys.executable, '-c', script, 'verify-export', str(tmp_path / 'none.jsonl'), '-p', str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        _one_line(done, 'is not a key')


def test_checkpoint_refuses_to_replace_a_checkpoint_file_without_force(fresh: Store, tmp_path: Path) -> None:
    key = tmp_path / 'signing.key'
    assert eventlog('keygen', '-o', key).returncode == 0
    output = tmp_path / 'cp.json'
    assert eventlog('checkpoint', '-k', key, '-o', output, store=fresh.path).returncode == 0
    first = output.read_bytes()
    refused = eventlog('checkpoint', '-k', key, '-o', output, store=fresh.path)
    _one_line(refused, 'refusing to replace a checkpoint')
    assert output.read_bytes() == first
    listed = eventlog('verify', '--json', store=fresh.path)
    assert listed.returncode == 0
    replaced = eventlog('checkpoint', '-k', key, '-o', output, '--force', store=fresh.path)
    assert replaced.returncode == 0, replaced.stderr
    assert output.read_bytes() != first
    key.chmod(0o644)
    _one_line(eventlog('checkpoint', '-k', key, '-o', tmp_path / 'cp2.json', store=fresh.path), 'chmod 600')
    assert not (tmp_path / 'cp2.json').exists()
