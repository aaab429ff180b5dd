"""Deeply nested JSON in stored messages (issue 42): a store where one tool call's arguments nest
600 levels deep, recorded by a real agent run, and one where they nest 100,000 levels, stored
through the log API; and the text that must stay findable around them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability.persistence import EventLogPersistence
from eventlog import EventLogBase, message_entry, run_finished_entry, run_started_entry

DEPTH = 600
"""How deep the agent's tool call nests (3.6 KB of JSON: within reach of a prompt injection)."""
HUGE_DEPTH = 100_000
"""How deep the message stored through the API nests."""
NEEDLE = 'wolverine'
"""The word at the bottom of every deep value."""
FACT = 'the vault code is heron-5521'
"""Stated in conversation `deep` before the deep call."""
AFTER = 'the marmot sleeps in the attic'
"""Stated in conversation `deep` after the deep call."""
OTHER = 'the ferry leaves at noon'
"""Stated in conversation `other`."""
HUGE_TEXT = 'the giraffe eats acacia leaves'
"""The reply after the 100,000-deep call, in conversation `huge`."""


def deep_json(depth: int) -> str:
    """`{"a":{"a":...{"a":"NEEDLE"}...}}`, `depth` objects deep."""
    return '{"a":' * depth + json.dumps(NEEDLE) + '}' * depth


@dataclass
class DeepStore:
    """What `add_deep_conversations` stored."""

    deep_runs: list[str] = field(default_factory=list[str])
    """The runs of conversation `deep`, in order; the second made the deep call."""
    other_run: str = ''
    huge_run: str = 'run-huge'
    deep_call_seq: int = 0
    """The entry holding the 600-deep tool call."""
    huge_call_seq: int = 0
    """The entry holding the 100,000-deep tool call."""


def _deep_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """`call deep` makes a tool call 600 levels deep; after the tool's answer (its arguments fail
    validation: a retry), it replies `AFTER`; anything else is acknowledged."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(part, ToolReturnPart | RetryPromptPart) for part in last.parts):
        return ModelResponse(parts=[TextPart(AFTER)])
    prompt = next((p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)), '')
    if prompt == 'call deep':
        return ModelResponse(parts=[ToolCallPart('inspect', '{"key":' + deep_json(DEPTH) + '}', tool_call_id='deep-1')])
    return ModelResponse(parts=[TextPart(f'noted: {prompt}')])


def deep_agent(log: EventLogBase) -> Agent[None, str]:
    """A real agent over `log` whose model makes the deep call (`_deep_model`)."""
    agent = Agent(FunctionModel(_deep_model), name='deep', capabilities=[EventLogPersistence[None](log)])

    @agent.tool_plain
    def inspect(key: object) -> str:  # pyright: ignore[reportUnusedFunction]
        """Inspect a value."""
        return 'inspected'

    return agent


async def add_deep_conversations(log: EventLogBase, *, huge: bool = True) -> DeepStore:
    """Conversation `deep` (three runs by a real agent: `FACT`, the 600-deep call answered by
    `AFTER`, one more prompt), `other` (one run, `OTHER`) and, with `huge`, `huge` (the
    100,000-deep call, a tool return as deep, and `HUGE_TEXT`, appended through the log API)."""
    found = DeepStore()
    agent = deep_agent(log)
    history: list[ModelMessage] | None = None
    for index, prompt in enumerate([f'please remember {FACT}', 'call deep', 'and one more thing']):
        result = await agent.run(prompt, message_history=history, conversation_id='deep' if index == 0 else None)
        history = result.all_messages()
        found.deep_runs.append(result.run_id)
    result = await deep_agent(log).run(f'remember {OTHER}', conversation_id='other')
    found.other_run = result.run_id
    for entry in await log.entries(run_id=found.deep_runs[1], kinds=['message']):
        if b'deep-1' in entry.payload and b'tool-call' in entry.payload:
            found.deep_call_seq = entry.seq
    assert found.deep_call_seq
    if not huge:
        return found
    text = deep_json(HUGE_DEPTH)
    await log.append(run_started_entry(conversation_id='huge', run_id=found.huge_run, agent_name='api'))
    for message in [
        ModelRequest(parts=[UserPromptPart('look at the giraffe')]),
        ModelResponse(parts=[ToolCallPart('inspect', text, tool_call_id='huge-1')]),
        ModelRequest(parts=[ToolReturnPart('inspect', text, tool_call_id='huge-1')]),
        ModelResponse(parts=[TextPart(HUGE_TEXT)]),
    ]:
        seq = await log.append(message_entry(message, conversation_id='huge', run_id=found.huge_run))
        if isinstance(message, ModelResponse) and isinstance(message.parts[0], ToolCallPart):
            found.huge_call_seq = seq
    await log.append(run_finished_entry(conversation_id='huge', run_id=found.huge_run, status='completed'))
    assert found.huge_call_seq
    return found


async def build_deep_store(path: Path) -> DeepStore:
    """A new LMDB store at `path` holding `add_deep_conversations`."""
    from eventlog import LmdbEventLog

    log = LmdbEventLog(path)
    try:
        return await add_deep_conversations(log)
    finally:
        log.close()


def unreadable_payload() -> bytes:
    """A response whose tool arguments nest 220 levels under a `kind` key: what an earlier version
    stored, and what pydantic-ai (whose JSON reader stops near 200 levels) cannot read."""
    args = '{"kind":"tree","a":' + '{"a":' * 220 + '1' + '}' * 221
    return (
        b'{"parts":[{"tool_name":"t","args":' + args.encode() + b',"tool_call_id":"x","id":null,'
        b'"provider_name":null,"provider_details":null,"part_kind":"tool-call"}],"usage":{},"model_name":"m",'
        b'"timestamp":"2026-01-01T00:00:00Z","kind":"response","provider_name":null,"provider_url":null,'
        b'"provider_details":null,"provider_response_id":null,"finish_reason":null,"run_id":null,"metadata":null}'
    )
