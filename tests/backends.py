"""The log backends every conformance test runs against, and how a test opens a store on each.

A plain module (not `conftest`), so that test modules import one copy of it: `from backends import
make_log`. The `postgres` branch runs on a real PostgreSQL server the tests start themselves
(`tests/pgserver.py`), or on the server `--postgres-dsn` / `EVENTLOG_TEST_DSN` names. Each test's
store is a schema of its own, named after its temporary directory, so that opening
`make_log(backend, path)` twice opens the same store, as it does for LMDB.
"""

from __future__ import annotations

import atexit
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from eventlog import InMemoryEventLog, LmdbEventLog
from eventlog.encryption import FileKeyProvider
from eventlog.log import EventLogBase

LogFactory = Callable[[], EventLogBase]

BACKENDS = ['memory', 'lmdb', 'postgres']
"""Adding a backend means adding its name here and a branch in `make_log`."""

ENCRYPTED_BACKENDS = ['lmdb-encrypted', 'postgres-encrypted']
"""The persistent backends opened with a key provider (docs/encryption.md): the conformance suite
runs on them too. Their keyring is `keyring` beside the store, made on first use."""

_server_dsn: str | None = None
_opened_schemas: set[str] = set()
"""Schemas `make_log` opened; dropped at the end of the session (on a server the tests did not start)."""


def postgres_dsn() -> str:
    """The DSN of the test server: `EVENTLOG_TEST_DSN`, or a server started on first use for this session."""
    global _server_dsn
    if _server_dsn is None:
        given = os.environ.get('EVENTLOG_TEST_DSN')
        if given:
            _server_dsn = given
        else:
            from pgserver import start_server

            server = start_server()
            atexit.register(server.destroy)
            _server_dsn = server.dsn()
    return _server_dsn


def schema_for(path: Path) -> str:
    """The PostgreSQL schema that stands for the store directory `path` in the tests."""
    return 't_' + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:20]


def keyring_for(tmp_path: Path) -> FileKeyProvider:
    """The keyring of the encrypted store of `tmp_path` (made on first use)."""
    where = tmp_path / 'keyring'
    if where.exists():
        return FileKeyProvider(where)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return FileKeyProvider.create(where)


def make_log(backend: str, tmp_path: Path) -> EventLogBase:
    if backend == 'lmdb-encrypted':
        return LmdbEventLog(tmp_path / 'store.lmdb', keys=keyring_for(tmp_path))
    if backend == 'postgres-encrypted':
        from eventlog.postgres_log import PostgresEventLog

        schema = schema_for(tmp_path / 'store.lmdb')
        _opened_schemas.add(schema)
        return PostgresEventLog(postgres_dsn(), schema=schema, keys=keyring_for(tmp_path))
    if backend == 'memory':
        return InMemoryEventLog()
    if backend == 'lmdb':
        return LmdbEventLog(tmp_path / 'store.lmdb')
    if backend == 'postgres':
        from eventlog.postgres_log import PostgresEventLog

        schema = schema_for(tmp_path / 'store.lmdb')
        _opened_schemas.add(schema)
        return PostgresEventLog(postgres_dsn(), schema=schema)
    raise AssertionError(backend)


def drop_opened_schemas() -> None:
    """Drop the schemas `make_log` opened, on a server the tests did not start (theirs goes away whole)."""
    if _server_dsn is not None and _opened_schemas and os.environ.get('EVENTLOG_TEST_DSN'):
        from pgserver import drop_schema

        for schema in sorted(_opened_schemas):
            drop_schema(_server_dsn, schema)
