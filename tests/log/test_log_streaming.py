"""The streaming readers (`iter_branch`, `iter_entries`, `iter_run_message_payloads`,
`iter_context_payloads`, `history_origin`) give exactly what the whole-list readers give, in
bounded batches; `run_messages` and `context` decoded in batches are unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from eventlog import InvalidArgumentError, RunNotFound, compaction_entry, message_entry, run_started_entry
from eventlog.log import STREAM_BYTES, EventLogBase
from tests.log.logtools import add_run, exchange, tool_exchange

dump = ModelMessagesTypeAdapter.dump_json


async def _history(log: EventLogBase) -> dict[str, int]:
    """Two runs in `a` (the second compacts), a fork `f` with a run, and `b` continuing from `a`."""
    first = await add_run(log, 'a', 'r1', exchange(1) + tool_exchange(2) + exchange(3))
    await log.append(run_started_entry(conversation_id='a', run_id='r2', parent=first[-1] + 1))
    more = [await log.append(message_entry(m, conversation_id='a', run_id='r2')) for m in exchange(4)]
    summary = ModelRequest(parts=[UserPromptPart(content='summary of 1 and 2')])
    await log.append(compaction_entry(conversation_id='a', run_id='r2', replaced=first[:4], summary=[summary]))
    more += [await log.append(message_entry(m, conversation_id='a', run_id='r2')) for m in exchange(5)]
    fork_id = await log.fork('a', at_seq=more[1], new_conversation_id='f')
    tip = await log.get_run('r2')
    assert tip is not None
    await add_run(log, fork_id, 'r3', exchange(6), parent=(await log.get_conversation('f')).last_seq)  # type: ignore[union-attr]
    await add_run(log, 'b', 'r4', exchange(7), parent=tip.last_seq)
    return {'r2_last': tip.last_seq}


async def _flatten(batches: AsyncIterator[list[Any]]) -> tuple[list[Any], list[int]]:
    items: list[Any] = []
    sizes: list[int] = []
    async for batch in batches:
        items.extend(batch)
        sizes.append(len(batch))
    return items, sizes


@pytest.mark.parametrize('batch', [1, 2, 3, 500])
async def test_iterators_match_the_whole_list_readers(log: EventLogBase, batch: int) -> None:
    points = await _history(log)
    for run_id in ('r1', 'r2', 'r3', 'r4'):
        payloads, sizes = await _flatten(log.iter_run_message_payloads(run_id, batch=batch))
        assert payloads == await log.run_message_payloads(run_id)
        assert all(0 < size <= batch for size in sizes)
        assert dump(await log.run_messages(run_id)) == await log.run_messages_json(run_id)
    for conversation_id in ('a', 'f', 'b'):
        context, sizes = await _flatten(log.iter_context_payloads(conversation_id, batch=batch))
        assert context == await log.context_payloads(conversation_id)
        assert all(0 < size <= max(batch, 1) for size in sizes[:-1])
        assert dump(await log.context(conversation_id)) == b'[' + b','.join(context) + b']'
        found, _ = await _flatten(log.iter_entries(conversation_id=conversation_id, batch=batch))
        assert found == await log.entries(conversation_id=conversation_id)
    branch, _ = await _flatten(log.iter_branch(points['r2_last'], batch=batch))
    assert branch == await log.branch(points['r2_last'])
    messages, _ = await _flatten(log.iter_branch(points['r2_last'], kinds=['message'], batch=batch))
    assert [e.seq for e in messages] == [e.seq for e in branch if e.kind == 'message']
    by_run, _ = await _flatten(log.iter_entries(run_id='r2', kinds=['message', 'compaction'], batch=batch))
    assert by_run == await log.entries(run_id='r2', kinds=['message', 'compaction'])
    everything, _ = await _flatten(log.iter_entries(after_seq=3, batch=batch))
    assert everything == await log.entries(after_seq=3)
    assert [b async for b in log.iter_branch(None)] == []


async def test_history_origin_is_where_the_inherited_history_ends(log: EventLogBase) -> None:
    points = await _history(log)
    assert await log.history_origin('a') is None
    fork = await log.get_conversation('f')
    assert fork is not None and fork.forked_from is not None
    assert await log.history_origin('f') == fork.forked_from.seq
    assert await log.history_origin('b') == points['r2_last']
    inherited, _ = await _flatten(log.iter_branch(points['r2_last'], kinds=['message']))
    own = await log.entries(conversation_id='b', kinds=['message'])
    assert [e.payload for e in inherited + own] == await log.transcript_payloads('b')


async def test_a_batch_ends_early_once_its_payloads_pass_the_byte_budget(log: EventLogBase) -> None:
    big = 'x' * (STREAM_BYTES // 3)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    for index in range(7):
        prompt = ModelRequest(parts=[UserPromptPart(content=f'{index} {big}')])
        await log.append(message_entry(prompt, conversation_id='c', run_id='r'))
    _, sizes = await _flatten(log.iter_run_message_payloads('r'))
    assert sizes == [3, 3, 1]
    _, sizes = await _flatten(log.iter_context_payloads('c'))
    assert sizes == [3, 3, 1]
    _, sizes = await _flatten(log.iter_entries(conversation_id='c', kinds=['message']))
    assert sizes == [3, 3, 1]


async def test_iterators_check_their_arguments(log: EventLogBase) -> None:
    with pytest.raises(RunNotFound):
        [b async for b in log.iter_run_message_payloads('nope')]
    with pytest.raises(InvalidArgumentError):
        [b async for b in log.iter_branch(1, batch=0)]
    with pytest.raises(InvalidArgumentError):
        [b async for b in log.iter_entries(kinds=['bogus'])]
    with pytest.raises(InvalidArgumentError):
        [b async for b in log.iter_entries(conversation_id='a\u202e')]
