"""A chat app whose conversations are kept in the event log.

Run it from the repository root (pydantic-ai-slim 2.68 or newer, `pip install uvicorn ag-ui-protocol`):

    CHAT_APP_STORE=chat.lmdb uvicorn examples.chat_app:app

`POST /api/chat` speaks the Vercel AI data stream protocol (the AI SDK's `useChat`), `POST /api/agui`
the AG-UI protocol. Either way the chat is held on the server: pydantic-ai's UI adapter loads it from
`EventLogConversationStore`, the agent records each step with `EventLogPersistence` as it runs, and the
adapter's save links the messages the capability recorded instead of storing them again. A regenerated
answer keeps the old one as a branch. Each conversation belongs to the user who started it: another user
naming its id gets a 404. `eventlog serve --store chat.lmdb` shows the conversations, `eventlog verify --store
chat.lmdb` checks them.

The user comes from the `X-User` header here; a real app takes it from its authentication (a session
cookie, a verified token), never from a header the browser sets, and makes conversation ids unguessable.
The model is `CHAT_APP_MODEL` (any pydantic-ai model name, e.g. `openai:gpt-5.2`); without it, a scripted
offline model answers, so the app runs without keys.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from capability import EventLogConversationStore, EventLogPersistence
from eventlog import EventLogBase, LmdbEventLog

STORE = os.environ.get('CHAT_APP_STORE', 'chat-app.lmdb')
"""The LMDB directory the conversations are kept in (created on first use)."""
MODEL = os.environ.get('CHAT_APP_MODEL')
"""A pydantic-ai model name; unset or empty: the scripted offline model (`scripted_model`)."""
USER_HEADER = 'X-User'
"""The request header naming the user; stands in for a real app's authentication."""

_replies = itertools.count(1)


def word_count(text: str) -> int:
    """Count the words in `text`."""
    return len(text.split())


async def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """The offline model: a question with "count" in it calls `word_count` on the question and
    reports the result; anything else gets a numbered echo (numbered per process, so a regenerated
    answer differs from the one it replaces)."""
    last = messages[-1]
    parts: Sequence[ModelRequestPart] = last.parts if isinstance(last, ModelRequest) else ()
    if returned := [part for part in parts if isinstance(part, ToolReturnPart)]:
        yield f'That question has {returned[0].content} words.'
        return
    prompt = ' '.join(str(part.content) for part in parts if isinstance(part, UserPromptPart))
    if 'count' in prompt.lower():
        yield {0: DeltaToolCall('word_count', json.dumps({'text': prompt}), tool_call_id=f'count-{next(_replies)}')}
        return
    for chunk in (f'Reply {next(_replies)}: ', 'you said ', repr(prompt)):
        yield chunk


def build_agent(log: EventLogBase) -> Agent[None, str]:
    """The chat agent: `MODEL` or the scripted model, one tool, every step recorded in `log` as it happens."""
    return Agent(
        MODEL or FunctionModel(stream_function=scripted_model),
        deps_type=type(None),
        instructions='You are a concise assistant. Use word_count to count words.',
        tools=[word_count],
        capabilities=[EventLogPersistence[None](log)],
    )


class Chat:
    """What the app serves with: the open log, the agent recording into it, the store on it."""

    def __init__(self, log: EventLogBase) -> None:
        self.log = log
        self.agent = build_agent(log)
        self.store = EventLogConversationStore(log)


def _user(request: Request) -> str | None:
    """The signed-in user (here: the `X-User` header; see the module docstring)."""
    return request.headers.get(USER_HEADER) or None


def _unauthorized() -> Response:
    return JSONResponse({'error': f'not signed in: send the {USER_HEADER} header'}, status_code=401)


async def vercel_chat(request: Request) -> Response:
    """`POST /api/chat`: one turn of the Vercel AI data stream protocol, the chat loaded and saved in the log."""
    if (user := _user(request)) is None:
        return _unauthorized()
    chat: Chat = request.app.state.chat
    return await VercelAIAdapter.dispatch_request(
        request, agent=chat.agent, conversation_store=chat.store, conversation_scope=user
    )


async def agui_chat(request: Request) -> Response:
    """`POST /api/agui`: one AG-UI run (its `threadId` is the conversation), loaded and saved in the log."""
    if (user := _user(request)) is None:
        return _unauthorized()
    chat: Chat = request.app.state.chat
    return await AGUIAdapter.dispatch_request(
        request, agent=chat.agent, conversation_store=chat.store, conversation_scope=user
    )


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncGenerator[None]:
    """Open the store at `STORE` for the app's lifetime."""
    log = LmdbEventLog(STORE)
    app.state.chat = Chat(log)
    try:
        yield
    finally:
        log.close()


app = Starlette(
    routes=[Route('/api/chat', vercel_chat, methods=['POST']), Route('/api/agui', agui_chat, methods=['POST'])],
    lifespan=lifespan,
)
