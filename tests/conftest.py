"""Shared fixtures: the log backends every conformance test runs against."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from eventlog import InMemoryEventLog, LmdbEventLog
from eventlog.log import EventLogBase

LogFactory = Callable[[], EventLogBase]

BACKENDS = ['memory', 'lmdb']
"""Adding a backend means adding its name here and a branch in `make_log`."""


def make_log(backend: str, tmp_path: Path) -> EventLogBase:
    if backend == 'memory':
        return InMemoryEventLog()
    if backend == 'lmdb':
        return LmdbEventLog(tmp_path / 'store.lmdb')
    raise AssertionError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def log(backend: str, tmp_path: Path) -> AsyncIterator[EventLogBase]:
    """A fresh, empty log of each backend."""
    instance = make_log(backend, tmp_path)
    try:
        yield instance
    finally:
        instance.close()
