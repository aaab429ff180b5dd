"""Imports that cannot poison a store: they reference only entries they carry, must be whole
(closing line), must be of a known version, and are read in bounded memory."""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from backends import make_log
from logtools import add_run, exchange, tool_exchange
from pydantic_ai.messages import ModelRequest, UserPromptPart
from transfertools import Crafted

from eventlog import ConversationNotFound, InvalidArgumentError, NewEntry, compaction_entry, encode_message
from eventlog._transfer import RestartableLines
from eventlog.entries import ForkInfo
from eventlog.errors import NotFoundError
from eventlog.log import EventLogBase

FIXTURES = Path(__file__).with_name('fixtures')


async def _victim(log: EventLogBase) -> list[int]:
    """A conversation holding a secret; returns its message seqs."""
    return await add_run(log, 'victim', 'rv', exchange(1, 'the launch code is 0000'))


def _attacker_run(crafted: Crafted, start: int, parent: int | None, *, detached: bool = False) -> None:
    crafted.add(start, 'mine', 'run_started', b'{}', run_id='ra', parent=parent, detached=detached)
    crafted.add(start + 1, 'mine', 'message', encode_message(exchange(2, 'hello')[0]), run_id='ra', parent=start)


async def _texts(log: EventLogBase, conversation_id: str) -> bytes:
    return b''.join(await log.context_payloads(conversation_id)) + b''.join(
        await log.transcript_payloads(conversation_id)
    )


# --- grafting ---------------------------------------------------------------------------------


async def test_an_import_cannot_continue_a_run_from_another_conversation(log: EventLogBase) -> None:
    seqs = await _victim(log)
    before = await log.last_seq()
    crafted = Crafted()
    _attacker_run(crafted, 100, parent=seqs[-1])
    with pytest.raises(InvalidArgumentError, match=r'line 2 .* does not carry'):
        await log.import_(io.BytesIO(crafted.export()))
    assert await log.last_seq() == before
    assert await log.get_conversation('mine') is None


async def test_an_import_cannot_fork_another_conversation(log: EventLogBase) -> None:
    seqs = await _victim(log)
    crafted = Crafted()
    crafted.add(100, 'mine', 'forked_from', msgspec.json.encode(ForkInfo('victim', seqs[-1])), parent=seqs[-1])
    with pytest.raises(InvalidArgumentError, match=r'line 2 .*does not carry'):
        await log.import_(io.BytesIO(crafted.export()))
    # A fork point it carries, but naming the victim as the forked conversation, is refused too.
    crafted = Crafted()
    _attacker_run(crafted, 100, parent=None)
    crafted.add(102, 'mine2', 'forked_from', msgspec.json.encode(ForkInfo('victim', 101)), parent=101)
    with pytest.raises(InvalidArgumentError, match=r"line 4: .*fork of 'victim'"):
        await log.import_(io.BytesIO(crafted.export()))
    assert await log.get_conversation('mine') is None and await log.get_conversation('mine2') is None


async def test_a_graft_marked_detached_is_dropped_not_followed(log: EventLogBase) -> None:
    seqs = await _victim(log)
    crafted = Crafted()
    _attacker_run(crafted, 100, parent=seqs[-1], detached=True)
    assert await log.import_(io.BytesIO(crafted.export())) == 2
    texts = await _texts(log, 'mine')
    assert b'hello' in texts and b'launch code' not in texts
    run = await log.get_run('ra')
    assert run is not None and run.branch_parent is None
    assert b'launch code' not in await log.run_messages_json('ra')
    crafted = Crafted()
    payload = msgspec.json.encode(ForkInfo('victim', seqs[-1]))
    crafted.add(200, 'mine-fork', 'forked_from', payload, parent=seqs[-1], detached=True)
    assert await log.import_(io.BytesIO(crafted.export())) == 1
    record = await log.get_conversation('mine-fork')
    assert record is not None and record.forked_from is None
    assert await log.context_payloads('mine-fork') == [] and await log.transcript_payloads('mine-fork') == []


async def test_forked_from_entries_are_made_by_fork_only(log: EventLogBase) -> None:
    seqs = await _victim(log)
    payload = msgspec.json.encode(ForkInfo('victim', seqs[-1]))
    with pytest.raises(InvalidArgumentError, match=r'use fork\(\)'):
        await log.append(NewEntry(conversation_id='mine', kind='forked_from', payload=payload, parent=seqs[-1]))
    assert await log.get_conversation('mine') is None
    assert await log.fork('victim', new_conversation_id='mine') == 'mine'


async def test_a_run_in_a_new_conversation_may_continue_other_history_through_the_api(log: EventLogBase) -> None:
    # What the persistence capability does when a run in a new conversation is handed history.
    seqs = await add_run(log, 'a', 'r1', exchange(1, 'shared history'))
    await add_run(log, 'b', 'r2', exchange(2), parent=seqs[-1])
    assert b'shared history' in b''.join(await log.context_payloads('b'))


async def _store_with_everything(log: EventLogBase) -> None:
    seqs = await add_run(log, 'a', 'r1', exchange(1, 'alpha') + tool_exchange(2))
    await add_run(log, 'a', 'r2', exchange(3), parent=seqs[-1])
    await add_run(log, 'b', 'r3', exchange(4, 'continued elsewhere'), parent=seqs[1])  # a run in a new conversation
    await log.fork('a', at_seq=seqs[1], new_conversation_id='f')
    await add_run(log, 'f', 'r4', exchange(5, 'on the fork'), parent=seqs[1])
    await log.fork('b', new_conversation_id='g')  # a fork whose point lies in another conversation's entries
    await log.set_title('a', 'Title')
    compacted = await add_run(log, 'k', 'rk', exchange(9, 'to be summarised') + exchange(10), finish=False)
    summary = ModelRequest(parts=[UserPromptPart('Summary: two questions')])
    await log.append(compaction_entry(conversation_id='k', run_id='rk', replaced=compacted[:2], summary=[summary]))
    gone = await add_run(log, 'gone', 'rg', exchange(6, 'deleted later'))
    await add_run(log, 'orphan', 'ro', exchange(7, 'continued deleted history'), parent=gone[-1])
    await log.fork('gone', new_conversation_id='gone-fork')
    await add_run(log, 'gone-fork', 'rgf', exchange(8, 'on a fork of deleted history'), parent=gone[-1])
    await log.delete_conversation('gone')
    await log.archive('f')


@pytest.mark.parametrize('shifted', [False, True])
async def test_a_whole_store_round_trip_with_forks_and_continued_runs(
    log: EventLogBase, backend: str, tmp_path: Path, shifted: bool
) -> None:
    await _store_with_everything(log)
    buffer = io.BytesIO()
    count = await log.export(buffer)
    assert count == len(await log.entries())
    detached = [json.loads(line) for line in buffer.getvalue().splitlines()[1:-1] if b'"detached"' in line]
    assert [(d['conversation_id'], d['kind']) for d in detached] == [
        ('orphan', 'run_started'),
        ('gone-fork', 'forked_from'),
        ('gone-fork', 'run_started'),
    ]
    target = make_log(backend, tmp_path / 'copy')
    try:
        if shifted:  # the target already holds entries, so every imported seq moves
            await add_run(target, 'local', 'rl', exchange(8) * 20)
        assert await target.import_(io.BytesIO(buffer.getvalue())) == count
        for conv in await log.list_conversations(include_archived=True):
            conv_id = conv.conversation_id
            assert await target.transcript_json(conv_id) == await log.transcript_json(conv_id), conv_id
            assert await target.context_payloads(conv_id) == await log.context_payloads(conv_id), conv_id
        for run in await log.list_runs():
            assert await target.run_messages_json(run.run_id) == await log.run_messages_json(run.run_id)
        assert (await target.verify()).ok
        if not shifted:
            # Exported again, every line is the same but those of 'orphan' and 'gone-fork', whose
            # references to deleted history were dropped on import (which changes their chains'
            # hashes) - and the closing line, which carries those hashes.
            again = io.BytesIO()
            await target.export(again)
            old, new = buffer.getvalue().splitlines(), again.getvalue().splitlines()
            assert len(old) == len(new)
            changed = [json.loads(line) for line, other in zip(old[1:-1], new[1:-1], strict=True) if line != other]
            assert changed and {line['conversation_id'] for line in changed} == {'orphan', 'gone-fork'}
            for conv_id in ('orphan', 'gone-fork'):
                roots = [e for e in await target.entries(conversation_id=conv_id) if e.kind != 'message']
                assert {e.parent for e in roots if e.kind in ('run_started', 'forked_from')} == {None}
    finally:
        target.close()


async def test_a_fork_of_deleted_history_round_trips(log: EventLogBase, backend: str, tmp_path: Path) -> None:
    seqs = await add_run(log, 'a', 'r1', exchange(1, 'deleted later'))
    await log.fork('a', at_seq=seqs[-1], new_conversation_id='f')
    await log.fork('a', at_seq=seqs[-1], new_conversation_id='empty-fork')
    await add_run(log, 'f', 'r2', exchange(2, 'kept'), parent=seqs[-1])
    await log.delete_conversation('a')
    buffer = io.BytesIO()
    await log.export(buffer, conversation_ids=['f', 'empty-fork'])  # the deleted source is left out
    with pytest.raises(ConversationNotFound):
        await log.export(io.BytesIO(), conversation_ids=['a'])
    target = make_log(backend, tmp_path / 'copy')
    try:
        assert await target.import_(io.BytesIO(buffer.getvalue())) == len(buffer.getvalue().splitlines()) - 2
        for conv_id in ('f', 'empty-fork'):
            assert await target.transcript_json(conv_id) == await log.transcript_json(conv_id)
            assert await target.context_payloads(conv_id) == await log.context_payloads(conv_id)
            record = await target.get_conversation(conv_id)
            assert record is not None and record.forked_from is None  # its fork point is gone
        assert b'deleted later' not in await target.transcript_json('f')
        assert (await target.verify()).ok
    finally:
        target.close()


# --- framing ----------------------------------------------------------------------------------


async def _export(log: EventLogBase) -> bytes:
    await add_run(log, 'a', 'r1', exchange(1))
    await add_run(log, 'b', 'r2', exchange(2))
    buffer = io.BytesIO()
    await log.export(buffer)
    return buffer.getvalue()


async def test_an_export_cut_at_a_line_boundary_is_refused(log: EventLogBase, backend: str, tmp_path: Path) -> None:
    data = await _export(log)
    lines = data.splitlines(keepends=True)
    target = make_log(backend, tmp_path / 'copy')
    try:
        for cut in range(1, len(lines)):
            with pytest.raises(InvalidArgumentError, match='cut short'):
                await target.import_(io.BytesIO(b''.join(lines[:cut])))
        # The last entry dropped and the count mended: the heads still tell.
        closing = json.loads(lines[-1])
        closing['entries'] -= 1
        mended = b''.join(lines[:-2]) + json.dumps(closing).encode() + b'\n'
        with pytest.raises(InvalidArgumentError, match='closing line'):
            await target.import_(io.BytesIO(mended))
        with pytest.raises(InvalidArgumentError, match='follows its closing line'):
            await target.import_(io.BytesIO(data + lines[1]))
        assert await target.last_seq() == 0
        assert await target.import_(io.BytesIO(data + b'\n\n')) == len(lines) - 2
    finally:
        target.close()


@pytest.mark.parametrize('version', [0, -1, 4, 99])
async def test_unknown_export_versions_are_refused(log: EventLogBase, version: int) -> None:
    crafted = Crafted()
    crafted.add(1, 'c', 'title', b'{"title":"x"}')
    data = crafted.header(version) + crafted.body() + crafted.closing()
    with pytest.raises(InvalidArgumentError, match=f'format {version}, which this version does not know'):
        await log.import_(io.BytesIO(data))


async def test_a_version_1_export_needs_the_flag(log: EventLogBase) -> None:
    path = FIXTURES / 'v1-export.jsonl'
    with pytest.raises(InvalidArgumentError, match=r'format 1, which has no closing line.*allow_version_1'):
        await log.import_(path)
    assert await log.last_seq() == 0
    lines = path.read_bytes().splitlines()
    assert await log.import_(path, allow_version_1=True) == len(lines) - 1
    assert (await log.verify()).ok
    exported = io.BytesIO()
    await log.export(exported)
    # The same entries; their hashes are the importing store's (chain rule 2, docs/transfer.md).
    unhashed = [{k: v for k, v in json.loads(line).items() if k != 'hash'} for line in lines[1:]]
    again = [
        {k: v for k, v in json.loads(line).items() if k != 'hash'} for line in exported.getvalue().splitlines()[1:-1]
    ]
    assert again == unhashed


async def test_an_empty_log_exports_and_imports_nothing(log: EventLogBase) -> None:
    buffer = io.BytesIO()
    assert await log.export(buffer) == 0
    assert [
        json.loads(line)['format' if i == 0 else 'type'] for i, line in enumerate(buffer.getvalue().splitlines())
    ] == [
        'pydantic-ai-eventlog',
        'closing',
    ]
    assert await log.import_(io.BytesIO(buffer.getvalue())) == 0


# --- streaming --------------------------------------------------------------------------------


class _Pipe(io.RawIOBase):
    """A non-seekable stream, like stdin."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_restartable_lines_read_again_from_the_start() -> None:
    data = b'one\ntwo\nthree'
    for stream in (io.BytesIO(b'skipped' + data), io.BufferedReader(_Pipe(data))):
        if isinstance(stream, io.BytesIO):
            stream.seek(len(b'skipped'))
        lines = RestartableLines(stream)
        first = iter(lines)
        assert next(first) == b'one\n'  # a pass stopped early (the map grew) ...
        assert list(lines) == [b'one\n', b'two\n', b'three']  # ... and a whole pass from the start
        assert list(lines) == [b'one\n', b'two\n', b'three']
        lines.close()


async def test_an_import_from_a_pipe_survives_the_map_growing(tmp_path: Path) -> None:
    from eventlog import InMemoryEventLog, LmdbEventLog

    source = InMemoryEventLog()
    for i in range(40):
        await add_run(source, f'c{i}', f'r{i}', exchange(i, 'x' * 4000))
    buffer = io.BytesIO()
    count = await source.export(buffer)
    target = LmdbEventLog(tmp_path / 'small.lmdb', map_size=64 * 1024)  # grows (and retries) many times
    try:
        assert await target.import_(io.BufferedReader(_Pipe(buffer.getvalue()))) == count
        assert (await target.verify()).ok
        assert await target.transcript_json('c39') == await source.transcript_json('c39')
    finally:
        target.close()


def _import_in_subprocess(export: Path, store: Path) -> tuple[int, int, int]:
    worker = Path(__file__).with_name('import_worker.py')
    done = subprocess.run(
        [sys.executable, str(worker), 'import', str(export), str(store)],
        capture_output=True,
        text=True,
        check=True,
        cwd=worker.parent,
    )
    count, rss, heap = (int(word) for word in done.stdout.split())
    return count, rss * 1024, heap * 1024


def test_an_import_holds_a_bounded_number_of_lines_in_memory(tmp_path: Path) -> None:
    """Peak memory of importing a big export against a small one, each in its own process.

    The import's own allocations (Python heap) stay the same whatever the export's size; the
    process's peak RSS grows only by the LMDB transaction's dirty pages, which are the store
    being written (LMDB keeps them in memory until the one transaction commits), not by a
    parsed copy of the export (which used to take about three times the file's size).
    """
    import_worker = importlib.import_module('import_worker')
    small, big = tmp_path / 'small.jsonl', tmp_path / 'big.jsonl'
    import_worker.make(small, 30)
    import_worker.make(big, 600)
    big_size = big.stat().st_size
    assert big_size > 15 * small.stat().st_size
    small_count, small_rss, small_heap = _import_in_subprocess(small, tmp_path / 'small.lmdb')
    big_count, big_rss, big_heap = _import_in_subprocess(big, tmp_path / 'big.lmdb')
    assert (small_count, big_count) == (330, 6600)
    store_growth = (tmp_path / 'big.lmdb' / 'data.mdb').stat().st_size - (
        tmp_path / 'small.lmdb' / 'data.mdb'
    ).stat().st_size
    figures = f'export {big_size >> 20} MiB: RSS {small_rss >> 20} -> {big_rss >> 20} MiB, heap {small_heap >> 10} -> {big_heap >> 10} KiB'
    assert big_heap - small_heap < big_size // 8, figures
    assert big_rss - small_rss < store_growth + big_size // 2, figures


async def test_an_import_of_a_directory_or_of_nothing_says_which(log: EventLogBase, tmp_path: Path) -> None:
    from eventlog._files import export_file_size

    folder = tmp_path / 'exports'
    folder.mkdir()
    with pytest.raises(InvalidArgumentError, match='exports is a directory, not an export file'):
        await log.import_(folder)
    with pytest.raises(InvalidArgumentError, match='exports is a directory, not an export file'):
        export_file_size(folder)
    with pytest.raises(NotFoundError, match=r'no file .*nothing\.jsonl'):
        await log.import_(tmp_path / 'nothing.jsonl')
    with pytest.raises(NotFoundError, match='no file'):
        export_file_size(tmp_path / 'nothing.jsonl')
    assert await log.last_seq() == 0
    data = await _export(log)
    (folder / 'one.jsonl').write_bytes(data)
    assert export_file_size(folder / 'one.jsonl') == len(data)
