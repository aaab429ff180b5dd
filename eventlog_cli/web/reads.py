"""What each page of the web viewer reads from the store, as plain data for its template.

Every read is bounded: lists and transcripts come a page at a time (`PAGE` entries, resumed
after an entry number), so a conversation of any length opens its first page in one short read.
Nothing here writes to the store, which `eventlog serve` opens read-only: a search reads the
store's index where it is current and indexes what it lacks in memory.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from eventlog.entries import ConversationRecord, Entry, RunRecord, VerifyProblem, VerifyReport
from eventlog.errors import EventLogError
from eventlog_cli._ids import ShortIds
from eventlog_cli._text import clip, entry_headline
from eventlog_cli._views import latest_start, run_status_filter
from eventlog_cli.entries import InstructionsShown
from eventlog_cli.outline import Mark, Outline, conversation_outline
from eventlog_cli.web.messages import (
    PAYLOAD_LIMIT,
    MessageView,
    compaction_view,
    message_view,
    payload_view,
)

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
    'RUNS_PAGE',
    'RUN_INDEX_CATCH_UP',
    'RUN_SORTS',
    'SEARCH_PAGE',
    'CheckpointStatus',
    'ContextItem',
    'EntryView',
    'Highlighted',
    'Page',
    'RunFindings',
    'RunIndex',
    'RunKey',
    'RunSort',
    'RunsPage',
    'RunsQuery',
    'SearchHitView',
    'SearchPage',
    'checkpoint_status',
    'child_runs',
    'context_page',
    'conversation_findings',
    'conversation_sort_key',
    'entry_findings',
    'entry_page',
    'entry_view',
    'highlight',
    'order_runs',
    'run_findings',
    'run_page',
    'run_statuses',
    'runs_page',
    'search_page',
    'transcript_page',
    'verify_by_conversation',
    'whole_unless_message',
]

PAGE = 100
"""Entries per page of a transcript, a run's timeline and a conversation's context."""

CONVERSATION_PAGE = 50
"""Conversations per page of the list."""

SEARCH_PAGE = 20
"""Search hits per page."""

RUNS_PAGE = 50
"""Runs per page of the runs page."""

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
    marks: list[Mark] = field(default_factory=list[Mark])
    """In a transcript: the conversation's marks before this entry (a branch, a branch left, a
    sub-agent run; `eventlog_cli.outline`)."""
    depth: int = 0
    """In a transcript: how deep the entry's run is nested (a sub-agent run's: 1 and more)."""


def entry_view(entry: Entry, size: int | None = None) -> EntryView:
    """`entry` with what its kind records decoded; a damaged payload is reported, not raised.
    `size` is the payload's full size when `entry` holds only its first `PAYLOAD_LIMIT` bytes
    (`EventLogBase.entry_heads`): such a message is previewed, not decoded."""
    view = EntryView(entry=entry)
    try:
        if entry.kind == 'message':
            view.message = message_view(entry, size)
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


async def whole_unless_message(log: EventLogBase, entry: Entry, size: int) -> tuple[Entry, int]:
    """An entry read cut (`entry_heads`) and its payload's size: a message as it is (its view
    previews a big one), any other kind read whole (it is shown decoded)."""
    if entry.kind == 'message' or size <= len(entry.payload):
        return entry, size
    whole = await log.get_entry(entry.seq)
    return (entry, size) if whole is None else (whole, size)


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
    found = await log.entry_heads(
        conversation_id=conversation_id,
        run_id=run_id,
        kinds=kinds,
        after_seq=after,
        limit=size + 1,
        payload_limit=PAYLOAD_LIMIT,
    )
    more = len(found) > size
    shown = found[:size]
    total = 0
    for count, (_, full) in enumerate(shown):
        total += full
        if total > PAGE_BYTES and count + 1 < len(shown):
            shown, more = shown[: count + 1], True
            break
    prev: int | None = None
    if after > 0:
        start = await latest_start(log, size, after, conversation_id, run_id, kinds)
        prev = 0 if start is None else start
    return Page(
        items=[entry_view(*await whole_unless_message(log, e, full)) for e, full in shown],
        after=after,
        next_after=shown[-1][0].seq if more and shown else None,
        prev_after=prev,
    )


def _show_instructions(items: Sequence[EntryView]) -> None:
    """Put each run's instructions in the page's messages where `InstructionsShown` says they are
    due: in each run's first request on the page, and where they change."""
    shown = InstructionsShown()
    for view in items:
        if view.message is not None:
            shown.show(view.entry.run_id, view.message, view.entry.seq)


async def transcript_page(log: EventLogBase, conversation_id: str, after: int, outline: Outline | None = None) -> Page:
    """A page of a conversation's transcript: its messages and compaction markers in order, each
    with the marks of the conversation's `outline` (read when not given) before it, and its depth."""
    page = await entry_page(log, after=after, conversation_id=conversation_id, kinds=_TRANSCRIPT_KINDS)
    if outline is None:
        outline = await conversation_outline(log, conversation_id)
    for view in page.items:
        view.marks = outline.before(view.entry.seq)
        view.depth = outline.depth_of(view.entry.run_id)
    _show_instructions(page.items)
    return page


async def run_page(log: EventLogBase, run: RunRecord, after: int) -> Page:
    """A page of a run's timeline: every entry of the run, with its time since the run started,
    and the duration of each tool call whose start is on the same page."""
    page = await entry_page(log, after=after, run_id=run.run_id)
    _show_instructions(page.items)
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
    async for batch in log.iter_context_heads(conversation_id, batch=size, payload_limit=PAYLOAD_LIMIT):
        for seq, payload, full in batch:
            if index >= start + size or (items and total > PAGE_BYTES):
                more = True
                break
            if index >= start:
                items.append(ContextItem(seq=seq, message=payload_view(payload, full), summary=False))
                total += full
            index += 1
        if more:
            break
    if items:
        found = await log.entry_heads(
            conversation_id=conversation_id, kinds=['compaction'], after_seq=items[0].seq - 1, payload_limit=0
        )
        compactions = {e.seq for e, _ in found if e.seq <= items[-1].seq}
    shown = InstructionsShown()
    for item in items:
        item.summary = item.seq in compactions
        shown.show(None, item.message, item.seq)
    return items, index, more


async def child_runs(log: EventLogBase, run: RunRecord, index: RunIndex | None = None) -> list[RunRecord]:
    """The runs started inside `run` (its `parent_run_id`), in start order: found through `index`
    when given (without it, every run record is read)."""
    if index is None:
        return await log.list_runs(parent_run_id=run.run_id)
    found = [await log.get_run(k.run_id) for k in await index.ordered(log, 'start') if k.parent_run_id == run.run_id]
    return [r for r in found if r is not None]


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
    unindexed: str = ''
    """What the search says of messages the index could not read (`SearchResult.unindexed`); empty when none."""


async def search_page(log: StoreLog, query: str, conversation_id: str | None, page: int) -> SearchPage:
    """Page `page` of the hits of `query` over the store's persistent index (one conversation, or all)."""
    from eventlog_cli._index import index_analyzer
    from eventlog_cli._views import unindexed_note
    from eventlog_cli.entries import hit_lines
    from search.engine import SearchEngine, SearchOptions
    from search.excerpt import make_locator
    from search.persistent_index import PersistentIndex

    name = index_analyzer(log) or 'default'
    index = PersistentIndex.for_log(log, name)
    analyzer = index.analyzer
    engine = SearchEngine(index, SearchOptions(max_matches=page * SEARCH_PAGE, context_lines=0, analyzer=analyzer))
    result: SearchResult = await engine.find(
        query,
        scope='all' if conversation_id is None else 'conversation',
        conversation_id=conversation_id,
        decode=False,
    )
    terms = frozenset(result.terms)
    locate = make_locator(analyzer, terms)
    hits: list[SearchHitView] = []
    for hit in result.hits[(page - 1) * SEARCH_PAGE :]:
        shown = next((w for w in hit.window if w.position == hit.position), None)
        lines = [] if shown is None else hit_lines(shown.stored(), locate)
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
        unindexed=unindexed_note(result.unindexed) if result.unindexed else '',
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


def run_statuses(runs: Sequence[RunRecord] | Sequence[RunKey]) -> str:
    """`3 completed, 1 failed`."""
    return ', '.join(f'{n} {s}' for s, n in Counter(r.status for r in runs).most_common())


def conversation_sort_key(record: ConversationRecord) -> tuple[datetime, int]:
    """Most recently active first (as `eventlog conversations` lists them)."""
    return record.updated_at, record.last_seq


# --- runs across conversations ----------------------------------------------------------------

RunSort = Literal['start', '-start', 'duration', '-duration']
"""How the runs page orders runs: by start or by duration, `-` for the latest or longest first."""

RUN_SORTS: tuple[RunSort, ...] = ('-start', 'start', '-duration', 'duration')
"""The orders of the runs page, its default first."""


@dataclass
class RunsQuery:
    """What the runs page lists: its filters (each `None` when not given), order and page."""

    status: str | None = None
    """A name of `eventlog_cli._views.RUN_STATUS_FILTERS` (`interrupted` among them)."""
    agent: str | None = None
    """An agent's name, exactly."""
    conversation_id: str | None = None
    """A conversation's full id."""
    since: datetime | None = None
    """Runs started at or after this time."""
    until: datetime | None = None
    """Runs started before this time."""
    sort: RunSort = '-start'
    """The order."""
    page: int = 1
    """The page (1 first)."""


@dataclass
class RunsPage:
    """A page of the runs page."""

    query: RunsQuery
    """What was asked."""
    runs: list[RunRecord]
    """The runs of this page, in the asked order."""
    matched: int
    """How many runs match the filters in all."""
    statuses: str
    """The matching runs by status (`200 completed, 1 failed`)."""
    agents: list[str]
    """Every agent name among the runs the page looked at (for the agent filter)."""
    short: ShortIds
    """The abbreviations of the page's run and conversation ids (as `eventlog runs` prints them)."""

    @property
    def more(self) -> bool:
        """Whether another page follows."""
        return self.query.page * RUNS_PAGE < self.matched


@dataclass(frozen=True, slots=True)
class RunKey:
    """What the runs page filters and orders a run by: fields a run's later entries never change
    but for its end (`status`, `finished_at`, set once by its `run_finished`)."""

    run_id: str
    conversation_id: str
    agent_name: str | None
    status: str
    started_at: datetime
    finished_at: datetime | None
    start_seq: int
    parent_run_id: str | None

    @classmethod
    def of(cls, run: RunRecord) -> RunKey:
        """The key of a run record."""
        return cls(
            run.run_id,
            run.conversation_id,
            run.agent_name,
            run.status,
            run.started_at,
            run.finished_at,
            run.start_seq,
            run.parent_run_id,
        )

    @property
    def seconds(self) -> float | None:
        """How long the run took (`None` while unfinished)."""
        return None if self.finished_at is None else (self.finished_at - self.started_at).total_seconds()


RUN_INDEX_CATCH_UP = 5_000
"""Entries appended since the runs were last read that `RunIndex` reads to catch up, at most;
after more, it reads every run record again."""


class RunIndex:
    """Every run of the store as a `RunKey`, kept between requests by the viewer.

    Reading every run record of a big store costs a decode per run (about a second for 50,000
    runs on a loaded 2-core machine), so the keys are read once and then brought up to date from
    the entries appended since: the runs those entries belong to are read again (`get_run`), new
    ones added in start order. Entries that are no run's (a delete, an erasure, a title...), or more
    than `RUN_INDEX_CATCH_UP` of them, make it read every run record again.
    """

    def __init__(self) -> None:
        """An index that has read nothing yet."""
        self._seq = -1
        self._keys: dict[str, RunKey] = {}
        self._orders: dict[RunSort, list[RunKey]] = {}
        self._agents: list[str] | None = None
        self._statuses: str | None = None
        self._lock = asyncio.Lock()

    async def ordered(self, log: EventLogBase, sort: RunSort) -> list[RunKey]:
        """Every run's key in the order `sort`, as of the log's last entry (each order kept until
        an entry is appended)."""
        async with self._lock:
            last = await log.last_seq()
            if last != self._seq:
                await self._catch_up(log, last)
                self._orders, self._agents, self._statuses = {}, None, None
            if sort not in self._orders:
                self._orders[sort] = order_runs(list(self._keys.values()), sort)
            return self._orders[sort]

    def agents(self) -> list[str]:
        """Every agent name among the runs `ordered` last returned, sorted."""
        if self._agents is None:
            self._agents = sorted({r.agent_name for r in self._keys.values() if r.agent_name})
        return self._agents

    def statuses(self) -> str:
        """The runs `ordered` last returned, by status (`run_statuses`)."""
        if self._statuses is None:
            self._statuses = run_statuses(list(self._keys.values()))
        return self._statuses

    def forget(self) -> None:
        """Read every run record again on the next call (a run listed here is gone)."""
        self._seq = -1

    async def _catch_up(self, log: EventLogBase, last: int) -> None:
        from eventlog.entries import RUN_KINDS

        if self._seq >= 0:
            heads = await log.entry_heads(after_seq=self._seq, limit=RUN_INDEX_CATCH_UP + 1, payload_limit=0)
            since = [entry for entry, _ in heads]
            if len(since) <= RUN_INDEX_CATCH_UP and all(e.kind in RUN_KINDS and e.run_id for e in since):
                for run_id in dict.fromkeys(e.run_id for e in since if e.run_id):
                    run = await log.get_run(run_id)
                    if run is not None:
                        self._keys[run_id] = RunKey.of(run)
                self._seq = since[-1].seq if since else last
                return
        self._keys = {r.run_id: RunKey.of(r) for r in await log.list_runs()}
        self._seq = last


def order_runs(keys: list[RunKey], sort: RunSort) -> list[RunKey]:
    """`keys` in the order `sort` names; unfinished runs have no duration and come last in
    either duration order."""
    if sort in ('start', '-start'):
        # The log lists runs in the order of their first entries, which their start times follow
        # unless entries were given times of their own (imported): sorted by time all the same.
        return sorted(keys, key=lambda r: (r.started_at, r.start_seq), reverse=sort == '-start')
    sign = -1 if sort == '-duration' else 1
    timed = sorted((r for r in keys if r.seconds is not None), key=lambda r: sign * (r.seconds or 0.0))
    return timed + [r for r in keys if r.seconds is None]


async def runs_page(log: EventLogBase, query: RunsQuery, index: RunIndex | None = None) -> RunsPage:
    """A page of the runs matching `query`, across conversations (or of one).

    Reads run records only, never entries: of one conversation through its index of runs, across
    conversations through `index` (which keeps them between requests; without one, every run
    record is read). The page's own runs are read again, so that what it shows is current.
    Unfinished runs have no duration: they come last in either duration order.
    """
    status = None if query.status is None else run_status_filter(query.status)
    whole = index if query.conversation_id is None else None
    if whole is not None:
        every = await whole.ordered(log, query.sort)
        agents = whole.agents()
    else:
        every = [RunKey.of(r) for r in await log.list_runs(conversation_id=query.conversation_id)]
        every = order_runs(every, query.sort)
        agents = sorted({r.agent_name for r in every if r.agent_name})
    unfiltered = status is None and query.agent is None and query.since is None and query.until is None
    found = (
        every
        if unfiltered
        else [
            r
            for r in every
            if (status is None or r.status == status)
            and (query.agent is None or r.agent_name == query.agent)
            and (query.since is None or r.started_at >= query.since)
            and (query.until is None or r.started_at < query.until)
        ]
    )
    statuses = whole.statuses() if whole is not None and unfiltered else run_statuses(found)
    shown: list[RunRecord] = []
    for key in found[(query.page - 1) * RUNS_PAGE : query.page * RUNS_PAGE]:
        run = await log.get_run(key.run_id)
        if run is not None:
            shown.append(run)
        elif index is not None:
            index.forget()
    short = ShortIds(log, uniform=True)
    await short.learn('run', [i for r in shown for i in (r.run_id, r.parent_run_id)])
    await short.learn('conversation', (r.conversation_id for r in shown))
    return RunsPage(
        query=query,
        runs=shown,
        matched=len(found),
        statuses=statuses,
        agents=agents,
        short=short,
    )


# --- verify findings on the pages they concern ------------------------------------------------


@dataclass
class RunFindings:
    """The `verify` findings a run's or an entry's page shows."""

    own: list[VerifyProblem]
    """The findings about the run's entries (or about the entry itself)."""
    others: int
    """How many other findings its conversation has (listed on the conversation's page)."""


def conversation_findings(report: VerifyReport, conversation_id: str) -> list[VerifyProblem]:
    """The findings about a conversation, in the report's order."""
    return [p for p in report.problems if p.conversation_id == conversation_id]


async def run_findings(log: EventLogBase, report: VerifyReport, run: RunRecord) -> RunFindings:
    """The findings about `run`: those naming an entry between its first and its last entry that
    is not another run's (an entry too damaged to be read counts as the run's)."""
    mine = conversation_findings(report, run.conversation_id)
    own: list[VerifyProblem] = []
    for problem in mine:
        if not run.start_seq <= problem.seq <= run.last_seq:
            continue
        try:
            entry = await log.get_entry(problem.seq)
        except EventLogError:
            entry = None
        if entry is None or entry.run_id in (None, run.run_id):
            own.append(problem)
    return RunFindings(own=own, others=len(mine) - len(own))


def entry_findings(report: VerifyReport, entry: Entry) -> RunFindings:
    """The findings about `entry` (naming its number), and how many others its conversation has."""
    mine = conversation_findings(report, entry.conversation_id)
    own = [p for p in mine if p.seq == entry.seq]
    return RunFindings(own=own, others=len(mine) - len(own))
