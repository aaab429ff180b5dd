"""`EventLogPersistence` records a request with the system prompt `ReinjectSystemPrompt` put back.

The UI adapters add a `ReinjectSystemPrompt` to every run they start (server-managed system
prompt). Newer pydantic-ai releases stamp a handed-in trailing request before the request hooks,
so a recorder running before the reinjector would store the request without the system prompt the
model was sent; `EventLogPersistence` orders itself inside it. With `replace_existing=True` the
reinjector renders the prompt again before every model request, with a fresh timestamp: the log
keeps the request as first sent (docs/persistence.md, known limits).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from _helpers import dump
from pydantic_ai import Agent
from pydantic_ai.capabilities import ReinjectSystemPrompt
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability.persistence import EventLogPersistence
from eventlog import InMemoryEventLog


def _model(seen: list[list[ModelMessage]]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('lookup', {'a': 1}, tool_call_id='c1')])

    return FunctionModel(answer)


def _agent(log: InMemoryEventLog, seen: list[list[ModelMessage]]) -> Agent[None, str]:
    agent = Agent(_model(seen), system_prompt='Be brief.', capabilities=[EventLogPersistence(log)])

    @agent.tool_plain
    def lookup(a: int) -> int:
        """Look `a` up."""
        return a

    return agent


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _without_system_prompt_stamps(messages: list[ModelMessage]) -> list[ModelMessage]:
    """`messages` with every system prompt part's timestamp set to one value."""
    return [
        replace(m, parts=[replace(p, timestamp=_EPOCH) if isinstance(p, SystemPromptPart) else p for p in m.parts])
        if isinstance(m, ModelRequest)
        else m
        for m in messages
    ]


async def test_a_handed_in_request_is_recorded_with_the_reinjected_system_prompt() -> None:
    log = InMemoryEventLog()
    seen: list[list[ModelMessage]] = []
    agent = _agent(log, seen)
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('hello')])]
    result = await agent.run(
        message_history=history,
        conversation_id='c',
        capabilities=[ReinjectSystemPrompt(replace_existing=True, id=None)],
    )
    recorded = await log.run_messages(result.run_id)
    first = recorded[0]
    assert isinstance(first, ModelRequest)
    assert [type(p) for p in first.parts] == [SystemPromptPart, UserPromptPart]
    # What the model was sent first is what the log holds, byte for byte.
    assert dump(recorded[:1]) == dump(seen[0][:1])
    # The reinjector stamps the prompt again on the second request; nothing else differs.
    assert len(seen) == 2 and len(recorded) == 4
    assert dump(_without_system_prompt_stamps(recorded)) == dump(_without_system_prompt_stamps(result.all_messages()))
    assert (await log.verify()).ok


async def test_a_run_with_its_own_prompt_replays_exactly_under_the_reinjector() -> None:
    log = InMemoryEventLog()
    agent = _agent(log, [])
    result = await agent.run('hello', conversation_id='c', capabilities=[ReinjectSystemPrompt()])
    assert dump(await log.run_messages(result.run_id)) == dump(result.all_messages())
