"""A store whose conversation branches, nests a sub-agent and is forked, recorded by real agent
runs (`FunctionModel`, `EventLogPersistence`), for the tests of the views' marks and instructions
(tests/cli/test_cli_outline.py, tests/web/test_web_outline.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability.persistence import EventLogPersistence
from capability.search import ConversationSearch
from eventlog import LmdbEventLog

SYSTEM = 'You audit \x1b[31mrockets\x1b[0m [bold]carefully[/bold].'
"""The agent's system prompt: escapes and Rich markup, shown as text."""
INSTRUCTIONS = 'Answer in one line.'
"""The agent's static instructions."""
AFTER_TOOL = 'Quote the tool result.'
"""Instructions added once a tool has returned: they change between two requests of one run."""
HELPER_INSTRUCTIONS = 'You are the helper: be exact.\x1b]0;owned\x07 <b>no markup</b>'
"""The sub-agent's instructions: a terminal title sequence and HTML, shown as text."""


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ''


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """`delegate X` calls the helper tool; anything else is answered by quoting the prompt."""
    last = messages[-1]
    if isinstance(last, ModelRequest):
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f'the helper said: {returns[0].content}')])
    prompt = _prompt(messages)
    if prompt.startswith('delegate '):
        return ModelResponse(parts=[ToolCallPart('ask_helper', {'question': prompt[9:]}, tool_call_id='call-h1')])
    return ModelResponse(parts=[TextPart(f'answer to {prompt}')])


@dataclass
class OutlineStore:
    """The store and the ids and entry numbers the tests look for."""

    path: Path
    runs: dict[str, str] = field(default_factory=dict[str, str])
    """Run ids by role: `first`, `second`, `regenerated`, `edited`, `delegating`, `helper`, `forked`."""
    first_seqs: dict[str, int] = field(default_factory=dict[str, int])
    """Each run's first message entry, by role."""
    fork_at: int = 0
    """The entry conversation `talk` was forked at."""


async def build_outline_store(path: Path) -> OutlineStore:
    """Conversation `talk`: `first`; `second` continues it; `regenerated` asks `second`'s question
    again from `first`'s tip (`second` is left); `edited` asks another question from the same
    point (`regenerated` is left); `delegating` continues `edited` and calls a tool that runs the
    sub-agent `helper` in the same conversation. Conversation `fork` is forked from `talk` at
    `first`'s answer and run once (`forked`)."""
    store = OutlineStore(path)
    log = LmdbEventLog(path)
    try:
        helper = Agent(
            FunctionModel(_model),
            name='helper',
            instructions=HELPER_INSTRUCTIONS,
            capabilities=[EventLogPersistence(log)],
        )
        agent = Agent(
            FunctionModel(_model),
            name='auditor',
            system_prompt=SYSTEM,
            instructions=INSTRUCTIONS,
            capabilities=[ConversationSearch(log, scope='conversation'), EventLogPersistence(log)],
        )

        @agent.instructions
        def after_tool(ctx: RunContext[None]) -> str:  # pyright: ignore[reportUnusedFunction]
            returned = any(
                isinstance(part, ToolReturnPart)
                for message in ctx.messages
                if isinstance(message, ModelRequest)
                for part in message.parts
            )
            return AFTER_TOOL if returned and ctx.messages[-1].run_id == ctx.run_id else ''

        @agent.tool
        async def ask_helper(ctx: RunContext[None], question: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Ask the helper."""
            result = await helper.run(question, conversation_id=ctx.conversation_id)
            store.runs['helper'] = result.run_id
            return result.output

        first = await agent.run('how high do rockets fly', conversation_id='talk')
        second = await agent.run('and how fast', message_history=first.all_messages())
        # Regenerate `second`'s answer: its request handed in again, without a new prompt.
        regenerated = await agent.run(message_history=second.all_messages()[:-1])
        edited = await agent.run('and how heavy', message_history=first.all_messages())
        delegating = await agent.run('delegate what fuel', message_history=edited.all_messages())
        for role, result in [
            ('first', first),
            ('second', second),
            ('regenerated', regenerated),
            ('edited', edited),
            ('delegating', delegating),
        ]:
            store.runs[role] = result.run_id
        store.fork_at = (await log.get_run(first.run_id)).last_seq - 1  # pyright: ignore[reportOptionalMemberAccess]
        await log.fork('talk', at_seq=store.fork_at, new_conversation_id='fork')
        forked = await agent.run('in the fork', message_history=first.all_messages(), conversation_id='fork')
        store.runs['forked'] = forked.run_id
        for role, run_id in store.runs.items():
            found = await log.entries(run_id=run_id, kinds=['message'])
            store.first_seqs[role] = found[0].seq
    finally:
        log.close()
    return store


def outline_store(path: Path) -> OutlineStore:
    """`build_outline_store` from synchronous code."""
    return asyncio.run(build_outline_store(path))
