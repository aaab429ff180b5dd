"""`eventlog demo`: a long conversation that forgets an early detail, then recalls it word for word.

A pydantic-ai agent holds a few hundred exchanges over several sessions, one run per user
message, with three capabilities: a small compaction (`ProcessHistory`) that folds old
messages into a summary so the live context stays short, `EventLogPersistence` that records
every message as it happens, and `ConversationSearch` over the log. Early on the user states
three details; the compaction soon paraphrases them away. At the end the user asks for one of
them; the scripted model sees that its context only holds the paraphrase, calls
`search_conversation_history`, and answers with the exact original the log kept.

Offline and deterministic by default: the model is a `FunctionModel` following a script.
With `model=` (a pydantic-ai model name) the final question goes to that real model instead.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import pydantic_ai
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from capability.persistence import EventLogPersistence
from capability.search import TOOL_NAME, ConversationSearch
from eventlog import LmdbEventLog, ReplayHistorySource, ToolEffectInfo
from search.persistent_index import PersistentIndex

__all__ = [
    'CONVERSATION_ID',
    'DETAIL_PATH',
    'FINAL_QUESTION',
    'DemoError',
    'DemoResult',
    'run_demo',
]


class _Detail(msgspec.Struct, frozen=True):
    at: int
    """The exchange of the first session (0-based) where the user states it."""
    prompt: str
    reply: str
    paraphrase: str
    """How the summary retells it: the gist, not the words."""


class _Story(msgspec.Struct, frozen=True):
    """The demo's script, kept as data in `demo_story.json` beside this module."""

    conversation_id: str
    detail_path: str
    final_question: str
    search_query: str
    session_names: tuple[str, ...]
    details: tuple[_Detail, ...]
    estimate_every: int
    """Every this many exchanges the user asks for an estimate, which the model gets from a tool."""
    topics: tuple[str, ...]
    asks: tuple[str, ...]
    actions: tuple[str, ...]
    replies: tuple[str, ...]


_STORY = msgspec.json.decode((Path(__file__).parent / 'demo_story.json').read_bytes(), type=_Story)

CONVERSATION_ID = _STORY.conversation_id
"""The conversation the demo records."""

DETAIL_PATH = _STORY.detail_path
"""The detail the final question asks for."""

FINAL_QUESTION = _STORY.final_question
"""The last user message: it asks for the detail without naming the words it was stated in."""

SEARCH_QUERY = _STORY.search_query
"""What the scripted model searches for."""

MAX_LIVE_MESSAGES = 24
"""The compaction runs when the live context holds more messages than this..."""

KEEP_LIVE_MESSAGES = 8
"""...and keeps about this many of the latest messages next to the summary."""

_SESSION_NAMES = _STORY.session_names
_PATH_RE = re.compile(r'/srv/[\w./-]+\.toml')
_DETAILS = tuple(msgspec.structs.replace(d, prompt=d.prompt.format(path=DETAIL_PATH)) for d in _STORY.details)
_DETAIL_AT = tuple(d.at for d in _DETAILS)
_TOPICS = _STORY.topics
_ASKS = _STORY.asks
_ACTIONS = _STORY.actions
_REPLIES = _STORY.replies
_ESTIMATE_EVERY = _STORY.estimate_every


@dataclass(frozen=True)
class _Exchange:
    prompt: str
    detail: _Detail | None = None
    topic: str | None = None


def _script(exchanges: int, sessions: int) -> list[list[_Exchange]]:
    """The user's messages, session by session (the final question is asked separately)."""
    rng = random.Random(20260101)
    flat: list[_Exchange] = []
    for index in range(exchanges):
        if index in _DETAIL_AT:
            detail = _DETAILS[_DETAIL_AT.index(index)]
            flat.append(_Exchange(detail.prompt, detail=detail))
            continue
        topic = rng.choice(_TOPICS)
        if index % _ESTIMATE_EVERY == _ESTIMATE_EVERY - 1:
            flat.append(_Exchange(f'Estimate the effort for the {topic} work.', topic=topic))
        else:
            flat.append(_Exchange(rng.choice(_ASKS).format(topic=topic), topic=topic))
    size = -(-len(flat) // sessions)
    return [flat[i : i + size] for i in range(0, len(flat), size)]


# --- the compaction ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionEvent:
    """One compaction: how the live context shrank and the summary that replaced the old part."""

    before: int
    after: int
    folded: int
    summary: str


@dataclass
class _Compactor:
    """Folds the oldest messages into one summary message once the live context grows too long.

    The summary is a `CompactionPart` in a request, which is how pydantic-ai marks a summary an
    application wrote; `EventLogPersistence` records the rewrite as a `compaction` entry and keeps
    the originals it replaced.
    """

    facts: list[str] = field(default_factory=list[str])
    topics: list[str] = field(default_factory=list[str])
    folded: int = 0
    events: list[CompactionEvent] = field(default_factory=list[CompactionEvent])

    async def compact(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor: `messages` unchanged, or a summary followed by the latest exchanges."""
        if len(messages) <= MAX_LIVE_MESSAGES:
            return messages
        cut = len(messages) - KEEP_LIVE_MESSAGES
        while cut < len(messages) - 1 and not _starts_exchange(messages[cut]):
            cut += 1
        if cut <= 1:
            return messages
        dropped = messages[:cut]
        for message in dropped:
            self._learn(message)
        summary = self._summary()
        # The summary goes into the first kept request (a request of its own would be merged into
        # it by pydantic-ai at the next run, a second rewrite for the log to record).
        first = messages[cut]
        if not isinstance(first, ModelRequest):
            return messages
        merged = replace(first, parts=[CompactionPart(content=summary), *first.parts])
        kept = [merged, *messages[cut + 1 :]]
        self.events.append(CompactionEvent(before=len(messages), after=len(kept), folded=len(dropped), summary=summary))
        return kept

    def _learn(self, message: ModelMessage) -> None:
        self.folded += 1
        prompt = _user_text(message)
        for detail in _DETAILS:
            if prompt == detail.prompt and detail.paraphrase not in self.facts:
                self.facts.append(detail.paraphrase)
        for topic in _TOPICS:
            if prompt and topic in prompt:
                if topic in self.topics:
                    self.topics.remove(topic)
                self.topics.append(topic)

    def _summary(self) -> str:
        topics = ', '.join(self.topics[-8:]) or 'none yet'
        facts = ' '.join(self.facts)
        return (
            f'Summary of the {self.folded} earliest messages of this conversation. The user is planning the '
            f'migration of the Orbit service. {facts} Topics discussed since: {topics}.'
        )


def _starts_exchange(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def _user_text(message: ModelMessage) -> str:
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ''


# --- the scripted model -----------------------------------------------------------------------


def _scripted_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline model: deterministic replies, a tool for estimates, and a search when it lacks a detail."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        ret = returns[0]
        if ret.tool_name == TOOL_NAME:
            return ModelResponse(parts=[TextPart(_answer_from_search(str(ret.content)))])
        return ModelResponse(parts=[TextPart(f'The estimate is {ret.content}.')])
    prompt = _user_text(last)
    calls = sum(1 for m in messages if isinstance(m, ModelResponse))
    if prompt == FINAL_QUESTION:
        earlier = ModelMessagesTypeAdapter.dump_json(messages[:-1]).decode()
        found = _PATH_RE.search(earlier)
        if found is not None:
            return ModelResponse(parts=[TextPart(f'The deploy job reads {found.group()} (it is still in my context).')])
        return ModelResponse(
            parts=[ToolCallPart(TOOL_NAME, {'query': SEARCH_QUERY}, tool_call_id=f'call-search-{calls}')]
        )
    for detail in _DETAILS:
        if prompt == detail.prompt:
            return ModelResponse(parts=[TextPart(detail.reply)])
    if prompt.startswith('Estimate the effort for the '):
        task = prompt.removeprefix('Estimate the effort for the ').removesuffix(' work.')
        return ModelResponse(parts=[ToolCallPart('estimate_effort', {'task': task}, tool_call_id=f'call-{calls}')])
    topic = next((t for t in _TOPICS if t in prompt), 'plan')
    rng = random.Random(prompt)
    a, b = rng.sample(_ACTIONS, 2)
    return ModelResponse(parts=[TextPart(rng.choice(_REPLIES).format(topic=topic, a=a, b=b))])


def _answer_from_search(answer: str) -> str:
    run_id = None
    for line in answer.splitlines():
        header = re.search(r'\| run (\S+) \|', line)
        if header is not None:
            run_id = header.group(1)
        found = _PATH_RE.search(line)
        if found is not None:
            where = f' (run {run_id})' if run_id else ''
            return (
                f'The deploy job reads {found.group()}. You gave me that path in our first session{where}; '
                'my summary only kept that it is a TOML file on the east cluster.'
            )
    return 'I searched our earlier messages but could not find where the deploy settings live.'


def _estimate_effort(task: str) -> str:
    """Estimate the effort of a migration task, in engineer-days."""
    return f'{2 + len(task) % 5} engineer-days for the {task} work'


# --- the demo ---------------------------------------------------------------------------------


class DemoError(Exception):
    """The demo cannot run as asked (an unusable model name, a missing API key)."""


@dataclass
class DemoResult:
    """What the demo did, for the caller (and the tests)."""

    store: Path
    conversation_id: str
    final_run_id: str
    answer: str
    searched: bool
    recalled: str | None
    """The original message the search returned, as the tool answer showed it."""
    paraphrase: str | None
    """What the summary in the live context said instead."""
    search_seconds: float | None
    compactions: int
    exchanges: int
    seconds: float


def _agent(model: Model | str, capabilities: Sequence[AbstractCapability[None]]) -> Agent[None, str]:
    agent = Agent[None, str](
        model,
        deps_type=type(None),
        output_type=str,
        name='orbit-assistant',
        capabilities=list(capabilities),
        instructions='You help a team plan the migration of their Orbit service. Answer briefly.',
    )
    agent.tool_plain(name='estimate_effort')(_estimate_effort)
    return agent


def _resolve_model(name: str | None) -> Model | None:
    if name is None:
        return None
    try:
        return infer_model(name)
    except Exception as exc:
        raise DemoError(f'cannot use model {name!r}: {exc}') from None


async def run_demo(
    store: Path,
    *,
    console: Console,
    exchanges: int = 240,
    sessions: int = 4,
    model: str | None = None,
) -> DemoResult:
    """Run the demo story into a new store at `store` (which must not exist) and show it on `console`."""
    if exchanges < 12:
        raise DemoError('the demo needs at least 12 exchanges to have something to forget')
    if not 1 <= sessions <= len(_SESSION_NAMES):
        raise DemoError(f'sessions must be from 1 to {len(_SESSION_NAMES)}')
    real_model = _resolve_model(model)
    # The demo owns its output: pydantic-ai's first-run banner would land in the middle of the
    # story's progress display (pydantic-ai reads this flag before the first run).
    pydantic_ai.BANNER_ENABLED = False
    started = time.perf_counter()
    log = LmdbEventLog(store)
    try:
        return await _story(log, store, console, exchanges, sessions, model, real_model, started)
    finally:
        log.close()


async def _story(
    log: LmdbEventLog,
    store: Path,
    console: Console,
    exchanges: int,
    sessions: int,
    model_name: str | None,
    real_model: Model | None,
    started: float,
) -> DemoResult:
    script = _script(exchanges, len(_SESSION_NAMES[:sessions]))
    compactor = _Compactor()
    scripted = FunctionModel(_scripted_reply, model_name='scripted-demo-model')
    search = ConversationSearch[None](ReplayHistorySource(log), scope='conversation')
    console.print(
        Panel(
            Text.from_markup(
                f'A pydantic-ai agent talks with a user for [bold]{exchanges}[/] exchanges over '
                f'{len(script)} sessions, one run per message.\n'
                f'Its live context is compacted: past {MAX_LIVE_MESSAGES} messages, the oldest are folded into '
                'a summary.\n'
                'Every message is appended to an event log as it happens; the model can search that log.\n'
                f'Store: [bold]{escape(str(store))}[/]   model: '
                f'[bold]{escape(model_name or "scripted (offline)")}[/]'
            ),
            title='eventlog demo',
            border_style='cyan',
        )
    )
    history: list[ModelMessage] | None = None
    shown_compaction = False
    progress = Progress(
        TextColumn('[progress.description]{task.description}'),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task = progress.add_task('conversation', total=exchanges)
        for number, session in enumerate(script, start=1):
            name = _SESSION_NAMES[number - 1]
            if number > 1:
                history = await log.context(CONVERSATION_ID)
                progress.console.print(
                    Text.assemble(
                        (f'Session {number} ({name}): ', 'bold'),
                        f'a new process would start here; the agent resumes from the store: '
                        f'log.context() gives {len(history)} messages.',
                    )
                )
            else:
                progress.console.print(Text(f'Session 1 ({name})', style='bold'))
            persistence = EventLogPersistence[None](log, metadata={'session': str(number), 'day': name})
            agent = _agent(scripted, [ProcessHistory[None](compactor.compact), persistence, search])
            for index, exchange in enumerate(session):
                progress.update(task, description=f'session {number} · {_clip(exchange.prompt, 38)}')
                result = await agent.run(exchange.prompt, message_history=history, conversation_id=CONVERSATION_ID)
                history = result.all_messages()
                if number == 1 and (exchange.detail is not None or index == 0):
                    _say(progress.console, 'user', exchange.prompt, detail=exchange.detail is not None)
                    _say(progress.console, 'model', result.output)
                if compactor.events and not shown_compaction:
                    shown_compaction = True
                    _show_compaction(progress.console, compactor.events[0])
                progress.advance(task)
            if number == 1:
                await log.set_title(CONVERSATION_ID, 'Orbit migration planning (demo)')
        progress.update(task, description=f'done · {len(compactor.events)} compactions')

    assert history is not None
    return await _finale(log, store, console, history, compactor, scripted, real_model, search, started, exchanges)


async def _finale(
    log: LmdbEventLog,
    store: Path,
    console: Console,
    history: list[ModelMessage],
    compactor: _Compactor,
    scripted: FunctionModel,
    real_model: Model | None,
    search: ConversationSearch[None],
    started: float,
    exchanges: int,
) -> DemoResult:
    console.print(Rule('The question'))
    began = time.perf_counter()
    applied = await asyncio.to_thread(PersistentIndex(log).catch_up)
    console.print(
        Text.assemble(
            ('search index: ', 'dim'),
            f'brought up to date with the log ({applied} entries) in {(time.perf_counter() - began) * 1000:.0f} ms',
            (' (it follows the log by position; a search applies whatever is newer first)', 'dim'),
        )
    )
    live_json = ModelMessagesTypeAdapter.dump_json(history).decode()
    in_context = DETAIL_PATH in live_json
    summary = next(
        (p.content for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, CompactionPart)),
        None,
    )
    paraphrase = _paraphrase_of_path(summary)
    console.print(
        Text.assemble(
            ('live context before the question: ', 'dim'),
            f'{len(history)} messages (a summary and the latest exchanges); ',
            ('the exact path is ', 'dim'),
            ('still in it' if in_context else 'NOT in it', 'green' if in_context else 'bold red'),
        )
    )
    _say(console, 'user', FINAL_QUESTION, detail=True)
    persistence = EventLogPersistence[None](log, metadata={'session': 'final'})
    capabilities: list[AbstractCapability[None]] = [ProcessHistory[None](compactor.compact), persistence, search]
    agent = _agent(real_model if real_model is not None else scripted, capabilities)
    try:
        result = await agent.run(FINAL_QUESTION, message_history=history, conversation_id=CONVERSATION_ID)
    except Exception as exc:
        if real_model is None:
            raise
        raise DemoError(f'the model failed: {type(exc).__name__}: {exc}') from None
    calls = [
        p
        for m in result.new_messages()
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_name == TOOL_NAME
    ]
    answers = [
        str(p.content)
        for m in result.new_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == TOOL_NAME
    ]
    search_seconds = await _search_seconds(log, result.run_id)
    recalled = None
    if calls:
        console.print(
            Text.assemble(
                ('model calls ', 'dim'), (f'{TOOL_NAME}({_args(calls[0])})', 'bold magenta'), ' — its context lacks it'
            )
        )
    for answer in answers[:1]:
        recalled = next((line.split('] ', 1)[-1] for line in answer.splitlines() if DETAIL_PATH in line), None)
        console.print(Panel(_clip_lines(answer, 16), title='the tool answers (from the log)', border_style='magenta'))
        if search_seconds is not None:
            console.print(
                Text.assemble(
                    ('search time: ', 'dim'), f'{search_seconds * 1000:.0f} ms', (' (tool start to end)', 'dim')
                )
            )
    if recalled is not None or paraphrase is not None:
        table = Table(show_header=True, expand=True, header_style='bold')
        table.add_column('the summary in the live context says')
        table.add_column('the log recalled, word for word')
        table.add_row(Text(paraphrase or '(no summary)', style='yellow'), _highlight(recalled or '(nothing)'))
        console.print(table)
    _say(console, 'model', result.output, detail=DETAIL_PATH in result.output)
    facts = await _store_facts(log, store)
    console.print(Rule('The store it leaves behind'))
    console.print(facts)
    console.print(_explore(store))
    return DemoResult(
        store=store,
        conversation_id=CONVERSATION_ID,
        final_run_id=result.run_id,
        answer=result.output,
        searched=bool(calls),
        recalled=recalled,
        paraphrase=paraphrase,
        search_seconds=search_seconds,
        compactions=len(compactor.events),
        exchanges=exchanges,
        seconds=time.perf_counter() - started,
    )


def _paraphrase_of_path(summary: str | None) -> str | None:
    if summary is None:
        return None
    paraphrase = _DETAILS[0].paraphrase
    return paraphrase if paraphrase in summary else summary


async def _search_seconds(log: LmdbEventLog, run_id: str) -> float | None:
    """How long the search tool ran, from the run's own `tool_effect` entries."""
    started: dict[str, float] = {}
    for entry in await log.entries(run_id=run_id, kinds=['tool_effect']):
        info = msgspec.json.decode(entry.payload, type=ToolEffectInfo)
        if info.tool_name != TOOL_NAME:
            continue
        if info.status == 'started':
            started[info.tool_call_id] = entry.timestamp.timestamp()
        elif info.tool_call_id in started:
            return entry.timestamp.timestamp() - started[info.tool_call_id]
    return None


async def _store_facts(log: LmdbEventLog, store: Path) -> Table:
    conversation = await log.require_conversation(CONVERSATION_ID)
    runs = await log.list_runs(conversation_id=CONVERSATION_ID)
    report = await log.verify()
    table = Table.grid(padding=(0, 2))
    table.add_column(style='dim')
    table.add_column()
    table.add_row('store', str(store))
    table.add_row('on disk', _size(log.disk_size()))
    table.add_row(
        'entries',
        f'{conversation.entry_count} ({conversation.message_count} messages, '
        f'{conversation.compaction_count} compactions)',
    )
    table.add_row('runs', str(len(runs)))
    table.add_row('message text', _size(conversation.payload_bytes))
    table.add_row(
        'verify', Text('every hash chain intact', style='green') if report.ok else Text('BROKEN', style='red')
    )
    return table


def _explore(store: Path) -> Panel:
    s = _quote(str(store))
    lines = [
        f'eventlog conversations --store {s}',
        f'eventlog info {CONVERSATION_ID} --store {s}',
        f'eventlog runs {CONVERSATION_ID} --store {s}',
        f'eventlog show {CONVERSATION_ID} --store {s}',
        f'eventlog replay --last --store {s}',
        f'eventlog context {CONVERSATION_ID} --store {s}',
        f'eventlog search "connection pool ceiling" --conversation {CONVERSATION_ID} --store {s}',
        f'eventlog verify --store {s}',
        f'eventlog export {CONVERSATION_ID} -o orbit.jsonl --store {s}',
    ]
    return Panel(Text('\n'.join(lines)), title='explore the store', border_style='cyan')


def _quote(text: str) -> str:
    return text if re.fullmatch(r'[\w./@:+-]+', text) else "'" + text.replace("'", "'\\''") + "'"


def _say(console: Console, who: str, text: str, *, detail: bool = False) -> None:
    style = 'bold green' if who == 'user' else 'bold blue'
    body = Text(text, style='bold' if detail else '')
    console.print(Text.assemble((f'{who:>5} › ', style), body))


def _show_compaction(console: Console, event: CompactionEvent) -> None:
    body = Group(
        Text(
            f'The live context reached {event.before} messages: the oldest {event.folded} were folded into one '
            f'summary, leaving {event.after}. The log keeps the originals and records the fold as a compaction entry.'
        ),
        Text(event.summary, style='yellow'),
    )
    console.print(Panel(body, title='compaction', border_style='yellow'))


def _highlight(text: str) -> Text:
    out = Text(text)
    out.highlight_regex(_PATH_RE, 'bold green')
    return out


def _args(call: ToolCallPart) -> str:
    return ', '.join(f'{k}={v!r}' for k, v in call.args_as_dict().items())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + '…'


def _clip_lines(text: str, count: int) -> Text:
    lines = text.splitlines()
    body = '\n'.join(lines[:count]) + (f'\n… ({len(lines) - count} more lines)' if len(lines) > count else '')
    return _highlight(body)


def _size(count: int) -> str:
    size = float(count)
    for unit in ('B', 'KB', 'MB', 'GB'):
        if size < 1024 or unit == 'GB':
            return f'{size:.0f} {unit}' if unit == 'B' else f'{size:.1f} {unit}'
        size /= 1024
    return f'{count} B'
