"""`LmdbEventLog.compact`: deleted text leaves the disk, nothing else changes, and a store open
elsewhere is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from logtools import add_run, exchange

from eventlog import LmdbEventLog
from eventlog.errors import StoreBusyError
from eventlog.lmdb_log import COMPACT_LOCK_FILE, LOCK_FILE, CompactResult
from search.persistent_index import PersistentIndex as LmdbIndex

GONE = 'quixotrombuslanthe'
"""A word only the deleted conversation ever held."""

KEPT = 'marzipanflotillawex'
"""A word only the kept conversation holds."""


def _store_bytes(path: Path) -> bytes:
    """Every file of the store directory, concatenated."""
    chunks: list[bytes] = []
    for root, _, files in os.walk(path):
        for name in files:
            chunks.append(Path(root, name).read_bytes())
    return b''.join(chunks)


async def _two_conversations(log: LmdbEventLog) -> None:
    """Runs of both conversations interleaved (so they share leaf pages), small messages and
    large ones (kept on overflow pages)."""
    for i in range(5):
        pad = 'padding ' * (1200 if i % 2 else 1)
        await add_run(log, 'doomed', f'doomed-{i}', exchange(i, f'the password is {GONE} {i} {pad}'))
        await add_run(log, 'kept', f'kept-{i}', exchange(i, f'remember {KEPT} {i} {pad}'))


async def test_compact_removes_deleted_text_from_the_files_and_the_index(tmp_path: Path) -> None:
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        await _two_conversations(log)
        index = LmdbIndex(log)
        index.catch_up()
        kept_before = await log.transcript_json('kept')
        export_before = await log.entries(conversation_id='kept')
        await log.delete_conversation('doomed')
        log.env.sync(True)
        # The oracle can fail: a delete alone leaves the text in freed pages and in the index.
        assert GONE.encode() in _store_bytes(path)
        result = await log.compact()
        assert isinstance(result, CompactResult)
        assert result.bytes_before > 0 and 0 < result.bytes_after <= result.bytes_before
        on_disk = _store_bytes(path)
        assert GONE.encode() not in on_disk
        assert KEPT.encode() in on_disk
        # The handle keeps working on the compacted store, reads and writes.
        assert await log.transcript_json('kept') == kept_before
        assert await log.entries(conversation_id='kept') == export_before
        assert (await log.verify()).ok
        await add_run(log, 'kept', 'kept-after', exchange(99, 'after compaction'))
        assert len(await log.list_runs(conversation_id='kept')) == 6
    finally:
        log.close()
    reopened = LmdbEventLog(path)
    try:
        assert (await reopened.verify()).ok
        assert await reopened.get_conversation('doomed') is None
        index = LmdbIndex(reopened)
        index.catch_up()
        hits = await (await index.open_corpus(conversation_id=None, run_id=None, analyzer=index.analyzer)).rank(
            [KEPT], k1=1.2, b=0.75
        )
        assert len(hits) == 10
        gone = await (await index.open_corpus(conversation_id=None, run_id=None, analyzer=index.analyzer)).rank(
            [GONE], k1=1.2, b=0.75
        )
        assert list(gone) == []
    finally:
        reopened.close()
    assert sorted(os.listdir(path)) == sorted(['data.mdb', 'lock.mdb', LOCK_FILE, COMPACT_LOCK_FILE])


async def test_compact_drops_the_terms_of_an_index_that_has_not_seen_the_delete(tmp_path: Path) -> None:
    """The index applies deletes lazily (at the next search); compact applies them first."""
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        await _two_conversations(log)
        LmdbIndex(log).catch_up()
        await log.delete_conversation('doomed')
        state = LmdbIndex(log).state()
        assert state.position < state.log_position
        await log.compact()
        state = LmdbIndex(log).state()
        assert state.position == state.log_position
    finally:
        log.close()
    assert GONE.encode() not in _store_bytes(path)


async def test_compact_refuses_while_another_handle_of_this_process_is_open(tmp_path: Path) -> None:
    path = tmp_path / 'store.lmdb'
    first, second = LmdbEventLog(path), LmdbEventLog(path)
    try:
        await add_run(first, 'c', 'r', exchange(1))
        with pytest.raises(StoreBusyError, match='another handle in this process'):
            await first.compact()
        second.close()
        await first.compact()
        assert len(await first.transcript('c')) == 2
    finally:
        first.close()
        second.close()


_HOLDER = textwrap.dedent(
    """
    import sys
    from eventlog import LmdbEventLog
    log = LmdbEventLog(sys.argv[1])
    print('open', flush=True)
    sys.stdin.readline()
    log.close()
    """
)


async def test_compact_refuses_while_another_process_has_the_store_open(tmp_path: Path) -> None:
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        await add_run(log, 'c', 'r', exchange(1, GONE))
        await log.delete_conversation('c')
        holder = subprocess.Popen(
            [sys.executable, '-c', _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == 'open\n'
            with pytest.raises(StoreBusyError, match=f'open in another process \\(pid {holder.pid}\\)'):
                await log.compact()
            # The refusal changed nothing: this handle still reads and writes.
            await add_run(log, 'd', 'r2', exchange(2))
        finally:
            assert holder.stdin is not None
            holder.stdin.write('\n')
            holder.stdin.close()
            assert holder.wait(timeout=60) == 0
        await log.compact()
        assert len(await log.transcript('d')) == 2
    finally:
        log.close()
    assert GONE.encode() not in _store_bytes(path)


async def test_an_open_in_another_process_waits_for_a_compaction(tmp_path: Path) -> None:
    """A process opening the store while this one holds it exclusively waits, then sees the compacted file."""
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    try:
        await add_run(log, 'c', 'r', exchange(1, KEPT))
        lock = log._store_lock  # pyright: ignore[reportPrivateUsage]
        import fcntl

        fcntl.flock(lock.fd, fcntl.LOCK_EX)
        reader = subprocess.Popen(
            [
                sys.executable,
                '-c',
                'import asyncio, sys\nfrom eventlog import LmdbEventLog\nlog = LmdbEventLog(sys.argv[1])\n'
                "print(len(asyncio.run(log.transcript('c'))), flush=True)\nlog.close()",
                str(path),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                reader.wait(timeout=1)
        finally:
            fcntl.flock(lock.fd, fcntl.LOCK_SH)
        out, _ = reader.communicate(timeout=60)
        assert reader.returncode == 0 and out == '2\n'
    finally:
        log.close()


async def test_without_file_locks_the_store_opens_and_compact_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from eventlog import lmdb_log

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, 'No locks available')

    monkeypatch.setattr(lmdb_log.fcntl, 'flock', no_locks)
    log = LmdbEventLog(tmp_path / 'store.lmdb')
    try:
        await add_run(log, 'c', 'r', exchange(1))
        with pytest.raises(StoreBusyError, match='does not support file locks'):
            await log.compact()
        assert len(await log.transcript('c')) == 2
    finally:
        log.close()
