"""The append rules and verify's rebuild agree (docs/verify.md, "Two folds, on purpose").

The derived records are built twice, on purpose: by the write path (`eventlog._append`, each
kind's rule in `_APPLY`) and, independently, by verify's rebuild from the stored entries
(`eventlog._verify._Rebuild`). This test drives random sequences of every kind of entry (most
valid, some not: a run that has not started or has finished, a conversation that does not
exist, a parent that is no entry, repeated idempotency keys, forks, deletions, erasures, an
imported fork whose source is gone) through the write path, and after each one that the log
accepts rebuilds the records from the stored entries and asserts they are exactly the stored
ones, and that verify passes. A change to one fold that the other does not follow fails here,
on the first entry where they part.
"""

from __future__ import annotations

import asyncio
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import (
    EventLogBase,
    EventLogError,
    InMemoryEventLog,
    NewEntry,
    RecalledHit,
    RecallInfo,
    compaction_entry,
    durable_step_entry,
    message_entry,
    recall_entry,
    run_finished_entry,
    run_started_entry,
    tool_effect_entry,
)
from eventlog._append import append_entries
from eventlog._keys import Table, decode_body, decode_conversation, decode_id, decode_run, key_seq
from eventlog._storage import ReadTxn
from eventlog._verify import _Invalid, _Rebuild  # pyright: ignore[reportPrivateUsage]
from eventlog.entries import ConversationRecord, ForkInfo, RunRecord, TitleInfo, encode_info

OPS = (
    'run_started',
    'run_started',
    'run_started',
    'message',
    'message',
    'message',
    'message',
    'run_finished',
    'compaction',
    'tool_effect',
    'durable_step',
    'recall',
    'title',
    'archived',
    'unarchived',
    'fork',
    'delete',
    'erase',
    'imported_fork',
    'stray_run_entry',
)
"""What a step does; a few are meant to be refused (the log must then store nothing)."""

STEP = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, 3),  # which conversation (0 to 2: one that exists, if any)
    st.integers(0, 4),  # which run
    st.integers(0, 7),  # a number for the step's own use (a parent, a seq, an idempotency key)
    st.booleans(),  # whether the entry carries an idempotency key
)


def _stored(txn: ReadTxn) -> tuple[list[tuple[int, Any]], dict[str, RunRecord], dict[str, ConversationRecord]]:
    bodies = [(key_seq(key), decode_body(key_seq(key), value)) for key, value in txn.scan(Table.ENTRIES)]
    runs = {decode_id(k, 'run'): decode_run(decode_id(k, 'run'), v) for k, v in txn.scan(Table.RUNS)}
    convs = {decode_id(k, 'conv'): decode_conversation(decode_id(k, 'conv'), v) for k, v in txn.scan(Table.CONVS)}
    return bodies, runs, convs


def _rebuilt_agrees(log: EventLogBase, step: object) -> None:
    bodies, runs, convs = log._read_sync(_stored)  # pyright: ignore[reportPrivateUsage]
    rebuild = _Rebuild()
    for seq, body in bodies:
        try:
            rebuild.apply(seq, body)
        except _Invalid as exc:  # the write path accepted what verify's rebuild refuses
            raise AssertionError(f'after {step}: the rebuild refuses entry {seq} ({body.kind}): {exc}') from None
    assert rebuild.runs == runs, f'after {step}: the run records differ'
    derived = {
        conv_id: msgspec.structs.replace(conv, head_hash=convs[conv_id].head_hash) if conv_id in convs else conv
        for conv_id, conv in rebuild.convs.items()
    }
    assert derived == convs, f'after {step}: the conversation records differ'


async def _step(log: EventLogBase, step: tuple[str, int, int, int, bool], forks: list[str]) -> None:
    op, conv_no, run_no, number, keyed = step
    live = [c.conversation_id for c in await log.list_conversations(include_archived=True)]
    conversations = live if live and conv_no < 3 else ['c0', 'c1', 'c2']  # mostly one that exists
    conv = conversations[conv_no % len(conversations)]
    run = f'r{run_no}'
    key = f'k{number % 3}' if keyed else None
    last = await log.last_seq()
    seq_ref = number % (last + 2)  # 0 and last + 1 are no entry
    if op == 'run_started':
        entry = run_started_entry(
            conversation_id=conv,
            run_id=f'{run}.{number}',
            agent_name='agent' if keyed else None,
            parent=(seq_ref or None) if number > 4 else None,
            idempotency_key=key,
        )
        await log.append(entry)
        return
    started = await log.list_runs()
    running = [r for r in started if r.status == 'running'] if run_no else started  # run 0: maybe a finished one
    run_id = running[run_no % len(running)].run_id if running else run
    if running and op not in ('title', 'archived', 'unarchived', 'fork', 'delete', 'erase'):
        conv = running[run_no % len(running)].conversation_id
    if op == 'message':
        message = ModelRequest(parts=[UserPromptPart(f'q{number}')]) if number % 2 else ModelResponse([TextPart('a')])
        await log.append(message_entry(message, conversation_id=conv, run_id=run_id, idempotency_key=key))
    elif op == 'run_finished':
        status = ('completed', 'failed', 'cancelled')[number % 3]
        usage = {'input_tokens': number} if keyed else None
        await log.append(
            run_finished_entry(conversation_id=conv, run_id=run_id, status=status, usage=usage, idempotency_key=key)
        )
    elif op == 'compaction':
        summary = [ModelResponse([TextPart(f'summary {number}')])]
        await log.append(
            compaction_entry(
                conversation_id=conv, run_id=run_id, replaced=[seq_ref or 1], summary=summary, idempotency_key=key
            )
        )
    elif op == 'tool_effect':
        await log.append(
            tool_effect_entry(
                conversation_id=conv, run_id=run_id, tool_call_id=f't{number}', tool_name='tool', status='started'
            )
        )
    elif op == 'durable_step':
        await log.append(
            durable_step_entry(conversation_id=conv, run_id=run_id, step=number, name='step', result=b'{}')
        )
    elif op == 'recall':
        info = RecallInfo(
            query='q',
            mode='bm25',
            hits=[RecalledHit(run_id=run_id, position=0, score=1.0, seq=seq_ref or None)],
            text='t',
            tokens=1,
            max_tokens=10,
        )
        await log.append(recall_entry(conversation_id=conv, run_id=run_id, info=info, idempotency_key=key))
    elif op == 'title':
        payload = encode_info(TitleInfo(f'title {number}'))
        await log.append(NewEntry(conversation_id=conv, kind='title', payload=payload, idempotency_key=key))
    elif op == 'archived':
        await log.archive(conv)
    elif op == 'unarchived':
        await log.unarchive(conv)
    elif op == 'fork':
        new_id = f'f{len(forks)}'
        await log.fork(conv, new_conversation_id=new_id)
        forks.append(new_id)
    elif op == 'delete':
        await log.delete_conversation(conv)
    elif op == 'erase':
        await log.erase(conv, where=lambda entry: entry.seq % 2 == number % 2, scrub=False)
    elif op == 'imported_fork':
        # What an import writes when the fork point was deleted before the export.
        payload = encode_info(ForkInfo(conversation_id='gone', seq=seq_ref or 1))
        entry = NewEntry(conversation_id=f'i{number}', kind='forked_from', payload=payload)
        await log._write(lambda txn: append_entries(txn, [entry], allow_internal=True))  # pyright: ignore[reportPrivateUsage]
    else:  # an entry of a run that names another conversation, or no run at all
        other = conversations[(conv_no + 1) % len(conversations)]
        await log.append(NewEntry(conversation_id=other, kind='tool_effect', run_id=run_id, payload=b'{}'))


def _run(steps: list[tuple[str, int, int, int, bool]]) -> None:
    async def drive() -> None:
        log = InMemoryEventLog()
        forks: list[str] = []
        for step in steps:
            before = await log.last_seq()
            try:
                await _step(log, step, forks)
            except EventLogError:
                assert await log.last_seq() == before, f'{step} was refused but wrote entries'
                continue
            _rebuilt_agrees(log, step)
        report = await log.verify()
        assert report.ok, report

    asyncio.run(drive())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=40))
def test_the_rebuild_agrees_with_the_append_rules(steps: list[tuple[str, int, int, int, bool]]) -> None:
    _run(steps)


def test_a_rule_changed_in_one_fold_only_is_caught(monkeypatch: Any) -> None:
    """The check above sees drift: a write path that stops counting compactions fails it."""
    from eventlog import _append

    def forgetful(batch: Any, entry: NewEntry, seq: int, ts: Any, allow_internal: bool) -> int | None:
        run, _ = _append._running(batch, entry)  # pyright: ignore[reportPrivateUsage]
        return _append._follow(run, seq)  # pyright: ignore[reportPrivateUsage]

    monkeypatch.setitem(_append._APPLY, 'compaction', forgetful)  # pyright: ignore[reportPrivateUsage]
    steps = [('run_started', 0, 0, 0, False), ('message', 0, 0, 1, False), ('compaction', 0, 0, 1, False)]
    with pytest.raises(AssertionError, match='conversation records differ'):
        _run(steps)
