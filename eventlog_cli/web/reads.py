"""What each page of the web viewer reads from the store, as plain data for its template.

Every read is bounded: lists and transcripts come a page at a time (`PAGE` entries, resumed
after an entry number), so a conversation of any length opens its first page in one short read.
Nothing here writes to the log; the search index (derived data) catches up before a search, as
every search of the store does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from eventlog.entries import ConversationRecord, Entry, RunRecord, VerifyReport
from eventlog.errors import EventLogError
from eventlog_cli._text import clip, entry_headline
from eventlog_cli._views import latest_start
from eventlog_cli.web.messages import MessageView, compaction_view, message_view, payload_view

if TYPE_CHECKING:
    from eventlog.checkpoint import Checkpoint
    from eventlog.log import EventLogBase
    from eventlog_cli._store import StoreLog
    from search.analyzers import Analyzer
    from search.result import SearchResult

__all__ = [
    'CONVERSATION_PAGE',
    'PAGE',
    'PAGE_BYTES',
    'SEARCH_PAGE',
    'CheckpointStatus',
    'ContextItem',
    'EntryView',
    'Highlighted',
    'Page',
    'SearchHitView',
    'SearchPage',
    'checkpoint_status',
    'child_runs',
    'context_page',
    'conversation_sort_key',
    'entry_page',
    'entry_view',
    'highlight',
    'run_page',
    'run_statuses',
    'search_page',
    'transcript_page',
    'verify_by_conversation',
]

PAGE = 100
"""Entries per page of a transcript, a run's timeline and a conversation's context."""

CONVERSATION_PAGE = 50
"""Conversations per page of the list."""

SEARCH_PAGE = 20
"""Search hits per page."""

PAGE_BYTES = 1 << 20
"""A page of entries or context ends once the payloads on it pass this many bytes (one entry at least)."""

_TRANSCRIPT_KINDS = ['message', 'compaction']


@dataclass
class EntryView:
    """One entry, ready for a template."""

    entry: Entry
    """The entry as stored."""
    message: MessageView | None = None
    """For a message: its parts."""
    replaced: list[int] = field(default_factory=list[int])
    """For a compaction: the entries its summary replaces."""
    summary: list[MessageView] = field(default_factory=list[MessageView])
    """For a compaction: the summary messages."""
    headline: str = ''
    """One line saying what any other kind of entry records."""
    offset_ms: float | None = None
    """In a run's timeline: milliseconds since the run started."""
    tool_status: str | None = None
    """For a tool effect: `started`, `completed`, `failed`, ..."""
    tool_after: float | None = None
    """For a tool effect that ends a call started on the same page: the call's duration in ms."""
    problem: str | None = None
    """Why the entry could not be shown (a damaged payload), if it could not."""


def entry_view(entry: Entry) -> EntryView:
    """`entry` with what its kind records decoded; a damaged payload is reported, not raised."""
    view = EntryView(entry=entry)
    try:
        if entry.kind == 'message':
            view.message = message_view(entry)
        elif entry.kind == 'compaction':
            view.replaced, view.summary = compaction_view(entry)
        else:
            view.headline = entry_headline(entry, limit=2000)
    except (EventLogError, ValueError) as exc:
        view.problem = str(exc)
    if entry.kind == 'tool_effect':
        from eventlog_cli._render import tool_effect

        effect = tool_effect(entry)
        view.tool_status = None if effect is None else effect.status
    return view


@dataclass
class Page:
    """A page of entries and where the pages around it start."""

    items: list[EntryView]
    """The entries shown."""
    after: int
    """The entry number this page resumes after (0 for the first page)."""
    next_after: int | None
    """Where the next page resumes (`None`: this is the last)."""
    prev_after: int | None
    """Where the previous page resumes (`None`: this is the first)."""


async def entry_page(
    log: EventLogBase,
    *,
    after: int,
    conversation_id: str | None = None,
    run_id: str | None = None,
    kinds: list[str] | None = None,
    size: int = PAGE,
) -> Page:
    """Up to `size` matching entries after entry `after`, and the links to the pages around them."""
    found = await log.entries(
        conversation_id=conversation_id, run_id=run_id, kinds=kinds, after_seq=after, limit=size + 1
    )
    more = len(found) > size
    shown = found[:size]
    total = 0
    for count, entry in enumerate(shown):
        total += len(entry.payload)
        if total > PAGE_BYTES and count + 1 < len(shown):
            shown, more = shown[: count + 1], True
            break
    prev: int | None = None
    if after > 0:
        start = await latest_start(log, size, after, conversation_id, run_id, kinds)
        prev = 0 if start is None else start
    return Page(
        items=[entry_view(e) for e in shown],
        after=after,
        next_after=shown[-1].seq if more and shown else None,
        prev_after=prev,
    )


async def transcript_page(log: EventLogBase, conversation_id: str, after: int) -> Page:
    """A page of a conversation's transcript: its messages and compaction markers in order."""
    return await entry_page(log, after=after, conversation_id=conversation_id, kinds=_TRANSCRIPT_KINDS)


async def run_page(log: EventLogBase, run: RunRecord, after: int) -> Page:
    """A page of a run's timeline: every entry of the run, with its time since the run started,
    and the duration of each tool call whose start is on the same page."""
    page = await entry_page(log, after=after, run_id=run.run_id)
    started: dict[str, datetime] = {}
    from eventlog_cli._render import tool_effect

    for view in page.items:
        entry = view.entry
        view.offset_ms = (entry.timestamp - run.started_at).total_seconds() * 1000
        if entry.kind != 'tool_effect':
            continue
        effect = tool_effect(entry)
        if effect is None:
            continue
        if effect.status == 'started':
            started[effect.tool_call_id] = entry.timestamp
        elif effect.tool_call_id in started:
            view.tool_after = (entry.timestamp - started.pop(effect.tool_call_id)).total_seconds() * 1000
    return page


@dataclass
class ContextItem:
    """One message of a conversation's context, numbered by its entry."""

    seq: int
    """Its own entry, or for a message of a compaction summary, the compaction's entry."""
    message: MessageView
    """The message."""
    summary: bool
    """Whether it comes from a compaction summary."""


async def context_page(
    log: EventLogBase, conversation_id: str, start: int, size: int = PAGE
) -> tuple[list[ContextItem], int, bool]:
    """Messages `start` to `start + size` of what an agent continuing the conversation starts from
    (compaction summaries folded in), fewer once their payloads pass `PAGE_BYTES`; where the next
    page starts and whether more follow."""
    items: list[ContextItem] = []
    index = 0
    more = False
    total = 0
    compactions: set[int] = set()
    async for batch in log.iter_context_messages(conversation_id, batch=size):
        for seq, payload in batch:
            if index >= start + size or (items and total > PAGE_BYTES):
                more = True
                break
            if index >= start:
                items.append(ContextItem(seq=seq, message=payload_view(payload), summary=False))
                total += len(payload)
            index += 1
        if more:
            break
    if items:
        found = await log.entries(conversation_id=conversation_id, kinds=['compaction'], after_seq=items[0].seq - 1)
        compactions = {e.seq for e in found if e.seq <= items[-1].seq}
    for item in items:
        item.summary = item.seq in compactions
    return items, index, more


async def child_runs(log: EventLogBase, run: RunRecord) -> list[RunRecord]:
    """The runs started inside `run` (its `parent_run_id`), in start order."""
    return [r for r in await log.list_runs() if r.parent_run_id == run.run_id]


# --- search -----------------------------------------------------------------------------------

Highlighted = list[tuple[str, bool]]
"""Text as pieces, each marked when it is a matched word."""


def highlight(text: str, analyzer: Analyzer, terms: frozenset[str]) -> Highlighted:
    """`text` cut into pieces, the words whose analyzed form is one of `terms` marked."""
    from search.analyzers import WORD_RE, LocatingAnalyzer

    if isinstance(analyzer, LocatingAnalyzer):
        spans = [(start, end) for term, start, end in analyzer.token_spans(text) if term in terms]
    else:
        spans = [
            (m.start(), m.end()) for m in WORD_RE.finditer(text) if any(t in terms for t in analyzer.tokens(m.group()))
        ]
    pieces: Highlighted = []
    done = 0
    for start, end in sorted(spans):
        if start < done:
            continue
        if start > done:
            pieces.append((text[done:start], False))
        pieces.append((text[start:end], True))
        done = end
    if done < len(text):
        pieces.append((text[done:], False))
    return pieces


@dataclass
class SearchHitView:
    """One search hit: where it is and its lines with the matches marked."""

    rank: int
    """1 for the best hit."""
    score: float
    """Its BM25 score."""
    conversation_id: str | None
    """Its conversation."""
    run_id: str
    """Its run."""
    seq: int | None
    """Its entry number (`None` when the index cannot tell)."""
    lines: list[Highlighted]
    """Its lines (`User: ...`), clipped around the first match."""


@dataclass
class SearchPage:
    """A page of search results."""

    query: str
    """The query as given."""
    outcome: str
    """How the search ended (`found`, `no_match`, `no_terms`, ...)."""
    hits: list[SearchHitView]
    """The hits of this page."""
    matches: int
    """How many messages matched in all."""
    documents: int
    """How many messages the scope holds."""
    seconds: float
    """How long the search took."""
    analyzer: str
    """The analyzer of the index."""
    page: int
    """This page's number (1 first)."""
    more: bool
    """Whether another page follows."""


async def search_page(log: StoreLog, query: str, conversation_id: str | None, page: int) -> SearchPage:
    """Page `page` of the hits of `query` over the store's persistent index (one conversation, or all)."""
    from eventlog_cli._index import index_analyzer
    from eventlog_cli.entries import hit_lines
    from search.engine import SearchEngine, SearchOptions
    from search.persistent_index import PersistentIndex
    from search.render import make_locator

    name = index_analyzer(log) or 'default'
    index = PersistentIndex.for_log(log, name)
    analyzer = index.analyzer
    engine = SearchEngine(index, SearchOptions(max_matches=page * SEARCH_PAGE, context_lines=0, analyzer=analyzer))
    result: SearchResult = await engine.find(
        query, scope='all' if conversation_id is None else 'conversation', conversation_id=conversation_id
    )
    terms = frozenset(result.terms)
    locate = make_locator(analyzer, terms)
    hits: list[SearchHitView] = []
    for hit in result.hits[(page - 1) * SEARCH_PAGE :]:
        shown = next((w for w in hit.window if w.position == hit.position), None)
        lines = [] if shown is None else hit_lines(shown.message, locate)
        hits.append(
            SearchHitView(
                rank=hit.rank,
                score=hit.score,
                conversation_id=hit.conversation_id,
                run_id=hit.run_id,
                seq=hit.seq,
                lines=[highlight(line, analyzer, terms) for line in lines],
            )
        )
    matches = result.matches if result.outcome == 'found' else 0
    return SearchPage(
        query=query,
        outcome=result.outcome,
        hits=hits,
        matches=matches,
        documents=result.documents,
        seconds=result.timings.total,
        analyzer=analyzer.name,
        page=page,
        more=matches > page * SEARCH_PAGE,
    )


# --- stats, verify, checkpoints ---------------------------------------------------------------


@dataclass
class CheckpointStatus:
    """The signed checkpoints recorded in the store."""

    checkpoints: list[Checkpoint]
    """Oldest first."""
    last_seq: int
    """The store's last entry number."""

    @property
    def latest(self) -> Checkpoint | None:
        """The newest checkpoint, if any."""
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def uncovered(self) -> int:
        """Entry numbers assigned after the newest checkpoint (all of them when there is none)."""
        latest = self.latest
        return self.last_seq - (latest.last_seq if latest is not None else 0)


async def checkpoint_status(log: EventLogBase) -> CheckpointStatus:
    """The checkpoints recorded in the store and how far the newest reaches."""
    return CheckpointStatus(checkpoints=await log.checkpoints(), last_seq=await log.last_seq())


def verify_by_conversation(report: VerifyReport) -> dict[str, str]:
    """Each conversation with a finding, and its first finding (`#seq reason`)."""
    found: dict[str, str] = {}
    for problem in report.problems:
        if problem.conversation_id and problem.conversation_id not in found:
            where = f'#{problem.seq} ' if problem.seq else ''
            found[problem.conversation_id] = clip(f'{where}{problem.code}: {problem.reason}', 200)
    return found


def run_statuses(runs: list[RunRecord]) -> str:
    """`3 completed, 1 failed`."""
    return ', '.join(f'{n} {s}' for s, n in Counter(r.status for r in runs).most_common())


def conversation_sort_key(record: ConversationRecord) -> tuple[datetime, int]:
    """Most recently active first (as `eventlog conversations` lists them)."""
    return record.updated_at, record.last_seq
