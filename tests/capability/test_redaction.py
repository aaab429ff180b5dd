"""`EventLogPersistence(redact=...)` with real agents on every backend: what is stored is what the
redactor returned, marked, replayed byte for byte; the live run keeps the original."""

from __future__ import annotations

import copy
import json
import re

import pytest
from _helpers import chat
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel

from capability.persistence import REDACTED_METADATA_KEY, EventLogPersistence, RedactionError
from eventlog import InvalidArgumentError
from eventlog.log import EventLogBase

CARD = '4111 1111 1111 1111'
TOKEN = 'Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.abc123'
_CARD = re.compile(r'\b(?:\d[ -]?){12,15}\d\b')
_BEARER = re.compile(r'Bearer\s+[A-Za-z0-9._~+/=-]+')


def _scrub(text: str) -> str:
    return _BEARER.sub('Bearer [REDACTED]', _CARD.sub('[CARD]', text))


def redact_secrets(message: ModelMessage) -> ModelMessage:
    """Replace card numbers and bearer tokens in every text, tool argument and tool return."""
    for part in message.parts:
        if isinstance(part, (UserPromptPart, TextPart, ToolReturnPart)) and isinstance(part.content, str):
            part.content = _scrub(part.content)
        elif isinstance(part, ToolCallPart):
            part.args = json.loads(_scrub(part.args_as_json_str()))
    return message


def make_agent(log: EventLogBase, **kwargs: object) -> Agent[None, str]:
    agent = Agent(FunctionModel(chat), capabilities=[EventLogPersistence(log, redact=redact_secrets, **kwargs)])  # type: ignore[arg-type]

    @agent.tool_plain
    def charge(arg: str) -> str:
        """Charge a card."""
        return f'charged {CARD} with {TOKEN}'

    return agent


async def test_redaction_before_storage(log: EventLogBase) -> None:
    agent = make_agent(log)
    result = await agent.run(f'pay with {CARD} using {TOKEN}', conversation_id='shop')
    # The live run saw the originals.
    live = ModelMessagesTypeAdapter.dump_json(result.all_messages())
    assert CARD.encode() in live and TOKEN.encode() in live
    assert result.output == f'answer to: pay with {CARD} using {TOKEN}'

    stored = await log.run_messages(result.run_id)
    raw = await log.run_messages_json(result.run_id)
    assert CARD.encode() not in raw and b'eyJhbGci' not in raw
    assert b'[CARD]' in raw and b'Bearer [REDACTED]' in raw
    # Replay is byte-exact to what was stored after redaction: the redacted messages, marked.
    assert ModelMessagesTypeAdapter.dump_json(stored) == raw
    assert len(stored) == len(result.all_messages())
    for original, kept in zip(result.all_messages(), stored, strict=True):
        redacted = redact_secrets(copy.deepcopy(original))
        assert kept.metadata == {REDACTED_METADATA_KEY: 'redact_secrets'}
        assert kept.parts == redacted.parts
    assert (await log.verify()).ok

    # A tool call and its return: arguments and results redacted too; an untouched message unmarked.
    second = await agent.run('call charge now', message_history=result.all_messages(), conversation_id='shop')
    assert f'charged {CARD}' in second.output
    new = (await log.run_messages(second.run_id))[len(stored) :]
    kinds = [type(m).__name__ for m in new]
    assert kinds == ['ModelRequest', 'ModelResponse', 'ModelRequest', 'ModelResponse']
    call_request, call, tool_return, answer = new
    assert isinstance(tool_return, ModelRequest) and isinstance(answer, ModelResponse)
    assert tool_return.parts[0].content == 'charged [CARD] with Bearer [REDACTED]'  # type: ignore[union-attr]
    assert tool_return.metadata == {REDACTED_METADATA_KEY: 'redact_secrets'}
    assert call.metadata is None and call_request.metadata is None  # nothing to redact: stored as is
    assert CARD not in repr(new) and 'eyJhbGci' not in repr(new)
    # The threaded history was found by its redacted bytes: nothing stored twice as inherited.
    entries = await log.entries(conversation_id='shop', kinds=['message'])
    assert not any(e.inherited for e in entries)
    assert len(entries) == len(second.all_messages())
    assert (await log.verify()).ok


async def test_redactor_mistakes(log: EventLogBase) -> None:
    with pytest.raises(InvalidArgumentError, match='redact must be a callable'):
        EventLogPersistence(log, redact='strip cards')  # type: ignore[arg-type]

    def wrong(message: ModelMessage) -> ModelMessage:
        return 'redacted'  # type: ignore[return-value]

    agent = Agent(FunctionModel(chat), capabilities=[EventLogPersistence(log, redact=wrong)])
    with pytest.raises(RedactionError, match=r'the redactor .*wrong returned str, not a ModelRequest or ModelResponse'):
        await agent.run(f'pay with {CARD}')
    # Nothing unredacted reached the log.
    assert all(CARD.encode() not in e.payload for e in await log.entries())
