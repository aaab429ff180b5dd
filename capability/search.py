"""`ConversationSearch`: a pydantic-ai capability that lets the model search stored history.

The capability is a front door: the search itself (scope, ranking, answers) lives in
`search.engine`. This module adds the `search_conversation_history` tool, its
description, and the instructions that tell the model the tool exists.
"""

from __future__ import annotations

import os
import sys
import typing
import warnings
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, fields

from pydantic_ai import RunContext
from pydantic_ai.agent.abstract import AgentInstructions
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.toolsets import AgentToolset, FunctionToolset

from eventlog import EventLogBase, ReplayHistorySource
from search import Analyzer, HistorySource, ScopeDefaultWarning, SearchBackend, SearchEngine, SearchOptions, SearchScope
from search.analyzers import resolve_analyzer
from search.options import AnswerStyle, validate_mode, validate_search_options
from search.persistent_index import backend_for
from search.render import SEARCH_TOOL_NAME
from search.semantic import SearchMode

if typing.TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = ['TOOL_NAME', 'ConversationSearch', 'ScopeDefaultWarning', 'SearchScope', 'backend_for']


TOOL_NAME = SEARCH_TOOL_NAME
"""The name of the tool the model calls (its calls and returns are not indexed)."""

_SCOPE_REACH: dict[SearchScope, str] = {
    'conversation': (
        'It covers the current conversation only, its earlier runs included; other conversations in the '
        'same store are out of its reach.'
    ),
    'all': 'It covers every run in the store, across all conversations.',
}

_DESCRIPTION = """\
Search the stored message history by keywords and get matching messages back word for word, \
each with the messages around it.

{reach} Messages that were dropped from your context to save space (compaction, summaries) \
are still stored, so this is how to get an exact detail back.

{ranking} Each result gives its score, the run and conversation it comes from, and the \
matching message with its neighbours, numbered by their position in that run. Pass `run_id` \
to search one run only, e.g. a run that a summary or another tool refers to.

Use it when your current context or a summary lacks a detail you need. Do not use it for what \
is already in your context, or for information from outside the conversation."""

_RANKING: dict[SearchMode, str] = {
    'bm25': (
        'Ranking is BM25: every word of the query counts on its own, and rare, exact words weigh most, '
        'so search with distinctive words (names, numbers, identifiers, file paths) rather than whole '
        'sentences.'
    ),
    'semantic': (
        'Ranking is by meaning: messages are compared with the query as a whole, so describe what you are '
        'looking for in a short sentence; different wording than the original message still finds it.'
    ),
    'hybrid': (
        'Ranking combines exact words (BM25) with meaning: distinctive words (names, numbers, identifiers) '
        'weigh in, and so does a short description of what you are looking for in other words.'
    ),
}

_INSTRUCTIONS: dict[SearchScope, str] = {
    'conversation': (
        f'The `{TOOL_NAME}` tool searches the stored messages of this conversation, including earlier '
        'runs and messages that were dropped from your context to save space. When you need an exact '
        'detail that your current context or a summary no longer holds, search for it instead of guessing.'
    ),
    'all': (
        f'The `{TOOL_NAME}` tool searches every stored conversation in this store, including earlier '
        'runs and messages that were dropped from your context to save space. When you need an exact '
        'detail that your current context or a summary no longer holds, search for it instead of guessing.'
    ),
}

_SCOPE_WARNING = (
    "ConversationSearch was created without `scope`, so it searches only the calling run's conversation "
    "(scope='conversation'). Pass scope='conversation' to keep this and silence the warning, or scope='all' "
    'to search every run in the store (only for a store that holds one principal).'
)

_THIS_FILE = os.path.normcase(__file__)
_TYPING_FILE = os.path.normcase(typing.__file__)


def _caller_stacklevel() -> int:
    """The `warnings.warn` stacklevel of the code that constructed the capability.

    Skips this module, the generated dataclass `__init__` and the `typing` frame a
    subscripted construction (`ConversationSearch[Deps](...)`) adds.
    """
    level = 1
    frame = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    while frame is not None:
        code = frame.f_code
        generated_init = code.co_name == '__init__' and code.co_filename.startswith('<')
        if not generated_init and os.path.normcase(code.co_filename) not in (_THIS_FILE, _TYPING_FILE):
            break
        level += 1
        frame = frame.f_back
    return level


@dataclass
class ConversationSearch(AbstractCapability[AgentDepsT]):
    """Gives the model a `search_conversation_history` tool: BM25 search over stored history.

    It stores nothing itself; it reads what a persistence capability stored, through a
    `HistorySource` (such as `eventlog.ReplayHistorySource`), or through a
    `search.SearchBackend` that keeps its own index. The tool reads the store when it is
    called, so the capabilities can be listed in any order.

    ```python
    agent = Agent(
        'openai:gpt-5',
        capabilities=[
            EventLogPersistence(log),
            ConversationSearch(ReplayHistorySource(log), scope='conversation'),
        ],
    )
    ```

    Raises:
        ValueError: an option is out of range, or `analyzer` names no analyzer.
        ImportError: `analyzer` needs an optional dependency that is missing.
    """

    source: HistorySource | SearchBackend | EventLogBase
    """Where the history comes from. An event log given here is read through a
    `ReplayHistorySource` over it (after construction, `source` holds that source)."""

    _: KW_ONLY

    scope: SearchScope | None = None
    """`'conversation'`: only runs sharing the calling run's conversation id, and nothing at all for
    a run without one. `'all'`: every run in the store, only for stores that hold one principal.
    Left unset it means `'conversation'` and warns once (`ScopeDefaultWarning`)."""

    max_matches: int = 10
    """The most results one answer shows; non-negative."""

    context_lines: int = 5
    """Messages shown before and after each match, from the match's run; non-negative."""

    bm25_k1: float = 1.5
    """BM25 term-frequency saturation; finite and non-negative."""

    bm25_b: float = 0.75
    """BM25 length normalisation; from 0 to 1."""

    add_instructions: bool = True
    """Tell the model, in the instructions, that the tool exists."""

    tool_id: str = 'conversation-search'
    """The id of the toolset holding the tool."""

    analyzer: str | Analyzer = 'default'
    """How text becomes terms: `'default'` (the reference's), `'english'`, `'cjk'`, or an `Analyzer`."""

    answer_style: AnswerStyle = 'reference'
    """How answers are worded. `'reference'`: the text pydantic-ai-harness's `ConversationSearch`
    returns for the same history, byte for byte, so swapping one capability for the other changes
    no prompt. `'explained'`: answers that find nothing say why and what to try, quoted text is
    escaped, and messages an earlier result already showed are not repeated."""

    mode: SearchMode = 'bm25'
    """How results are ranked: `'bm25'` (lexical; answers unchanged), `'semantic'` (embeddings, via the
    log's `VectorIndex` or in memory) or `'hybrid'` (both, fused by standardised scores); docs/semantic.md."""

    embedder: Embedder | None = None
    """The pydantic-ai `Embedder` for `'semantic'` and `'hybrid'` (required there)."""

    id: str | None = 'conversation_search'
    """The capability's id. Two `ConversationSearch` under one id must agree on every option."""

    _toolset: FunctionToolset[AgentDepsT] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the source and the options, and warn, once, when `scope` was left unset."""
        if isinstance(self.source, EventLogBase):
            self.source = ReplayHistorySource(self.source)
        elif not isinstance(self.source, (HistorySource, SearchBackend)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                'ConversationSearch reads history from an event log, a HistorySource (such as '
                'eventlog.ReplayHistorySource(log)) or a search.SearchBackend; got '
                f'{type(self.source).__name__}, which is none of these'
            )
        validate_search_options(
            max_matches=self.max_matches,
            context_lines=self.context_lines,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
        )
        resolve_analyzer(self.analyzer)
        validate_mode(self.mode, self.embedder)
        if self.answer_style not in ('reference', 'explained'):
            raise ValueError(f"answer_style must be 'reference' or 'explained', got {self.answer_style!r}.")
        if self.scope is None:
            warnings.warn(_SCOPE_WARNING, ScopeDefaultWarning, stacklevel=_caller_stacklevel())
        elif self.scope not in _INSTRUCTIONS:
            raise ValueError(f"scope must be 'conversation' or 'all', got {self.scope!r}.")

    @property
    def effective_scope(self) -> SearchScope:
        """The scope searches use: `scope`, or `'conversation'` when it was left unset."""
        return 'conversation' if self.scope is None else self.scope

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[AgentDepsT]]) -> AbstractCapability[AgentDepsT]:
        """Several under one id are one search stated more than once; if they disagree, raise `UserError`.

        Merging two different configurations could widen the corpus one of them was given.
        """
        first = capabilities[0]
        for other in capabilities[1:]:
            differing = [
                spec.name
                for spec in fields(first)
                if spec.compare and spec.name != 'id' and getattr(first, spec.name) != getattr(other, spec.name)
            ]
            if differing:
                raise UserError(
                    f'Several ConversationSearch capabilities share the id {first.id!r} but differ in '
                    f'{", ".join(differing)}. Give each its own `id` and `tool_id` (and prefix their tool '
                    'names), or configure them the same.'
                )
        return first

    def build_engine(self) -> SearchEngine:
        """The engine the tool answers with, configured from this capability's options."""
        options = SearchOptions(
            max_matches=self.max_matches,
            context_lines=self.context_lines,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
            analyzer=resolve_analyzer(self.analyzer),
            answer_style=self.answer_style,
            mode=self.mode,
            embedder=self.embedder,
        )
        return SearchEngine(backend_for(self.source, options.analyzer), options)

    def get_toolset(self) -> AgentToolset[AgentDepsT] | None:
        """The toolset holding `search_conversation_history`, built once per capability (building
        it generates the tool's schema, which would otherwise cost every run several milliseconds)."""
        if self._toolset is None:
            self._toolset = self._build_toolset()
        return self._toolset

    def _build_toolset(self) -> FunctionToolset[AgentDepsT]:
        engine = self.build_engine()
        scope = self.effective_scope

        async def search_conversation_history(
            ctx: RunContext[AgentDepsT], query: str, run_id: str | None = None
        ) -> str:
            """Search the stored message history.

            Args:
                ctx: The run context.
                query: The words to look for. Each word counts on its own; rare words weigh most.
                run_id: Search only this run's messages (a run id from an earlier result or a summary).
            """
            return await engine.search(
                query, scope=scope, conversation_id=ctx.conversation_id, run_id=run_id, searching_run_id=ctx.run_id
            )

        toolset = FunctionToolset[AgentDepsT](id=self.tool_id)
        toolset.add_function(
            search_conversation_history,
            name=TOOL_NAME,
            description=_DESCRIPTION.format(reach=_SCOPE_REACH[scope], ranking=_RANKING[self.mode]),
        )
        return toolset

    def get_instructions(self) -> AgentInstructions[AgentDepsT] | None:
        """A short note that the tool exists, worded for the configured scope; `None` without `add_instructions`."""
        if not self.add_instructions:
            return None
        return _INSTRUCTIONS[self.effective_scope]
