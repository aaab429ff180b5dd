"""Where a command's store is: an LMDB directory, or a PostgreSQL schema named by a URL.

`--store` (and `$EVENTLOG_STORE`) takes either a path or a `postgresql://` (or `postgres://`)
URL. The schema holding the log goes in the URL's fragment, after `#`
(`postgresql://user@host/db#myschema`); without one it is `eventlog`, the library's default. The
fragment is the command line's own notation and is never sent to the server (libpq has no
`schema` parameter); a `#` inside a password is written `%23`, as in any URL.

Reading commands never create a store: a path that holds none, or a schema without an event
log in it, is refused with one line (`no store at ...`); `import` creates one. They never change
one either: a reading command opens the store read-only, so that it finishes no pending scrub,
runs no projection maintainer, migrates no older format and persists no search index
(`open_store`'s `writes`).

A store this process cannot write (read-only media or mount, a directory or files of another
user, a database role with only SELECT) is opened read-only: every reading command works, and a
writing one fails with one line naming why the store is read-only. `--read-only` (which sets
`$EVENTLOG_READ_ONLY=1`) opens every store read-only even where it could be written. Whatever is shown
of a URL (messages, `stats`) leaves its password out (`redact_dsn`). psycopg is imported only
when a URL is opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import parse_qsl, urlsplit

from eventlog._dsn import hide_secrets
from eventlog.errors import EncryptionSetupError, EventLogError, InvalidArgumentError, StoreLocationError

if TYPE_CHECKING:
    from eventlog.encryption import FileKeyProvider
    from eventlog.lmdb_log import LmdbEventLog
    from eventlog.postgres_log import PostgresEventLog

__all__ = [
    'DEFAULT_SCHEMA',
    'KEYS_ENV',
    'READ_ONLY_ENV',
    'PostgresStore',
    'StoreLocation',
    'StoreLog',
    'describe',
    'drop_schema',
    'is_postgres',
    'keys_wanted',
    'open_store',
    'parse_store',
    'read_only_wanted',
    'redacted',
    'store_exists',
]

DEFAULT_SCHEMA = 'eventlog'
"""The schema used when a PostgreSQL URL names none after `#` (`PostgresEventLog`'s default)."""

KEYS_ENV = 'EVENTLOG_KEYS'
"""The environment variable naming the keyring of an encrypted store (`--keys` sets it; docs/encryption.md)."""

READ_ONLY_ENV = 'EVENTLOG_READ_ONLY'
"""The environment variable that opens every store read-only when set to `1` (`--read-only` sets it)."""

_SCHEMES = ('postgresql://', 'postgres://')
_FRAGMENT = re.compile(r'#([^#/@?]*)$')


@dataclass(frozen=True)
class PostgresStore:
    """A PostgreSQL store: the connection string (without the `#schema` fragment) and the schema."""

    dsn: str
    schema: str

    def __str__(self) -> str:
        return describe(self)


StoreLocation: TypeAlias = 'Path | PostgresStore'
"""A store as `--store` names it: a directory, or a schema in a PostgreSQL database."""

StoreLog: TypeAlias = 'LmdbEventLog | PostgresEventLog'
"""An open store, as the commands use it."""


def is_postgres(text: str | Path) -> bool:
    """Whether `text` names a PostgreSQL store (a `postgresql://` or `postgres://` URL)."""
    return isinstance(text, str) and text.lower().startswith(_SCHEMES)


def parse_store(text: str | Path) -> StoreLocation:
    """The store `text` names: a `PostgresStore` for a URL (schema from its `#` fragment, else
    `DEFAULT_SCHEMA`), else a path. `InvalidArgumentError` for a fragment that is not a schema
    name, or a `schema=` query parameter (libpq would reject it)."""
    if not isinstance(text, str) or not is_postgres(text):
        return Path(text)
    dsn, schema = text, DEFAULT_SCHEMA
    found = _FRAGMENT.search(text)
    if found is not None:
        dsn, schema = text[: found.start()], found.group(1)
        if not schema:
            raise InvalidArgumentError('the store URL ends in an empty #schema; name the schema after # or drop the #')
    try:
        query = urlsplit(dsn).query
    except ValueError as exc:  # an unclosed `[` of an IPv6 host
        raise InvalidArgumentError(f'not a PostgreSQL connection string: {exc} in {_rough(text)}') from None
    if any(key == 'schema' for key, _ in parse_qsl(query)):
        raise InvalidArgumentError(
            'name the schema after # at the end of the store URL (postgresql://host/db#schema); '
            '?schema= is not a PostgreSQL connection parameter'
        )
    return PostgresStore(dsn, schema)


def describe(store: StoreLocation | str) -> str:
    """How messages name `store`: a path as given, a URL without its password and with its `#schema`.

    Every message, page and listing that names a store names it through this function (or
    `redacted`, which it calls for a URL that does not parse)."""
    if isinstance(store, str):
        try:
            store = parse_store(store)
        except InvalidArgumentError:
            return redacted(store)
    if isinstance(store, Path):  # a libpq keyword string is not a store URL, but may hold a password
        return hide_secrets(str(store), str(store))
    from eventlog.postgres_log import redact_dsn

    return f'{redact_dsn(store.dsn)}#{store.schema}'


def redacted(text: str) -> str:
    """`text` (a store as the user typed it) with any password of a URL left out; never raises."""
    if not is_postgres(text):
        return hide_secrets(text, text)
    try:
        return describe(parse_store(text))
    except Exception:  # an unparsable URL, or psycopg missing
        return _rough(text)


def _rough(url: str) -> str:
    """A URL that does not parse, named by its scheme and host part only (never its password)."""
    scheme, _, rest = url.partition('://')
    host = rest.rpartition('@')[2].split('/', 1)[0].split('?', 1)[0].split('#', 1)[0]
    return hide_secrets(f'{scheme}://{host}/...', url)


def _scrub(message: str, store: PostgresStore) -> str:
    """`message` with any password of `store` replaced by `***` (libpq may quote a bad token)."""
    return hide_secrets(message, store.dsn)


def read_only_wanted() -> bool | None:
    """`True` when `$EVENTLOG_READ_ONLY` asks for read-only stores (`1`, `true`, `yes`, `on`), else
    `None`: read-only only where the store cannot be written. `InvalidArgumentError` for another value."""
    raw = os.environ.get(READ_ONLY_ENV, '').strip().lower()
    if raw in ('1', 'true', 'yes', 'on'):
        return True
    if raw in ('', '0', 'false', 'no', 'off'):
        return None
    raise InvalidArgumentError(f'{READ_ONLY_ENV} must be 1 (open stores read-only) or 0, not {raw[:20]!r}')


def keys_wanted() -> FileKeyProvider | None:
    """The keyring `$EVENTLOG_KEYS` names (`--keys`), or `None`."""
    path = os.environ.get(KEYS_ENV, '').strip()
    if not path:
        return None
    from eventlog.encryption import FileKeyProvider

    return FileKeyProvider(path)


def _postgres(
    store: PostgresStore, *, create: bool, read_only: bool | None = None, keys: FileKeyProvider | None = None
) -> PostgresEventLog:
    """Open the PostgreSQL store; a missing schema is `StoreLocationError` (`no store at ...`)
    unless `create`; every message leaves the password out."""
    try:
        from eventlog.postgres_log import PostgresEventLog
    except ImportError as exc:
        raise StoreLocationError(
            "a PostgreSQL store needs the extra 'postgres' "
            f"(in a clone of this repository: pip install '.[postgres]') ({exc})"
        ) from None
    try:
        return PostgresEventLog(
            store.dsn, schema=store.schema, create=create, pool_size=2, read_only=read_only, keys=keys
        )
    except StoreLocationError as exc:
        if create or 'holds no event log' not in str(exc):
            raise StoreLocationError(_scrub(str(exc), store)) from None
        raise StoreLocationError(
            f'no store at {describe(store)} (no schema {store.schema!r} with an event log in that database)'
        ) from None
    except EventLogError as exc:
        raise type(exc)(_scrub(str(exc), store)) from None


def _check_directory(store: Path) -> None:
    """Refuse a path that holds no store, so that reading never creates one by accident."""
    if not store.exists():
        raise StoreLocationError(f'no store at {describe(store)} (pass --store PATH or set EVENTLOG_STORE)')
    if store.is_dir() and not (store / 'data.mdb').exists():
        raise StoreLocationError(f'{describe(store)} is not an eventlog store (it holds no data.mdb)')


@asynccontextmanager
async def open_store(
    store: StoreLocation | str,
    *,
    create: bool = False,
    read_only: bool | None = None,
    with_keys: bool = True,
    writes: bool = False,
) -> AsyncGenerator[StoreLog]:
    """The store `store` names, closed afterwards; unless `create`, refuse one that does not exist yet.

    `writes`: whether the command writes the store. A reading one (the default) always opens it
    read-only, whatever `read_only` says: an auditor's `verify`, `show` or `search` of a store
    someone handed them changes nothing in it and runs none of its maintenance (a pending scrub
    stays pending, an older format is read as it is where it can be, the search indexes in memory
    what the store's index lacks). `create` implies `writes`.

    For a writing command, `read_only`: `True` opens it read-only; `None` (the default) does so
    when `$EVENTLOG_READ_ONLY` asks (`read_only_wanted`) or when this process cannot write the
    store, so that it refuses a write-protected store with one line (`ReadOnlyStoreError`, naming
    why); `False` opens it for writing or fails.

    The keyring `$EVENTLOG_KEYS` names (`--keys`) opens an encrypted store; without one, an
    encrypted store is opened read-only (its records and `verify` need no key). `with_keys=False`
    opens the store as plain whatever `$EVENTLOG_KEYS` says (`eventlog encrypt`)."""
    where = parse_store(store) if isinstance(store, str) else store
    wanted = read_only_wanted()  # checked whatever the command: a bad value is refused
    if not writes and not create:
        read_only = True
    elif read_only is None:
        read_only = wanted
    keys = keys_wanted() if with_keys else None
    try:
        log = _open(where, create=create, read_only=read_only, keys=keys)
    except EncryptionSetupError as exc:
        # An encrypted store named without its keyring: opened read-only, so that reading
        # commands show its records and verify it, and writing ones say why they cannot.
        if keys is not None or read_only is not None or not with_keys or 'is encrypted' not in str(exc):
            raise
        log = _open(where, create=False, read_only=True, keys=None)
        log.read_only_reason = 'it is encrypted and no keyring was given (--keys)'
    try:
        yield log
    finally:
        log.close()


def _open(store: StoreLocation, *, create: bool, read_only: bool | None, keys: FileKeyProvider | None) -> StoreLog:
    if isinstance(store, PostgresStore):
        return _postgres(store, create=create and read_only is not True, read_only=read_only, keys=keys)
    from eventlog.lmdb_log import LmdbEventLog

    if not create or read_only is True:
        _check_directory(store)
    return LmdbEventLog(store, read_only=read_only, keys=keys)


def store_exists(store: StoreLocation) -> bool:
    """Whether `store` holds an event log already (a schema with one; a path that exists)."""
    if isinstance(store, Path):
        return store.exists()
    try:
        log = _postgres(store, create=False)
    except StoreLocationError:
        return False
    log.close()
    return True


def drop_schema(store: PostgresStore) -> None:
    """Drop the schema of `store` and everything in it (used only for one this command created
    and left empty); errors are left unreported, as removing an empty LMDB directory's are."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(store.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL('DROP SCHEMA IF EXISTS {} CASCADE').format(sql.Identifier(store.schema)))
    except psycopg.Error:
        pass
