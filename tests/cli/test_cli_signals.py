"""The `eventlog` console script never dies of a signal: a damaged store that crashes the storage
engine ends in one line on stderr and exit status 3; Ctrl-C and closed pipes end as usual.

These run the real console entry point (`eventlog_cli.launch.main`) in subprocesses; the in-process
runner of the other tests (`clirunner.run_cli`) drives the parser, which does not fork."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from clitools import invoke
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry
from eventlog_cli.launch import EXIT_STORE_CRASHED

GUARDED = 'import sys\nfrom eventlog_cli.launch import main\nsys.argv[0] = "eventlog"\nmain()\n'
"""The console script, as installed."""

UNGUARDED = 'import sys\nfrom eventlog_cli.main import run\nsys.exit(run(sys.argv[1:]))\n'
"""The same command without the fork: what a damaged store does to a plain process."""

_CRASHES = {-signal.SIGBUS, -signal.SIGSEGV, -signal.SIGABRT, -signal.SIGILL, -signal.SIGFPE}


def _run(script: str, *args: str | Path, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, 'COLUMNS': '200'}
    env.pop('EVENTLOG_STORE', None)
    env.pop('PYTHONFAULTHANDLER', None)
    return subprocess.run(
        [sys.executable, '-c', script, *map(str, args)], capture_output=True, input=input, env=env, timeout=120
    )


def _exchange(i: int) -> list[ModelMessage]:
    text = f'question {i} ' + 'filler text ' * 40
    return [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(f'answer {i}')])]


async def _build(path: Path) -> None:
    log = LmdbEventLog(path)
    try:
        for i in range(60):
            await log.append(run_started_entry(conversation_id='c', run_id=f'r{i}'))
            await log.append_many([message_entry(m, conversation_id='c', run_id=f'r{i}') for m in _exchange(i)])
            await log.append(run_finished_entry(conversation_id='c', run_id=f'r{i}', status='completed'))
    finally:
        log.close()


@pytest.fixture(scope='module')
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 60 runs in one conversation, spread over dozens of leaf pages."""
    path = tmp_path_factory.mktemp('signals') / 'store.lmdb'
    asyncio.run(_build(path))
    return path


def _leaves(path: Path, db: bytes) -> tuple[int, list[int]]:
    """The page size and the leaf pages of one of the store's databases, left to right, found by
    walking the page headers down from its root."""
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    try:
        psize = env.stat()['psize']
        with env.begin() as txn:
            record = txn.get(db)
    finally:
        env.close()
    assert record is not None
    root = struct.unpack_from('<Q', record, 40)[0]  # MDB_db.md_root
    data = (path / 'data.mdb').read_bytes()

    def walk(pgno: int) -> list[int]:
        page = data[pgno * psize : (pgno + 1) * psize]
        flags, lower = struct.unpack_from('<HH', page, 10)  # mp_flags, mp_lower
        if flags & 0x02:  # P_LEAF
            return [pgno]
        assert flags & 0x01, f'page {pgno} is neither a branch nor a leaf'  # P_BRANCH
        children: list[int] = []
        for slot in range((lower - 16) // 2):
            offset = struct.unpack_from('<H', page, 16 + 2 * slot)[0]
            lo, hi, high = struct.unpack_from('<HHH', page, offset)  # a branch node's child page number
            children += walk(lo | hi << 16 | high << 32)
        return children

    return psize, walk(root)


def _mark_as_branch(path: Path, db: bytes, which: int) -> None:
    """Turn the header of the `which`-th leaf of `db` into a branch page's header."""
    psize, leaves = _leaves(path, db)
    with open(path / 'data.mdb', 'r+b') as fh:
        fh.seek(leaves[which] * psize + 10)
        fh.write(struct.pack('<H', 0x01))


def _assert_one_line(result: subprocess.CompletedProcess[bytes]) -> str:
    err = result.stderr.decode()
    assert err.count('\n') == 1 and err.startswith('eventlog: '), err
    assert 'Traceback' not in err and 'Assertion' not in err
    return err


@pytest.fixture(scope='module')
def aborting(intact: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of `intact` with one page header damaged so that an unguarded `show` aborts in LMDB."""
    for db in (b'index', b'entries'):
        for which in range(1, len(_leaves(intact, db)[1])):
            path = tmp_path_factory.mktemp('aborting') / f'{db.decode()}-{which}.lmdb'
            shutil.copytree(intact, path)
            _mark_as_branch(path, db, which)
            if _run(UNGUARDED, 'show', 'c', '--store', path).returncode == -signal.SIGABRT:
                return path
            shutil.rmtree(path)
    pytest.skip('no single damaged page header makes show abort with this LMDB')


def test_show_on_a_damaged_page_header_reports_instead_of_aborting(aborting: Path) -> None:
    # (the fixture checked that the same command without the guard dies of SIGABRT)
    result = _run(GUARDED, 'show', 'c', '--store', aborting)
    assert result.returncode == EXIT_STORE_CRASHED
    assert _assert_one_line(result) == (
        f'eventlog: the store at {aborting} is damaged: reading it crashed the storage engine (SIGABRT); '
        "run 'eventlog verify'\n"
    )


@pytest.mark.parametrize(('size', 'command'), [('8k', ['conversations']), ('half', ['show', 'c'])])
def test_no_command_dies_of_a_signal_on_a_truncated_store(
    intact: Path, tmp_path: Path, size: str, command: list[str]
) -> None:
    path = tmp_path / 'store.lmdb'
    shutil.copytree(intact, path)
    data = path / 'data.mdb'
    os.truncate(data, 8192 if size == '8k' else data.stat().st_size // 2)
    plain = _run(UNGUARDED, *command, '--store', path)
    result = _run(GUARDED, *command, '--store', path)
    assert result.returncode >= 0
    err = _assert_one_line(result)
    if plain.returncode in _CRASHES:
        name = signal.Signals(-plain.returncode).name
        assert result.returncode == EXIT_STORE_CRASHED
        assert f'the store at {path} is damaged: reading it crashed the storage engine ({name})' in err
    else:  # a check before opening already refuses the file: the same typed error either way
        assert result.returncode == plain.returncode != 0
        assert result.stderr == plain.stderr


def test_the_guard_passes_exit_status_and_output_through(intact: Path) -> None:
    listed = _run(GUARDED, 'conversations', '--json', '--store', intact)
    assert listed.returncode == 0 and listed.stderr == b''
    assert listed.stdout.decode() == invoke('conversations', '--json', store=intact).stdout
    missing = _run(GUARDED, 'info', 'nope', '--store', intact)
    assert missing.returncode == 1 and missing.stderr == b"eventlog: no conversation 'nope' in this store\n"
    usage = _run(GUARDED, 'show', '--bogus')
    assert usage.returncode == 2 and usage.stderr.count(b'\n') == 1


def test_a_closed_pipe_ends_the_command_quietly(intact: Path) -> None:
    script = GUARDED
    proc = subprocess.Popen(
        [sys.executable, '-c', script, 'export', '--store', str(intact)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == -signal.SIGPIPE
    assert err == b''


def test_ctrl_c_exits_quietly_with_130(intact: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, '-c', GUARDED, 'tail', '--follow', '--store', str(intact)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline()  # the backlog is printed: the command is running
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert b'Traceback' not in err and err.strip() == b''


def test_a_crash_of_any_command_is_one_line(tmp_path: Path) -> None:
    """Whatever crashes the child (here: an abort from C), the parent reports it the same way."""
    script = (
        'import os, sys\nimport eventlog_cli.main as cli\nfrom eventlog_cli.launch import main\n'
        "cli.run = lambda *a, **k: (os.write(2, b'mdb.c:1: Assertion failed\\n'), os.abort())\n"
        'sys.argv[0] = "eventlog"\nmain()\n'
    )
    result = _run(script, 'show', 'c', '--store', tmp_path / 'x.lmdb')
    assert result.returncode == EXIT_STORE_CRASHED
    assert _assert_one_line(result).startswith(f'eventlog: the store at {tmp_path / "x.lmdb"} is damaged')


def test_a_kill_aimed_at_the_command_ends_it_by_that_signal(intact: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, '-c', GUARDED, 'tail', '--follow', '--store', str(intact)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline()  # running
    proc.send_signal(signal.SIGTERM)  # to the parent only: it passes the signal on to the command
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert err == b''


def test_a_bug_inside_a_command_is_reported_with_its_traceback() -> None:
    """Errors a user can cause are one line; anything else is a bug, and the child must not
    swallow it: its traceback reaches stderr and the status is 1."""
    script = (
        'import sys\nimport eventlog_cli.main as cli\nfrom eventlog_cli.launch import main\n'
        'def broken(*args, **kwargs):\n    raise RuntimeError("boom in a command")\n'
        'cli.run = broken\nsys.argv[0] = "eventlog"\nmain()\n'
    )
    result = _run(script, 'stats')
    assert result.returncode == 1
    assert b'Traceback' in result.stderr and b'RuntimeError: boom in a command' in result.stderr


def test_a_command_killed_by_sigkill_ends_with_status_137_in_one_line(intact: Path) -> None:
    """The out-of-memory killer sends SIGKILL to the command (the forked child): the parent cannot
    die of the same signal by a handler (SIGKILL has none), so it exits 128 + 9 with one line."""
    proc = subprocess.Popen(
        [sys.executable, '-c', GUARDED, 'tail', '--follow', '--store', str(intact)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline()  # running
    children = Path(f'/proc/{proc.pid}/task/{proc.pid}/children').read_text().split()
    assert len(children) == 1
    os.kill(int(children[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    assert b'Traceback' not in err and err.count(b'\n') == 1 and b'SIGKILL' in err
