"""Shared fixtures: the log backends every conformance test runs against (from `backends.py`).

The `postgres` branch runs on a real PostgreSQL server the tests start themselves
(`tests/pgserver.py`), or on the server `--postgres-dsn` / `EVENTLOG_TEST_DSN` names. Each
test's store is a schema of its own, named after its temporary directory, so that opening
`make_log(backend, path)` twice opens the same store, as it does for LMDB.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, drop_opened_schemas, make_log, postgres_dsn, schema_for

from eventlog.log import EventLogBase


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
    drop_opened_schemas()


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
        if backend.startswith('postgres'):
            from pgserver import drop_schema

            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))
