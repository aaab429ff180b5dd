"""Serving the viewer: open the store, listen, print the URL, serve until interrupted.

The viewer listens on 127.0.0.1 by default, where it takes no token but answers only requests
whose `Host` is a loopback name (a web page elsewhere cannot reach it by DNS rebinding).
Listening on any other address requires a token: the one given with `--token`, or a fresh random
one, printed in the URL. The socket is bound before anything is printed, so a port in use is one
clear error rather than a server that never starts.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
from collections.abc import Callable

from eventlog.errors import InvalidArgumentError, MissingExtraError
from eventlog_cli._store import describe, open_store

__all__ = ['LOOPBACK_HOSTS', 'MIN_TOKEN_LENGTH', 'is_loopback', 'serve', 'viewer_url']

MIN_TOKEN_LENGTH = 16
"""A shorter `--token` is served with a warning (the random one has 32 characters)."""

LOOPBACK_HOSTS = frozenset({'localhost', '127.0.0.1', '[::1]'})
"""The `Host` names a viewer without a token answers (with any port)."""


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`): reachable from this machine only."""
    if host.lower() == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        return False


def viewer_url(host: str, port: int, token: str | None) -> str:
    """The URL to open: with the token in its query when there is one (the page then keeps it in a cookie)."""
    shown = f'[{host}]' if ':' in host and not host.startswith('[') else host
    return f'http://{shown}:{port}/' + (f'?token={token}' if token else '')


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port`; `InvalidArgumentError` when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host.strip('[]'), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidArgumentError(f'cannot listen on {host!r}: {exc.strerror}') from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidArgumentError(f'cannot listen on {host}:{port}: {exc.strerror or exc}') from None
    sock.setblocking(False)
    return sock


async def serve(
    store: str, *, host: str = '127.0.0.1', port: int = 8765, token: str | None = None, announce: Callable[[str], None]
) -> None:
    """Serve the viewer of `store` on `host:port` until interrupted (Ctrl-C), calling `announce`
    with one line naming the URL once it listens.

    Off loopback without `token`, a random token is made. Raises `StoreLocationError` for a
    missing store, `InvalidArgumentError` for an address that cannot be listened on or an
    empty token, `MissingExtraError` without the `web` extra.
    """
    try:
        import uvicorn

        from eventlog_cli.web.app import create_app
    except ImportError as exc:
        raise MissingExtraError(
            f"eventlog serve needs the extra 'web' (in a clone of this repository: pip install '.[web]') ({exc})"
        ) from None
    if token is not None and not token.strip():
        raise InvalidArgumentError('--token must not be empty')
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        sys.stderr.write(
            f'eventlog: warning: a --token of {len(token)} characters can be guessed; use {MIN_TOKEN_LENGTH} or '
            'more, or leave --token out for a random one\n'
        )
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
    async with open_store(store) as log:
        sock = _bind(host, port)
        try:
            bound = sock.getsockname()[1]
            hosts = None if token is not None else LOOPBACK_HOSTS | {host.lower()}
            app = create_app(log, store=describe(store), token=token, allowed_hosts=hosts)
            config = uvicorn.Config(app, log_level='warning', access_log=False, lifespan='off')
            server = uvicorn.Server(config)
            announce(f'serving {describe(store)} read-only at {viewer_url(host, bound, token)} (Ctrl-C stops)')
            await server.serve(sockets=[sock])
        finally:
            sock.close()
