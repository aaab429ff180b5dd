"""`eventlog serve`: a read-only web viewer over a store, for auditors (docs/web.md).

Needs the extra `web` (Starlette, Jinja2, uvicorn; in a clone of this repository: `pip install '.[web]'`).
`create_app` builds the ASGI application over an open store; `serve` opens a store and serves it.
"""

from __future__ import annotations

from eventlog_cli.web.app import CONTENT_SECURITY_POLICY, TOKEN_COOKIE, Viewer, create_app
from eventlog_cli.web.serve import LOOPBACK_HOSTS, is_loopback, serve, viewer_url

__all__ = [
    'CONTENT_SECURITY_POLICY',
    'LOOPBACK_HOSTS',
    'TOKEN_COOKIE',
    'Viewer',
    'create_app',
    'is_loopback',
    'serve',
    'viewer_url',
]
