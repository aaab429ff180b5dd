"""`PersistentIndex.verify` rebuilds in a scratch store of its own: appends go on meanwhile, the
comparison is as of the index's position, and the scratch store never outlives the check."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eventlog import EventLogError, LmdbEventLog
from eventlog.projection import LogReader, ProjectionWriter
from search.persistent_index import PersistentIndex as LmdbIndex
from tests.search.test_lmdb_index import Builder

_APPEND = textwrap.dedent(
    """
    import asyncio, sys
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry

    async def main() -> None:
        log = LmdbEventLog(sys.argv[1])
        try:
            await log.append_many([
                run_started_entry(conversation_id='late', run_id='late-run', agent_name='a'),
                message_entry(ModelRequest(parts=[UserPromptPart('appended while verifying zebra')]),
                              conversation_id='late', run_id='late-run'),
                run_finished_entry(conversation_id='late', run_id='late-run', status='completed'),
            ])
        finally:
            log.close()
        print('appended')

    asyncio.run(main())
    """
)


async def _store(path: Path) -> LmdbEventLog:
    log = LmdbEventLog(path, sync=False)
    await Builder(log, 3).build(10)
    return log


def _scratch_dirs(place: Path) -> list[Path]:
    return sorted(place.glob('eventlog-verify-*'))


async def test_another_process_appends_while_verify_rebuilds_and_verify_stays_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While verify rebuilds the index beside itself, another process's append commits (it
    does not wait for the check), and the check, made as of the index's position, finds nothing:
    the entries appended meanwhile are not the index's yet. The next search indexes them."""
    log = await _store(tmp_path / 's')
    try:
        index = LmdbIndex(log)
        index.catch_up()
        scratch = tmp_path / 'scratch'
        scratch.mkdir()
        real = index._apply_batch  # pyright: ignore[reportPrivateUsage]
        outcomes: list[str] = []
        seen: list[list[Path]] = []

        def apply_then_append(
            records: ProjectionWriter, reader: LogReader, limit: int | None = None
        ) -> tuple[int, int]:
            result = real(records, reader, limit)
            if not outcomes and _scratch_dirs(scratch):  # inside the rebuild into the scratch store
                seen.append(_scratch_dirs(scratch))
                done = subprocess.run(
                    [sys.executable, '-c', _APPEND, str(log.path)], capture_output=True, text=True, timeout=60
                )
                outcomes.append(done.stdout.strip() or done.stderr)
            return result

        monkeypatch.setattr(index, '_apply_batch', apply_then_append)
        assert index.verify(scratch_dir=scratch) == []
        assert outcomes == ['appended'], 'the append committed during the check'
        assert seen and len(seen[0]) == 1, 'the rebuild ran in one scratch directory of scratch_dir'
        assert _scratch_dirs(scratch) == [], 'the scratch directory is removed after the check'
        monkeypatch.undo()
        state = index.state()
        assert state.position < state.log_position, 'the append landed after the index position verify used'
        index.catch_up()
        assert index.verify(scratch_dir=scratch) == []
    finally:
        log.close()


async def test_a_scratch_place_without_room_is_one_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    """A scratch place too small for the rebuilt index (a 1 MiB tmpfs) gives an `EventLogError`
    that says where it needs room and how to choose another place; the store and its index are
    unchanged and the scratch directory is gone."""
    log = await _store(tmp_path / 's')
    tiny = tmp_path / 'tiny'
    tiny.mkdir()
    mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(tiny)], check=False)
    if mounted.returncode:
        pytest.fail('this test mounts a tmpfs (it runs as root in CI): mount failed')
    try:
        index = LmdbIndex(log)
        index.catch_up()
        before = index.state()
        filler = tiny / 'filler'
        filler.write_bytes(b'\0' * (1024 * 1024 - 64 * 1024))  # leave less room than any LMDB store needs
        with pytest.raises(EventLogError) as caught:
            index.verify(scratch_dir=tiny)
        message = str(caught.value)
        assert 'verify could not' in message and str(tiny) in message, message
        assert '\n' not in message
        assert _scratch_dirs(tiny) == []
        assert index.state() == before
        filler.unlink()
        assert index.verify(scratch_dir=tmp_path) == []
    finally:
        subprocess.run(['umount', str(tiny)], check=False)
        log.close()


async def test_verify_on_a_backlog_commits_the_catch_up_and_compares(tmp_path: Path) -> None:
    """An index behind the log is brought up to date (committed, as a search would) before the
    comparison, so the check covers every entry."""
    log = await _store(tmp_path / 's')
    try:
        index = LmdbIndex(log)
        index.catch_up()
        subprocess.run([sys.executable, '-c', _APPEND, str(log.path)], check=True, timeout=60)
        state = index.state()
        assert state.position < state.log_position
        assert index.verify(scratch_dir=tmp_path) == []
        state = index.state()
        assert state.position == state.log_position
    finally:
        log.close()
