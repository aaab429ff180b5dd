"""A seeded generator of realistic multi-session chat conversations, for benchmarks.

`make_conversation(n_exchanges, seed)` returns pydantic-ai messages as an agent would
record them: per exchange a `ModelRequest` with the user's prompt, then either a
`ModelResponse` with the answer or, about a third of the time, a `ModelResponse` calling
one or two tools, a `ModelRequest` with their returns and a final `ModelResponse`.
The text is English of widely varying length (one-line questions to long answers with
lists and code), full of file paths, numbers, names, dates and decisions, spread over
sessions on a few recurring topics, like a long-lived assistant conversation.

`make_exchanges(n_exchanges, seed)` returns the script behind it, to drive a real agent
(for example with a `FunctionModel` and tools named as in `TOOL_NAMES`).
The same arguments always give the same output, byte for byte.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

__all__ = ['TOOL_NAMES', 'Exchange', 'ToolUse', 'make_conversation', 'make_exchanges']

TOOL_NAMES: tuple[str, ...] = ('read_file', 'search_code', 'run_command', 'lookup_calendar')
"""Tools the generated conversations call; each takes string arguments only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUse:
    """One tool call of an exchange, with what the tool returned."""

    tool_name: str
    args: dict[str, str]
    tool_call_id: str
    result: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One user turn and everything the assistant did to answer it."""

    session: int
    run_id: str
    timestamp: datetime
    prompt: str
    preface: str | None
    """Text the assistant wrote next to its tool calls, if any."""
    tool_uses: tuple[ToolUse, ...]
    reply: str


# --- vocabulary ---------------------------------------------------------------------------------

_PEOPLE = (
    'Amara', 'Bruno', 'Chen Wei', 'Dana', 'Elif', 'Farid', 'Greta', 'Hiroshi', 'Ines', 'Jonas',
    'Kavya', 'Lucia', 'Mateo', 'Noor', 'Oskar', 'Priya', 'Rafael', 'Sofia', 'Tomasz', 'Yuki',
)  # fmt: skip
_SERVICES = ('billing', 'auth', 'search', 'ingest', 'notifications', 'reports', 'gateway', 'scheduler')
_MODULES = ('invoice', 'tokens', 'ranking', 'parser', 'retry', 'cache', 'schema', 'export', 'limits', 'session')
_FUNCS = (
    'apply_discount', 'refresh_token', 'score_documents', 'parse_header', 'backoff_delay', 'evict_stale',
    'migrate_rows', 'render_csv', 'check_quota', 'close_session', 'merge_batches', 'resolve_tenant',
)  # fmt: skip
_TABLES = ('invoices', 'customers', 'events', 'audit_log', 'sessions', 'line_items', 'webhooks')
_CITIES = ('Lisbon', 'Kyoto', 'Montreal', 'Tbilisi', 'Oaxaca', 'Bergen', 'Hanoi', 'Valparaíso', 'Edinburgh')
_WEEKDAYS = ('Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday')
_MONTHS = ('January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October')
_LIBS = ('httpx', 'sqlalchemy', 'pydantic', 'celery', 'redis', 'boto3', 'numpy', 'fastapi', 'alembic')
_ERRORS = (
    'TimeoutError', 'KeyError', 'IntegrityError', 'ConnectionResetError', 'ValidationError', 'PermissionError',
)  # fmt: skip
_TOPICS = ('service', 'migration', 'trip', 'team', 'budget', 'incident')
_SLOT = re.compile(r'\{(\w+)\}')


class _Words:
    """Slot fillers drawn from one seeded random generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.slots: dict[str, Callable[[], str]] = {
            'path': self.path,
            'path2': self.path,
            'num': self.num,
            'num2': self.num,
            'int': lambda: str(rng.randint(2, 5000)),
            'days': lambda: str(rng.choice((7, 14, 30, 90, 180, 365, 730))),
            'pct': self.pct,
            'ms': self.ms,
            'money': self.money,
            'version': self.version,
            'date': self.date,
            'person': lambda: rng.choice(_PEOPLE),
            'person2': lambda: rng.choice(_PEOPLE),
            'service': lambda: rng.choice(_SERVICES),
            'func': lambda: rng.choice(_FUNCS),
            'table': lambda: rng.choice(_TABLES),
            'city': lambda: rng.choice(_CITIES),
            'city2': lambda: rng.choice(_CITIES),
            'lib': lambda: rng.choice(_LIBS),
            'error': lambda: rng.choice(_ERRORS),
        }

    def pick(self, options: tuple[str, ...]) -> str:
        return self.rng.choice(options)

    def path(self) -> str:
        r = self.rng
        kind = r.random()
        if kind < 0.6:
            return f'src/{r.choice(_SERVICES)}/{r.choice(_MODULES)}.py'
        if kind < 0.8:
            return f'tests/{r.choice(_SERVICES)}/test_{r.choice(_MODULES)}.py'
        if kind < 0.9:
            return f'deploy/{r.choice(_SERVICES)}/values-{r.choice(("prod", "staging", "eu"))}.yaml'
        return f'migrations/versions/{r.randint(100, 999)}_{r.choice(_TABLES)}_{r.choice(_MODULES)}.py'

    def num(self, lo: int = 2, hi: int = 5000) -> str:
        return f'{self.rng.randint(lo, hi):,}'

    def pct(self) -> str:
        return f'{self.rng.uniform(0.1, 99):.1f}%'

    def ms(self) -> str:
        return f'{self.rng.randint(3, 2400)} ms'

    def money(self) -> str:
        return f'${self.rng.randint(40, 48000):,}'

    def version(self) -> str:
        return f'{self.rng.randint(0, 5)}.{self.rng.randint(0, 30)}.{self.rng.randint(0, 12)}'

    def date(self) -> str:
        return f'{self.pick(_WEEKDAYS)} {self.rng.randint(1, 28)} {self.pick(_MONTHS)}'

    def fill(self, template: str) -> str:
        """`template` with each `{slot}` replaced, left to right, by a fresh random value."""
        return _SLOT.sub(lambda match: self.slots[match.group(1)](), template)


# --- templates ----------------------------------------------------------------------------------

_PROMPTS: dict[str, tuple[str, ...]] = {
    'service': (
        'Can you look at {path} and tell me why {func} is so slow? p95 is {ms} since the last deploy.',
        'The {service} service throws {error} when the batch is larger than {num} rows. Where does that come from?',
        'Please refactor {func} in {path} so it stops calling the database inside the loop.',
        'Why did we pin {lib} to {version} again?',
        'Add a test for {func} that covers the empty input case.',
        'What does {path} actually do? I have never opened it.',
        'Is it safe to delete {path2} now that {func} lives in {path}?',
        'Run the {service} tests and tell me what fails.',
    ),
    'migration': (
        'We need to move {num} rows from {table} to the new schema before {date}. What is the plan?',
        'How long will the backfill of {table} take at {num} rows per second?',
        'The migration in {path} failed halfway with {error}. Can we resume it?',
        'Should the {table} index be created concurrently? The table has {num} rows.',
        'Remind me what we decided about the {table} retention window.',
    ),
    'trip': (
        'I am flying to {city} on {date}. What did we say about the hotel budget?',
        'Compare {city} and {city2} for the team offsite: flights, cost per person, weather.',
        'Can you check my calendar for {date}? I might move the {city} trip.',
        'My budget for the {city} trip is {money}. Is that realistic for five days?',
        'What was the name of the restaurant {person} recommended in {city}?',
    ),
    'team': (
        '{person} starts on {date}. What should their first week look like?',
        'Draft a short note to {person} about moving the {service} on-call rotation to {person2}.',
        'Who owns {path} these days? {person} says it is not them.',
        'Summarize what {person} and {person2} disagreed about in the design review.',
        'Did we agree to hire a second engineer for {service} this quarter?',
    ),
    'budget': (
        'We spent {money} on compute last month, up {pct}. What drove it?',
        'If we move {service} to spot instances, how much do we save per month?',
        'The storage bill for {table} is {money}. Can we archive anything older than {days} days?',
        'Put together the numbers for the {service} budget review on {date}.',
    ),
    'incident': (
        '{service} is returning 502s for {pct} of requests since {ms} ago. Help!',
        'Write the incident summary for the {service} outage on {date}.',
        'The alert for {func} fired {num} times overnight. Is it noise?',
        'Roll back {service} to {version}? {person} thinks the new {lib} release caused it.',
    ),
}

_SHORT_PROMPTS = (
    'Thanks, that works.',
    'Ok, go ahead.',
    'Why?',
    'And the tests?',
    'Sounds good, do it.',
    'Can you make it shorter?',
    'What about {path}?',
    'Same for {service}, please.',
    'Wait, {num} or {num2}?',
)

_SENTENCES: dict[str, tuple[str, ...]] = {
    'service': (
        '{func} in {path} builds a new {lib} client on every call, which costs about {ms} each time.',
        'The hot loop issues one query per row, so a batch of {num} rows means {num} round trips.',
        'Caching the lookup cut the median from {ms} to {ms} in my local run.',
        'The {error} comes from {path2}, where the code assumes the header is always present.',
        'We pinned {lib} to {version} because the next minor release changed the retry defaults.',
        'I moved the helper into {path} and left a re-export in {path2} so existing imports keep working.',
        'The change touches {num} lines across {path} and {path2}; the public signature of {func} stays the same.',
        'The new test feeds an empty list to {func} and checks that it returns without touching the database.',
        'Coverage for the {service} package goes from {pct} to {pct} with these tests.',
        'Nothing else imports {path2}, so deleting it is safe once the deploy of {version} is out.',
    ),
    'migration': (
        'At {num} rows per second the backfill of {table} takes roughly {num2} minutes.',
        'The plan: copy in batches of {num} keyed by id, verify counts, then switch reads on {date}.',
        'The failed run stopped at id {num}; the script in {path} is idempotent, so we can resume from there.',
        'Creating the index concurrently avoids locking {table}, at the cost of a slower build.',
        'We decided to keep {table} rows for {days} days and to archive older ones to cold storage.',
        'The dry run on staging moved {num} rows in {ms} per batch with no lock waits.',
    ),
    'trip': (
        'We set the hotel budget at {money} for the whole stay in {city}.',
        'Flights to {city} are about {money} per person, against {money} for {city2}.',
        '{city} is warmer in {date}; {city2} is cheaper but needs a connection.',
        'Your calendar on {date} has the {service} review at 10:00 and nothing after 15:00.',
        '{person} recommended a small place near the harbour in {city}; they said to book a week ahead.',
        'Five days in {city} on {money} works if the hotel stays under {money} a night.',
    ),
    'team': (
        '{person} will spend the first two days on setup and reading {path}, then pair with {person2}.',
        'The on-call rotation for {service} moves to {person2} starting {date}.',
        'According to the history of {path}, {person} made most of the changes this year.',
        '{person} wanted to split {service} into two deployables; {person2} preferred to keep one and add a queue.',
        'We agreed to open one more position for {service}, with a start date no later than {date}.',
        'The decision was to keep weekly one-on-ones and move the team sync to {date}.',
    ),
    'budget': (
        'Compute went up {pct}, mostly from the {service} workers scaling to {num} instances during the backfill.',
        'Moving {service} to spot instances would save around {money} a month at current usage.',
        'Archiving {table} rows older than {days} days would cut the storage bill by about {pct}.',
        'The biggest line item is still egress from {service} at {money}.',
        'Reserved capacity for {service} runs out on {date}; renewing for a year costs {money}.',
        'The {service} team is {pct} over its quarterly budget, mostly because of the {table} backfill.',
        '{person} asked for {money} more for load testing; I suggested reusing the staging cluster instead.',
        'Per request, {service} now costs about {money} per million calls, down {pct} since {version}.',
    ),
    'incident': (
        'The 502s started when {service} {version} rolled out; error rate peaked at {pct}.',
        'The root cause was a connection pool of {num} shared by {num2} workers, which ran dry under load.',
        'Rolling back to {version} brought p95 back under {ms} within minutes.',
        'The alert on {func} fired {num} times, all during the nightly batch, so it needs a better threshold.',
        '{person} is writing the follow-up to make the pool size configurable in {path}.',
        'Retries in {func} multiplied the load by {num2}x; the backoff in {path} had no jitter.',
        'The {error} in the logs is a symptom: the upstream {service} call timed out after {ms}.',
        'The status page was updated at {ms} after detection; {person} handled customer comms.',
    ),
}

_DECISIONS = (
    'Decision: we go with the smaller change now and revisit after {date}.',
    'Decided: {person} owns this until the {service} release ships.',
    'We agreed to cap it at {num} and alert above {pct}.',
    'Final call: keep {lib} at {version} until the upstream fix lands.',
    'Agreed: the budget for this is {money}, no more.',
)

_OPENERS = (
    'Sure.',
    'Here is what I found.',
    'Short answer: yes, with one caveat.',
    'I checked.',
    'Good question.',
    'Done.',
    'Let me summarize.',
    '',
)

_PREFACES = (
    'Let me look at the code first.',
    'I will check that.',
    'Checking the calendar.',
    'Running it now.',
    'Let me search for where that is used.',
)

_CODE_LINES = (
    'def {func}(rows: list[dict[str, object]], *, limit: int = {int}) -> int:',
    '    client = {lib}.Client(timeout={int})',
    '    for row in rows:',
    "        if row.get('tenant_id') is None:",
    "            raise ValueError('missing tenant in {table}')",
    '        total += row["amount"] * RATE',
    '    return total',
    '# TODO({person}): move this out of the request path',
    'from {service}.{func} import {func}',
    '    await session.execute(select(Table).where(Table.id > last_id).limit({int}))',
)


def _paragraph(words: _Words, topic: str, n_sentences: int) -> str:
    rng = words.rng
    pool = _SENTENCES[topic]
    sentences = [words.fill(rng.choice(pool)) for _ in range(n_sentences)]
    if rng.random() < 0.3:
        sentences.append(words.fill(rng.choice(_DECISIONS)))
    return ' '.join(sentences)


def _code_block(words: _Words) -> str:
    rng = words.rng
    lines = [words.fill(rng.choice(_CODE_LINES)) for _ in range(rng.randint(4, 16))]
    return '```python\n' + '\n'.join(lines) + '\n```'


def _reply(words: _Words, topic: str) -> str:
    rng = words.rng
    opener = rng.choice(_OPENERS)
    roll = rng.random()
    if roll < 0.35:
        body = _paragraph(words, topic, rng.randint(1, 2))
    elif roll < 0.75:
        body = _paragraph(words, topic, rng.randint(3, 6))
    elif roll < 0.9:
        items = [f'- {_paragraph(words, topic, rng.randint(1, 2))}' for _ in range(rng.randint(3, 7))]
        body = _paragraph(words, topic, 1) + '\n\n' + '\n'.join(items)
    else:
        parts = [_paragraph(words, topic, rng.randint(2, 4))]
        for _ in range(rng.randint(1, 3)):
            parts.append(_code_block(words))
            parts.append(_paragraph(words, topic, rng.randint(1, 4)))
        body = '\n\n'.join(parts)
    return f'{opener} {body}' if opener else body


def _prompt(words: _Words, topic: str) -> str:
    rng = words.rng
    if rng.random() < 0.15:
        return words.fill(rng.choice(_SHORT_PROMPTS))
    text = words.fill(rng.choice(_PROMPTS[topic]))
    if rng.random() < 0.25:
        text += ' For context: ' + _paragraph(words, topic, rng.randint(1, 4))
    if rng.random() < 0.05:
        text += '\n\nHere is the traceback:\n' + _traceback(words)
    return text


def _traceback(words: _Words) -> str:
    rng = words.rng
    frames = [
        f'  File "/app/{words.path()}", line {rng.randint(10, 900)}, in {words.pick(_FUNCS)}'
        for _ in range(rng.randint(3, 9))
    ]
    return 'Traceback (most recent call last):\n' + '\n'.join(frames) + f'\n{words.pick(_ERRORS)}: {words.num()}'


def _tool_use(words: _Words, topic: str, call_id: str) -> ToolUse:
    rng = words.rng
    if topic in ('trip', 'team') and rng.random() < 0.6:
        day = words.date()
        events = [
            f'{rng.randint(8, 18):02d}:{rng.choice(("00", "15", "30", "45"))} {words.fill(e)}'
            for e in rng.sample(
                ['{service} review', '1:1 with {person}', 'flight to {city}', 'dentist', 'offsite planning',
                 'budget sync', 'interview ({person})', 'lunch with {person2}'],
                rng.randint(1, 5),
            )
        ]  # fmt: skip
        return ToolUse(tool_name='lookup_calendar', args={'date': day}, tool_call_id=call_id, result='\n'.join(events))
    kind = rng.random()
    if kind < 0.45:
        path = words.path()
        lines = [words.fill(rng.choice(_CODE_LINES)) for _ in range(rng.randint(6, 60))]
        numbered = '\n'.join(f'{i + 1:>4}  {line}' for i, line in enumerate(lines))
        return ToolUse(tool_name='read_file', args={'path': path}, tool_call_id=call_id, result=numbered)
    if kind < 0.75:
        func = words.pick(_FUNCS)
        hits = [f'{words.path()}:{rng.randint(1, 800)}: {words.fill(rng.choice(_CODE_LINES)).strip()}']
        hits += [
            f'{words.path()}:{rng.randint(1, 800)}: {func}(' + words.num() + ')' for _ in range(rng.randint(0, 12))
        ]
        return ToolUse(
            tool_name='search_code',
            args={'pattern': func, 'directory': f'src/{words.pick(_SERVICES)}'},
            tool_call_id=call_id,
            result='\n'.join(hits),
        )
    service = words.pick(_SERVICES)
    passed, failed = rng.randint(5, 400), rng.choice((0, 0, 0, 1, 2, 5))
    out = [f'collected {passed + failed} items', '']
    for _ in range(failed):
        out.append(f'FAILED tests/{service}/test_{words.pick(_MODULES)}.py::test_{words.pick(_FUNCS)} - '
                   f'{words.pick(_ERRORS)}: expected {words.num()} got {words.num()}')  # fmt: skip
    out.append(f'{passed} passed, {failed} failed in {rng.uniform(0.4, 90):.2f}s')
    return ToolUse(
        tool_name='run_command',
        args={'command': f'pytest tests/{service} -q -x'},
        tool_call_id=call_id,
        result='\n'.join(out),
    )


def _hex(rng: random.Random, n: int) -> str:
    return f'{rng.getrandbits(4 * n):0{n}x}'


def make_exchanges(n_exchanges: int, seed: int = 0) -> list[Exchange]:
    """The script of a conversation of `n_exchanges` user turns, spread over sessions."""
    rng = random.Random(seed)
    words = _Words(rng)
    when = datetime(2025, 3, 3, 9, 0, tzinfo=UTC) + timedelta(days=rng.randint(0, 60))
    out: list[Exchange] = []
    session = 0
    left_in_session = rng.randint(4, 25)
    topic = rng.choice(_TOPICS)
    for _ in range(n_exchanges):
        if left_in_session == 0:
            session += 1
            left_in_session = rng.randint(4, 25)
            topic = rng.choice(_TOPICS)
            when += timedelta(hours=rng.randint(3, 72), minutes=rng.randint(0, 59))
        left_in_session -= 1
        if rng.random() < 0.2:
            topic = rng.choice(_TOPICS)  # conversations drift
        when += timedelta(seconds=rng.randint(20, 900))
        prompt = _prompt(words, topic)
        tool_uses: tuple[ToolUse, ...] = ()
        preface: str | None = None
        if rng.random() < 0.35:
            count = 1 if rng.random() < 0.8 else 2
            tool_uses = tuple(_tool_use(words, topic, f'call_{_hex(rng, 24)}') for _ in range(count))
            preface = rng.choice(_PREFACES) if rng.random() < 0.5 else None
        out.append(
            Exchange(
                session=session,
                run_id=f'run-{_hex(rng, 12)}',
                timestamp=when,
                prompt=prompt,
                preface=preface,
                tool_uses=tool_uses,
                reply=_reply(words, topic),
            )
        )
    return out


def _usage(rng: random.Random, history_chars: int, text: str) -> RequestUsage:
    return RequestUsage(
        input_tokens=history_chars // 4 + rng.randint(200, 900),
        output_tokens=max(1, len(text) // 4),
        cache_read_tokens=(history_chars // 4) // 128 * 128,
    )


def make_conversation(n_exchanges: int, seed: int = 0) -> list[ModelMessage]:
    """A conversation of `n_exchanges` user turns as the pydantic-ai messages of its runs."""
    rng = random.Random(seed ^ 0x5EED)
    conversation_id = f'conv-{seed}'
    messages: list[ModelMessage] = []
    history_chars = 0
    for ex in make_exchanges(n_exchanges, seed):
        ts = ex.timestamp
        ids = (ex.run_id, conversation_id)
        prompt = UserPromptPart(ex.prompt, timestamp=ts)
        messages.append(ModelRequest(parts=[prompt], timestamp=ts, run_id=ex.run_id, conversation_id=conversation_id))
        history_chars += len(ex.prompt)
        if ex.tool_uses:
            ts += timedelta(milliseconds=rng.randint(600, 9000))
            parts: list[TextPart | ToolCallPart] = [TextPart(ex.preface)] if ex.preface else []
            parts += [ToolCallPart(u.tool_name, dict(u.args), tool_call_id=u.tool_call_id) for u in ex.tool_uses]
            messages.append(_response(rng, parts, ts, history_chars, ex.preface or '', 'tool_call', ids))
            ts += timedelta(milliseconds=rng.randint(20, 4000))
            returns = [
                ToolReturnPart(u.tool_name, u.result, tool_call_id=u.tool_call_id, timestamp=ts) for u in ex.tool_uses
            ]
            messages.append(
                ModelRequest(parts=returns, timestamp=ts, run_id=ex.run_id, conversation_id=conversation_id)
            )
            history_chars += sum(len(u.result) for u in ex.tool_uses)
        ts += timedelta(milliseconds=rng.randint(800, 30000))
        messages.append(_response(rng, [TextPart(ex.reply)], ts, history_chars, ex.reply, 'stop', ids))
        history_chars += len(ex.reply)
    return messages


def _response(
    rng: random.Random,
    parts: list[TextPart | ToolCallPart],
    ts: datetime,
    history_chars: int,
    text: str,
    finish: str,
    ids: tuple[str, str],
) -> ModelResponse:
    return ModelResponse(
        parts=list(parts),
        usage=_usage(rng, history_chars, text),
        model_name='gpt-5.1-2025-11-13',
        timestamp=ts,
        provider_name='openai',
        provider_response_id=f'resp_{_hex(rng, 32)}',
        finish_reason='tool_call' if finish == 'tool_call' else 'stop',
        run_id=ids[0],
        conversation_id=ids[1],
    )
