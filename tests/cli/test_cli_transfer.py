"""`export`, `import`, `verify`, `stats`, `reindex`: what operators and auditors run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import lmdb
from clitools import DETAIL, Store, fresh, invoke, open_log, shared

from eventlog._engine import seq_key

__all__ = ['fresh', 'shared']


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_export_everything_to_stdout(shared: Store) -> None:
    result = invoke('export', store=shared.path)
    assert result.exit_code == 0, result.output
    lines = _lines(result.stdout)
    assert lines[0]['format'] == 'pydantic-ai-eventlog'
    assert {line['conversation_id'] for line in lines[1:-1]} == {'alpha', 'beta'}
    assert lines[-1]['type'] == 'closing' and lines[-1]['entries'] == len(lines) - 2
    assert result.stderr == f'exported {len(lines) - 2} entries\n'


def test_export_one_conversation_to_a_file_and_import_it(shared: Store, tmp_path: Path) -> None:
    target = tmp_path / 'alpha.jsonl'
    result = invoke('export', 'alpha', '-o', target, store=shared.path)
    assert result.exit_code == 0, result.output
    assert result.stdout == ''
    assert result.stderr == f'exported 22 entries to {target}\n'
    assert not list(tmp_path.glob('.alpha.jsonl.*'))
    assert {line['conversation_id'] for line in _lines(target.read_text())[1:-1]} == {'alpha'}

    copy = tmp_path / 'copy.lmdb'
    imported = invoke('import', target, store=copy)
    assert imported.exit_code == 0, imported.output
    assert imported.stderr.endswith(f'imported 22 entries from {target} into {copy}\n')
    assert invoke('verify', store=copy).exit_code == 0
    original, restored = open_log(shared.path), open_log(copy)
    try:
        assert asyncio.run(restored.transcript_json('alpha')) == asyncio.run(original.transcript_json('alpha'))
    finally:
        original.close()
        restored.close()
    # Importing it again is refused whole, in one line.
    again = invoke('import', target, store=copy)
    assert again.exit_code == 1
    assert again.stderr.endswith("conversation 'alpha' already exists in this log; nothing was imported\n")


def test_import_from_stdin(shared: Store, tmp_path: Path) -> None:
    export = invoke('export', 'beta', store=shared.path).stdout
    result = invoke('import', '-', store=tmp_path / 'in.lmdb', input=export)
    assert result.exit_code == 0, result.output
    assert 'imported 4 entries' in result.stderr
    assert 'wombat' in invoke('show', 'beta', store=tmp_path / 'in.lmdb').stdout


def test_import_errors(tmp_path: Path) -> None:
    missing = invoke('import', tmp_path / 'nothing.jsonl', store=tmp_path / 's.lmdb')
    assert missing.exit_code == 1 and missing.stderr.startswith('eventlog: no file')
    assert not (tmp_path / 's.lmdb').exists()
    folder = invoke('import', tmp_path, store=tmp_path / 's.lmdb')
    assert folder.exit_code == 1 and folder.stderr == f'eventlog: {tmp_path} is a directory, not an export file\n'
    assert not (tmp_path / 's.lmdb').exists()
    junk = tmp_path / 'junk.jsonl'
    junk.write_text('hello\n')
    bad = invoke('import', junk, store=tmp_path / 's.lmdb')
    assert bad.exit_code == 1 and 'not an eventlog export' in bad.stderr


def test_export_errors(shared: Store, tmp_path: Path) -> None:
    unknown = invoke('export', 'nope', store=shared.path)
    assert unknown.exit_code == 1 and unknown.stderr == "eventlog: no conversation 'nope' in this store\n"
    unwritable = invoke('export', '-o', tmp_path / 'no-such-dir' / 'x.jsonl', store=shared.path)
    assert unwritable.exit_code == 1 and unwritable.stderr.startswith('eventlog: ')


def test_verify_an_intact_store(shared: Store) -> None:
    result = invoke('verify', store=shared.path)
    assert result.exit_code == 0
    assert result.stdout.strip() == 'ok: 26 entries in 2 conversations; every hash chain is intact'
    data = json.loads(invoke('verify', '--json', store=shared.path).stdout)
    assert data == {
        'ok': True,
        'entries_checked': 26,
        'conversations_checked': 2,
        'problems': [],
        'scrub_pending': None,
        'chain_from': 1,
        'conversations': 2,
        'deletion_tombstones': 0,
    }


def test_verify_names_the_first_altered_entry(fresh: Store) -> None:
    log = open_log(fresh.path)
    try:
        target = next(e.seq for e in asyncio.run(log.entries(conversation_id='alpha')) if b'quokka' in e.payload)
    finally:
        log.close()
    env = lmdb.open(str(fresh.path), max_dbs=32)
    entries = env.open_db(b'entries')
    with env.begin(write=True) as txn:
        value = txn.get(seq_key(target), db=entries)
        assert value is not None
        txn.put(seq_key(target), value.replace(b'quokka', b'koala!'), db=entries)
    env.close()
    result = invoke('verify', store=fresh.path)
    assert result.exit_code == 1
    assert 'BROKEN: 1 of 2 conversations' in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith(' alpha') or line.startswith('alpha'))
    assert f'#{target}' in row
    data = json.loads(invoke('verify', '--json', store=fresh.path).stdout)
    assert data['ok'] is False
    assert [(p['conversation_id'], p['seq']) for p in data['problems']] == [('alpha', target)]
    assert invoke('verify', '--json', store=fresh.path).exit_code == 1


def test_stats(shared: Store) -> None:
    result = invoke('stats', store=shared.path)
    assert result.exit_code == 0, result.output
    assert 'conversations  2 (0 archived)' in result.stdout
    assert 'search index' in result.stdout
    data = json.loads(invoke('stats', '--json', store=shared.path).stdout)
    assert data['conversations'] == 2 and data['runs'] == 5 and data['entries'] == 26
    assert data['messages'] == 12 and data['compactions'] == 1
    assert data['runs_by_status'] == {'completed': 5}
    assert data['disk_bytes'] > 0 and data['last_seq'] == 26
    assert data['index']['kind'] == 'persistent'


def test_reindex_and_the_index_state(fresh: Store) -> None:
    before = json.loads(invoke('stats', '--json', store=fresh.path).stdout)['index']
    assert before['kind'] == 'persistent' and before['analyzer'] is None
    assert 'not built yet' in invoke('stats', store=fresh.path).stdout
    assert invoke('search', 'quokka', '-c', 'alpha', store=fresh.path).exit_code == 0
    searched = json.loads(invoke('stats', '--json', store=fresh.path).stdout)['index']
    assert searched['analyzer'] is None  # a search writes nothing: it indexed in memory
    assert invoke('reindex', store=fresh.path).exit_code == 0
    built = json.loads(invoke('stats', '--json', store=fresh.path).stdout)['index']
    assert built['analyzer'] == 'default' and built['current'] is True and built['documents'] == 12
    assert '12 documents, default analyzer, current' in invoke('stats', store=fresh.path).stdout

    result = invoke('reindex', '--analyzer', 'english', store=fresh.path)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == 'rebuilt the search index with the english analyzer: 12 documents from 26 entries'
    # The index now stems; a search with the default analyzer still works (in memory).
    english = json.loads(
        invoke('search', 'remembering', '-c', 'alpha', '--analyzer', 'english', '--json', store=fresh.path).stdout
    )
    assert english['matches'] >= 1
    default = json.loads(invoke('search', 'quokka', '-c', 'alpha', '--json', store=fresh.path).stdout)
    assert default['matches'] == 2  # the statement and the reply quoting it
    data = json.loads(invoke('reindex', '--json', store=fresh.path).stdout)
    assert data['analyzer'] == 'default' and data['documents'] == 12 and data['current'] is True
    bad = invoke('reindex', '--analyzer', 'klingon', store=fresh.path)
    assert bad.exit_code == 1 and "unknown analyzer 'klingon'" in bad.stderr


def test_exported_detail_survives_the_round_trip(shared: Store, tmp_path: Path) -> None:
    target = tmp_path / 'all.jsonl'
    invoke('export', '-o', target, store=shared.path)
    assert DETAIL in target.read_text()


def test_import_of_a_version_1_export_needs_the_flag(tmp_path: Path) -> None:
    v1 = Path(__file__).parents[1] / 'log' / 'fixtures' / 'v1-export.jsonl'
    store = tmp_path / 'store.lmdb'
    refused = invoke('import', v1, store=store)
    assert refused.exit_code == 1 and refused.stderr.count('\n') == 1
    assert 'format 1' in refused.stderr and '--allow-version-1' in refused.stderr
    assert not store.exists()  # a refused import creates nothing
    accepted = invoke('import', v1, '--allow-version-1', store=store)
    assert accepted.exit_code == 0, accepted.output
    assert invoke('verify', store=store).exit_code == 0
    lines = v1.read_text().splitlines()
    assert f'imported {len(lines) - 1} entries' in accepted.stderr
