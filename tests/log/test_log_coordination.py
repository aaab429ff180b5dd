"""Coordination through the store: compaction can never take an acknowledged append with it,
a scrub an erasure left undone is recorded and finished, and storage limits are typed errors.

Each test runs real processes or real file systems (a tmpfs, a replaced file, an address-space
limit) and reads back, in a fresh handle or process, what the writers were told had succeeded.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from logtools import add_run, exchange

from eventlog import InMemoryEventLog, LmdbEventLog, message_entry
from eventlog.errors import StoreReplacedError

SECRET = 'vorpalquenchmirablesecret'
"""A word only the erased messages hold, looked for in the store's bytes."""

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT), str(ROOT / 'tests' / 'log')])}


def _store_bytes(path: Path) -> bytes:
    return b''.join(p.read_bytes() for p in path.iterdir() if p.is_file())


# --- a data file replaced under a writer ------------------------------------------------------


async def test_a_write_into_a_replaced_data_file_is_refused_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    """What a compaction that bypassed the store lock (or a backup restored over the file) does to a
    process that still maps the old file: its next write must fail, never land in a file nobody
    else will open."""
    path = tmp_path / 'store.lmdb'
    log = LmdbEventLog(path)
    acknowledged = await add_run(log, 'c', 'r1', exchange(1), finish=False)
    data = path / 'data.mdb'
    shutil.copyfile(data, tmp_path / 'copy.mdb')
    os.replace(tmp_path / 'copy.mdb', data)  # same bytes, another file
    try:
        with pytest.raises(StoreReplacedError, match='nothing was written'):
            acknowledged.append(await log.append(message_entry(exchange(2)[0], conversation_id='c', run_id='r1')))
    finally:
        log.close()
    fresh = LmdbEventLog(path)
    try:
        present = {e.seq for e in await fresh.entries(conversation_id='c')}
        assert set(acknowledged) <= present, 'an acknowledged append went into the replaced file'
        assert (await fresh.verify()).ok
    finally:
        fresh.close()


# --- many processes appending and compacting one store ----------------------------------------

_RACER = textwrap.dedent(
    """
    import asyncio, os, random, sys, time
    from eventlog import LmdbEventLog, message_entry, run_started_entry
    from eventlog.errors import StoreBusyError
    from logtools import exchange

    store, name, seconds, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    acks = open(f'{store}.{name}.acks', 'a')

    async def main():
        deadline = time.monotonic() + seconds
        i = compactions = busy = 0
        while time.monotonic() < deadline:
            log = LmdbEventLog(store, sync=False)
            run = f'{name}-{i}'
            await log.append(run_started_entry(conversation_id=name, run_id=run))
            for _ in range(rng.randint(1, 6)):
                seq = await log.append(message_entry(exchange(i)[0], conversation_id=name, run_id=run))
                acks.write(f'{seq}\\n')
                acks.flush()
                i += 1
            try:
                await log.compact()
                compactions += 1
            except StoreBusyError:
                busy += 1
            if rng.random() < 0.5:
                seq = await log.append(message_entry(exchange(i)[0], conversation_id=name, run_id=run))
                acks.write(f'{seq}\\n')
                acks.flush()
                i += 1
            log.close()
            time.sleep(rng.random() * 0.005)
        print(i, compactions, busy, flush=True)

    asyncio.run(main())
    """
)


def test_processes_appending_and_compacting_one_store_lose_no_acknowledged_append(tmp_path: Path) -> None:
    """The deployment that lost appends: several processes that each append, compact and close
    (two workers serving erasure requests, an application and a cron job). Every append a
    process was told succeeded must be in the store a fresh process opens afterwards."""
    store = tmp_path / 'store.lmdb'
    LmdbEventLog(store).close()
    seed = random.randrange(1 << 30)
    names = [f'w{n}' for n in range(4)]
    workers = [
        subprocess.Popen(
            [sys.executable, '-c', _RACER, str(store), name, '8', str(seed + n)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, name in enumerate(names)
    ]
    compactions = 0
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, f'seed {seed}: {err}'
        compactions += int(out.split()[1])
    assert compactions > 0, 'no compaction ever ran: the race was not exercised'
    checker = textwrap.dedent(
        """
        import asyncio, sys
        from eventlog import LmdbEventLog
        store, names = sys.argv[1], sys.argv[2:]
        async def main():
            log = LmdbEventLog(store)
            lost = total = 0
            for name in names:
                present = {e.seq for e in await log.entries(conversation_id=name)}
                acked = [int(line) for line in open(f'{store}.{name}.acks')]
                total += len(acked)
                lost += sum(1 for seq in acked if seq not in present)
            print(total, lost, (await log.verify()).ok)
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, '-c', checker, str(store), *names], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    total, lost, ok = done.stdout.split()
    assert int(total) > 100
    assert (int(lost), ok) == (0, 'True'), f'seed {seed}: {lost} of {total} acknowledged appends lost'


# --- a scrub that cannot finish ---------------------------------------------------------------


async def _seed_secret(log: LmdbEventLog) -> None:
    await add_run(log, 'c', 'secret-run', exchange(0, f'the code is {SECRET}'))
    await add_run(log, 'c', 'kept-run', exchange(1, 'nothing to hide ' + 'padding ' * 30_000))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root, as CI has; fails loudly elsewhere)."""
    mount_point = tmp_path / 'small'
    mount_point.mkdir()
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(['umount', '-l', str(mount_point)], check=False)


async def test_an_erasure_with_no_room_to_compact_says_it_committed_and_stays_pending(small_disk: Path) -> None:
    store = small_disk / 'store'
    log = LmdbEventLog(store, map_size=1 << 22)
    try:
        await _seed_secret(log)
        size = os.stat(store / 'data.mdb').st_size
        free = shutil.disk_usage(small_disk).free
        filler = small_disk / 'filler'
        filler.write_bytes(b'\0' * (free - size // 3))  # room for the erasure, not for a copy
        done = await log.erase('c', run_id='secret-run', reason='request')
        assert done.seqs and done.erasure_seq is not None
        assert not done.scrubbed
        assert done.scrub_error is not None
        assert 'the removal itself is committed' in done.scrub_error
        assert 'The store is unchanged' in done.scrub_error
        assert 'was not committed' not in done.scrub_error
        assert await log.scrub_pending() == done.erasure_seq
        report = await log.verify()
        assert report.ok and report.scrub_pending == done.erasure_seq
        assert SECRET not in str(await log.run_messages('secret-run'))
        # A second erasure finds nothing to erase, but the pending scrub stays visible.
        again = await log.erase('c', run_id='secret-run')
        assert again.seqs == [] and await log.scrub_pending() == done.erasure_seq
        await add_run(log, 'c', 'after', exchange(2))  # the handle still writes
    finally:
        log.close()
    filler.unlink()
    reopened = LmdbEventLog(store)  # alone with the store: finishes the scrub as it opens
    try:
        assert await reopened.scrub_pending() is None
        assert (await reopened.verify()).scrub_pending is None
        assert len(await reopened.list_runs(conversation_id='c')) == 3
    finally:
        reopened.close()
    assert SECRET.encode() not in _store_bytes(store)


_CRASHING_ERASER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from eventlog import LmdbEventLog

    log = LmdbEventLog(sys.argv[1])
    log._maintain_projections = lambda: os.kill(os.getpid(), signal.SIGKILL)  # dies after the commit
    asyncio.run(log.erase('c', run_id='secret-run', reason='request'))
    """
)


async def test_a_crash_between_an_erasure_and_its_compaction_is_recorded_and_finished(tmp_path: Path) -> None:
    store = tmp_path / 'store.lmdb'
    log = LmdbEventLog(store)
    await _seed_secret(log)
    log.close()
    # A process that has the store open keeps the eraser's scrub and the next opener from
    # compacting: the scrub stays pending and every report says so.
    holder = subprocess.Popen(
        [
            sys.executable,
            '-c',
            'import sys; from eventlog import LmdbEventLog; l = LmdbEventLog(sys.argv[1]); '
            'print("open", flush=True); sys.stdin.read()',
            str(store),
        ],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == 'open\n'
        crashed = subprocess.run([sys.executable, '-c', _CRASHING_ERASER, str(store)], env=_env(), timeout=60)
        assert crashed.returncode == -signal.SIGKILL
        assert SECRET.encode() in _store_bytes(store)  # the oracle can fail: the text is still there
        log = LmdbEventLog(store)
        try:
            pending = await log.scrub_pending()
            assert pending is not None
            erasure = (await log.entries(conversation_id='c', kinds=['erasure']))[-1]
            assert pending == erasure.seq
            report = await log.verify()
            assert report.ok and report.scrub_pending == pending
        finally:
            log.close()
        cli = [sys.executable, '-m', 'eventlog_cli']
        stats = subprocess.run([*cli, 'stats', '--store', str(store)], env=_env(), capture_output=True, text=True)
        assert stats.returncode == 0 and f'text removed by entry #{pending}' in stats.stdout
        verify = subprocess.run([*cli, 'verify', '--store', str(store)], env=_env(), capture_output=True, text=True)
        assert verify.returncode == 0 and 'scrub pending' in verify.stdout
        compact = subprocess.run([*cli, 'compact', '--store', str(store)], env=_env(), capture_output=True, text=True)
        assert compact.returncode == 1 and 'open in another process' in compact.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    compact = subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', 'compact', '--store', str(store)],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert compact.returncode == 0, compact.stderr
    assert SECRET.encode() not in _store_bytes(store)
    log = LmdbEventLog(store)
    try:
        assert await log.scrub_pending() is None
        assert (await log.verify()).ok
    finally:
        log.close()


async def test_a_removal_recorded_after_the_scrub_began_stays_pending() -> None:
    """A scrub clears only the removals it saw when it began: one recorded meanwhile (here while
    the projections are maintained, before the files are rewritten) is left for the next scrub."""
    log = InMemoryEventLog()
    await add_run(log, 'c', 'r1', exchange(0))
    await add_run(log, 'other', 'o1', exchange(5))
    late: list[int] = []

    def erase_more() -> None:
        if not late:
            loop = asyncio.new_event_loop()
            try:
                late.append(loop.run_until_complete(log.erase('other', scrub=False)).erasure_seq or 0)
            finally:
                loop.close()

    log._maintain_projections = erase_more  # pyright: ignore[reportPrivateUsage]
    first = await log.erase('c', run_id='r1', scrub=False)
    assert await log.scrub_pending() == first.erasure_seq
    assert await log.scrub() is None
    assert first.erasure_seq is not None and late[0] > first.erasure_seq
    assert await log.scrub_pending() == late[0]
    assert await log.scrub() is None
    assert await log.scrub_pending() is None
    log.close()


# --- a map that cannot grow ---------------------------------------------------------------------

_ADDRESS_LIMITED = textwrap.dedent(
    """
    import asyncio, resource, sys
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from eventlog import LmdbEventLog, message_entry, run_started_entry
    from eventlog.errors import StorageError
    from logtools import exchange

    log = LmdbEventLog(sys.argv[1], map_size=1 << 20, sync=False)
    with open('/proc/self/status') as status:
        size = next(int(line.split()[1]) * 1024 for line in status if line.startswith('VmSize'))
    resource.setrlimit(resource.RLIMIT_AS, (size + (96 << 20), resource.RLIM_INFINITY))
    big = ModelRequest(parts=[UserPromptPart('a' * 200_000)])

    async def main():
        await log.append(run_started_entry(conversation_id='c', run_id='r'))
        acknowledged = 0
        try:
            for _ in range(10_000):
                await log.append(message_entry(big, conversation_id='c', run_id='r'))
                acknowledged += 1
        except StorageError as exc:
            print('refused', acknowledged, str(exc).replace(chr(10), ' '))
        record = await log.get_conversation('c')
        print('read', record.message_count)
        await log.append(message_entry(exchange(1)[0], conversation_id='c', run_id='r'))
        print('small append', (await log.get_conversation('c')).message_count)

    asyncio.run(main())
    log.close()
    """
)


def test_a_map_that_cannot_grow_is_a_storage_error_and_the_handle_stays_usable(tmp_path: Path) -> None:
    store = tmp_path / 'store.lmdb'
    done = subprocess.run(
        [sys.executable, '-c', _ADDRESS_LIMITED, str(store)], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith('refused '), done.stdout
    acknowledged = int(lines[0].split()[1])
    assert acknowledged > 0 and 'was not committed' in lines[0] and 'ulimit -v' in lines[0]
    assert lines[1] == f'read {acknowledged}'
    assert lines[2] == f'small append {acknowledged + 1}'
    log = LmdbEventLog(store)
    try:
        record = asyncio.run(log.get_conversation('c'))
        assert record is not None and record.message_count == acknowledged + 1
        assert asyncio.run(log.verify()).ok
    finally:
        log.close()
