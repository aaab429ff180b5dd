"""Where `export -o` and `export(path)` write, and what a failed `import` leaves behind."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import Store, fresh, invoke, shared

from eventlog import EventLogError, LmdbEventLog
from eventlog.errors import DestinationError

__all__ = ['fresh', 'shared']


def _export_bytes(store: Path) -> bytes:
    result = invoke('export', store=store)
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def _read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader thread draining the FIFO at `path` into the returned list."""
    chunks: list[bytes] = []

    def drain() -> None:
        with open(path, 'rb') as fh:
            chunks.append(fh.read())

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return thread, chunks


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def null_device(tmp_path: Path) -> Path:
    """A private copy of the /dev/null device node (made as root), so that code which renames
    over its target cannot damage the system's /dev/null."""
    if os.geteuid() != 0:
        pytest.skip('making a device node needs root')
    node = tmp_path / 'devices' / 'null'
    node.parent.mkdir()
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return node


def test_export_to_a_null_device_leaves_the_device_alone(shared: Store, null_device: Path) -> None:
    result = invoke('export', '-o', null_device, store=shared.path)
    assert result.exit_code == 0, result.output
    info = os.lstat(null_device)
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)
    assert os.listdir(null_device.parent) == ['null']


def test_export_into_a_fifo_writes_through_it(shared: Store, tmp_path: Path) -> None:
    fifo = tmp_path / 'pipe'
    os.mkfifo(fifo)
    thread, chunks = _read_fifo(fifo)
    result = invoke('export', '-o', fifo, store=shared.path)
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert chunks == [_export_bytes(shared.path)]
    assert os.listdir(tmp_path) == ['pipe']


def test_export_through_a_symlink_to_a_fifo(shared: Store, tmp_path: Path) -> None:
    fifo = tmp_path / 'pipe'
    os.mkfifo(fifo)
    link = tmp_path / 'link'
    link.symlink_to(fifo)
    thread, chunks = _read_fifo(fifo)
    result = invoke('export', '-o', link, store=shared.path)
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)
    assert chunks == [_export_bytes(shared.path)]


def test_export_through_a_symlink_to_a_regular_file(shared: Store, tmp_path: Path) -> None:
    real = tmp_path / 'real.jsonl'
    real.write_bytes(b'old\n')
    link = tmp_path / 'link.jsonl'
    link.symlink_to(real)
    result = invoke('export', '-o', link, store=shared.path)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == _export_bytes(shared.path)
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ['link.jsonl', 'real.jsonl']


def test_export_to_a_symlink_to_nothing_is_refused(shared: Store, tmp_path: Path) -> None:
    link = tmp_path / 'dangling'
    link.symlink_to(tmp_path / 'elsewhere' / 'x.jsonl')
    result = invoke('export', '-o', link, store=shared.path)
    assert result.exit_code == 1
    assert result.stderr.startswith('eventlog: ') and 'symlink to nothing' in result.stderr
    assert result.stderr.count('\n') == 1
    assert link.is_symlink() and not (tmp_path / 'elsewhere').exists()


def test_export_to_a_directory_is_refused(shared: Store, tmp_path: Path) -> None:
    result = invoke('export', '-o', tmp_path, store=shared.path)
    assert result.exit_code == 1 and result.stderr == f'eventlog: cannot write to {tmp_path}: it is a directory\n'


def test_export_to_a_regular_file_is_complete_and_private(shared: Store, tmp_path: Path) -> None:
    target = tmp_path / 'out.jsonl'
    target.write_bytes(b'previous')
    os.chmod(target, 0o644)
    result = invoke('export', '-o', target, store=shared.path)
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == _export_bytes(shared.path)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert os.listdir(tmp_path) == ['out.jsonl']


# --- the API: the same rules through the same helper ------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_api_export_creates_a_private_file(shared: Store, tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / 'api.jsonl'
    log = LmdbEventLog(shared.path)
    try:
        count = asyncio.run(log.export(target))
    finally:
        log.close()
    assert count > 0
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert target.read_bytes() == _export_bytes(shared.path)


def test_api_export_to_a_null_device_and_through_symlinks(shared: Store, tmp_path: Path, null_device: Path) -> None:
    real = tmp_path / 'real.jsonl'
    real.write_bytes(b'old')
    link = tmp_path / 'link.jsonl'
    link.symlink_to(real)
    dangling = tmp_path / 'dangling'
    dangling.symlink_to(tmp_path / 'nowhere')
    log = LmdbEventLog(shared.path)
    try:
        asyncio.run(log.export(null_device))
        asyncio.run(log.export(link))
        with pytest.raises(DestinationError, match='symlink to nothing'):
            asyncio.run(log.export(dangling))
    finally:
        log.close()
    assert stat.S_ISCHR(os.lstat(null_device).st_mode)
    assert link.is_symlink() and real.read_bytes() == _export_bytes(shared.path)
    assert not (tmp_path / 'nowhere').exists()


def test_a_failed_export_leaves_the_old_file_untouched(
    shared: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventlog import _transfer

    real_lines = _transfer.export_lines

    def broken(*args: object, **kwargs: object) -> Iterator[bytes]:
        for number, line in enumerate(real_lines(*args, **kwargs)):  # pyright: ignore[reportArgumentType]
            if number == 3:
                raise OSError(28, 'No space left on device')
            yield line

    monkeypatch.setattr(_transfer, 'export_lines', broken)
    target = tmp_path / 'out.jsonl'
    target.write_bytes(b'the previous export\n')
    result = invoke('export', '-o', target, store=shared.path)
    assert result.exit_code == 1 and result.stderr.count('\n') == 1 and 'No space left' in result.stderr
    assert target.read_bytes() == b'the previous export\n'
    assert os.listdir(tmp_path) == ['out.jsonl']
    log = LmdbEventLog(shared.path)
    try:
        with pytest.raises(EventLogError):
            asyncio.run(log.export(target))
    finally:
        log.close()
    assert target.read_bytes() == b'the previous export\n'
    assert os.listdir(tmp_path) == ['out.jsonl']


# --- a failed import creates nothing ---------------------------------------------------------


@pytest.mark.parametrize(
    'content',
    [b'garbage that is not json\n', b'{"format": "something-else", "version": 1}\n{"seq": 1}\n', b''],
    ids=['garbage', 'wrong-header', 'empty'],
)
def test_a_failed_import_from_a_file_creates_no_store(tmp_path: Path, content: bytes) -> None:
    source = tmp_path / 'bad.jsonl'
    source.write_bytes(content)
    store = tmp_path / 'deep' / 'new.lmdb'
    result = invoke('import', source, store=store)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith('eventlog: ') and result.stderr.count('\n') == 1
    assert not (tmp_path / 'deep').exists()


def test_a_failed_import_from_stdin_creates_no_store(tmp_path: Path) -> None:
    store = tmp_path / 'new.lmdb'
    result = invoke('import', '-', store=store, input=b'\x00\xffnot an export\n')
    assert result.exit_code == 1 and result.stderr.count('\n') == 1
    assert not store.exists()


def test_a_failed_import_keeps_a_store_that_was_there(shared: Store, tmp_path: Path) -> None:
    store = tmp_path / 'existing.lmdb'
    first = invoke('import', '-', store=store, input=_export_bytes(shared.path))
    assert first.exit_code == 0, first.output
    before = _export_bytes(store)
    again = invoke('import', '-', store=store, input=b'garbage\n')
    assert again.exit_code == 1
    assert store.is_dir() and _export_bytes(store) == before
    empty = tmp_path / 'empty.lmdb'
    LmdbEventLog(empty).close()
    assert invoke('import', '-', store=empty, input=b'garbage\n').exit_code == 1
    assert (empty / 'data.mdb').exists()


def test_importing_an_empty_export_creates_no_store(shared: Store, tmp_path: Path) -> None:
    header = _export_bytes(shared.path).split(b'\n', 1)[0] + b'\n'
    store = tmp_path / 'new.lmdb'
    result = invoke('import', '-', store=store, input=header)
    if result.exit_code == 0:
        assert 'no store was created' in result.stderr
    assert not store.exists()


# --- delete --yes compacts; compact -------------------------------------------------------------


def _store_bytes(path: Path) -> bytes:
    return b''.join(Path(root, name).read_bytes() for root, _, files in os.walk(path) for name in files)


_HOLDER = 'import sys\nfrom eventlog import LmdbEventLog\nlog = LmdbEventLog(sys.argv[1])\nprint("open", flush=True)\nsys.stdin.readline()\n'


def test_delete_with_yes_compacts_the_deleted_text_away(fresh: Store) -> None:
    assert invoke('search', 'wombat', '--all', store=fresh.path).exit_code == 0  # builds the persistent index
    assert b'wombat' in _store_bytes(fresh.path)
    result = invoke('delete', 'beta', '--yes', store=fresh.path)
    assert result.exit_code == 0, result.output
    assert result.stdout == 'deleted beta: 4 entries removed\n'
    assert (
        result.stderr.startswith(f'compacted {fresh.path}: ')
        and 'the removed text is gone from its files' in result.stderr
    )
    on_disk = _store_bytes(fresh.path)
    assert b'wombat' not in on_disk
    assert b'quokka-archive-7731' in on_disk
    assert invoke('verify', store=fresh.path).exit_code == 0
    assert '2 matching' in invoke('search', 'quokka', '--all', store=fresh.path).stdout


def test_delete_while_the_store_is_open_elsewhere_says_to_compact_later(fresh: Store) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, '-c', _HOLDER, str(fresh.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == 'open\n'
        result = invoke('delete', 'beta', '--yes', store=fresh.path)
        assert result.exit_code == 0, result.output
        assert result.stdout == 'deleted beta: 4 entries removed\n'
        assert result.stderr.count('\n') == 1
        assert f'pid {holder.pid}' in result.stderr and "Run 'eventlog compact'" in result.stderr
        busy = invoke('compact', store=fresh.path)
        assert busy.exit_code == 1 and busy.stderr.count('\n') == 1 and 'open in another process' in busy.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.write('\n')
        holder.stdin.close()
        holder.wait(timeout=60)
    assert b'wombat' in _store_bytes(fresh.path)
    done = invoke('compact', '--json', store=fresh.path)
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data['bytes_after'] <= data['bytes_before']
    assert b'wombat' not in _store_bytes(fresh.path)


def test_compact_needs_a_store(tmp_path: Path) -> None:
    result = invoke('compact', store=tmp_path / 'none.lmdb')
    assert result.exit_code == 1 and result.stderr.startswith('eventlog: no store at')
    assert not (tmp_path / 'none.lmdb').exists()


def test_export_to_dev_stdout_writes_into_the_pipe(shared: Store, tmp_path: Path) -> None:
    """`/dev/stdout` is a symlink through /proc to whatever fd 1 is: here a pipe, written through."""
    import subprocess
    import sys

    script = 'import sys\nfrom eventlog_cli.main import run\nsys.exit(run(sys.argv[1:]))\n'
    done = subprocess.run(
        [sys.executable, '-c', script, 'export', '-o', '/dev/stdout', '--store', str(shared.path)],
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _export_bytes(shared.path)
    assert os.listdir(tmp_path) == []
    redirected = tmp_path.parent / f'{tmp_path.name}-redirected.jsonl'
    with open(redirected, 'wb') as out:
        into_file = subprocess.run(
            [sys.executable, '-c', script, 'export', '-o', '/dev/stdout', '--store', str(shared.path)],
            stdout=out,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
    assert into_file.returncode == 0, into_file.stderr
    assert redirected.read_bytes() == _export_bytes(shared.path)
