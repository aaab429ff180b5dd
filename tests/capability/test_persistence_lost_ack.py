"""A write whose commit landed but whose answer was lost (a connection that broke after COMMIT,
as PostgreSQL can leave it): the failing run's last record repeats the same idempotency keys, so
the log holds each message once.

Found by the fault suite's saver on PostgreSQL with the server killed (issue 41): the recorder
moved its message counter for the lost write, so recording the run's failure appended the
response again under the next key.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _helpers import chat_model
from pydantic_ai import Agent

from capability import EventLogPersistence, EventLogPersistenceError
from eventlog import InMemoryEventLog, NewEntry, StoreConnectionError


class LosesOneAnswer(InMemoryEventLog):
    """Commits every write; the answer of the one carrying a response is lost once."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False

    async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
        seqs = await super().append_many(entries)
        if not self.lost and any(e.kind == 'message' and b'"kind":"response"' in e.payload for e in entries):
            self.lost = True
            raise StoreConnectionError('the connection broke after COMMIT was sent; its outcome is unknown')
        return seqs


async def test_a_lost_answer_never_stores_a_message_twice() -> None:
    log = LosesOneAnswer()
    agent = Agent(chat_model(), capabilities=[EventLogPersistence(log)])
    with pytest.raises(EventLogPersistenceError):
        await agent.run('hello', conversation_id='c')
    assert log.lost
    messages = await log.entries(conversation_id='c', kinds=['message'])
    payloads = [entry.payload for entry in messages]
    assert len(payloads) == len(set(payloads)) == 2
    [run] = await log.list_runs(conversation_id='c')
    assert run.status == 'failed'
    assert (await log.verify()).ok
