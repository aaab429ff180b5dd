"""Shared pieces of the capability tests: scripted models, byte-level comparisons and a lease clock."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

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
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from eventlog.log import EventLogBase


def dump(messages: Sequence[ModelMessage]) -> bytes:
    """A history exactly as pydantic-ai serializes it."""
    return ModelMessagesTypeAdapter.dump_json(list(messages))


async def replayed(log: EventLogBase, run_id: str) -> bytes:
    """A run's record replayed from the log, serialized like `dump`."""
    return dump(await log.run_messages(run_id))


def last_prompt(messages: Sequence[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ''


def _pending_tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return []
    return [part for part in last.parts if isinstance(part, ToolReturnPart)]


def chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A deterministic model: `call <tool> <arg>` calls a tool (with a fixed call id), anything
    else is answered with text that quotes the prompt."""
    returns = _pending_tool_returns(messages)
    if returns:
        return ModelResponse(parts=[TextPart(f'tool said {returns[0].content}')])
    prompt = last_prompt(messages)
    if prompt.startswith('call '):
        _, tool, arg = prompt.split(' ', 2)
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        return ModelResponse(parts=[ToolCallPart(tool, {'arg': arg}, tool_call_id=f'call-{step}')])
    return ModelResponse(parts=[TextPart(f'answer to: {prompt}')])


async def chat_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """The streaming twin of `chat` (text in several chunks)."""
    response = chat(messages, info)
    for part in response.parts:
        if isinstance(part, TextPart):
            words = part.content.split(' ')
            for i, word in enumerate(words):
                yield word if i == 0 else ' ' + word
        elif isinstance(part, ToolCallPart):
            yield {
                0: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str(), tool_call_id=part.tool_call_id)
            }


def chat_model() -> FunctionModel:
    return FunctionModel(chat, stream_function=chat_stream)


class LeaseClock:
    """A wall clock for `EventLogBase.lease_clock` that moves only when told: a lease lapses at once
    when the test moves it past the lease's end, and never lapses by itself on a slow machine."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` forward."""
        self.now += seconds


def stop_lease_clock(log: EventLogBase) -> LeaseClock:
    """Give `log` a `LeaseClock` of its own (every lease it takes or renews is timed by it)."""
    clock = LeaseClock()
    log.lease_clock = clock
    return clock
