"""Signed checkpoints: `checkpoint`, `verify(checkpoints=..., public_key=...)`, signed exports.

The attacks are written straight into the store through the backends' own storage
transactions (the engine's storage protocol), the way someone with write access to the store
would: a whole chain rewritten with valid recomputed hashes passes a plain `verify` and must
fail against a checkpoint, naming the first entry that differs.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import msgspec
import pytest
from logtools import add_run, exchange, tool_exchange

from eventlog import InMemoryEventLog, InvalidArgumentError, NewEntry
from eventlog._keys import (
    Table,
    append_hash,
    by_conv_key,
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
from eventlog.checkpoint import Checkpoint, Comparison, PublicKey, Signer, verify_export, write_key_pair
from eventlog.entries import VerifyReport
from eventlog.errors import (
    CheckpointAheadError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointSignatureError,
    KeyFileError,
)
from eventlog.log import EventLogBase

SIGNER = Signer.generate()
OTHER = Signer.generate()


def _codes(report: VerifyReport) -> list[tuple[str, str, int]]:
    return [(p.code, p.conversation_id, p.seq) for p in report.problems]


async def _story(log: EventLogBase) -> None:
    await add_run(log, 'a', 'ra1', exchange(1) + tool_exchange(2))
    await add_run(log, 'b', 'rb1', exchange(3))
    await add_run(log, 'a', 'ra2', exchange(4))
    await log.set_title('b', 'the b conversation')


def _conversation_seqs(txn: WriteTxn, conversation_id: str) -> list[int]:
    return [key_seq(k) for k, _ in txn.scan(Table.BY_CONV, prefix=ck(conversation_id))]


def _rewrite(log: EventLogBase, conversation_id: str, *, from_seq: int = 0) -> int:
    """Alter every message of the conversation from `from_seq` on ('answer' -> 'ANSWER', the same
    length, so every derived count still matches) and recompute the whole chain and the record's
    head hash: what someone with write access would do. Return the first altered seq."""
    first: list[int] = []

    def work(txn: WriteTxn) -> None:
        prev = b''
        for seq in _conversation_seqs(txn, conversation_id):
            value = txn.get(Table.ENTRIES, seq_key(seq))
            assert value is not None
            body = decode_body(seq, value)
            hashed, _ = split_value(value)
            if seq >= from_seq and body.kind == 'message' and b'answer' in body.payload:
                hashed = encode_body(msgspec.structs.replace(body, payload=body.payload.replace(b'answer', b'ANSWER')))
                first.append(seq)
            prev = b'' if body.kind == 'deleted' else prev
            digest = append_hash(prev, hashed)  # the store's chain rule 2
            txn.put(Table.ENTRIES, seq_key(seq), hashed + digest)
            prev = digest
        raw = txn.get(Table.CONVS, conv_key(conversation_id))
        assert raw is not None
        record = decode_conversation(conversation_id, raw)
        record.head_hash = prev
        txn.put(Table.CONVS, conv_key(conversation_id), encode_conversation(record))

    log._write_sync(work)  # pyright: ignore[reportPrivateUsage]
    assert first
    return first[0]


async def test_a_checkpoint_signs_every_head_and_verifies(log: EventLogBase, tmp_path: Path) -> None:
    await _story(log)
    removed = await log.delete_conversation('b')
    made = await log.checkpoint(SIGNER, path=tmp_path / 'cp.json')
    assert made.last_seq == await log.last_seq()
    assert made.key_fingerprint == SIGNER.public_key.fingerprint
    records = {c.conversation_id: c for c in await log.list_conversations(include_archived=True)}
    heads = made.heads
    assert set(heads) == {'a', 'b'}  # the deleted conversation is there as its tombstone
    assert heads['a'] == (records['a'].last_seq, records['a'].head_hash)
    assert heads['b'][0] == made.last_seq  # the tombstone is the newest entry
    read = Checkpoint.read(tmp_path / 'cp.json')
    assert read == made
    assert (tmp_path / 'cp.json').stat().st_mode & 0o777 == 0o600
    assert await log.checkpoints() == [made]
    report = await log.verify(checkpoints=[tmp_path / 'cp.json'], public_key=SIGNER.public_key)
    assert report.ok, report.problems
    assert report.entries_checked == await log.last_seq() - removed  # b's tombstone stays


async def test_a_rewritten_chain_with_valid_hashes_is_caught(log: EventLogBase) -> None:
    await _story(log)
    made = await log.checkpoint(SIGNER)
    first = _rewrite(log, 'a')
    plain = await log.verify()
    assert plain.ok, plain.problems  # the recomputed chain fools the hash check alone
    report = await log.verify(checkpoints=[made], public_key=SIGNER.public_key)
    assert not report.ok
    assert _codes(report) == [('checkpoint-mismatch', 'a', first)]
    assert 'the entry differs from the one signed' in report.problems[0].reason


async def test_a_series_of_checkpoints_names_the_exact_entry(log: EventLogBase) -> None:
    """The second checkpoint lists only what came after the first; together they name the
    entry; the second alone can only say the history up to its head differs."""
    await add_run(log, 'a', 'ra1', exchange(1) + exchange(2))
    first = await log.checkpoint(SIGNER)
    await add_run(log, 'a', 'ra2', exchange(3) + exchange(4))
    await add_run(log, 'c', 'rc1', exchange(5))
    second = await log.checkpoint(SIGNER)
    assert second.body.since == first.last_seq
    assert {h.conversation_id: [s for s, _ in h.entries] for h in second.body.conversations}['a'] == [
        s for s in range(first.last_seq + 1, first.last_seq + 7)
    ]
    await log.append(NewEntry(conversation_id='c', kind='archived'))  # after every checkpoint: not checked
    altered = _rewrite(log, 'a', from_seq=first.last_seq + 1)
    assert (await log.verify()).ok
    both = await log.verify(checkpoints=[second, first], public_key=SIGNER)
    assert _codes(both) == [('checkpoint-mismatch', 'a', altered)]
    alone = await log.verify(checkpoints=[second], public_key=SIGNER)
    assert _codes(alone) == [('checkpoint-mismatch', 'a', altered)]
    older = await log.verify(checkpoints=[first], public_key=SIGNER)
    assert older.ok  # the first checkpoint's history is untouched


async def test_a_full_checkpoint_lists_every_entry(log: EventLogBase) -> None:
    await add_run(log, 'a', 'ra1', exchange(1))
    await log.checkpoint(SIGNER)
    await add_run(log, 'a', 'ra2', exchange(2))
    full = await log.checkpoint(SIGNER, full=True)
    assert full.body.since == 0
    assert sum(len(h.entries) for h in full.body.conversations) == await log.last_seq()
    first = _rewrite(log, 'a')
    report = await log.verify(checkpoints=[full], public_key=SIGNER)
    assert _codes(report) == [('checkpoint-mismatch', 'a', first)]


async def test_appends_deletes_and_reused_ids_after_a_checkpoint_keep_it_valid(log: EventLogBase) -> None:
    await _story(log)
    made = await log.checkpoint(SIGNER)
    await add_run(log, 'a', 'ra3', exchange(9))
    removed = await log.delete_conversation('b')
    assert removed > 0
    await add_run(log, 'b', 'rb2', exchange(10))  # the id is reused after its tombstone
    await log.fork('a', new_conversation_id='fa')
    report = await log.verify(checkpoints=[made], public_key=SIGNER)
    assert report.ok, report.problems
    later = await log.checkpoint(SIGNER)
    assert (await log.verify(checkpoints=[made, later], public_key=SIGNER)).ok
    again = await log.checkpoint(SIGNER)  # nothing new: it replaces `later` and lists the same entries
    assert again.body.since == later.body.since == made.last_seq
    assert again.body.conversations == later.body.conversations
    assert await log.checkpoints() == [made, again]


async def test_a_conversation_removed_without_a_trace_is_named(log: EventLogBase) -> None:
    """Deleting a conversation and then its tombstone and record passes a plain verify; the
    checkpoint still has its entries."""
    await _story(log)
    made = await log.checkpoint(SIGNER)
    b_first = min(_conversation_seqs_of(log, 'b'))
    await log.delete_conversation('b')
    tombstone = await log.last_seq()

    def erase_traces(txn: WriteTxn) -> None:
        txn.delete(Table.ENTRIES, seq_key(tombstone))
        txn.delete(Table.BY_CONV, by_conv_key('b', tombstone))
        txn.delete(Table.CONVS, conv_key('b'))

    log._write_sync(erase_traces)  # pyright: ignore[reportPrivateUsage]
    await add_run(log, 'a', 'ra9', exchange(9))  # the store's last seq has an entry again
    assert (await log.verify()).ok
    report = await log.verify(checkpoints=[made], public_key=SIGNER)
    assert _codes(report) == [('checkpoint-missing', 'b', b_first)]
    assert 'was removed' in report.problems[0].reason


def _conversation_seqs_of(log: EventLogBase, conversation_id: str) -> list[int]:
    return log._read_sync(lambda txn: [key_seq(k) for k, _ in txn.scan(Table.BY_CONV, prefix=ck(conversation_id))])  # pyright: ignore[reportPrivateUsage]


async def test_an_erased_entry_keeps_its_hash_and_matches(log: EventLogBase) -> None:
    """Erasure keeps each entry's stored hash: the comparison with a checkpoint uses stored
    hashes only, so an entry whose content is gone but whose hash stayed still matches
    (the chain check itself is verify's, which knows erased entries)."""
    await add_run(log, 'a', 'ra1', exchange(1))
    made = await log.checkpoint(SIGNER)
    seq = _conversation_seqs_of(log, 'a')[1]

    def blank(txn: WriteTxn) -> None:
        value = txn.get(Table.ENTRIES, seq_key(seq))
        assert value is not None
        body = decode_body(seq, value)
        _, digest = split_value(value)
        txn.put(Table.ENTRIES, seq_key(seq), encode_body(msgspec.structs.replace(body, payload=b'{}')) + digest)

    log._write_sync(blank)  # pyright: ignore[reportPrivateUsage]
    from eventlog.checkpoint import compare_store

    assert log._read_sync(lambda txn: compare_store(txn, [made])) == []  # pyright: ignore[reportPrivateUsage]


def test_reordered_inserted_and_removed_entries_are_named() -> None:
    """The comparison itself, fed entries one by one: an entry moved to another conversation's
    seq, an entry inserted into the history (at a seq freed by a deletion before the
    checkpoint), and a conversation's entries gone."""
    import asyncio

    log = InMemoryEventLog()

    async def build() -> Checkpoint:
        await add_run(log, 'x', 'rx', exchange(0))  # seqs 1-4, freed by the deletion
        await log.delete_conversation('x')
        await add_run(log, 'a', 'ra1', exchange(1))
        await add_run(log, 'b', 'rb1', exchange(2))
        return await log.checkpoint(SIGNER)

    made = asyncio.run(build())
    log.close()
    entries = {h.conversation_id: [(s, bytes.fromhex(d)) for s, d in h.entries] for h in made.body.conversations}

    def compare(extra: list[tuple[int, str, bytes]], skip: str = '') -> list[tuple[str, str, int]]:
        comparison = Comparison([made])
        observed = [(s, c, d) for c in entries if c != skip for s, d in entries[c]] + extra
        for seq, conv, digest in sorted(observed):
            comparison.observe(seq, conv, 'deleted' if conv == 'x' else 'message', digest)
        return [(p.code, p.conversation_id, p.seq) for p in comparison.finish()]

    assert compare([]) == []
    b_first, b_hash = entries['b'][0]
    comparison = Comparison([made])
    comparison.observe(b_first, 'a', 'run_started', b_hash)  # b's first seq now holds an entry of a
    found = comparison.finish()
    assert ('checkpoint-mismatch', 'b', b_first) in [(p.code, p.conversation_id, p.seq) for p in found]
    assert 'reordered' in next(p.reason for p in found if p.conversation_id == 'b')
    assert compare([(2, 'a', b'\x00' * 32)]) == [('checkpoint-added', 'a', 2)]
    assert compare([], skip='b') == [('checkpoint-missing', 'b', b_first)]


# --- bad input ----------------------------------------------------------------------------------


async def test_a_checkpoint_of_another_key_is_refused(log: EventLogBase) -> None:
    await _story(log)
    made = await log.checkpoint(OTHER)
    with pytest.raises(CheckpointSignatureError, match='signed by another key'):
        await log.verify(checkpoints=[made], public_key=SIGNER.public_key)
    forged = Checkpoint(msgspec.structs.replace(made.body, key=SIGNER.public_key.fingerprint), made.signature)
    with pytest.raises(CheckpointSignatureError, match='does not match'):
        await log.verify(checkpoints=[forged], public_key=SIGNER.public_key)


async def test_truncated_garbled_and_altered_checkpoints_are_refused(log: EventLogBase, tmp_path: Path) -> None:
    await _story(log)
    path = tmp_path / 'cp.json'
    await log.checkpoint(SIGNER, path=path)
    data = json.loads(path.read_bytes())

    def write(name: str, value: object) -> Path:
        target = tmp_path / name
        target.write_text(json.dumps(value, separators=(',', ':')) + '\n')
        return target

    short = dict(data, signature=base64.b64encode(base64.b64decode(data['signature'])[:40]).decode())
    with pytest.raises(CheckpointSignatureError, match='truncated or malformed'):
        await log.verify(checkpoints=[write('short.json', short)], public_key=SIGNER)
    with pytest.raises(CheckpointSignatureError, match='garbled'):
        await log.verify(checkpoints=[write('garbled.json', dict(data, signature='#not base64#'))], public_key=SIGNER)
    body = dict(data['checkpoint'], created_at='2020-01-01T00:00:00.000000Z')
    with pytest.raises(CheckpointSignatureError, match='does not match'):
        await log.verify(checkpoints=[write('altered.json', dict(data, checkpoint=body))], public_key=SIGNER)
    raw = path.read_bytes()
    cut = tmp_path / 'cut.json'
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointFormatError, match='is not a checkpoint'):
        await log.verify(checkpoints=[cut], public_key=SIGNER)
    with pytest.raises(CheckpointFormatError, match='is not a checkpoint'):
        await log.verify(checkpoints=[write('other.json', {'type': 'checkpoint', 'hello': 1})], public_key=SIGNER)
    heads = data['checkpoint']['conversations']
    moved = dict(data['checkpoint'], conversations=list(reversed(heads)))
    with pytest.raises(CheckpointFormatError, match='not in id order'):
        await log.verify(checkpoints=[write('moved.json', dict(data, checkpoint=moved))], public_key=SIGNER)
    with pytest.raises(CheckpointFormatError, match='cannot read'):
        await log.verify(checkpoints=[tmp_path / 'absent.json'], public_key=SIGNER)
    with pytest.raises(InvalidArgumentError, match='needs the public key'):
        await log.verify(checkpoints=[path])
    for error in (CheckpointSignatureError, CheckpointFormatError):
        assert issubclass(error, CheckpointError)


async def test_a_checkpoint_newer_than_the_store_is_refused(log: EventLogBase) -> None:
    other = InMemoryEventLog()
    await _story(other)
    await add_run(other, 'a', 'ra9', exchange(9))
    ahead = await other.checkpoint(SIGNER)
    other.close()
    await _story(log)
    with pytest.raises(CheckpointAheadError, match='latest entries are missing'):
        await log.verify(checkpoints=[ahead], public_key=SIGNER)


def test_key_files_are_checked(tmp_path: Path) -> None:
    private, public, signer = write_key_pair(tmp_path / 'key')
    assert public == tmp_path / 'key.pub'
    assert private.stat().st_mode & 0o777 == 0o600
    assert Signer.from_file(private).public_key.fingerprint == signer.public_key.fingerprint
    assert PublicKey.from_file(public).fingerprint == signer.public_key.fingerprint
    assert PublicKey.from_file(private).fingerprint == signer.public_key.fingerprint
    with pytest.raises(KeyFileError, match='exists'):
        write_key_pair(tmp_path / 'key')
    with pytest.raises(KeyFileError, match='is a public key'):
        Signer.from_file(public)
    (tmp_path / 'junk').write_bytes(b'-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n')
    (tmp_path / 'junk').chmod(0o600)  # a private key open to others is refused before it is parsed
    with pytest.raises(KeyFileError, match='not a usable PEM private key'):
        Signer.from_file(tmp_path / 'junk')
    (tmp_path / 'text').write_text('hello')
    with pytest.raises(KeyFileError, match='not a PEM'):
        PublicKey.from_file(tmp_path / 'text')
    with pytest.raises(KeyFileError, match='cannot read'):
        Signer.from_file(tmp_path / 'absent')
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / 'ec').write_bytes(other)
    (tmp_path / 'ec').chmod(0o600)
    with pytest.raises(KeyFileError, match='not an Ed25519 key'):
        Signer.from_file(tmp_path / 'ec')


async def test_a_store_holding_damaged_records_is_not_checkpointed(log: EventLogBase) -> None:
    await _story(log)

    def damage(txn: WriteTxn) -> None:
        raw = txn.get(Table.CONVS, conv_key('a'))
        assert raw is not None
        record = decode_conversation('a', raw)
        record.head_hash = b'\x01' * 32
        txn.put(Table.CONVS, conv_key('a'), encode_conversation(record))

    log._write_sync(damage)  # pyright: ignore[reportPrivateUsage]
    from eventlog.errors import CorruptStoreError

    with pytest.raises(CorruptStoreError, match='run verify'):
        await log.checkpoint(SIGNER)
    assert await log.checkpoints() == []


# --- signed exports -------------------------------------------------------------------------------


async def test_a_signed_export_verifies_without_the_store(log: EventLogBase, tmp_path: Path) -> None:
    await _story(log)
    plain = tmp_path / 'plain.jsonl'
    await log.export(plain)
    before = plain.read_bytes()
    signed = tmp_path / 'signed.jsonl'
    with pytest.raises(CheckpointError, match='no checkpoint'):
        await log.export(signed, signed=True)
    await log.export(signed, signed=True, signer=SIGNER)
    await log.export(plain)
    assert plain.read_bytes() == before  # an unsigned export is unchanged by checkpoints
    lines = signed.read_bytes().splitlines(keepends=True)
    assert b''.join(lines[:-2]) == before
    trailer = json.loads(lines[-1])
    assert trailer == {'type': 'signed', 'keys': [SIGNER.public_key.fingerprint], 'checkpoints': 1, 'complete': True}
    report = verify_export(signed, SIGNER.public_key)
    assert report.ok, report.problems
    assert report.entries_checked == await log.last_seq()
    copy = InMemoryEventLog()
    assert await copy.import_(signed) == await log.last_seq()  # a signed export still imports
    copy.close()
    with pytest.raises(CheckpointSignatureError, match='no checkpoint'):
        verify_export(signed, OTHER.public_key)
    with pytest.raises(CheckpointFormatError, match='not a signed export'):
        verify_export(plain, SIGNER.public_key)
    cut = tmp_path / 'cut.jsonl'
    cut.write_bytes(b''.join(lines[:-1]))  # only its closing signature line lost
    with pytest.raises(CheckpointFormatError, match=r'was cut short: its 1 checkpoint line\(s\) are not followed'):
        verify_export(cut, SIGNER.public_key)


async def test_a_rewritten_export_is_caught(log: EventLogBase, tmp_path: Path) -> None:
    """An export whose conversation was rewritten with recomputed hashes (and closing line)
    imports; its checkpoint names the first entry that differs."""
    await _story(log)
    source = tmp_path / 'signed.jsonl'
    await log.export(source, signed=True, signer=SIGNER)
    first = _rewrite(log, 'a')
    rewritten = tmp_path / 'rewritten.jsonl'
    await log.export(rewritten)  # the attacker's export of the rewritten store ...
    trailer = source.read_bytes().splitlines(keepends=True)[-2:]
    rewritten.write_bytes(rewritten.read_bytes() + b''.join(trailer))  # ... with the old signed trailer
    report = verify_export(rewritten, SIGNER.public_key)
    assert [(p.code, p.conversation_id, p.seq) for p in report.problems] == [('checkpoint-mismatch', 'a', first)]


async def test_a_partial_signed_export_checks_what_it_holds(log: EventLogBase, tmp_path: Path) -> None:
    await _story(log)
    await log.checkpoint(SIGNER)
    part = tmp_path / 'part.jsonl'
    await log.export(part, conversation_ids=['b'], signed=True)
    trailer = json.loads(part.read_bytes().splitlines()[-1])
    assert trailer['complete'] is False
    report = verify_export(part, SIGNER)
    assert report.ok, report.problems
    assert report.conversations_checked == 1
    # the same entries claimed to be complete: a's entries are missing
    lines = part.read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"complete":false', b'"complete":true')
    part.write_bytes(b''.join(lines))
    report = verify_export(part, SIGNER)
    assert [p.code for p in report.problems] == ['checkpoint-missing']
    assert report.problems[0].conversation_id == 'a'


def test_without_cryptography_the_log_works_and_signing_says_which_extra(tmp_path: Path) -> None:
    """`import eventlog` and plain verify never need `cryptography`; signing names the extra."""
    import subprocess
    import sys

    script = (
        'import asyncio, sys\n'
        "sys.modules['cryptography'] = None\n"
        'from eventlog import InMemoryEventLog\n'
        'from eventlog.checkpoint import Signer\n'
        'from eventlog.errors import MissingExtraError\n'
        'log = InMemoryEventLog()\n'
        'print(asyncio.run(log.verify()).ok)\n'
        'try:\n'
        '    Signer.generate()\n'
        'except MissingExtraError as exc:\n'
        '    print(exc)\n'
    )
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        'True',
        "signed checkpoints need the 'cryptography' package: install the extra 'audit' "
        "(in a clone of this repository: pip install '.[audit]')",
    ]


_READ_HOSTILE = """
import sys
from eventlog.checkpoint import Checkpoint
from eventlog.errors import CheckpointFormatError
try:
    Checkpoint.read(sys.argv[1])
except CheckpointFormatError as exc:
    print(str(exc))
with open('/proc/self/status') as status:  # the peak of this process's own memory (ru_maxrss
    # would carry the forking parent's peak across exec)
    print(int(next(line.split()[1] for line in status if line.startswith('VmHWM:'))) // 1024)
"""


@pytest.mark.parametrize('kind', ['zeros', 'huge', 'binary'])
def test_a_hostile_checkpoint_file_is_refused_without_being_read_whole(tmp_path: Path, kind: str) -> None:
    """A 1.5 GB sparse file of zeros, one past the size limit that starts like a checkpoint,
    and a binary file are each refused with one line, and the reading process never holds the
    file (its peak memory stays far below the file's size)."""
    import subprocess
    import sys

    from eventlog.checkpoint import CHECKPOINT_FILE_LIMIT

    path = tmp_path / 'cp.json'
    with path.open('wb') as fh:
        if kind == 'huge':
            fh.write(b'{"type":"checkpoint",')
        elif kind == 'binary':
            fh.write(bytes(range(256)) * 64)
        fh.truncate(CHECKPOINT_FILE_LIMIT + (1 << 29) if kind != 'binary' else fh.tell())
    done = subprocess.run([sys.executable, '-c', _READ_HOSTILE, str(path)], capture_output=True, text=True, check=True)
    message, peak_mb = done.stdout.splitlines()
    assert 'is not a checkpoint' in message and str(path) in message, message
    assert int(peak_mb) < 200, f'the reader peaked at {peak_mb} MB'
