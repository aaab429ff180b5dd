"""`verify` sees what replay depends on: every derived record and index key is rebuilt from the
entries and compared; damaged records raise typed errors instead of decoder tracebacks.

Damage is written through the backends' own storage transactions, so each test runs on both.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from clirunner import run_cli
from logtools import add_run, exchange, tool_exchange

from eventlog import (
    CorruptEntryError,
    CorruptStoreError,
    EventLogError,
    LmdbEventLog,
    NewEntry,
    run_started_entry,
)
from eventlog._keys import ck, encode_run, seq_key
from eventlog._storage import Table, TableId, WriteTxn
from eventlog.entries import VerifyReport
from eventlog.log import EventLogBase


def _put(log: EventLogBase, table: TableId, key: bytes, value: bytes) -> None:
    log._write_sync(lambda txn: txn.put(table, key, value))  # pyright: ignore[reportPrivateUsage]


def _delete(log: EventLogBase, table: TableId, key: bytes) -> None:
    log._write_sync(lambda txn: txn.delete(table, key))  # pyright: ignore[reportPrivateUsage]


def _get(log: EventLogBase, table: TableId, key: bytes) -> bytes:
    value = log._read_sync(lambda txn: txn.get(table, key))  # pyright: ignore[reportPrivateUsage]
    assert value is not None
    return value


def _codes(report: VerifyReport) -> set[str]:
    return {p.code for p in report.problems}


async def _busy_log(log: EventLogBase) -> None:
    """Conversations with every kind of history: runs, tools, titles, archives, a fork whose
    source is deleted, a conversation id reused after a delete, a run continuing another
    conversation, idempotency keys on runs and conversations."""
    await add_run(log, 'a', 'ra1', exchange(1) + tool_exchange(2))
    await add_run(log, 'a', 'ra2', exchange(3))
    await log.set_title('a', 'first')
    await add_run(log, 'src', 'rs1', exchange(4))
    await log.fork('src', new_conversation_id='forked')
    await add_run(log, 'forked', 'rf1', exchange(5))
    tip = await log.last_seq()
    await add_run(log, 'cont', 'rc1', exchange(6), parent=tip)
    await log.delete_conversation('src')
    await add_run(log, 'src', 'rs2', exchange(7))
    await log.delete_conversation('forked')
    await log.archive('a')
    await log.unarchive('a')
    await log.archive('cont')
    await log.append(NewEntry(conversation_id='a', kind='title', payload=b'{"title":"t2"}', idempotency_key='k-title'))
    await log.append(run_started_entry(conversation_id='a', run_id='open', idempotency_key='k-run'))


async def test_a_store_with_deletes_forks_and_reused_ids_verifies(log: EventLogBase) -> None:
    await _busy_log(log)
    report = await log.verify()
    assert report.ok, report.problems
    assert report.problems == []


async def test_a_moved_run_record_is_named(log: EventLogBase) -> None:
    """A flipped bit in a run record's key hides the run from replay; verify must say so."""
    await _busy_log(log)
    before = await log.run_messages('ra2')
    assert before
    raw = _get(log, Table.RUNS, b'ra2')
    _delete(log, Table.RUNS, b'ra2')
    _put(log, Table.RUNS, b'ra3', raw)  # 'ra2' with one bit flipped
    report = await log.verify()
    assert not report.ok
    assert _codes(report) == {'run-record'}
    reasons = ' '.join(p.reason for p in report.problems)
    assert "'ra2' is missing" in reasons and "'ra3'" in reasons
    assert {p.conversation_id for p in report.problems} == {'a'}


async def test_an_altered_run_record_is_named(log: EventLogBase) -> None:
    await add_run(log, 'c', 'r', exchange(1) + exchange(2))
    run = await log.get_run('r')
    assert run is not None
    run.entry_count -= 2
    _put(log, Table.RUNS, b'r', encode_run(run))
    report = await log.verify()
    assert [(p.code, p.conversation_id, p.seq) for p in report.problems] == [('run-record', 'c', run.start_seq)]
    assert 'entry_count' in report.problems[0].reason


async def test_a_damaged_run_id_in_an_index_is_a_typed_error(log: EventLogBase) -> None:
    """A run id that is no longer UTF-8 made list_runs raise UnicodeDecodeError."""
    await add_run(log, 'c', 'r', exchange(1))
    run = await log.get_run('r')
    assert run is not None
    _put(log, Table.RUN_ORDER, seq_key(run.start_seq), b'\xff')
    with pytest.raises(CorruptStoreError):
        await log.list_runs()
    report = await log.verify()
    assert _codes(report) == {'index-key'}
    assert 'RUN_ORDER' in report.problems[0].reason
    _put(log, Table.RUN_ORDER, seq_key(run.start_seq), b'r')
    _put(log, Table.CONV_RUNS, ck('c') + seq_key(run.start_seq), b'\xfe\xff')
    with pytest.raises(CorruptStoreError):
        await log.list_runs(conversation_id='c')
    with pytest.raises(CorruptStoreError):
        await log.context('c')
    assert _codes(await log.verify()) == {'index-key'}


async def test_undecodable_records_are_typed_errors(log: EventLogBase) -> None:
    await add_run(log, 'c', 'r', exchange(1))
    _put(log, Table.RUNS, b'r', b'\x93\x01')
    with pytest.raises(CorruptStoreError):
        await log.get_run('r')
    with pytest.raises(CorruptStoreError):
        await log.list_runs()
    with pytest.raises(CorruptStoreError):
        await log.run_messages('r')
    _put(log, Table.RUNS, b'r', b'')
    with pytest.raises(CorruptStoreError):
        await log.get_run('r')
    report = await log.verify()
    assert _codes(report) == {'run-record'}
    _put(log, Table.CONVS, b'c', b'\xc1garbage')
    with pytest.raises(CorruptStoreError):
        await log.get_conversation('c')
    with pytest.raises(CorruptStoreError):
        await log.list_conversations()
    report = await log.verify()
    assert {'run-record', 'conversation-record'} <= _codes(report)


async def test_impossible_positions_in_a_record_are_typed_errors(log: EventLogBase) -> None:
    """A record that decodes but points nowhere (a negative seq) made replays raise struct.error."""
    await add_run(log, 'c', 'r', exchange(1))
    run = await log.get_run('r')
    assert run is not None
    run.last_seq = -1
    _put(log, Table.RUNS, b'r', encode_run(run))
    with pytest.raises(CorruptStoreError):
        await log.run_messages('r')
    assert not (await log.verify()).ok


async def test_an_altered_conversation_record_is_named(log: EventLogBase) -> None:
    await add_run(log, 'c', 'r', exchange(1))
    await add_run(log, 'd', 'rd', exchange(2))
    record = await log.get_conversation('c')
    assert record is not None
    import msgspec

    record.message_count = 7
    _put(log, Table.CONVS, b'c', msgspec.msgpack.encode(record))
    report = await log.verify()
    assert [(p.code, p.conversation_id) for p in report.problems] == [('conversation-record', 'c')]
    assert 'message_count is 7' in report.problems[0].reason


@pytest.mark.parametrize('table', [Table.BY_CONV, Table.IDEM, Table.CONV_RUNS])
async def test_missing_and_extra_index_keys_are_named(log: EventLogBase, table: TableId) -> None:
    await log.append(run_started_entry(conversation_id='c', run_id='r', idempotency_key='once'))
    seqs = await add_run(log, 'd', 'rd', exchange(1))
    run = await log.get_run('r')
    assert run is not None
    key = {
        Table.BY_CONV: ck('d') + seq_key(seqs[0]),
        Table.IDEM: b'r' + seq_key(run.start_seq) + b'once',
        Table.CONV_RUNS: ck('c') + seq_key(run.start_seq),
    }[table]
    value = _get(log, table, key)
    _delete(log, table, key)
    report = await log.verify()
    assert _codes(report) == {'index-key'}, report.problems
    assert 'lacks the key' in report.problems[0].reason
    _put(log, table, key, value)
    assert (await log.verify()).ok
    _put(log, table, ck('ghost') + seq_key(99), value)
    report = await log.verify()
    assert _codes(report) == {'index-key'}
    assert 'no entry gives' in report.problems[0].reason


async def test_a_lowered_last_seq_is_named(log: EventLogBase) -> None:
    """New entries would reuse seqs after it, in a store that records the last seq with each
    write; an LMDB store derives it from its last entry, so there the record is only a lower
    bound, and the next entry still follows the last one."""
    await add_run(log, 'c', 'r', exchange(1))
    last = await log.last_seq()
    _put(log, Table.META, b'last_seq', seq_key(2))
    report = await log.verify()
    if isinstance(log, LmdbEventLog):
        assert report.ok, report.problems
        assert await log.last_seq() == last
        assert await add_run(log, 'c', 'r2', exchange(1)) == [last + 2, last + 3]  # after its run_started
        assert (await log.verify()).ok
        return
    assert _codes(report) == {'meta'}


async def test_a_last_seq_recorded_beyond_the_last_entry_is_named(log: EventLogBase) -> None:
    """The latest entries were removed (an LMDB store records the last seq before a deletion, which
    then appends its tombstone after it). A PostgreSQL store keeps a counter instead, which seqs
    claimed and never committed may leave ahead of the last entry."""
    if type(log).__name__ == 'PostgresEventLog':
        pytest.skip('a PostgreSQL store counts claimed seqs, which may run ahead of its entries')
    await add_run(log, 'c', 'r', exchange(1))
    _put(log, Table.META, b'last_seq', seq_key(await log.last_seq() + 5))
    report = await log.verify()
    assert _codes(report) == {'meta'}
    assert 'beyond the last entry' in report.problems[0].reason


async def test_an_entry_that_cannot_follow_its_predecessors_is_named(log: EventLogBase) -> None:
    """A chain can be intact (recomputed by whoever forged it) while the entries contradict each other."""
    await add_run(log, 'c', 'r', exchange(1))

    def forge(txn: WriteTxn) -> None:
        from eventlog._engine import append_entries

        # A second run_started for the same run, written with the engine's own chaining.
        txn.delete(Table.RUNS, b'r')
        append_entries(txn, [run_started_entry(conversation_id='c', run_id='r')])

    log._write_sync(forge)  # pyright: ignore[reportPrivateUsage]
    report = await log.verify()
    assert 'entry-invalid' in _codes(report)


async def test_a_damaged_message_payload_is_a_typed_error(log: EventLogBase) -> None:
    seqs = await add_run(log, 'c', 'r', exchange(1))
    value = _get(log, Table.ENTRIES, seq_key(seqs[0]))
    assert b'user-prompt' in value
    _put(log, Table.ENTRIES, seq_key(seqs[0]), value.replace(b'user-prompt', b'user-prompX'))
    with pytest.raises(CorruptEntryError):
        await log.run_messages('r')
    with pytest.raises(CorruptEntryError):
        await log.transcript('c')
    report = await log.verify()
    assert [(p.code, p.seq) for p in report.problems] == [('hash-mismatch', seqs[0])]


async def test_every_finding_is_an_event_log_error_free_report(log: EventLogBase) -> None:
    """verify itself never raises on damaged records: it reports them."""
    await _busy_log(log)
    for table in (Table.RUNS, Table.CONVS, Table.RUN_ORDER, Table.CONV_RUNS, Table.IDEM, Table.BY_CONV):
        keys = log._read_sync(lambda txn, t=table: [k for k, _ in txn.scan(t)])  # pyright: ignore[reportPrivateUsage]
        assert keys
        _put(log, table, keys[0], b'\xff\x00\xc1')
    try:
        report = await log.verify()
    except EventLogError as exc:  # pragma: no cover - the failure this test guards against
        pytest.fail(f'verify raised {exc!r}')
    assert not report.ok


# --- the search index ---------------------------------------------------------------------------


async def test_the_search_index_is_checked_against_the_log(tmp_path: Path) -> None:
    from search.persistent_index import PersistentIndex as LmdbIndex

    log = LmdbEventLog(tmp_path / 's')
    try:
        await _busy_log(log)
        index = LmdbIndex(log)
        assert index.verify() == [], 'no index built yet: nothing to check'
        index.catch_up()
        await add_run(log, 'late', 'rl', exchange(9, 'appended after the index caught up'))
        assert index.verify() == []
        before = index.state()
        stats = log.open_table(b'ix.stats')
        held = log.open_table(b'ix.held')
        with log.env.begin(write=True) as txn:
            raw = txn.get(b'a\x00', db=stats)
            assert raw is not None
            txn.put(b'a\x00', raw[:-1] + bytes([raw[-1] ^ 1]), db=stats)
            txn.delete(next(k for k, _ in txn.cursor(db=held)), db=held)
        found = index.verify()
        assert {f.table for f in found} == {'stats', 'held'}
        assert 'a' in {f.conversation_id for f in found}
        assert index.state() == before, 'verify leaves the index as it was'
        result = await asyncio.to_thread(run_cli, ['verify', '--json', '--store', str(tmp_path / 's')])
        assert result.exit_code == 1
        codes = {p['code'] for p in json.loads(result.stdout)['problems']}
        assert codes == {'search-index'}
        assert 'eventlog reindex' in result.stdout
        index.rebuild()
        assert index.verify() == []
        again = await asyncio.to_thread(run_cli, ['verify', '--store', str(tmp_path / 's')])
        assert again.exit_code == 0, again.stdout
    finally:
        log.close()


def test_the_cli_turns_damaged_records_into_one_line(tmp_path: Path) -> None:
    async def build() -> None:
        log = LmdbEventLog(tmp_path / 's')
        try:
            await add_run(log, 'c', 'r', exchange(1))
            _put(log, Table.RUNS, b'r', b'\x93\x01')
            _put(log, Table.CONVS, b'c', b'\xc1')
        finally:
            log.close()

    asyncio.run(build())
    for args in (['runs'], ['stats'], ['show', 'c'], ['info', 'c'], ['conversations']):
        result = run_cli([*args, '--store', str(tmp_path / 's')])
        assert result.exit_code == 1, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert 'cannot be decoded' in result.output, (args, result.output)
    result = run_cli(['verify', '--store', str(tmp_path / 's')])
    assert result.exit_code == 1
    assert 'run-record' in result.stdout and 'conversation-record' in result.stdout
