"""Shared fixtures: the log backends every conformance test runs against.

The `postgres` branch runs on a real PostgreSQL server the tests start themselves
(`tests/pgserver.py`), or on the server `--postgres-dsn` / `EVENTLOG_TEST_DSN` names. Each
test's store is a schema of its own, named after its temporary directory, so that opening
`make_log(backend, path)` twice opens the same store, as it does for LMDB.
"""

from __future__ import annotations

import atexit
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from eventlog import InMemoryEventLog, LmdbEventLog
from eventlog.log import EventLogBase

LogFactory = Callable[[], EventLogBase]

BACKENDS = ['memory', 'lmdb', 'postgres']
"""Adding a backend means adding its name here and a branch in `make_log`."""

_server_dsn: str | None = None
_opened_schemas: set[str] = set()
"""Schemas `make_log` opened; dropped at the end of the session (on a server the tests did not start)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        '--postgres-dsn',
        default=None,
        help='run the PostgreSQL tests against this existing server instead of starting one '
        '(also EVENTLOG_TEST_DSN); the user must be allowed to create schemas',
    )


def pytest_configure(config: pytest.Config) -> None:
    dsn = config.getoption('--postgres-dsn')
    if dsn:
        os.environ['EVENTLOG_TEST_DSN'] = dsn


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _server_dsn is not None and _opened_schemas and os.environ.get('EVENTLOG_TEST_DSN'):
        from pgserver import drop_schema

        for schema in sorted(_opened_schemas):
            drop_schema(_server_dsn, schema)


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


def make_log(backend: str, tmp_path: Path) -> EventLogBase:
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


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pg_dsn() -> str:
    """The DSN of the test PostgreSQL server (started for the session on first use)."""
    return postgres_dsn()


@pytest.fixture
def pg_schemas(pg_dsn: str) -> Iterator[list[str]]:
    """Schemas a test creates; dropped when it ends."""
    from pgserver import drop_schema

    created: list[str] = []
    yield created
    for schema in created:
        drop_schema(pg_dsn, schema)


@pytest.fixture
async def log(backend: str, tmp_path: Path) -> AsyncIterator[EventLogBase]:
    """A fresh, empty log of each backend."""
    instance = make_log(backend, tmp_path)
    try:
        yield instance
    finally:
        instance.close()
        if backend == 'postgres':
            from pgserver import drop_schema

            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))
