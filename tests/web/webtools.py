"""Helpers for the web viewer's tests: a store recorded by real agent runs, a real `eventlog serve`
subprocess over it, and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console

from capability.persistence import EventLogPersistence
from eventlog import LmdbEventLog
from eventlog_cli.demo import run_demo

CHROMIUM = Path('/usr/bin/chromium')
"""Debian's Chromium (`make test` installs it); Playwright never downloads a browser of its own here."""

CHROMIUM_ARGS = [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
]

TOKEN = 'test-token-8f3a'
"""The token of the `token_server` fixture."""
SCRIPT_TEXT = '<script>window.__pwned = 1; document.title = "pwned"</script>'
"""Stored in a user prompt: must show as text, never run."""
IMG_TEXT = '<img src=x onerror="window.__pwned = 2">'
"""Stored next to it: must show as text, never load."""
ESC_TEXT = '\x1b[31mred\x1b[0m'
"""A terminal escape sequence in stored text: shown as `\\x1b[31m...`."""
REPLY_TEXT = '</pre><script>window.__pwned = 3</script> done'
"""The model's reply, which tries to close the `<pre>` it is shown in."""
TOOL_ARG = '<script>alert(1)</script>'
"""A tool call argument."""
BINARY = b'\x89PNG\r\n\x1a\n' + bytes(range(256))
"""Binary content of the user prompt, served back as a download."""
HOSTILE_TITLE = '<b>bold</b> \x1b]0;owned\x07 title'
"""The hostile conversation's title."""
ODD_ID = 'team/a b <i>?#'
"""A conversation id with a slash, spaces, markup and URL syntax in it: its pages must still open."""
LONG_MESSAGES = 250
"""Messages handed in as history to the `long` conversation's one run (so its transcript has 3 pages)."""


@dataclass
class WebStore:
    """The store the web tests read, and what is in it."""

    path: Path
    hostile_run: str = ''
    long_run: str = ''
    demo_conversation: str = ''
    detail: str = ''
    seqs: dict[str, int] = field(default_factory=dict[str, int])


def _hostile_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart(REPLY_TEXT)])
    return ModelResponse(
        parts=[ToolCallPart('lookup', {'key': TOOL_ARG, 'nested': {'n': [1, 2]}}, tool_call_id='call-x')]
    )


def _echo_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f'reply {len(messages)}')])


def _history(count: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for index in range(count // 2):
        out.append(ModelRequest(parts=[UserPromptPart(f'long question number {index}')]))
        out.append(ModelResponse(parts=[TextPart(f'long answer number {index}')]))
    return out


async def build_web_store(path: Path) -> WebStore:
    """The offline demo (its conversation compacted, recalled by search), then a `hostile`
    conversation whose stored text is markup and escape sequences (and a binary file), and a
    `long` one of `LONG_MESSAGES` messages and more."""
    from eventlog_cli.demo import CONVERSATION_ID, DETAIL_PATH

    with open(os.devnull, 'w') as sink:
        await run_demo(path, console=Console(file=sink), exchanges=24, sessions=2)
    store = WebStore(path, demo_conversation=CONVERSATION_ID, detail=DETAIL_PATH)
    log = LmdbEventLog(path)
    try:
        agent = Agent(
            FunctionModel(_hostile_model), name='hostile-agent', capabilities=[EventLogPersistence[None](log)]
        )

        @agent.tool_plain
        def lookup(key: str, nested: dict[str, list[int]]) -> dict[str, object]:
            """Look a key up."""
            return {'found': key, 'nested': nested}

        prompt = [f'{SCRIPT_TEXT} {IMG_TEXT} {ESC_TEXT}', BinaryContent(BINARY, media_type='image/png')]
        result = await agent.run(prompt, conversation_id='hostile')
        store.hostile_run = result.run_id
        await log.set_title('hostile', HOSTILE_TITLE)
        entries = await log.entries(conversation_id='hostile', kinds=['message'])
        store.seqs['hostile_prompt'] = entries[0].seq
        store.seqs['hostile_call'] = entries[1].seq

        echo = Agent(FunctionModel(_echo_model), name='long-agent', capabilities=[EventLogPersistence[None](log)])
        result = await echo.run(
            'and the last question', message_history=_history(LONG_MESSAGES), conversation_id='long'
        )
        store.long_run = result.run_id
        entries = await log.entries(conversation_id='long', kinds=['message'])
        store.seqs['long_first'] = entries[0].seq
        store.seqs['long_last'] = entries[-1].seq
        store.seqs['long_count'] = len(entries)
        await echo.run('an odd id', conversation_id=ODD_ID)
    finally:
        log.close()
    return store


@dataclass
class Server:
    """A running `eventlog serve` subprocess and the URL it printed."""

    process: subprocess.Popen[str]
    url: str
    """The URL as printed (with `?token=` when it has one)."""
    base: str
    """`http://host:port` without a path or a token."""


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f'eventlog serve printed nothing in {timeout} s') from None


@contextmanager
def serving(store: Path | str, *args: str) -> Iterator[Server]:
    """`eventlog serve --store STORE --port 0 ARGS` in a subprocess, stopped (SIGTERM) afterwards."""
    process = subprocess.Popen(
        [sys.executable, '-m', 'eventlog_cli', 'serve', '--store', str(store), '--port', '0', *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, 'EVENTLOG_STORE': ''},
    )
    try:
        line = _first_line(process, 60)
        assert ' at http://' in line, (
            line,
            process.stderr.read() if process.poll() is not None and process.stderr else '',
        )
        url = line.split(' at ', 1)[1].split(' ', 1)[0]
        base = url.split('/?', 1)[0].rstrip('/')
        yield Server(process, url, base)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
