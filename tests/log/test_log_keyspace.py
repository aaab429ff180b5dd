"""The keyspace module's keys parse back to what built them, every kind has one rule wherever
code tells kinds apart, the entry's shapes agree, and the one compaction fold does what the
log's context and the capability's matching rely on."""

from __future__ import annotations

from datetime import UTC, datetime
from operator import itemgetter
from typing import get_args

import msgspec
import pytest

from eventlog import _append, _keys, _lmdb_check, _transfer, _verify
from eventlog.entries import (
    CONVERSATION_KINDS,
    KINDS,
    PAYLOAD_TYPES,
    RUN_KINDS,
    CompactionInfo,
    Entry,
    EntryBody,
    Kind,
    RunRecord,
    fold_compaction,
)
from eventlog.errors import CorruptEntryError

# --- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize('conversation_id', ['c', 'conversation-é', 'x' * 200])
@pytest.mark.parametrize('seq', [1, 255, 256, 2**53 - 1])
def test_conversation_keys_parse_back(conversation_id: str, seq: int) -> None:
    key = _keys.by_conv_key(conversation_id, seq)
    assert key.startswith(_keys.ck(conversation_id))
    assert _keys.key_seq(key) == seq
    assert _keys.by_conv_conversation(key) == conversation_id
    assert _keys.key_conversation(key) == conversation_id
    assert _keys.entry_key_of(key) == _keys.seq_key(seq)
    assert _keys.key_seq(_keys.conv_runs_key(conversation_id, seq)) == seq


def test_keys_sort_in_seq_order_within_a_conversation() -> None:
    keys = [_keys.by_conv_key('c', seq) for seq in (1, 2, 255, 256, 65536, 2**40)]
    assert keys == sorted(keys)
    assert _keys.by_conv_key('c', 2**40) < _keys.by_conv_key('c\x01', 1)


def test_idempotency_keys_name_their_owner() -> None:
    run_key = _keys.run_idem_prefix(42) + b'key'
    conv_key = _keys.conv_idem_prefix('conv') + b'key'
    assert _keys.idem_run_start(run_key) == _keys.seq_key(42)
    assert _keys.idem_run_start(conv_key) is None
    assert _keys.idem_conversation(conv_key) == 'conv'


def test_lmdb_layout_puts_entries_apart_and_the_rest_in_one_index() -> None:
    assert _keys.LMDB_TABLES[_keys.Table.ENTRIES] == (b'entries', b'')
    others = {table: place for table, place in _keys.LMDB_TABLES.items() if table != _keys.Table.ENTRIES}
    assert {name for name, _ in others.values()} == {b'index'}
    assert len({prefix for _, prefix in others.values()}) == len(others)
    assert _lmdb_check.OPEN_KEYS == {'index': (b'\x00format', b'\x00last_seq')}


def test_a_stored_entry_of_an_unknown_kind_is_undecodable() -> None:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    raw = msgspec.msgpack.encode((1, 'c', None, 'bogus', ts, None, None, False, b''))
    with pytest.raises(CorruptEntryError, match='entry 1 cannot be decoded'):
        _keys.decode_body(1, raw + bytes(_keys.HASH_SIZE))


# --- kinds and shapes ---------------------------------------------------------------------------


def test_every_kind_has_one_rule_wherever_kinds_are_told_apart() -> None:
    assert set(get_args(Kind)) == KINDS
    assert RUN_KINDS | CONVERSATION_KINDS == KINDS and not RUN_KINDS & CONVERSATION_KINDS
    assert set(PAYLOAD_TYPES) == KINDS
    assert set(_append._APPLY) == KINDS  # pyright: ignore[reportPrivateUsage]
    assert set(_verify._REBUILD) == KINDS  # pyright: ignore[reportPrivateUsage]


def test_the_entry_shapes_share_one_definition() -> None:
    body = list(EntryBody.__struct_fields__)
    assert body[-1] == 'payload'
    assert list(_keys.StoredBody.__struct_fields__) == body
    assert list(Entry.__struct_fields__) == [*body, 'hash', 'erased']
    assert list(_transfer.ExportedEntry.__struct_fields__) == [*body, 'hash', 'detached', 'erased', 'digest']
    assert list(_keys.StoredRun.__struct_fields__) == [
        f.name for f in msgspec.structs.fields(RunRecord) if f.name != 'run_id'
    ]


# --- the fold -----------------------------------------------------------------------------------


def _info(replaced: list[int]) -> CompactionInfo:
    return CompactionInfo(replaced=replaced, summary=[])


def test_fold_puts_the_summary_where_the_first_replaced_item_stood() -> None:
    live = [(1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')]
    assert fold_compaction(live, _info([2, 3]), [(9, 'S')], itemgetter(0)) == [(1, 'a'), (9, 'S'), (4, 'd')]


def test_fold_drops_replaced_items_wherever_they_are() -> None:
    live = [(1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')]
    assert fold_compaction(live, _info([4, 2]), [(9, 'S1'), (9, 'S2')], itemgetter(0)) == [
        (1, 'a'),
        (9, 'S1'),
        (9, 'S2'),
        (3, 'c'),
    ]


def test_fold_appends_the_summary_when_nothing_replaced_is_held() -> None:
    assert fold_compaction([(1, 'a')], _info([7]), [(9, 'S')], itemgetter(0)) == [(1, 'a'), (9, 'S')]


def test_fold_replaces_an_earlier_summary_by_its_compaction_seq() -> None:
    live = [(5, 'S1'), (5, 'S2'), (6, 'e')]
    assert fold_compaction(live, _info([5]), [(8, 'T')], itemgetter(0)) == [(8, 'T'), (6, 'e')]
