"""`retention=` on the durable backends' constructors: the policy is applied as the store opens."""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import make_log, postgres_dsn, schema_for
from pgserver import drop_schema
from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import InvalidArgumentError, LmdbEventLog, NewEntry, message_entry
from eventlog.log import EventLogBase
from eventlog.postgres_log import PostgresEventLog
from eventlog.retention import RetentionPolicy
from tests.log.logtools import at

OLD_TEXT = 'the vault code was 7731 in spring'


def _reopen(backend: str, path: Path, policy: object) -> EventLogBase:
    if backend == 'lmdb':
        return LmdbEventLog(path / 'store.lmdb', retention=policy)  # type: ignore[arg-type]
    return PostgresEventLog(postgres_dsn(), schema=schema_for(path / 'store.lmdb'), retention=policy)  # type: ignore[arg-type]


async def _seed(log: EventLogBase) -> tuple[int, int]:
    old_payload = message_entry(
        ModelRequest(parts=[UserPromptPart(OLD_TEXT, timestamp=at(1))]), conversation_id='c', run_id='r'
    ).payload
    await log.append(NewEntry(conversation_id='c', run_id='r', kind='run_started', timestamp=at(0)))
    old = await log.append(
        NewEntry(conversation_id='c', run_id='r', kind='message', timestamp=at(1), payload=old_payload)
    )
    fresh = await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('a recent question')]), conversation_id='c', run_id='r')
    )
    return old, fresh


@pytest.mark.parametrize('backend', ['lmdb', 'postgres'])
async def test_a_policy_given_at_open_is_applied_and_reported(backend: str, tmp_path: Path) -> None:
    log = make_log(backend, tmp_path)
    try:
        old, fresh = await _seed(log)
        assert log.retention_report is None  # opened without a policy
    finally:
        log.close()
    reopened = _reopen(backend, tmp_path, RetentionPolicy(max_age='30d'))
    try:
        report = reopened.retention_report
        assert report is not None and report.erased == {'c': 1} and not report.dry_run
        erased = {e.seq for e in await reopened.entries() if e.erased}
        assert erased == {old}
        assert fresh not in erased
        assert OLD_TEXT not in str(await reopened.transcript('c'))
        assert (await reopened.verify()).ok
    finally:
        reopened.close()
        if backend == 'postgres':
            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))


@pytest.mark.parametrize('backend', ['lmdb', 'postgres'])
async def test_a_bad_policy_at_open_is_refused_and_the_store_left_closed(backend: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match='RetentionPolicy'):
        _reopen(backend, tmp_path, '30d')
    # The refused handle released the store: it opens again at once.
    again = make_log(backend, tmp_path)
    try:
        assert await again.last_seq() >= 0
    finally:
        again.close()
        if backend == 'postgres':
            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store.lmdb'))
