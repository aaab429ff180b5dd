"""A fork continued by a run `EventLogPersistence` records: the history the fork shares is not
stored again (docs/conversations.md, "Each message once").

Found by the fault suite's saver (tests/faults, issue 41): when the turns the fork shares were
saved by hand (the store appended them, without a run id naming the run), the fork's first
recorded run recorded them again in the fork's conversation. It now continues from the fork's
`forked_from` entry, as a run of a fork whose messages name their runs does.
"""

from __future__ import annotations

import pytest

pytest.importorskip('pydantic_ai.conversation_store', reason='the conversation store needs pydantic-ai-slim 2.66+')

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from capability import EventLogConversationStore, EventLogPersistence
from eventlog import InMemoryEventLog


def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = messages[-1].parts[-1]
    assert isinstance(prompt, UserPromptPart)
    return ModelResponse(parts=[TextPart(f'reply {prompt.content}')])


@pytest.mark.parametrize('first_turn', ['recorded', 'by hand'])
async def test_a_recorded_run_on_a_fork_stores_the_shared_history_once(first_turn: str) -> None:
    log = InMemoryEventLog()
    store = EventLogConversationStore(log)
    agent = Agent(FunctionModel(echo), capabilities=[EventLogPersistence(log)])
    if first_turn == 'recorded':
        await store.save(await agent.run('one', conversation=Conversation(conversation_id='source')))
    else:
        await store.save(
            Conversation(
                conversation_id='source',
                messages=[ModelRequest(parts=[UserPromptPart('one')]), ModelResponse(parts=[TextPart('reply one')])],
            )
        )
    fork = await store.fork('source', at=2, new_conversation_id='fork')
    await store.save(await agent.run('two', conversation=fork))

    loaded = await store.load('fork')
    assert loaded is not None
    assert [p.content for m in loaded.messages for p in m.parts] == ['one', 'reply one', 'two', 'reply two']
    stored = [e.payload for e in await log.entries(kinds=['message'])]
    for text in (b'"one"', b'"reply one"', b'"two"', b'"reply two"'):
        assert sum(text in payload for payload in stored) == 1, text
    assert (await log.verify()).ok
