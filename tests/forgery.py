"""An attacker's write access to a store that bypasses the library (files or rows, no keys), and
the forgery such an attacker makes: a payload replaced, its conversation's chain recomputed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import msgspec
from backends import postgres_dsn

from eventlog._keys import (
    META_CHAIN_FROM,
    SEQ_SIZE,
    TABLE_NAMES,
    Table,
    TableId,
    append_hash,
    chain_hash,
    conv_key,
    decode_body,
    decode_conversation,
    encode_body,
    encode_conversation,
    encode_erased_body,
    erased_digest,
    is_erased_value,
    key_seq,
    link,
    lmdb_key,
    seq_key,
    split_value,
)


class Raw:
    """Write access to a store's tables that bypasses the library (what the attacker has)."""

    def entries(self) -> dict[int, bytes]:
        raise NotImplementedError

    def get(self, table: TableId, key: bytes) -> bytes | None:
        raise NotImplementedError

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        raise NotImplementedError

    def delete(self, table: TableId, key: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class RawLmdb(Raw):
    def __init__(self, path: Path) -> None:
        self.env = lmdb.open(str(path), max_dbs=32)
        self.dbs = {name: self.env.open_db(name) for name in (b'entries', b'index')}

    def _where(self, table: TableId, key: bytes) -> tuple[Any, bytes]:
        if table == Table.ENTRIES:
            return self.dbs[b'entries'], key
        return self.dbs[b'index'], lmdb_key(table, key)

    def entries(self) -> dict[int, bytes]:
        with self.env.begin(db=self.dbs[b'entries']) as txn:
            return {key_seq(bytes(k)): bytes(v) for k, v in txn.cursor()}

    def get(self, table: TableId, key: bytes) -> bytes | None:
        db, where = self._where(table, key)
        with self.env.begin(db=db) as txn:
            found = txn.get(where)
            return None if found is None else bytes(found)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        db, where = self._where(table, key)
        with self.env.begin(write=True, db=db) as txn:
            txn.put(where, value)

    def delete(self, table: TableId, key: bytes) -> None:
        db, where = self._where(table, key)
        with self.env.begin(write=True, db=db) as txn:
            txn.delete(where)

    def close(self) -> None:
        self.env.close()


class RawPostgres(Raw):
    def __init__(self, schema: str) -> None:
        import psycopg

        self.schema = schema
        self.conn = psycopg.connect(postgres_dsn(), autocommit=True)
        self.conn.execute("SET session_replication_role = 'replica'")  # past the append-only trigger

    def _table(self, table: TableId) -> str:
        return f'"{self.schema}"."{TABLE_NAMES[table].decode()}"'

    def entries(self) -> dict[int, bytes]:
        rows = self.conn.execute(f'SELECT k, v FROM {self._table(Table.ENTRIES)}').fetchall()
        return {key_seq(bytes(k)): bytes(v) for k, v in rows}

    def get(self, table: TableId, key: bytes) -> bytes | None:
        row = self.conn.execute(f'SELECT v FROM {self._table(table)} WHERE k = %s', (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        self.conn.execute(
            f'INSERT INTO {self._table(table)} (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v',
            (key, value),
        )

    def delete(self, table: TableId, key: bytes) -> None:
        self.conn.execute(f'DELETE FROM {self._table(table)} WHERE k = %s', (key,))

    def close(self) -> None:
        self.conn.close()


def forge(raw: Raw, seq: int, payload: bytes) -> None:
    """Put `payload` in clear in entry `seq` (keeping an erased entry's mark and hash) and
    recompute its conversation's chain and record, as an attacker without keys can."""
    values = raw.entries()
    target = decode_body(seq, values[seq])
    conv_id = target.conversation_id
    boundary = raw.get(Table.META, META_CHAIN_FROM)
    first = None if boundary is None or len(boundary) != SEQ_SIZE else key_seq(boundary)
    prev = b''
    grown = 0
    for at in sorted(values):
        value = values[at]
        body = decode_body(at, value)
        if body.conversation_id != conv_id:
            continue
        hashed, stored = split_value(value)
        if at == seq:
            grown = len(payload) - len(body.payload)
            body = msgspec.structs.replace(body, payload=payload)
            erased = is_erased_value(value)
            hashed = encode_erased_body(body, erased_digest(value)) if erased else encode_body(body)
        rule_2 = first is not None and at >= first  # the store's own chain rule, as the attacker reads it
        if is_erased_value(value):
            digest = link(prev, hashed + stored, rule=2 if rule_2 else 1) or stored
        else:
            digest = append_hash(prev, hashed) if rule_2 else chain_hash(prev, hashed)
        if hashed + digest != value:
            raw.put(Table.ENTRIES, seq_key(at), hashed + digest)
        prev = digest
    record = raw.get(Table.CONVS, conv_key(conv_id))
    assert record is not None
    conv = decode_conversation(conv_id, record)
    conv.head_hash = prev
    conv.payload_bytes += grown
    raw.put(Table.CONVS, conv_key(conv_id), encode_conversation(conv))
