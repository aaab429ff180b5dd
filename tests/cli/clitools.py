"""Helpers for the command-line tests: real stores built by real agent runs, and a runner."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import struct
import subprocess
import termios
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from clirunner import Result, run_cli
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    CompactionPart,
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
from eventlog import LmdbEventLog

DETAIL = 'the staging bucket is s3://quokka-archive-7731 and nothing else'
"""A detail stated early in conversation `alpha`, later compacted away."""

OTHER_DETAIL = 'the beta launch code is wombat-4242'
"""A detail of conversation `beta` that `alpha`'s searches must never show."""


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ''


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """`lookup X` calls the lookup tool; anything else gets a reply quoting the prompt."""
    last = messages[-1]
    if isinstance(last, ModelRequest):
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f'the tool said: {returns[0].content}')])
    prompt = _last_prompt(messages)
    if prompt.startswith('lookup '):
        return ModelResponse(parts=[ToolCallPart('lookup', {'key': prompt[7:]}, tool_call_id='call-lookup-1')])
    return ModelResponse(parts=[TextPart(f'noted: {prompt}')])


def compact_after(limit: int):
    """A history processor replacing all but the last two messages with a summary once there are more than `limit`."""

    async def processor(messages: list[ModelMessage]) -> list[ModelMessage]:
        if len(messages) <= limit:
            return messages
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        summary = CompactionPart(content=f'summary of {len(messages) - 1} earlier messages')
        return [replace(last, parts=[summary, *last.parts])]

    return processor


def make_agent(log: LmdbEventLog, name: str, *, compact: int | None = None) -> Agent[None, str]:
    capabilities = [] if compact is None else [ProcessHistory[None](compact_after(compact))]
    agent = Agent(FunctionModel(scripted), name=name, capabilities=[*capabilities, EventLogPersistence[None](log)])

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        return f'value-of-{key}'

    return agent


@dataclass
class Store:
    """A store built by `build_store`, and the ids in it."""

    path: Path
    alpha_runs: list[str] = field(default_factory=list[str])
    beta_runs: list[str] = field(default_factory=list[str])


async def build_store_async(path: Path) -> Store:
    """Two conversations recorded by real agent runs.

    `alpha` (titled 'Alpha planning'): four runs threaded with `message_history`; the first
    states `DETAIL`, the second calls a tool, the last two are compacted down to a summary.
    `beta`: one run of another agent, stating `OTHER_DETAIL`.
    """
    store = Store(path)
    log = LmdbEventLog(path)
    try:
        agent = make_agent(log, 'planner', compact=6)
        history: list[ModelMessage] | None = None
        for index, prompt in enumerate(
            [f'please remember {DETAIL}', 'lookup gizmo', 'what about the weather', 'and the rollout']
        ):
            result = await agent.run(prompt, message_history=history, conversation_id='alpha' if index == 0 else None)
            history = result.all_messages()
            store.alpha_runs.append(result.run_id)
        await log.set_title('alpha', 'Alpha planning')
        other = make_agent(log, 'helper')
        result = await other.run(f'remember {OTHER_DETAIL}', conversation_id='beta')
        store.beta_runs.append(result.run_id)
    finally:
        log.close()
    return store


def build_store(path: Path) -> Store:
    """`build_store_async` from synchronous code."""
    return asyncio.run(build_store_async(path))


def invoke(
    *args: str | Path,
    store: Path | None = None,
    input: str | bytes | None = None,
    env: dict[str, str | None] | None = None,
) -> Result:
    """Run `eventlog ARGS [--store STORE]` in-process (`clirunner.run_cli`: wide output, no colours)."""
    argv = [str(a) for a in args]
    if store is not None:
        argv += ['--store', str(store)]
    return run_cli(argv, input=input, env=env)


def open_log(path: Path) -> LmdbEventLog:
    """Open an existing store for checks."""
    assert path.exists()
    return LmdbEventLog(path)


@pytest.fixture(scope='module')
def shared(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store the read-only tests of one module share."""
    return build_store(tmp_path_factory.mktemp('shared') / 'store.lmdb')


@pytest.fixture
def fresh(tmp_path: Path) -> Store:
    """A store of its own, for tests that change it."""
    return build_store(tmp_path / 'store.lmdb')


def run_on_terminal(argv: list[str], env: dict[str, str], columns: int = 100) -> tuple[int, bytes]:
    """Run `argv` with stdin, stdout and stderr a pseudo-terminal `columns` wide, as a user at a
    terminal runs a command: its exit status and every byte it wrote to the terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack('HHHH', 40, columns, 0, 0))
    child = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    written = bytearray()
    while True:  # drain the terminal, or the command blocks once its buffer is full
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(leader)
    return child.wait(timeout=120), bytes(written)
