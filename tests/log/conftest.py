"""Fixtures of the PostgreSQL concurrency and fault tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pgserver import fresh_schema
from pgworkers import Worker


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    """Start `pg_worker.py` processes; any still running when the test ends are killed."""
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        worker = Worker(*args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def schema(pg_schemas: list[str]) -> str:
    """A fresh schema name, dropped when the test ends."""
    name = fresh_schema()
    pg_schemas.append(name)
    return name
