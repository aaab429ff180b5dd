"""The web viewer's ASGI application: read-only pages over one open store (docs/web.md).

Pages (every one a GET; nothing else is routed, so no request can change the store):

| path | page |
|---|---|
| `/` | conversations, most recently active first (`?page=`, `?archived=1`) |
| `/c/{id}` | a conversation's transcript (`?after=SEQ`, `?at=SEQ`), its context framed beside it |
| `/context/{id}` | the context view: what an agent continuing it starts from (`?ctx=N`) |
| `/r/{id}` | a run's replay as a timeline (`?after=SEQ`) |
| `/e/{seq}` | one entry: the stable URL to cite (`/e/{seq}/payload`, `/e/{seq}/file/{n}`) |
| `/search` | ranked search through the persistent index (`?q=`, `?c=`, `?page=`) |
| `/stats` | the store's totals, the `verify` report, the signed checkpoints |

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

from eventlog._threads import to_thread
from eventlog.entries import VerifyReport
from eventlog.errors import EventLogError, InvalidArgumentError
from eventlog_cli._store import StoreLog
from eventlog_cli._text import clean, size, timestamp, tokens
from eventlog_cli._views import CliError, read_stats, read_verify, stats_rows, verify_ok_line
from eventlog_cli.web import reads
from eventlog_cli.web.messages import binary_item, part_body, pretty_json

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
    _lock: threading.Lock = field(default_factory=threading.Lock)

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
        )

    async def transcript(self, request: Request) -> Response:
        log = self.viewer.log
        conversation_id = request.path_params['conversation_id']
        record = await self._conversation(conversation_id)
        after = _int_param(request, 'after', 0)
        at = request.query_params.get('at')
        if at is not None:
            after = max(0, _int_param(request, 'at', 1, 1) - 1)
        page = await reads.transcript_page(log, conversation_id, after)
        origin = await log.history_origin(conversation_id)
        runs = await log.list_runs(conversation_id=conversation_id)
        return self.render(
            'transcript.html',
            title=f'Conversation {conversation_id}',
            record=record,
            page=page,
            origin=origin,
            runs=runs,
            statuses=reads.run_statuses(runs),
        )

    async def context(self, request: Request) -> Response:
        """The context view, framed beside the transcript: planning it walks the whole branch, so
        the transcript's page does not wait for it."""
        log = self.viewer.log
        conversation_id = request.path_params['conversation_id']
        record = await self._conversation(conversation_id)
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
            raise _NotFound(f'no run {run_id!r} in this store')
        after = _int_param(request, 'after', 0)
        page = await reads.run_page(log, record, after)
        return self.render(
            'run.html',
            title=f'Run {run_id}',
            run=record,
            page=page,
            children=await reads.child_runs(log, record),
        )

    async def _entry(self, request: Request) -> Any:
        seq = request.path_params['seq']
        entry = await self.viewer.log.get_entry(seq) if seq > 0 else None
        if entry is None:
            raise _NotFound(f'no entry #{seq} in this store')
        return entry

    async def entry(self, request: Request) -> Response:
        entry = await self._entry(request)
        view = reads.entry_view(entry)
        run = await self.viewer.log.get_run(entry.run_id) if entry.run_id else None
        if run is not None and entry.run_id is not None:
            view.offset_ms = (entry.timestamp - run.started_at).total_seconds() * 1000
        return self.render('entry.html', title=f'Entry #{entry.seq}', view=view, entry=entry, run=run)

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
