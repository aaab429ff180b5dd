"""Helpers for the log tests: messages and small runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from eventlog import message_entry, run_finished_entry, run_started_entry
from eventlog.log import EventLogBase


def at(i: int) -> datetime:
    """A fixed timestamp, so that the same call builds byte-identical messages."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)


def exchange(i: int, text: str = '') -> list[ModelMessage]:
    """A user turn and the assistant's reply, with recognisable text (deterministic bytes)."""
    return [
        ModelRequest(parts=[UserPromptPart(f'question {i} {text}'.strip(), timestamp=at(i))], timestamp=at(i)),
        ModelResponse(parts=[TextPart(f'answer {i} {text}'.strip())], timestamp=at(i)),
    ]


def tool_exchange(i: int) -> list[ModelMessage]:
    """A user turn, a tool call, its return and the final answer (deterministic bytes)."""
    call = ToolCallPart('lookup', {'item': i, 'path': f'/srv/data/{i}.json'}, tool_call_id=f'c{i}')
    ret = ToolReturnPart('lookup', {'found': True, 'n': i}, tool_call_id=f'c{i}', timestamp=at(i))
    return [
        ModelRequest(parts=[UserPromptPart(f'look up item {i}', timestamp=at(i))], timestamp=at(i)),
        ModelResponse(parts=[call], timestamp=at(i)),
        ModelRequest(parts=[ret], timestamp=at(i)),
        ModelResponse(parts=[TextPart(f'item {i} found')], timestamp=at(i)),
    ]


async def add_run(
    log: EventLogBase,
    conversation_id: str,
    run_id: str,
    messages: list[ModelMessage],
    *,
    parent: int | None = None,
    finish: bool = True,
) -> list[int]:
    """Append a whole run (start, messages, finish) one entry per call; return the message seqs."""
    await log.append(run_started_entry(conversation_id=conversation_id, run_id=run_id, parent=parent))
    seqs = [await log.append(message_entry(m, conversation_id=conversation_id, run_id=run_id)) for m in messages]
    if finish:
        await log.append(run_finished_entry(conversation_id=conversation_id, run_id=run_id, status='completed'))
    return seqs
