"""The web viewer's ASGI application: read-only pages over one open store (docs/web.md).

Pages (every one a GET; nothing else is routed, so no request can change the store):

| path | page |
|---|---|
| `/` | conversations, most recently active first (`?page=`, `?archived=1`) |
| `/runs` | runs across conversations (`?status=`, `?agent=`, `?c=`, `?from=`, `?to=`, `?sort=`, `?page=`) |
| `/c/{id}` | a conversation's transcript (`?after=SEQ`, `?at=SEQ`), its context framed beside it |
| `/context/{id}` | the context view: what an agent continuing it starts from (`?ctx=N`) |
| `/r/{id}` | a run's replay as a timeline (`?after=SEQ`) |
| `/e/{seq}` | one entry: the stable URL to cite (`/e/{seq}/payload`, `/e/{seq}/file/{n}`) |
| `/search` | ranked search through the persistent index (`?q=`, `?c=`, `?page=`) |
| `/stats` | the store's totals, the `verify` report, the signed checkpoints |

A conversation or run id in a path may be given as any unique prefix (of at least four
characters), as the command line takes it: the viewer redirects to the full id's page, lists the
ids an ambiguous prefix starts, and answers 404 for one that starts none.

Safety: every stored string reaches the page through Jinja's autoescaping, control characters
shown as escapes (`\\x1b`); the Content-Security-Policy allows no script at all, and styles
and frames only from the viewer itself. With a token, every request must carry it (`?token=`,
which sets a cookie and redirects to the URL without it, the cookie, or `Authorization:
Bearer`); otherwise 401.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from http.cookies import SimpleCookie
from pathlib import Path
from time import monotonic
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from eventlog._ids import IdKind
from eventlog._threads import to_thread
from eventlog.entries import VerifyReport
from eventlog.errors import EventLogError, InvalidArgumentError
from eventlog_cli._ids import matches, resolve_conversation
from eventlog_cli._render import duration
from eventlog_cli._store import StoreLog
from eventlog_cli._text import clean, clip, size, timestamp, tokens
from eventlog_cli._views import RUN_STATUS_FILTERS, CliError, read_stats, read_verify, stats_rows, verify_ok_line
from eventlog_cli.entries import InstructionsShown
from eventlog_cli.outline import Outline, conversation_outline, fork_mark
from eventlog_cli.web import reads
from eventlog_cli.web.messages import PAYLOAD_LIMIT, binary_item, part_body, pretty_json

__all__ = ['CONTENT_SECURITY_POLICY', 'TOKEN_COOKIE', 'VERIFY_INTERVAL', 'Viewer', 'create_app']

_HERE = Path(__file__).parent

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; frame-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'self'"
)
"""Sent with every response: no script runs, whatever a page holds; styles, images and frames only
from the viewer itself (the transcript frames its context view), and no other site may frame it."""

TOKEN_COOKIE = 'eventlog_token'
"""The cookie that carries the token once a `?token=` URL has been opened."""

_HEADERS = {
    'content-security-policy': CONTENT_SECURITY_POLICY,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'x-frame-options': 'SAMEORIGIN',
    'cache-control': 'no-store',
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class _NotFound(Exception):
    """A page for something the store does not hold (404)."""


Verified = tuple[int, VerifyReport, int, int]
"""A `verify` run: the last entry number when it began, the report, live conversations, tombstones."""


VERIFY_INTERVAL = 60.0
"""Least seconds between the starts of two background `verify` runs of one viewer."""

OUTLINES = 64
"""Conversations whose outlines a viewer keeps between requests."""


@dataclass
class Viewer:
    """What the pages share: the open store, how to name it, and the latest `verify` report.

    `verify` walks the whole store, so it runs in a thread of its own, at most one at a time and
    at most one start per `verify_interval` seconds, however many requests arrive: pages show
    the latest report (naming the entry it covers) and start a new run only when entries were
    appended since and the interval has passed. Only the first report is waited for.
    """

    log: StoreLog
    """The store, open for the viewer's lifetime (closed by whoever opened it)."""
    store: str
    """How the pages name the store (a path, or a URL without its password)."""
    verify_interval: float = VERIFY_INTERVAL
    """Least seconds between two starts of `verify` (0: whenever entries were appended)."""
    verify_runs: int = 0
    """How many `verify` runs this viewer started."""
    _verified: Verified | None = None
    _running: threading.Event | None = None
    _started: float | None = None
    _error: Exception | None = None
    runs: reads.RunIndex = field(default_factory=reads.RunIndex)
    """Every run's key, kept between requests for the runs page."""
    outlines: dict[str, tuple[int, Outline]] = field(default_factory=dict[str, tuple[int, Outline]])
    """The latest conversations' outlines (`outline`), each with the conversation's last entry then."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def outline(self, conversation_id: str) -> Outline:
        """The conversation's outline (`eventlog_cli.outline`): kept until the conversation gains an
        entry, for the `OUTLINES` conversations opened last, since it takes a few reads per run."""
        record = await self.log.get_conversation(conversation_id)
        last = -1 if record is None else record.last_seq
        kept = self.outlines.pop(conversation_id, None)
        if kept is None or kept[0] != last:
            kept = (last, await conversation_outline(self.log, conversation_id))
        self.outlines[conversation_id] = kept
        while len(self.outlines) > OUTLINES:
            del self.outlines[next(iter(self.outlines))]
        return kept[1]

    @property
    def checking(self) -> bool:
        """Whether a `verify` run is under way."""
        with self._lock:
            return self._running is not None

    def latest_verify(self) -> Verified | None:
        """The report of the last `verify` that finished, if any."""
        with self._lock:
            return self._verified

    def start_verify(self, last_seq: int) -> threading.Event:
        """Start a `verify` unless one is running, the latest covers `last_seq`, or the last one
        started less than `verify_interval` seconds ago; the event is set once a report is there
        (at once when none is started and one exists)."""
        with self._lock:
            if self._running is not None:
                return self._running
            covered = self._verified is not None and self._verified[0] >= last_seq
            recent = self._started is not None and monotonic() - self._started < self.verify_interval
            if self._started is not None and (covered or recent):
                done = threading.Event()
                done.set()
                return done
            done = self._running = threading.Event()
            self._started = monotonic()
            self.verify_runs += 1
        threading.Thread(target=self._verify, args=(done,), name='eventlog-web-verify', daemon=True).start()
        return done

    def _verify(self, done: threading.Event) -> None:
        async def work() -> Verified:
            last = await self.log.last_seq()
            report, live, tombstones = await read_verify(self.log)
            return last, report, live, tombstones

        try:
            found = asyncio.run(work())
            with self._lock:
                self._verified, self._error = found, None
        except Exception as exc:  # reported by the page that waits for it
            with self._lock:
                self._error = exc
        finally:
            with self._lock:
                self._running = None
            done.set()

    async def verify(self) -> Verified:
        """The latest `verify` report: the first one is waited for, later ones are started in the
        background (see `start_verify`) and the latest finished one returned meanwhile."""
        last = await self.log.last_seq()
        await to_thread(self.start_verify(last).wait)
        found = self.latest_verify()
        if found is not None:
            return found
        with self._lock:
            error = self._error
        raise EventLogError(f'verify could not finish: {error}')


def _visible(value: object) -> str:
    """Stored text with control characters, bidi controls and lone surrogates shown as escapes."""
    return clean('' if value is None else value, multiline=True)


def _one_line(value: object) -> str:
    """A one-line field (an id, a title) with every control character shown as an escape."""
    return clean('' if value is None else value)


def _id_url(value: object) -> str:
    """An id as one path segment: every character but letters, digits and `-._~` percent-encoded
    (a `/` too, so that no client or proxy can fold `..` segments), decoded once by the server."""
    return quote('' if value is None else str(value), safe='')


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_HERE / 'templates'),
        autoescape=select_autoescape(['html'], default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters['visible'] = _visible
    env.filters['one_line'] = _one_line
    env.filters['id_url'] = _id_url
    env.filters['ts'] = timestamp
    env.filters['size'] = size
    env.filters['tokens'] = tokens
    env.filters['json'] = pretty_json
    env.filters['duration'] = duration  # pyright: ignore[reportArgumentType]
    env.filters['clip'] = clip  # pyright: ignore[reportArgumentType]
    env.globals['part_body'] = part_body  # pyright: ignore[reportArgumentType]
    env.globals['page_size'] = reads.PAGE  # pyright: ignore[reportArgumentType]
    return env


def _int_param(request: Request, name: str, default: int, minimum: int = 0) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == '':
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f'{name} must be a whole number, got {raw!r}') from None
    if value < minimum:
        raise InvalidArgumentError(f'{name} must be at least {minimum}, got {value}')
    return value


_AMBIGUOUS_SHOWN = 50
"""Ids an ambiguous prefix's page lists at most."""


def _str_param(request: Request, name: str) -> str | None:
    """A query parameter, `None` when missing or blank."""
    raw = request.query_params.get(name, '').strip()
    return raw or None


def _time_param(request: Request, name: str, *, end: bool = False) -> datetime | None:
    """A time of a query: an ISO date or date and time (`2026-12-02`, `2026-12-02T04:20`,
    `2026-12-02 04:20:05+01:00`), UTC unless it names its offset. A date alone is the start of
    that day, or with `end` the start of the next one (so that `to=DAY` takes the whole day)."""
    raw = _str_param(request, name)
    if raw is None:
        return None
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return moment + timedelta(days=1) if end else moment
        moment = datetime.fromisoformat(raw)
    except (ValueError, OverflowError):
        raise InvalidArgumentError(
            f'{name} must be a date or a date and time such as 2026-12-02 or 2026-12-02T04:20, got {raw!r}'
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    """A query parameter that must be one of `choices` (`None` when missing or blank)."""
    raw = _str_param(request, name)
    if raw is not None and raw not in choices:
        raise InvalidArgumentError(f'{name} must be one of {", ".join(choices)}, got {raw!r}')
    return raw


def _url(path: str, **params: object) -> str:
    """`path` with the query `params` that are not `None`."""
    given = {k: str(v) for k, v in params.items() if v is not None}
    return path + ('?' + urlencode(given) if given else '')


class _Pages:
    """The route handlers over one `Viewer`."""

    def __init__(self, viewer: Viewer) -> None:
        self.viewer = viewer
        self.env = _environment()
        self.env.globals['url'] = _url  # pyright: ignore[reportArgumentType]
        self.env.globals['store'] = viewer.store  # pyright: ignore[reportArgumentType]

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(template).render(**context), status_code=status)

    async def _conversation(self, conversation_id: str) -> Any:
        record = await self.viewer.log.get_conversation(conversation_id)
        if record is None:
            raise _NotFound(f'no conversation {conversation_id!r} in this store')
        return record

    async def _by_prefix(self, request: Request, kind: IdKind, text: str, base: str) -> Response:
        """The answer for a path naming no id of `kind` exactly: a redirect to the one id `text`
        is a prefix of (by the command line's rule, `eventlog_cli._ids.matches`), a page listing
        the ids it starts when several, else 404."""
        found = await matches(self.viewer.log, kind, text, limit=_AMBIGUOUS_SHOWN + 1)
        query = request.url.query
        if len(found) == 1 and found[0] != text:
            return RedirectResponse(base + _id_url(found[0]) + ('?' + query if query else ''), status_code=303)
        if len(found) > 1:
            return self.render(
                'ambiguous.html',
                status=300,
                title=f'Ambiguous {kind} id prefix {text}',
                kind=kind,
                prefix=text,
                base=base,
                found=found[:_AMBIGUOUS_SHOWN],
                more=len(found) > _AMBIGUOUS_SHOWN,
            )
        raise _NotFound(f'no {kind} {text!r} in this store, and no {kind} id starts with it')

    def _findings(self, last_seq: int) -> Verified | None:
        """The latest `verify` report (starting a new run when one is due), `None` before the first."""
        self.viewer.start_verify(last_seq)
        return self.viewer.latest_verify()

    async def runs(self, request: Request) -> Response:
        """Runs across conversations, filtered, ordered and paged (`reads.runs_page`)."""
        log = self.viewer.log
        status = _choice_param(request, 'status', RUN_STATUS_FILTERS)
        sort = _choice_param(request, 'sort', reads.RUN_SORTS) or reads.RUN_SORTS[0]
        since = _time_param(request, 'from')
        until = _time_param(request, 'to', end=True)
        if since is not None and until is not None and until <= since:
            raise InvalidArgumentError('to must be later than from')
        conversation = _str_param(request, 'c')
        if conversation is not None:
            conversation = await resolve_conversation(log, conversation)
            await self._conversation(conversation)
        query = reads.RunsQuery(
            status=status,
            agent=_str_param(request, 'agent'),
            conversation_id=conversation,
            since=since,
            until=until,
            sort=_run_sort(sort),
            page=_int_param(request, 'page', 1, 1),
        )
        found = await reads.runs_page(log, query, self.viewer.runs)
        params = {
            'status': status,
            'agent': query.agent,
            'c': conversation,
            'from': _str_param(request, 'from'),
            'to': _str_param(request, 'to'),
        }
        return self.render(
            'runs.html',
            title='Runs',
            found=found,
            params=params,
            sort=sort,
            sorts=reads.RUN_SORTS,
            statuses=RUN_STATUS_FILTERS,
        )

    async def conversations(self, request: Request) -> Response:
        log = self.viewer.log
        archived = request.query_params.get('archived') == '1'
        page = _int_param(request, 'page', 1, 1)
        records = await log.list_conversations(include_archived=archived)
        records.sort(key=reads.conversation_sort_key, reverse=True)
        shown = records[(page - 1) * reads.CONVERSATION_PAGE : page * reads.CONVERSATION_PAGE]
        last = await log.last_seq()
        self.viewer.start_verify(last)
        verified = self.viewer.latest_verify()
        problems = {} if verified is None else reads.verify_by_conversation(verified[1])
        store_wide = [] if verified is None else [p for p in verified[1].problems if not p.conversation_id]
        rows = [(c, problems.get(c.conversation_id)) for c in shown]
        return self.render(
            'conversations.html',
            title='Conversations',
            rows=rows,
            archived=archived,
            page=page,
            total=len(records),
            more=page * reads.CONVERSATION_PAGE < len(records),
            store_wide=store_wide,
            verified_at=None if verified is None else verified[0],
            last_seq=last,
            checking=self.viewer.checking,
        )

    async def transcript(self, request: Request) -> Response:
        log = self.viewer.log
        conversation_id = request.path_params['conversation_id']
        record = await log.get_conversation(conversation_id)
        if record is None:
            return await self._by_prefix(request, 'conversation', conversation_id, '/c/')
        after = _int_param(request, 'after', 0)
        at = request.query_params.get('at')
        if at is not None:
            after = max(0, _int_param(request, 'at', 1, 1) - 1)
        page = await reads.transcript_page(log, conversation_id, after, await self.viewer.outline(conversation_id))
        origin = await log.history_origin(conversation_id)
        runs = await log.list_runs(conversation_id=conversation_id)
        verified = self._findings(await log.last_seq())
        findings = None if verified is None else reads.conversation_findings(verified[1], conversation_id)
        return self.render(
            'transcript.html',
            title=f'Conversation {conversation_id}',
            record=record,
            page=page,
            fork=fork_mark(record),
            origin=origin,
            runs=runs[-_RECENT_RUNS:][::-1],
            run_total=len(runs),
            statuses=reads.run_statuses(runs),
            verified_at=None if verified is None else verified[0],
            findings=findings,
            damaged={p.seq for p in findings or []},
        )

    async def context(self, request: Request) -> Response:
        """The context view, framed beside the transcript: planning it walks the whole branch, so
        the transcript's page does not wait for it."""
        log = self.viewer.log
        conversation_id = request.path_params['conversation_id']
        record = await log.get_conversation(conversation_id)
        if record is None:
            return await self._by_prefix(request, 'conversation', conversation_id, '/context/')
        start = _int_param(request, 'ctx', 0)
        items, next_start, more = await reads.context_page(log, conversation_id, start)
        return self.render(
            'context.html',
            title=f'Context of {conversation_id}',
            record=record,
            context=items,
            start=start,
            more=more,
            next_start=next_start,
        )

    async def run(self, request: Request) -> Response:
        log = self.viewer.log
        run_id = request.path_params['run_id']
        record = await log.get_run(run_id)
        if record is None:
            return await self._by_prefix(request, 'run', run_id, '/r/')
        after = _int_param(request, 'after', 0)
        page = await reads.run_page(log, record, after)
        outline = await self.viewer.outline(record.conversation_id)
        verified = self._findings(await log.last_seq())
        return self.render(
            'run.html',
            title=f'Run {run_id}',
            run=record,
            page=page,
            branch=outline.branches.get(record.run_id),
            sub_agent=outline.sub_agents.get(record.run_id),
            children=await reads.child_runs(log, record, self.viewer.runs),
            verified_at=None if verified is None else verified[0],
            findings=None if verified is None else await reads.run_findings(log, verified[1], record),
        )

    async def _entry(self, request: Request) -> Any:
        seq = request.path_params['seq']
        entry = await self.viewer.log.get_entry(seq) if seq > 0 else None
        if entry is None:
            raise _NotFound(f'no entry #{seq} in this store')
        return entry

    async def entry(self, request: Request) -> Response:
        seq = request.path_params['seq']
        head = await self.viewer.log.get_entry_head(seq, PAYLOAD_LIMIT) if seq > 0 else None
        if head is None:
            raise _NotFound(f'no entry #{seq} in this store')
        entry, size = await reads.whole_unless_message(self.viewer.log, *head)
        view = reads.entry_view(entry, size)
        if view.message is not None:  # one message alone: its instructions shown whole
            InstructionsShown().show(entry.run_id, view.message, entry.seq)
        run = await self.viewer.log.get_run(entry.run_id) if entry.run_id else None
        if run is not None and entry.run_id is not None:
            view.offset_ms = (entry.timestamp - run.started_at).total_seconds() * 1000
        verified = self._findings(await self.viewer.log.last_seq())
        return self.render(
            'entry.html',
            title=f'Entry #{entry.seq}',
            view=view,
            entry=entry,
            run=run,
            verified_at=None if verified is None else verified[0],
            findings=None if verified is None else reads.entry_findings(verified[1], entry),
        )

    async def payload(self, request: Request) -> Response:
        entry = await self._entry(request)
        return Response(
            bytes(entry.payload),
            media_type='application/json' if entry.payload else 'text/plain',
            headers={'content-disposition': f'inline; filename="entry-{entry.seq}.json"'},
        )

    async def file(self, request: Request) -> Response:
        entry = await self._entry(request)
        index = request.path_params['index']
        found = binary_item(entry, index)
        if found is None:
            raise _NotFound(f'entry #{entry.seq} holds no binary item {index}')
        data, media_type = found
        return Response(
            data,
            media_type=_header_media_type(media_type),
            headers={'content-disposition': f'attachment; filename="entry-{entry.seq}-file-{index}"'},
        )

    async def search(self, request: Request) -> Response:
        query = request.query_params.get('q', '').strip()
        conversation_id = request.query_params.get('c') or None
        page_number = _int_param(request, 'page', 1, 1)
        if conversation_id is not None:
            conversation_id = await resolve_conversation(self.viewer.log, conversation_id)
            await self._conversation(conversation_id)
        result = None
        if query:
            result = await reads.search_page(self.viewer.log, query, conversation_id, page_number)
        return self.render('search.html', title='Search', query=query, conversation_id=conversation_id, result=result)

    async def stats(self, request: Request) -> Response:
        log = self.viewer.log
        data = await read_stats(log, self.viewer.store)
        verified_at, report, live, tombstones = await self.viewer.verify()
        checkpoints = await reads.checkpoint_status(log)
        return self.render(
            'stats.html',
            title='Stats and verify',
            rows=stats_rows(data),
            verified_at=verified_at,
            last_seq=int(data['last_seq']),
            report=report,
            ok_line=verify_ok_line(report, live, tombstones) if report.ok else None,
            checkpoints=checkpoints,
        )


_RECENT_RUNS = 10
"""Runs a conversation's page lists (the latest); the runs page lists them all."""


def _run_sort(name: str) -> reads.RunSort:
    """The order `name` (one of `reads.RUN_SORTS`) names; `InvalidArgumentError` for another."""
    for sort in reads.RUN_SORTS:
        if sort == name:
            return sort
    raise InvalidArgumentError(f'sort must be one of {", ".join(reads.RUN_SORTS)}, got {name!r}')


_MEDIA_TYPE = re.compile(r'[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(;[ -~]*)?')


def _header_media_type(stored: str) -> str:
    """A stored media type as a `Content-Type` value: `type/subtype` with printable parameters, else
    `application/octet-stream` (a CR, LF or NUL in a header would break the response)."""
    return stored if _MEDIA_TYPE.fullmatch(stored) else 'application/octet-stream'


def _local_target(path: str, query: str) -> str:
    """A redirect target on this server: `path` with its leading slashes and backslashes folded into
    one `/` (`//host/` and `/\\host/` would name another site), and `query`."""
    return '/' + path.lstrip('/\\') + ('?' + query if query else '')


def _token_of(scope: Scope) -> tuple[str | None, str | None]:
    """The token a request carries: from its query (`token=`), else its cookie or its bearer header."""
    query = dict(parse_qsl(scope.get('query_string', b'').decode('latin-1')))
    headers = {k.decode('latin-1').lower(): v.decode('latin-1') for k, v in scope.get('headers', [])}
    if 'token' in query:
        return query['token'], 'query'
    auth = headers.get('authorization', '')
    if auth.lower().startswith('bearer '):
        return auth[7:].strip(), 'header'
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get('cookie', ''))
    except Exception:
        return None, None
    morsel = cookie.get(TOKEN_COOKIE)
    return (morsel.value, 'cookie') if morsel is not None else (None, None)


class _Guard:
    """ASGI middleware: the token on every request (401 without it), an allowed `Host`, and the
    security headers on every response."""

    def __init__(self, app: Asgi, token: str | None, hosts: Iterable[str] | None) -> None:
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope['type'] != 'http':
            await self.app(scope, receive, send)
            return
        raw = scope.get('raw_path')
        if isinstance(raw, bytes) and raw:
            # The path decoded exactly once from the bytes the client sent: ids in links are
            # percent-encoded whole (`a%20b` as `a%2520b`), and a server that decoded `path` twice
            # (Starlette's TestClient does) would open another id's page.
            scope = {**scope, 'path': unquote(raw.decode('latin-1'))}

        async def secured(message: Message) -> None:
            if message['type'] == 'http.response.start':
                headers = [(k, v) for k, v in message.get('headers', []) if k.decode().lower() not in _HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
                message['headers'] = headers
            await send(message)

        if self.hosts is not None:
            host = next((v.decode('latin-1') for k, v in scope.get('headers', []) if k == b'host'), '')
            name = host.rsplit(':', 1)[0] if not host.endswith(']') else host
            if name.lower() not in self.hosts:
                await PlainTextResponse('unexpected Host header', status_code=400)(scope, receive, secured)
                return
        if self.token is not None:
            given, source = _token_of(scope)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                response = PlainTextResponse(
                    '401: this viewer needs its token (open the URL `eventlog serve` printed)', status_code=401
                )
                response.headers['www-authenticate'] = 'Bearer'
                await response(scope, receive, secured)
                return
            if source == 'query':
                query = [(k, v) for k, v in parse_qsl(scope.get('query_string', b'').decode()) if k != 'token']
                raw = scope.get('raw_path')
                path = raw.decode('latin-1') if isinstance(raw, bytes) else quote(scope['path'])
                response = RedirectResponse(_local_target(path, urlencode(query)), status_code=303)
                response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite='strict', path='/')
                await response(scope, receive, secured)
                return
        await self.app(scope, receive, secured)


def _preload() -> None:
    """Import what the pages and the verify thread import lazily, and build the messages' validator,
    before any request: two threads importing pydantic-ai at once can see it half initialized."""
    import importlib

    for name in (
        'pydantic_ai.messages',
        'search.engine',
        'search.persistent_index',
        'search.render',
        'eventlog._verify',
        'eventlog.checkpoint',
        'eventlog_cli._index',
        'eventlog_cli._render',
    ):
        importlib.import_module(name)
    # pydantic builds the messages' validator on its first use (a third of the first `verify` of
    # the demo store under cProfile): build it now, before any page waits for it.
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    ModelMessagesTypeAdapter.validate_json(b'[]')


def create_app(
    log: StoreLog, *, store: str, token: str | None = None, allowed_hosts: Iterable[str] | None = None
) -> Asgi:
    """The viewer over the open store `log` (named `store` on its pages).

    With `token`, every request must carry it (else 401). With `allowed_hosts`, a request whose
    `Host` names another host is refused (400): a viewer bound to 127.0.0.1 without a token
    passes only `localhost` names, so that no other web site can reach it through DNS rebinding.
    """
    _preload()
    pages = _Pages(Viewer(log=log, store=store))

    async def failed(request: Request, exc: Exception) -> Response:
        status = 404 if isinstance(exc, _NotFound | CliError) else 400
        return pages.render(
            'error.html', status=status, title='Not found' if status == 404 else 'Bad request', message=str(exc)
        )

    routes = [
        Route('/', pages.conversations),
        Route('/runs', pages.runs),
        # `path`: an id may hold a `/`.
        Route('/c/{conversation_id:path}', pages.transcript),
        Route('/context/{conversation_id:path}', pages.context),
        Route('/r/{run_id:path}', pages.run),
        Route('/e/{seq:int}', pages.entry),
        Route('/e/{seq:int}/payload', pages.payload),
        Route('/e/{seq:int}/file/{index:int}', pages.file),
        Route('/search', pages.search),
        Route('/stats', pages.stats),
        Mount('/static', StaticFiles(directory=_HERE / 'static'), name='static'),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={_NotFound: failed, CliError: failed, EventLogError: failed},
    )
    return _Guard(app, token, allowed_hosts)
