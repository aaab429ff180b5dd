"""Encryption at rest (docs/encryption.md): content sealed under per-conversation keys held by a key
provider outside the store, `verify` without any key, typed errors for a missing, wrong or moved
key or payload, and crypto-shredding that reaches a backup taken before it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import lmdb
import msgspec
import pytest
from backends import keyring_for, make_log, postgres_dsn, schema_for
from logtools import add_run, exchange, tool_exchange
from pydantic_ai.messages import ModelRequest, ModelResponse

from eventlog import InMemoryEventLog, LmdbEventLog, message_entry
from eventlog._keys import StoredBody, decode_body, encode_body, seq_key, split_value
from eventlog.encryption import SHREDDED_METADATA_KEY, FileKeyProvider, Sealer, is_sealed
from eventlog.errors import (
    ConversationShreddedError,
    EncryptionSetupError,
    KeyMissingError,
    PayloadMovedError,
    WrongKeyError,
)
from eventlog.log import EventLogBase


def _marker() -> str:
    return f'MARKER{uuid.uuid4().hex}'


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found: list[Path] = []
    for path in root.rglob('*'):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def _raw_values(store: Path) -> dict[int, bytes]:
    """Every ENTRIES value of an LMDB store, read straight from its file."""
    env = lmdb.open(str(store), max_dbs=32, readonly=True, lock=False)
    try:
        db = env.open_db(b'entries', create=False)
        with env.begin(db=db) as txn:
            return {int.from_bytes(bytes(k)): bytes(v) for k, v in txn.cursor()}
    finally:
        env.close()


def _plaintexts(values: dict[int, bytes], ring: FileKeyProvider) -> list[bytes]:
    """Everything any data key the keyring still holds opens among `values`' sealed payloads."""
    opened: list[bytes] = []
    for store_id, _conv, key in ring.held():
        sealer = Sealer(store_id, _FixedKey(key))
        for seq, value in values.items():
            body = decode_body(seq, value)
            if is_sealed(body.payload):
                try:
                    opened.append(sealer.open(seq, body.conversation_id, body.payload))
                except (WrongKeyError, PayloadMovedError):
                    continue
    return opened


class _FixedKey:
    """A provider answering one data key for every conversation (to try a key on everything)."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
        return self.key

    def destroy(self, store_id: str, conversation_id: str) -> bool:
        return False


async def test_lmdb_marker_never_reaches_the_store_files_and_reads_back(tmp_path: Path) -> None:
    marker = _marker()
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        await add_run(log, 'c', 'r', exchange(1, marker) + tool_exchange(2))
        assert log.encrypted
        transcript = await log.transcript_json('c')
        assert marker.encode() in transcript
    finally:
        log.close()
    assert _files_holding(tmp_path / 'store.lmdb', marker.encode()) == []
    assert _files_holding(tmp_path / 'keyring', marker.encode()) == []
    # Read-only and without any key: records and verify work, payloads refuse with a typed error.
    evidence = LmdbEventLog(tmp_path / 'store.lmdb', read_only=True)
    try:
        report = await evidence.verify()
        assert report.ok, report
        assert report.entries_checked == 8
        conv = await evidence.get_conversation('c')
        assert conv is not None and conv.message_count == 6
        with pytest.raises(KeyMissingError, match='opened without its keys'):
            await evidence.transcript('c')
    finally:
        evidence.close()


async def test_opening_rules(tmp_path: Path) -> None:
    ring = keyring_for(tmp_path)
    plain = LmdbEventLog(tmp_path / 'plain')
    await add_run(plain, 'c', 'r', exchange(1))
    plain.close()
    with pytest.raises(EncryptionSetupError, match='eventlog encrypt'):
        LmdbEventLog(tmp_path / 'plain', keys=ring)
    reopened = LmdbEventLog(tmp_path / 'plain')  # the refused open changed nothing
    assert not reopened.encrypted and (await reopened.verify()).ok
    reopened.close()
    # A plain store stays byte-for-byte as before: no encryption record, payloads in clear.
    values = _raw_values(tmp_path / 'plain')
    assert not any(is_sealed(decode_body(seq, v).payload) for seq, v in values.items())
    sealed = LmdbEventLog(tmp_path / 'sealed', keys=ring)
    await add_run(sealed, 'c', 'r', exchange(1))
    sealed.close()
    with pytest.raises(EncryptionSetupError, match='keys='):
        LmdbEventLog(tmp_path / 'sealed')
    with pytest.raises(EncryptionSetupError, match='not a keyring'):
        FileKeyProvider(tmp_path / 'plain')
    with pytest.raises(EncryptionSetupError, match='exists'):
        FileKeyProvider.create(tmp_path / 'keyring')


async def test_missing_and_wrong_keys_are_typed(tmp_path: Path) -> None:
    log = make_log('lmdb-encrypted', tmp_path)
    await add_run(log, 'c', 'r', exchange(1, 'secret'))
    store_id = log.store_id
    assert store_id is not None
    log.close()
    ring_dir = tmp_path / 'keyring'
    # Another keyring: its own key-encryption key cannot unwrap this keyring's data keys.
    other = FileKeyProvider.create(tmp_path / 'other')
    shutil.rmtree(other.path / 'keys')
    shutil.copytree(ring_dir / 'keys', other.path / 'keys')
    wrong_kek = LmdbEventLog(tmp_path / 'store.lmdb', keys=FileKeyProvider(other.path))
    with pytest.raises(WrongKeyError, match='cannot be unwrapped'):
        await wrong_kek.transcript('c')
    wrong_kek.close()
    # A keyring holding another data key for the same conversation.
    third = FileKeyProvider.create(tmp_path / 'third')
    third.data_key(store_id, 'c', create=True)
    wrong_dk = LmdbEventLog(tmp_path / 'store.lmdb', keys=third)
    with pytest.raises(WrongKeyError, match='another data key'):
        await wrong_dk.transcript('c')
    wrong_dk.close()
    # The key is gone from the keyring (without a shred): reads say so.
    for path in (ring_dir / 'keys').glob('*.key'):
        path.unlink()
    missing = LmdbEventLog(tmp_path / 'store.lmdb', keys=FileKeyProvider(ring_dir))
    with pytest.raises(KeyMissingError, match="holds no data key for conversation 'c'"):
        await missing.transcript('c')
    assert (await missing.verify()).ok
    missing.close()


def _swap_payloads(values: dict[int, bytes], a: int, b: int) -> tuple[bytes, bytes]:
    """The ENTRIES values of `a` and `b` with their sealed payloads exchanged (hashes kept)."""
    body_a, body_b = decode_body(a, values[a]), decode_body(b, values[b])
    new_a = encode_body(msgspec.structs.replace(body_a, payload=body_b.payload)) + split_value(values[a])[1]
    new_b = encode_body(msgspec.structs.replace(body_b, payload=body_a.payload)) + split_value(values[b])[1]
    return new_a, new_b


async def test_a_payload_moved_to_another_entry_is_refused_lmdb(tmp_path: Path) -> None:
    log = make_log('lmdb-encrypted', tmp_path)
    seqs = await add_run(log, 'c', 'r', exchange(1, 'first') + exchange(2, 'second'))
    log.close()
    store = tmp_path / 'store.lmdb'
    new_a, new_b = _swap_payloads(_raw_values(store), seqs[0], seqs[2])
    env = lmdb.open(str(store), max_dbs=32)
    db = env.open_db(b'entries')
    with env.begin(write=True, db=db) as txn:
        txn.put(seq_key(seqs[0]), new_a)
        txn.put(seq_key(seqs[2]), new_b)
    env.close()
    moved = make_log('lmdb-encrypted', tmp_path)
    try:
        with pytest.raises(PayloadMovedError, match=f'entry {seqs[0]} does not belong to it'):
            await moved.transcript('c')
        report = await moved.verify()
        assert not report.ok and report.problems[0].seq == seqs[0]
    finally:
        moved.close()


async def test_a_payload_moved_to_another_entry_is_refused_postgres(tmp_path: Path) -> None:
    psycopg = pytest.importorskip('psycopg')
    log = make_log('postgres-encrypted', tmp_path)
    schema = schema_for(tmp_path / 'store.lmdb')
    try:
        seqs = await add_run(log, 'c', 'r', exchange(1, 'first') + exchange(2, 'second'))
        with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
            rows = conn.execute(f'SELECT k, v FROM "{schema}".entries').fetchall()
            values = {int.from_bytes(bytes(k)): bytes(v) for k, v in rows}
            new_a, new_b = _swap_payloads(values, seqs[1], seqs[3])
            conn.execute("SET session_replication_role = 'replica'")  # past the append-only trigger
            conn.execute(f'UPDATE "{schema}".entries SET v = %s WHERE k = %s', (new_a, seq_key(seqs[1])))
            conn.execute(f'UPDATE "{schema}".entries SET v = %s WHERE k = %s', (new_b, seq_key(seqs[3])))
        with pytest.raises(PayloadMovedError):
            await log.transcript('c')
        assert not (await log.verify()).ok
    finally:
        log.close()
        from pgserver import drop_schema

        drop_schema(postgres_dsn(), schema)


async def test_postgres_marker_absent_from_the_data_directory_after_checkpoint(tmp_path: Path) -> None:
    psycopg = pytest.importorskip('psycopg')
    marker = _marker()
    log = make_log('postgres-encrypted', tmp_path)
    schema = schema_for(tmp_path / 'store.lmdb')
    try:
        await add_run(log, 'c', 'r', exchange(1, marker))
        assert marker.encode() in await log.transcript_json('c')
        with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
            conn.execute('CHECKPOINT')
            row = conn.execute('SHOW data_directory').fetchone()
        assert row is not None
        data = Path(row[0])
        if not os.access(data, os.R_OK):
            pytest.skip(f'the server data directory {data} cannot be read from here')
        assert (data / 'base').is_dir()
        assert _files_holding(data, marker.encode()) == []
        assert (await log.verify()).ok
    finally:
        log.close()
        from pgserver import drop_schema

        drop_schema(postgres_dsn(), schema)


async def _shred_and_check(log: EventLogBase, marker: str) -> int:
    seq = await log.shred('c', reason='ticket 7', by='dpo')
    messages = await log.transcript('c')
    assert [type(m) for m in messages] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
    assert all(m.metadata == {SHREDDED_METADATA_KEY: seq} for m in messages)
    assert marker.encode() not in await log.transcript_json('c')
    assert marker.encode() in await log.transcript_json('other')
    assert (await log.verify()).ok
    with pytest.raises(ConversationShreddedError, match='was shredded'):
        await log.append(message_entry(messages[0], conversation_id='c', run_id='r2'))
    with pytest.raises(ConversationShreddedError):
        await log.shred('c')
    entries = await log.entries(conversation_id='c')
    assert entries[-1].kind == 'shred' and entries[-1].seq == seq
    return seq


async def test_shred_reaches_a_backup_taken_before_it(tmp_path: Path) -> None:
    marker = _marker()
    log = make_log('lmdb-encrypted', tmp_path)
    await add_run(log, 'c', 'r', exchange(1, marker) + exchange(2, marker))
    await add_run(log, 'other', 'r3', exchange(3, marker))
    log.close()
    backup = tmp_path / 'backup.lmdb'
    shutil.copytree(tmp_path / 'store.lmdb', backup)
    ring = keyring_for(tmp_path)
    before = _plaintexts(_raw_values(backup), ring)
    assert sum(marker.encode() in p for p in before) == 6  # every key still held: all readable
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        await _shred_and_check(log, marker)
    finally:
        log.close()
    # Every key the provider still holds, tried on every sealed payload of the backup and the store.
    for values in (_raw_values(backup), _raw_values(tmp_path / 'store.lmdb')):
        opened = _plaintexts(values, ring)
        assert sum(marker.encode() in p for p in opened) == 2  # only conversation 'other'
    restored = LmdbEventLog(backup, keys=ring)
    try:
        with pytest.raises(KeyMissingError):
            await restored.transcript('c')  # the backup does not know of the shred: the key is gone
        assert marker.encode() in await restored.transcript_json('other')
    finally:
        restored.close()


async def test_shred_on_postgres(tmp_path: Path) -> None:
    marker = _marker()
    log = make_log('postgres-encrypted', tmp_path)
    try:
        await add_run(log, 'c', 'r', exchange(1, marker) + exchange(2, marker))
        await add_run(log, 'other', 'r3', exchange(3, marker))
        await _shred_and_check(log, marker)
        assert await log.delete_conversation('c') > 0  # a shredded conversation can still be deleted
    finally:
        log.close()
        from pgserver import drop_schema

        drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))


async def test_erase_in_a_live_encrypted_conversation(tmp_path: Path) -> None:
    marker = _marker()
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        seqs = await add_run(log, 'c', 'r', exchange(1, marker) + exchange(2, 'kept'))
        done = await log.erase('c', where=lambda e: e.seq in seqs[:2])
        assert done.seqs == seqs[:2]
        text = await log.transcript_json('c')
        assert marker.encode() not in text and b'answer 2 kept' in text
        assert (await log.verify()).ok
    finally:
        log.close()
    for seq, value in _raw_values(tmp_path / 'store.lmdb').items():
        body: StoredBody = decode_body(seq, value)
        if body.kind == 'message':
            assert is_sealed(body.payload)  # the placeholders are sealed too


async def test_shred_refuses_a_plain_store_and_plain_export_imports_sealed(tmp_path: Path) -> None:
    marker = _marker()
    source = InMemoryEventLog()
    await add_run(source, 'c', 'r', exchange(1, marker) + tool_exchange(2))
    with pytest.raises(EncryptionSetupError, match='not encrypted'):
        await source.shred('c')
    export = tmp_path / 'plain.jsonl'
    await source.export(export)
    target = make_log('lmdb-encrypted', tmp_path)
    try:
        await target.import_(export)
        assert await target.transcript_json('c') == await source.transcript_json('c')
        assert (await target.verify()).ok
    finally:
        target.close()
    assert _files_holding(tmp_path / 'store.lmdb', marker.encode()) == []


_SHRED_WORKER = """
import asyncio, os, sys, time
from eventlog import LmdbEventLog
from eventlog.encryption import FileKeyProvider

class Slow(FileKeyProvider):
    def destroy(self, store_id, conversation_id):
        held = super().destroy(store_id, conversation_id)
        open(sys.argv[3], 'w').close()
        time.sleep(60)
        return held

async def main():
    log = LmdbEventLog(sys.argv[1], keys=Slow(sys.argv[2]))
    await log.shred('c')

asyncio.run(main())
"""


async def test_a_kill_between_destroying_the_key_and_recording_the_shred(tmp_path: Path) -> None:
    """The key is destroyed before the `shred` entry is appended: a process killed in between leaves
    a conversation that nobody can read and that is not yet recorded as shredded; shredding again
    finishes the job."""
    marker = _marker()
    log = make_log('lmdb-encrypted', tmp_path)
    await add_run(log, 'c', 'r', exchange(1, marker))
    log.close()
    flag = tmp_path / 'destroyed'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path.cwd()), *sys.path])}
    worker = subprocess.Popen(
        [sys.executable, '-c', _SHRED_WORKER, str(tmp_path / 'store.lmdb'), str(tmp_path / 'keyring'), str(flag)],
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert worker.poll() is None, 'the worker ended before destroying the key'
            assert time.monotonic() < deadline
            time.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.wait()
    ring = keyring_for(tmp_path)
    assert not any(marker.encode() in p for p in _plaintexts(_raw_values(tmp_path / 'store.lmdb'), ring))
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        conv = await log.get_conversation('c')
        assert conv is not None and conv.entry_count == 4  # no shred entry was recorded
        with pytest.raises(KeyMissingError):
            await log.transcript('c')
        seq = await log.shred('c')
        assert (await log.transcript('c'))[0].metadata == {SHREDDED_METADATA_KEY: seq}
        assert (await log.verify()).ok
    finally:
        log.close()


class _FailingKeys(FileKeyProvider):
    """A keyring that fails when asked for its third new data key (a KMS outage mid-migration)."""

    made = 0

    def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
        if create:
            self.made += 1
            if self.made == 3:
                raise OSError('the key service is unreachable')
        return super().data_key(store_id, conversation_id, create=create)


@pytest.mark.parametrize('backend', ['lmdb', 'postgres'])
async def test_encrypt_migrates_all_or_nothing(tmp_path: Path, backend: str) -> None:
    marker = _marker()
    log = make_log(backend, tmp_path)
    try:
        for conv in ('a', 'b', 'c'):
            await add_run(log, conv, f'r{conv}', exchange(1, marker) + tool_exchange(2))
        await log.erase('a', where=lambda e: e.kind == 'message' and marker.encode() in e.payload)
        await log.delete_conversation('b')
        await add_run(log, 'b', 'rb2', exchange(3, marker))  # the id reused after its tombstone
        before = [(e.seq, e.hash, e.payload) for e in await log.entries()]
        transcripts = {conv: await log.transcript_json(conv) for conv in ('a', 'b', 'c')}
        failing = _FailingKeys(FileKeyProvider.create(tmp_path / 'failing').path)
        with pytest.raises(OSError, match='unreachable'):
            await log.encrypt(failing)
        assert not log.encrypted
        assert [(e.seq, e.hash, e.payload) for e in await log.entries()] == before
        assert (await log.verify()).ok
        sealed = await log.encrypt(keyring_for(tmp_path))
        assert sealed > 0 and log.encrypted
        assert {conv: await log.transcript_json(conv) for conv in ('a', 'b', 'c')} == transcripts
        report = await log.verify()
        assert report.ok, report
        await add_run(log, 'c', 'rc2', exchange(4, marker))
        assert (await log.verify()).ok
    finally:
        log.close()
    if backend == 'lmdb':
        assert _files_holding(tmp_path / 'store.lmdb', marker.encode()) == []
        reopened = make_log('lmdb-encrypted', tmp_path)
        try:
            assert marker.encode() in await reopened.transcript_json('c')
        finally:
            reopened.close()
    else:
        from pgserver import drop_schema

        drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))


async def test_signed_checkpoints_and_exports_are_checked_without_any_key(tmp_path: Path) -> None:
    from eventlog.checkpoint import verify_export, write_key_pair

    marker = _marker()
    _, public, signer = write_key_pair(tmp_path / 'signing')
    log = make_log('lmdb-encrypted', tmp_path)
    try:
        await add_run(log, 'c', 'r', exchange(1, marker))
        await log.checkpoint(signer, path=tmp_path / 'one.checkpoint')
        await add_run(log, 'd', 'r2', exchange(2, marker))
        await log.shred('c')
        await log.export(tmp_path / 'signed.jsonl', signed=True)
    finally:
        log.close()
    assert marker.encode() not in (tmp_path / 'signed.jsonl').read_bytes()
    exported = verify_export(tmp_path / 'signed.jsonl', public)  # the sealed export, checked with no key
    assert exported.ok, exported
    auditor = LmdbEventLog(tmp_path / 'store.lmdb', read_only=True)  # no key at all
    try:
        report = await auditor.verify(checkpoints=[tmp_path / 'one.checkpoint'], public_key=public)
        assert report.ok, report
    finally:
        auditor.close()
    with pytest.raises(EncryptionSetupError, match='nothing at rest'):
        await InMemoryEventLog().encrypt(keyring_for(tmp_path))


_APPEND_WORKER = """
import asyncio, sys, time
from pydantic_ai.messages import ModelRequest, UserPromptPart
from eventlog import LmdbEventLog, message_entry, run_started_entry
from eventlog.encryption import FileKeyProvider

async def main():
    store, ring, name, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if store.startswith('postgresql://'):
        from eventlog.postgres_log import PostgresEventLog
        dsn, schema = store.split('#')
        log = PostgresEventLog(dsn, schema=schema, keys=FileKeyProvider(ring))
    else:
        log = LmdbEventLog(store, keys=FileKeyProvider(ring))
    while time.time() < start:
        time.sleep(0.001)
    await log.append(run_started_entry(conversation_id='shared', run_id=name))
    for i in range(20):
        message = ModelRequest(parts=[UserPromptPart(f'{name} says {i}')])
        await log.append(message_entry(message, conversation_id='shared', run_id=name))
        print(i, flush=True)
    log.close()

asyncio.run(main())
"""


@pytest.mark.parametrize('backend', ['lmdb-encrypted', 'postgres-encrypted'])
async def test_processes_starting_one_conversation_at_once_agree_on_its_key(tmp_path: Path, backend: str) -> None:
    """Four processes make the first entries of one conversation at the same moment (on PostgreSQL
    they seal before they lock): the keyring holds one data key for it and every acknowledged
    message reads back with it."""
    make_log(backend, tmp_path).close()  # the store and keyring exist, the conversation not
    store = str(tmp_path / 'store.lmdb')
    if backend == 'postgres-encrypted':
        store = f'{postgres_dsn()}#{schema_for(tmp_path / "store.lmdb")}'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(Path.cwd()), *sys.path])}
    start = time.time() + 2
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                '-c',
                _APPEND_WORKER,
                store,
                str(tmp_path / 'keyring'),
                f'w{n}',
                str(start),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    acknowledged: dict[str, int] = {}
    for n, worker in enumerate(workers):
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        acknowledged[f'w{n}'] = len(out.split())
    assert acknowledged == {f'w{n}': 20 for n in range(4)}
    ring = keyring_for(tmp_path)
    assert [conv for _, conv, _ in ring.held()] == ['shared']
    log = make_log(backend, tmp_path)
    try:
        text = await log.transcript_json('shared')
        for n in range(4):
            for i in range(20):
                assert f'w{n} says {i}'.encode() in text
        assert (await log.verify()).ok
    finally:
        log.close()
        if backend == 'postgres-encrypted':
            from pgserver import drop_schema

            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))


def test_a_handle_keeps_a_bounded_number_of_data_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process serving many conversations keeps only the most recently used keys unwrapped; a
    key it let go is fetched from the provider again and still opens what it sealed."""
    from eventlog import encryption

    monkeypatch.setattr(encryption, 'CACHED_KEYS', 2)
    ring = FileKeyProvider.create(tmp_path / 'ring')
    fetched: list[str] = []

    class Counting:
        def data_key(self, store_id: str, conversation_id: str, *, create: bool) -> bytes | None:
            fetched.append(conversation_id)
            return ring.data_key(store_id, conversation_id, create=create)

        def destroy(self, store_id: str, conversation_id: str) -> bool:
            return ring.destroy(store_id, conversation_id)

    sealer = Sealer('store-1', Counting())
    sealed = {conv: sealer.seal(1, conv, 'message', b'{"kind":"request"}') for conv in ('a', 'b', 'c')}
    assert fetched == ['a', 'b', 'c']
    assert sealer.open(1, 'c', sealed['c']) == b'{"kind":"request"}'  # still held
    assert fetched == ['a', 'b', 'c']
    assert sealer.open(1, 'a', sealed['a']) == b'{"kind":"request"}'  # let go: fetched again
    assert fetched == ['a', 'b', 'c', 'a']
    assert sealer.open(1, 'c', sealed['c']) == b'{"kind":"request"}'  # used more recently than b
    assert fetched == ['a', 'b', 'c', 'a']
    assert sealer.open(1, 'b', sealed['b']) == b'{"kind":"request"}'
    assert fetched == ['a', 'b', 'c', 'a', 'b']
