"""`entry_heads`, `get_entry_head` and `iter_context_heads`: entries with their payloads cut to a
first part and the full size beside them (what the web viewer reads to show a big message), on
every backend; and a stored body whose payload is not bytes is a typed error, not a crash."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from eventlog import CorruptEntryError, InvalidArgumentError, message_entry, run_finished_entry, run_started_entry
from eventlog._keys import HASH_SIZE, StoredBody, decode_body_clipped, encode_body
from eventlog.log import EventLogBase

BIG = 3 << 20


def _request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


async def _record(log: EventLogBase) -> list[bytes]:
    """One run of three messages, the second of `BIG` characters; their stored payloads."""
    await log.append(run_started_entry(conversation_id='c1', run_id='r1'))
    messages = [_request('small one'), _request('x' * BIG), _request('small two')]
    await log.append_many([message_entry(m, conversation_id='c1', run_id='r1') for m in messages])
    await log.append(run_finished_entry(conversation_id='c1', run_id='r1', status='completed'))
    return [ModelMessagesTypeAdapter.dump_json([m])[1:-1] for m in messages]


async def test_heads_cut_payloads_and_tell_their_size(log: EventLogBase) -> None:
    await _record(log)
    whole = await log.entries(conversation_id='c1')
    for limit in (0, 100, BIG + 1000):
        heads = await log.entry_heads(conversation_id='c1', payload_limit=limit)
        assert [(e.seq, e.kind, e.hash, size) for e, size in heads] == [
            (e.seq, e.kind, e.hash, len(e.payload)) for e in whole
        ]
        assert [e.payload for e, _ in heads] == [e.payload[:limit] for e in whole]
    by_run = await log.entry_heads(run_id='r1', kinds=['message'], payload_limit=10, after_seq=whole[1].seq, limit=1)
    assert [(e.seq, e.payload, size) for e, size in by_run] == [
        (whole[2].seq, whole[2].payload[:10], len(whole[2].payload))
    ]
    assert len(whole[2].payload) > BIG
    every = await log.entry_heads(payload_limit=5, kinds=['message'])
    assert [e.seq for e, _ in every] == [e.seq for e in whole if e.kind == 'message']
    head = await log.get_entry_head(whole[2].seq, 64)
    assert head is not None and head[0].payload == whole[2].payload[:64] and head[1] == len(whole[2].payload)
    assert await log.get_entry_head(10_000, 64) is None


async def test_context_heads_are_the_context_cut(log: EventLogBase) -> None:
    await _record(log)
    whole = [pair async for batch in log.iter_context_messages('c1') for pair in batch]
    heads = [item async for batch in log.iter_context_heads('c1', payload_limit=50) for item in batch]
    assert [(seq, payload[:50], len(payload)) for seq, payload in whole] == heads
    assert max(size for _, _, size in heads) > BIG


@pytest.mark.parametrize('bad', [-1, 1.5, '10', None])
async def test_a_bad_payload_limit_is_refused(log: EventLogBase, bad: object) -> None:
    await _record(log)
    with pytest.raises(InvalidArgumentError, match='payload_limit'):
        await log.entry_heads(payload_limit=bad)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidArgumentError, match='payload_limit'):
        await log.get_entry_head(1, bad)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidArgumentError, match='payload_limit'):
        async for _ in log.iter_context_heads('c1', payload_limit=bad):  # pyright: ignore[reportArgumentType]
            pass


def test_a_stored_payload_that_is_not_bytes_is_a_corrupt_entry() -> None:
    body = StoredBody(1, 'c1', None, 'title', datetime.now(UTC), None, None, False, b'{}')
    good = encode_body(body)
    fields = msgspec.msgpack.decode(good)
    fields[-1] = 'a string where bytes belong'
    value = msgspec.msgpack.encode(fields) + b'\0' * HASH_SIZE
    with pytest.raises(CorruptEntryError, match='entry 1 cannot be decoded'):
        decode_body_clipped(1, value, 10)
    with pytest.raises(CorruptEntryError, match='entry 1 cannot be decoded'):
        decode_body_clipped(1, good[:-1] + b'\0' * HASH_SIZE, 10)
