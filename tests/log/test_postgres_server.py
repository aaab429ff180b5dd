"""The tests' PostgreSQL server starts wherever the clone is, even inside a directory only root can enter.

As root the server runs as the unprivileged `eventlog_pg`, who cannot reach a virtualenv under
/root or any 0700 directory; `tests/pgserver.py` runs it from a copy of the server's files that
user can reach. These tests put the server's files inside a fresh 0700 directory, as a clone under
/root has them, and start a real server from there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgserver import reachable_install, start_server, wheel_install

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='only root runs the server as another user')


@pytest.fixture
def hidden_install() -> Iterator[Path]:
    """A copy of the server's files inside a 0700 directory, as a clone under /root holds them."""
    hidden = Path(tempfile.mkdtemp(prefix='eventlog-hidden-'))
    assert hidden.stat().st_mode & 0o777 == 0o700
    try:
        wheel = wheel_install()
        site = hidden / 'clone' / '.venv' / 'site-packages'
        install = site / wheel.parent.name / wheel.name
        shutil.copytree(wheel, install, symlinks=True)
        libs = wheel.parent.parent / f'{wheel.parent.name}.libs'  # the wheel's shared libraries, if apart
        if libs.is_dir():
            shutil.copytree(libs, site / libs.name, symlinks=True)
        yield install
    finally:
        shutil.rmtree(hidden)


@pytest.fixture
def cache() -> Iterator[Path]:
    """An empty folder for the reachable copy, readable by all as /var/tmp is."""
    folder = Path(tempfile.mkdtemp(prefix='eventlog-cache-', dir='/tmp'))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_the_server_starts_from_files_in_a_directory_its_user_cannot_enter(hidden_install: Path, cache: Path) -> None:
    server = start_server(install=hidden_install, cache=cache)
    try:
        assert server.user is not None
        assert server.bin.is_relative_to(cache)
        with psycopg.connect(server.dsn()) as conn:
            assert conn.execute('SELECT 41 + 1').fetchone() == (42,)
        with pytest.raises(PermissionError):  # where the files are, the server's user cannot run them
            subprocess.run([str(hidden_install / 'bin' / 'initdb'), '--version'], user=server.user, check=False)
    finally:
        server.destroy()
    copy = cache / server.bin.relative_to(cache).parts[0]
    made = (copy / '.digest').stat().st_mtime_ns
    assert reachable_install(hidden_install, cache) == server.bin.parent  # the next session reuses it as it is
    assert (copy / '.digest').stat().st_mtime_ns == made
    assert [path.name for path in cache.iterdir()] == [copy.name]


def test_a_copy_that_differs_is_not_reused(hidden_install: Path, cache: Path) -> None:
    first = reachable_install(hidden_install, cache)
    (hidden_install / 'share' / 'eventlog-extra.txt').write_text('changed')
    second = reachable_install(hidden_install, cache)
    assert second != first
    assert (second / 'share' / 'eventlog-extra.txt').read_text() == 'changed'
    assert not (first / 'share' / 'eventlog-extra.txt').exists()


def test_a_folder_of_that_name_someone_else_made_is_not_used(hidden_install: Path, cache: Path) -> None:
    first = reachable_install(hidden_install, cache).parent.parent
    shutil.rmtree(first)
    first.mkdir()
    (first / '.digest').write_text(first.name.removeprefix('eventlog-pg-'))
    first.chmod(0o777)  # anyone could have put files in it
    used = reachable_install(hidden_install, cache)
    assert used != first
    assert (used / 'bin' / 'initdb').is_file()
    assert not used.is_relative_to(first)
