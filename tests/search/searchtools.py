"""Helpers for the search tests: in-memory history sources, message builders, answer parsers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

FIXED_TIME = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True)
class RunStub:
    """A run record with just what the search needs."""

    run_id: str
    conversation_id: str | None = None


@dataclass(eq=False)
class ListSource:
    """A `HistorySource` over lists of messages, runs in the order they were added (equal only to itself)."""

    runs: list[RunStub] = field(default_factory=list[RunStub])
    histories: dict[str, list[ModelMessage]] = field(default_factory=dict[str, list[ModelMessage]])
    list_calls: int = 0

    def add(self, run_id: str, conversation_id: str | None, messages: Iterable[ModelMessage]) -> None:
        self.runs.append(RunStub(run_id, conversation_id))
        self.histories[run_id] = list(messages)

    async def list_runs(self) -> list[RunStub]:
        self.list_calls += 1
        return list(self.runs)

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        return list(self.histories.get(run_id, []))


class ClosedSource:
    """A source whose store is closed: every read raises."""

    async def list_runs(self) -> list[RunStub]:
        raise RuntimeError('store is closed: /secret/path/conv-other')

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        raise RuntimeError('store is closed')


@dataclass(eq=False)
class HistoryFailsSource(ListSource):
    """Lists runs, then fails to read any of them."""

    async def run_history(self, *, run_id: str) -> list[ModelMessage]:
        raise OSError('disk went away')


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=FIXED_TIME)])


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=FIXED_TIME)


def exchange(*texts: str) -> list[ModelMessage]:
    """Alternating user prompts and replies."""
    return [user(text) if index % 2 == 0 else reply(text) for index, text in enumerate(texts)]


# --- our answers -----------------------------------------------------------------------------

_RESULT_RE = re.compile(
    r'^Result (\d+) of (\d+) \| score (\d+\.\d) \| run (.+?) \| (?:conversation (.+)|no conversation id)$'
)
_LINE_RE = re.compile(r'^\[(\d+)\] ')


@dataclass
class ParsedResult:
    score: str
    run_id: str
    conversation_id: str | None
    positions: list[int]
    text: str


def parse_answer(answer: str) -> list[ParsedResult]:
    """The results of one of our answers, in order."""
    results: list[ParsedResult] = []
    for line in answer.split('\n'):
        match = _RESULT_RE.match(line)
        if match:
            results.append(ParsedResult(match[3], match[4], match[5], [], ''))
            continue
        if not results:
            continue
        numbered = _LINE_RE.match(line)
        if numbered:
            results[-1].positions.append(int(numbered[1]))
        results[-1].text += line + '\n'
    return results


# --- the reference's answers -----------------------------------------------------------------

_REF_HEADER_RE = re.compile(r'^\[score: (\d+\.\d) \| run: (.+?)(?: \| conversation: (.+))?\]$')


def parse_reference_answer(answer: str) -> list[ParsedResult]:
    """The results of a reference answer, in order."""
    results: list[ParsedResult] = []
    for line in answer.split('\n'):
        match = _REF_HEADER_RE.match(line)
        if match:
            results.append(ParsedResult(match[1], match[2], match[3], [], ''))
            continue
        if not results or line == '---':
            continue
        numbered = _LINE_RE.match(line)
        if numbered:
            results[-1].positions.append(int(numbered[1]))
        results[-1].text += line + '\n'
    return results


def answer_count(answer: str) -> int | None:
    """The stored-message count an answer of ours reports, if it reports one."""
    match = re.search(r'(?:from|among the) (\d+) stored messages?', answer)
    return int(match[1]) if match else None


def all_positions(results: Sequence[ParsedResult]) -> set[tuple[str, int]]:
    return {(result.run_id, position) for result in results for position in result.positions}


# --- every part kind -------------------------------------------------------------------------


def every_part_kind() -> list[ModelMessage]:
    """One message per part kind pydantic-ai-slim 2.62 has (and a few shapes of each), in a plausible order.

    Everything is built through public constructors or `ModelMessagesTypeAdapter`, so the list
    also loads on newer pydantic-ai-slim releases.
    """
    import warnings

    from pydantic_ai import messages as m

    def request(*parts: object) -> ModelRequest:
        return ModelRequest(parts=list(parts), timestamp=FIXED_TIME)  # pyright: ignore[reportArgumentType]

    def response(*parts: object) -> ModelResponse:
        return ModelResponse(parts=list(parts), timestamp=FIXED_TIME)  # pyright: ignore[reportArgumentType]

    validated = m.ModelMessagesTypeAdapter.validate_python(
        [
            {
                'kind': 'request',
                'parts': [
                    {'part_kind': 'instruction-delta', 'id': 'agent:rules', 'content': 'Always answer in French'},
                    {'part_kind': 'instruction-delta', 'id': 'agent:rules', 'content': None},
                    {'part_kind': 'instruction-baseline', 'instructions': []},
                    {'part_kind': 'tool-availability-delta', 'tools_added': ['alpha_tool']},
                    {'part_kind': 'model-settings-delta', 'settings': {'thinking': 'high'}},
                    {'part_kind': 'retry-feedback', 'content': 'output was bad', 'retry': {'cause': 'model_retry'}},
                    {
                        'part_kind': 'retry-feedback',
                        'content': [{'type': 'missing', 'loc': ['answer'], 'msg': 'Field required', 'input': {}}],
                        'retry': {'cause': 'validation_error'},
                    },
                    {'part_kind': 'retry-prompt', 'content': 'please fix the zebra', 'tool_name': 'fixme'},
                    {'part_kind': 'retry-prompt', 'content': 'general quokka fix'},
                ],
            }
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        legacy_retries = [
            m.RetryPromptPart(content='legacy retry walrus', tool_name='old_tool'),  # pyright: ignore[reportDeprecated]
            m.RetryPromptPart(  # pyright: ignore[reportDeprecated]
                content=[{'type': 'int_parsing', 'loc': ('n',), 'msg': 'not an int', 'input': 'x', 'ctx': {'a': 1}}],
            ),
        ]
    image = m.ImageUrl('https://example.com/cat.png')
    binary = m.BinaryContent(b'\x89PNG', media_type='image/png')
    return [
        request(
            m.SystemPromptPart('You are a careful archivist of llamas.', timestamp=FIXED_TIME),
            m.UserPromptPart('What did we decide about the Kraków office? Café naïve ÉTÉ', timestamp=FIXED_TIME),
        ),
        request(
            m.UserPromptPart(
                ['Look at', m.TextContent('this picture of a heron'), image, binary, m.CachePoint(), 'please'],
                timestamp=FIXED_TIME,
            )
        ),
        request(
            m.SystemPromptPart('Summary of previous conversation:\n\nwe talked about otters', timestamp=FIXED_TIME)
        ),
        response(
            m.TextPart('The Kraków office opens in March; 東京 follows.'),
            m.ThinkingPart('secret reasoning about badgers'),
            m.ToolCallPart('lookup_office', {'city': 'Kraków', 'floors': 3, 'tags': ['a', 'ß']}),
            m.ToolCallPart('raw_args', '{"q": "json string args"}'),
            m.ToolCallPart('bad_args', '{not json'),
            m.ToolCallPart('no_args', None),
        ),
        request(
            m.ToolReturnPart('lookup_office', {'address': 'Rynek 1', 'floors': 3}, timestamp=FIXED_TIME),
            m.ToolReturnPart('raw_args', 'plain text return', timestamp=FIXED_TIME),
            m.ToolReturnPart('bad_args', ['see the chart', image], timestamp=FIXED_TIME),
            m.ToolReturnPart('no_args', image, timestamp=FIXED_TIME),
            m.ToolReturnPart('failing', 'it exploded', outcome='failed', timestamp=FIXED_TIME),
            m.ToolReturnPart('denied_tool', 'not allowed', outcome='denied', timestamp=FIXED_TIME),
            m.ToolReturnPart('retry_str', 'try a smaller number', outcome='retried', timestamp=FIXED_TIME),
            m.ToolReturnPart(
                'retry_errors',
                [{'type': 'missing', 'loc': ['x'], 'msg': 'Field required', 'input': {'y': 1}}],
                outcome='retried',
                timestamp=FIXED_TIME,
            ),
        ),
        *validated,
        request(*legacy_retries),
        request(
            m.CompactionPart('Earlier we agreed the budget is 4200 euros.'),
            m.CompactionPart(None),
            m.CompactionPart(''),
        ),
        response(m.CompactionPart('provider compaction text'), m.FilePart(binary)),
        request(m.SpeechPart(speaker='user', transcript='spoken question about the pelican')),
        request(m.SpeechPart(speaker='user')),
        response(m.SpeechPart(speaker='assistant', transcript='spoken answer about the pelican')),
        response(
            m.NativeToolCallPart('web_search', {'query': 'native search'}),
            m.NativeToolReturnPart('web_search', {'results': ['native result']}),
            m.NativeToolSearchCallPart(args={'queries': ['native tool search']}),  # pyright: ignore[reportArgumentType]
            m.NativeToolSearchReturnPart(content={'discovered_tools': []}),  # pyright: ignore[reportArgumentType]
        ),
        response(m.ToolSearchCallPart(args={'queries': ['find tool']})),
        request(m.ToolSearchReturnPart(content={'discovered_tools': []}, timestamp=FIXED_TIME)),  # pyright: ignore[reportArgumentType]
        response(m.LoadCapabilityCallPart(args={'id': 'capability_x'})),  # pyright: ignore[reportArgumentType]
        request(m.LoadCapabilityReturnPart(content={'id': 'capability_x'}, timestamp=FIXED_TIME)),  # pyright: ignore[reportArgumentType]
        response(m.ThinkingPart('only thinking here')),
        request(),
    ]
