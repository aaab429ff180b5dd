"""Hostile connection strings and schema names given to `PostgresEventLog`: each is refused with
an `EventLogError` of one line that never holds the password, before any server is asked."""

from __future__ import annotations

import pytest

from eventlog.errors import EventLogError, InvalidArgumentError
from eventlog.postgres_log import PostgresEventLog

SECRET = 'Hx9-sekrit-marker'

MALFORMED = [
    f'postgresql://app:{SECRET}@[::1:5432/db',
    f'postgresql://app:{SECRET}@[::1]:99999/db',
    f'postgresql://app:{SECRET}@host:-1/db',
    f'postgresql://app:{SECRET}@host/db?sslmode=%ZZ',
    f'postgresql://app:{SECRET}@host/db?bogus_option=1',
    f'postgres://app:{SECRET}@host:5432,other:x/db',
    f'postgresql://app:{SECRET}@host/db\x00tail',
    f'host=h password={SECRET} port=notaport',
    f"host=h password='{SECRET}",
    f'host=h password={SECRET} =x',
    f'postgresql://app:{SECRET}@' + 'h' * 5000 + ':0/db',
]


def _one_line(exc: BaseException) -> str:
    message = str(exc)
    assert message and '\n' not in message, message
    assert SECRET not in message, message
    return message


@pytest.mark.parametrize('dsn', MALFORMED)
def test_a_malformed_dsn_is_one_line_without_its_password(dsn: str) -> None:
    with pytest.raises(EventLogError) as caught:
        PostgresEventLog(dsn)
    _one_line(caught.value)


def test_an_unclosed_ipv6_bracket_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        PostgresEventLog(f'postgresql://app:{SECRET}@[::1:5432/db')
    assert 'not a PostgreSQL connection string' in _one_line(caught.value)


@pytest.mark.parametrize('schema', ['pg_x', 'pg_catalog', 'pg_toast', 'information_schema'])
def test_a_reserved_schema_name_is_refused_before_connecting(schema: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        PostgresEventLog(f'postgresql://app:{SECRET}@127.0.0.1:1/db', schema=schema)
    assert 'reserved' in _one_line(caught.value)
