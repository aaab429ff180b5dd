"""`keygen`, `checkpoint`, `verify --checkpoint`, `export --signed` and `verify-export`, each run
as a real `eventlog` process (`python -m eventlog_cli`) on a store built by real agent runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
from clitools import Store, fresh

from eventlog import LmdbEventLog
from eventlog._keys import (
    Table,
    append_hash,
    ck,
    conv_key,
    decode_body,
    decode_conversation,
    encode_body,
    encode_conversation,
    key_seq,
    seq_key,
    split_value,
)
from eventlog._storage import WriteTxn

__all__ = ['fresh']


def eventlog(*args: str | Path, store: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `eventlog ARGS [--store STORE]` in its own process."""
    argv = [sys.executable, '-m', 'eventlog_cli', *map(str, args)]
    if store is not None:
        argv += ['--store', str(store)]
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def _rewrite_alpha(path: Path) -> int:
    """Rewrite every reply of `alpha` ('noted' -> 'NOTED') with recomputed hashes and head; return
    the first altered seq."""
    log = LmdbEventLog(path)
    first: list[int] = []

    def work(txn: WriteTxn) -> None:
        prev = b''
        for key, _ in list(txn.scan(Table.BY_CONV, prefix=ck('alpha'))):
            seq = key_seq(key)
            value = txn.get(Table.ENTRIES, seq_key(seq))
            assert value is not None
            body = decode_body(seq, value)
            hashed, _ = split_value(value)
            if body.kind == 'message' and b'noted' in body.payload:
                hashed = encode_body(msgspec.structs.replace(body, payload=body.payload.replace(b'noted', b'NOTED')))
                first.append(seq)
            digest = append_hash(prev, hashed)  # the store's chain rule 2
            txn.put(Table.ENTRIES, seq_key(seq), hashed + digest)
            prev = digest
        raw = txn.get(Table.CONVS, conv_key('alpha'))
        assert raw is not None
        record = decode_conversation('alpha', raw)
        record.head_hash = prev
        txn.put(Table.CONVS, conv_key('alpha'), encode_conversation(record))

    try:
        log._write_sync(work)  # pyright: ignore[reportPrivateUsage]
    finally:
        log.close()
    assert first
    return first[0]


def test_keygen_checkpoint_and_verify_catch_a_rewritten_chain(fresh: Store, tmp_path: Path) -> None:
    key = tmp_path / 'keys' / 'audit.key'
    key.parent.mkdir()
    made = eventlog('keygen', '-o', key)
    assert made.returncode == 0, made.stderr
    assert 'fingerprint ed25519:' in made.stdout
    assert key.read_bytes().startswith(b'-----BEGIN PRIVATE KEY-----')
    assert (tmp_path / 'keys' / 'audit.key.pub').read_bytes().startswith(b'-----BEGIN PUBLIC KEY-----')
    assert key.stat().st_mode & 0o777 == 0o600
    again = eventlog('keygen', '-o', key)
    assert again.returncode == 1 and again.stderr.count('\n') == 1 and 'exists' in again.stderr

    checkpoint = tmp_path / 'cp-1.json'
    done = eventlog('checkpoint', '--key', key, '-o', checkpoint, store=fresh.path)
    assert done.returncode == 0, done.stderr
    assert 'checkpoint of 2 conversations' in done.stdout
    assert json.loads(checkpoint.read_bytes())['type'] == 'checkpoint'
    public = tmp_path / 'keys' / 'audit.key.pub'
    ok = eventlog('verify', '--checkpoint', checkpoint, '--public-key', public, store=fresh.path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith('ok:') and 'matches 1 signed checkpoint' in ok.stdout

    first = _rewrite_alpha(fresh.path)
    plain = eventlog('verify', store=fresh.path)
    assert plain.returncode == 0, plain.stdout  # the recomputed chain fools the hash check alone
    caught = eventlog('verify', '--checkpoint', checkpoint, '--public-key', public, '--json', store=fresh.path)
    assert caught.returncode == 1
    report = json.loads(caught.stdout)
    assert [(p['code'], p['conversation_id'], p['seq']) for p in report['problems']] == [
        ('checkpoint-mismatch', 'alpha', first)
    ]


def test_bad_keys_and_checkpoints_are_one_line_errors(fresh: Store, tmp_path: Path) -> None:
    key = tmp_path / 'a.key'
    other = tmp_path / 'b.key'
    assert eventlog('keygen', '-o', key).returncode == 0
    assert eventlog('keygen', '-o', other).returncode == 0
    checkpoint = tmp_path / 'cp.json'
    assert eventlog('checkpoint', '-k', key, '-o', checkpoint, store=fresh.path).returncode == 0
    garbled = tmp_path / 'garbled.json'
    data = json.loads(checkpoint.read_bytes())
    garbled.write_text(json.dumps(dict(data, signature=data['signature'][:20])))
    cut = tmp_path / 'cut.json'
    cut.write_bytes(checkpoint.read_bytes()[:100])
    cases = [
        (('checkpoint', '-k', Path(f'{key}.pub'), '-o', tmp_path / 'x.json'), 'is a public key'),
        (('checkpoint', '-k', tmp_path / 'absent.key', '-o', tmp_path / 'x.json'), 'cannot read the key file'),
        (('verify', '-c', checkpoint, '-p', Path(f'{other}.pub')), 'signed by another key'),
        (('verify', '-c', garbled, '-p', Path(f'{key}.pub')), 'truncated or malformed'),
        (('verify', '-c', cut, '-p', Path(f'{key}.pub')), 'is not a checkpoint'),
        (('verify', '-c', checkpoint, '-p', cut), 'not a PEM public key'),
    ]
    for args, message in cases:
        done = eventlog(*args, store=fresh.path)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith('eventlog: ') and done.stderr.count('\n') == 1, done.stderr
        assert message in done.stderr, (args, done.stderr)
    assert not (tmp_path / 'x.json').exists()
    half = eventlog('verify', '-c', checkpoint, store=fresh.path)
    assert half.returncode == 2 and 'go together' in half.stderr


def test_a_signed_export_is_checked_on_a_machine_without_the_store(fresh: Store, tmp_path: Path) -> None:
    key = tmp_path / 'k'
    assert eventlog('keygen', '-o', key).returncode == 0
    plain = tmp_path / 'plain.jsonl'
    assert eventlog('export', '-o', plain, store=fresh.path).returncode == 0
    unsigned = eventlog('export', '--signed', '-o', tmp_path / 'none.jsonl', store=fresh.path)
    assert unsigned.returncode == 1 and 'no checkpoint' in unsigned.stderr
    signed = tmp_path / 'signed.jsonl'
    done = eventlog('export', '--signed', '--key', key, '-o', signed, store=fresh.path)
    assert done.returncode == 0, done.stderr
    lines = signed.read_bytes().splitlines(keepends=True)
    assert b''.join(lines[:-2]) == plain.read_bytes()
    assert json.loads(lines[-1])['keys'][0].startswith('ed25519:')

    elsewhere = tmp_path / 'auditor'
    elsewhere.mkdir()
    (elsewhere / 'export.jsonl').write_bytes(signed.read_bytes())
    (elsewhere / 'k.pub').write_bytes(Path(f'{key}.pub').read_bytes())
    ok = eventlog('verify-export', elsewhere / 'export.jsonl', '--public-key', elsewhere / 'k.pub')
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith('ok: ')

    first = _rewrite_alpha(fresh.path)
    rewritten = elsewhere / 'rewritten.jsonl'
    assert eventlog('export', '-o', rewritten, store=fresh.path).returncode == 0
    rewritten.write_bytes(rewritten.read_bytes() + b''.join(lines[-2:]))
    caught = eventlog('verify-export', rewritten, '-p', elsewhere / 'k.pub')
    assert caught.returncode == 1
    assert caught.stdout.startswith('BROKEN: 1 conversations')
    assert f'alpha #{first} checkpoint-mismatch' in caught.stdout
    wrong = eventlog('verify-export', plain, '-p', elsewhere / 'k.pub')
    assert wrong.returncode == 1 and 'not a signed export' in wrong.stderr
    cut = elsewhere / 'cut.jsonl'
    cut.write_bytes(b''.join(lines[:-1]))  # the closing signature line lost
    short = eventlog('verify-export', cut, '-p', elsewhere / 'k.pub')
    assert short.returncode == 1 and 'was cut short' in short.stderr, short.stderr
    assert short.stderr.count('\n') == 1 and 'Traceback' not in short.stderr
    copy = tmp_path / 'copy.lmdb'
    imported = eventlog('import', signed, store=copy)
    assert imported.returncode == 0, imported.stderr
