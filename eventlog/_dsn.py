"""The passwords a PostgreSQL connection string holds, found without parsing it strictly.

Messages about a store quote parts of its connection string (libpq's parse errors quote it
whole); `hide_secrets` takes every password of the string out of such a message, even when the
string is malformed (an unclosed `[`, a bad port) and no URL parser accepts it. It imports
nothing from psycopg, so the command line can use it before opening anything.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ['HIDDEN', 'dsn_secrets', 'hide_secrets']

HIDDEN = '***'
"""What stands in a message where a password was."""

_USERINFO = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)@')
_QUERY_PASSWORD = re.compile(r'[?&]password=([^&#]*)', re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def dsn_secrets(dsn: str) -> list[str]:
    """Every password `dsn` holds (a URL's userinfo or `password=` parameter, a keyword string's
    `password=`), as written and decoded, longest first; empty when it holds none."""
    found: list[str] = []
    userinfo = _USERINFO.match(dsn.strip())
    if userinfo is not None:
        # The password runs from the first `:` to the last `@` before the host (the host part
        # itself cannot hold an `@`): a malformed host does not hide it.
        _, colon, password = userinfo.group(1).partition(':')
        if colon:
            found.append(password)
    found += _QUERY_PASSWORD.findall(dsn)
    for value in _KEYWORD_PASSWORD.findall(dsn):
        found.append(value)
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            found.append(re.sub(r'\\(.)', r'\1', value[1:-1]))
    found += [unquote(value) for value in found]
    return sorted({value for value in found if value}, key=len, reverse=True)


def hide_secrets(text: str, dsn: str) -> str:
    """`text` with every password of `dsn` replaced by `***` (see `dsn_secrets`)."""
    for secret in dsn_secrets(dsn):
        text = text.replace(secret, HIDDEN)
    return text
