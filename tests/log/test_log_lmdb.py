"""What only the LMDB backend has to prove: durability, processes, growth, files, tampering."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lmdb
import log_worker
import pytest
from logtools import add_run, exchange
from pydantic_ai.messages import ModelMessagesTypeAdapter

from eventlog import (
    InvalidArgumentError,
    LmdbEventLog,
    StorageError,
    StoreLocationError,
    StoreVersionError,
    message_entry,
    run_started_entry,
)
from eventlog._engine import FORMAT_VERSION, seq_key
from eventlog._storage import Table

WORKER = Path(__file__).with_name('log_worker.py')
LONG = bool(os.environ.get('EVENTLOG_LONG'))


def worker(store: Path, name: str, count: int, map_size: int | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, str(WORKER), str(store), name, str(count)]
    if map_size is not None:
        args.append(str(map_size))
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def acks(output: str) -> dict[int, int]:
    """seq -> message index of every acknowledged append in a worker's output."""
    out: dict[int, int] = {}
    for line in output.splitlines():
        if line.startswith('ack '):
            _, seq, index = line.split()
            out[int(seq)] = int(index)
    return out


async def test_entries_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    seqs = await add_run(log, 'c', 'r', exchange(1))
    expected = await log.run_messages_json('r')
    log.close()
    reopened = LmdbEventLog(path)
    assert await reopened.run_messages_json('r') == expected
    assert await reopened.last_seq() == seqs[-1] + 1
    reopened.close()


async def test_same_store_opened_twice_in_one_process_shares_one_environment(tmp_path: Path) -> None:
    a = LmdbEventLog(tmp_path / 's')
    b = LmdbEventLog(tmp_path / 's')
    assert a.env is b.env
    await add_run(a, 'c', 'r', exchange(1))
    a.close()
    assert len(await b.entries()) == 4
    b.close()


async def test_map_grows_by_itself(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', map_size=256 * 1024, sync=False)
    initial = log.env.info()['map_size']
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    big = 'y' * 20_000
    written = 0
    for i in range(0, 600, 20):
        batch = [message_entry(exchange(i + j, big)[0], conversation_id='c', run_id='r') for j in range(20)]
        await log.append_many(batch)
        written += 20
    for i in range(50):
        await log.append(message_entry(exchange(1000 + i, big)[0], conversation_id='c', run_id='r'))
        written += 1
    assert log.env.info()['map_size'] > 20 * initial
    assert len(await log.entries(kinds=['message'])) == written
    assert (await log.verify()).ok
    log.close()


def test_map_grows_while_threads_read_and_write(tmp_path: Path) -> None:
    """A writer that fills the map waits for this process's other transactions to end before it
    grows the map; readers and writers in other threads meanwhile neither hang nor lose anything."""
    log = LmdbEventLog(tmp_path / 's', map_size=256 * 1024, sync=False)
    initial = log.env.info()['map_size']
    big = 'z' * 8_000
    errors: list[BaseException] = []
    written: dict[str, int] = {}
    stop = threading.Event()

    def write(name: str) -> None:
        async def work() -> None:
            await log.append(run_started_entry(conversation_id=name, run_id=name))
            for i in range(0, 120, 4):
                batch = [message_entry(exchange(i + j, big)[0], conversation_id=name, run_id=name) for j in range(4)]
                await log.append_many(batch)
                written[name] = written.get(name, 0) + len(batch)

        try:
            asyncio.run(work())
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    def read() -> None:
        # Long read transactions: a writer that fills the map meanwhile must wait for their end.
        try:
            while not stop.is_set():
                log.run_in_txn(lambda txn: time.sleep(0.005), write=False)
                asyncio.run(log.last_seq())
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f'w{n}',), daemon=True) for n in range(2)]
    threads += [threading.Thread(target=read, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads[:2]:
        thread.join(timeout=120)
    stop.set()
    for thread in threads[2:]:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), 'a thread hung while the map grew'
    assert errors == []
    assert log.env.info()['map_size'] > 8 * initial
    counts = {name: len(asyncio.run(log.entries(conversation_id=name, kinds=['message']))) for name in written}
    assert counts == written == {'w0': 120, 'w1': 120}
    assert asyncio.run(log.verify()).ok
    log.close()


def test_store_files_are_private_to_the_owner(tmp_path: Path) -> None:
    path = tmp_path / 'private'
    LmdbEventLog(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for name in ('data.mdb', 'lock.mdb'):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o600


def test_sync_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    durable = LmdbEventLog(tmp_path / 'a')
    fast = LmdbEventLog(tmp_path / 'b', sync=False)
    assert durable.env.flags()['sync'] is True
    assert fast.env.flags()['sync'] is False
    durable.close()
    fast.close()


async def test_newer_format_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    await add_run(log, 'c', 'r', exchange(1))
    log.close()
    env = lmdb.open(str(path), max_dbs=32)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.put(bytes([Table.META]) + b'format', b'99', db=index)
    env.close()
    before = (path / 'data.mdb').read_bytes()
    with pytest.raises(StoreVersionError, match='format 99'):
        LmdbEventLog(path)
    assert (path / 'data.mdb').read_bytes() == before
    # The failed open does not leave a half-open environment behind.
    env = lmdb.open(str(path), max_dbs=32)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.put(bytes([Table.META]) + b'format', str(FORMAT_VERSION).encode(), db=index)
    env.close()
    reopened = LmdbEventLog(path)
    assert len(await reopened.entries()) == 4
    reopened.close()


def test_bad_locations_are_refused(tmp_path: Path) -> None:
    a_file = tmp_path / 'file'
    a_file.write_text('not a store')
    with pytest.raises(StoreLocationError, match='not a directory'):
        LmdbEventLog(a_file)
    with pytest.raises(StoreLocationError):
        LmdbEventLog(a_file / 'below')
    with pytest.raises(StoreLocationError):
        LmdbEventLog('/proc/eventlog-cannot-live-here')
    with pytest.raises(StoreLocationError):
        LmdbEventLog(42)  # type: ignore[arg-type]
    assert a_file.read_text() == 'not a store'


@pytest.mark.skipif(os.geteuid() == 0, reason='root may write anywhere')
def test_unwritable_directory_is_refused(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    path = tmp_path / 'ro'
    path.mkdir(mode=0o500)
    with pytest.raises(StoreLocationError, match='not readable and writable'):
        LmdbEventLog(path)


def _raw_env(path: Path) -> tuple[lmdb.Environment, lmdb._Database]:
    env = lmdb.open(str(path), max_dbs=32)
    return env, env.open_db(b'entries')


@pytest.mark.parametrize('how', ['alter', 'delete', 'garble'])
async def test_tampering_is_named_by_verify(tmp_path: Path, how: str) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    await add_run(log, 'victim', 'rv', exchange(1, 'pay alice 10') + exchange(2))
    await add_run(log, 'bystander', 'rb', exchange(3))
    target = next(e.seq for e in await log.entries(conversation_id='victim') if b'alice' in e.payload)
    bystander = await log.transcript_json('bystander')
    log.close()
    env, entries = _raw_env(path)
    with env.begin(write=True) as txn:
        value = txn.get(seq_key(target), db=entries)
        assert value is not None
        if how == 'alter':
            txn.put(seq_key(target), value.replace(b'alice 10', b'alice 99'), db=entries)
        elif how == 'delete':
            txn.delete(seq_key(target), db=entries)
        else:
            txn.put(seq_key(target), b'\xc1' + value[1:], db=entries)
    env.close()
    log = LmdbEventLog(path)
    report = await log.verify()
    assert not report.ok
    assert [(p.conversation_id, p.seq) for p in report.problems] == [('victim', target)]
    assert await log.transcript_json('bystander') == bystander
    log.close()


async def test_removing_an_entry_and_its_index_is_still_caught(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    seqs = await add_run(log, 'c', 'r', exchange(1) + exchange(2))
    log.close()
    env, entries = _raw_env(path)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.delete(seq_key(seqs[1]), db=entries)
        txn.delete(bytes([Table.BY_CONV]) + b'c\x00' + seq_key(seqs[1]), db=index)
        txn.delete(bytes([Table.BY_RUN]) + b'r\x00' + seq_key(seqs[1]), db=index)
    env.close()
    log = LmdbEventLog(path)
    report = await log.verify()
    assert [(p.conversation_id, p.seq) for p in report.problems] == [('c', seqs[1])]
    log.close()


async def test_dropping_the_latest_entries_is_caught(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    await add_run(log, 'c', 'r', exchange(1))
    last = await log.last_seq()
    log.close()
    env, entries = _raw_env(path)
    index = env.open_db(b'index')
    with env.begin(write=True) as txn:
        txn.delete(seq_key(last), db=entries)
        txn.delete(bytes([Table.BY_CONV]) + b'c\x00' + seq_key(last), db=index)
    env.close()
    log = LmdbEventLog(path)
    report = await log.verify()
    assert [(p.conversation_id, p.seq) for p in report.problems] == [('c', last)]
    log.close()


async def test_processes_append_concurrently(tmp_path: Path) -> None:
    path = tmp_path / 's'
    LmdbEventLog(path, map_size=256 * 1024).close()
    names = [f'proc{i}' for i in range(4)]
    procs = [worker(path, name, 120, 256 * 1024) for name in names]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.rstrip().endswith('done')
    log = LmdbEventLog(path)
    every = await log.entries()
    seqs = [e.seq for e in every]
    assert seqs == sorted(set(seqs))
    for name, (out, _) in zip(names, outputs, strict=True):
        acked = acks(out)
        mine = [e for e in every if e.conversation_id == name and e.kind == 'message']
        assert len(mine) == 120
        # Each process's own order is kept, and every acknowledged seq holds its message.
        indexes = [int(e.message().parts[0].content.split()[2]) for e in mine]  # type: ignore[union-attr]
        assert indexes == list(range(120))
        assert {e.seq: i for e, i in zip(mine, indexes, strict=True)} == acked
    assert (await log.verify()).ok
    log.close()


def _fork_writer(store: Path, name: str) -> tuple[int, int]:
    """Fork a writer process (already importing everything, so it starts at once)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_fd)
            sys.stdout = os.fdopen(write_fd, 'w', buffering=1)
            asyncio.run(log_worker.main(str(store), name, 10_000_000, 64 * 1024 * 1024))
        finally:
            os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def _kill_at_random(store: Path, name: str, rng: random.Random) -> dict[int, int]:
    pid, fd = _fork_writer(store, name)
    with os.fdopen(fd, 'r') as out:
        assert out.readline().strip() == 'ready'
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return acks(out.read())


def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store = tmp_path / 's'
    rng = random.Random(1234)
    kills = 200 if LONG else 20
    acknowledged: dict[str, dict[int, int]] = {}

    async def check(name: str) -> None:
        log = LmdbEventLog(store)
        try:
            report = await log.verify()
            assert report.ok, report
            messages = await log.entries(conversation_id=name, kinds=['message'])
            stored = {e.seq: e for e in messages}
            for seq, index in acknowledged[name].items():
                entry = stored[seq]
                assert entry.message().parts[0].content.startswith(f'{name} message {index} ')  # type: ignore[union-attr]
            # Nothing partial: every stored message decodes, and their indexes run without gaps.
            indexes = [int(e.message().parts[0].content.split()[2]) for e in messages]  # type: ignore[union-attr]
            assert indexes == list(range(len(indexes)))
            assert len(indexes) >= len(acknowledged[name])
        finally:
            log.close()

    for round_ in range(kills):
        name = f'crash{round_}'
        acknowledged[name] = _kill_at_random(store, name, rng)
        asyncio.run(check(name))
    assert sum(len(a) for a in acknowledged.values()) > kills  # the writers did get to write


def _holder(store: Path, read: bool) -> subprocess.Popen[str]:
    """A process that keeps the store open (and, with `read`, a read transaction) until killed."""
    code = (
        'import time, lmdb\n'
        f'env = lmdb.open({str(store)!r}, max_dbs=32)\n'
        + ('txn = env.begin()\n' if read else '')
        + "print('open', flush=True)\n"
        'time.sleep(120)\n'
    )
    proc = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == 'open'
    return proc


def test_dead_readers_are_cleared_on_open(tmp_path: Path) -> None:
    store = tmp_path / 's'
    LmdbEventLog(store).close()
    keeper = _holder(store, read=False)  # keeps the lock file live, so LMDB does not reset it
    try:
        reader = _holder(store, read=True)
        reader.kill()
        reader.wait()
        probe = lmdb.open(str(store), max_dbs=32)
        assert str(reader.pid) in probe.readers()
        probe.close()
        log = LmdbEventLog(store)
        assert str(reader.pid) not in log.env.readers()
        log.close()
    finally:
        keeper.kill()
        keeper.wait()


async def test_replay_of_a_long_run_does_not_block_the_event_loop(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append_many([message_entry(exchange(i)[0], conversation_id='c', run_id='r') for i in range(20_000)])
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    messages = await log.run_messages('r')
    report = await log.verify()
    done = True
    await task
    assert len(messages) == 20_000
    assert report.ok
    assert ticks > 10  # the loop kept running while replay and verification worked in a thread
    assert ModelMessagesTypeAdapter.dump_json(messages[:1]) == ModelMessagesTypeAdapter.dump_json([exchange(0)[0]])
    log.close()


async def test_invalid_map_size_and_ids_are_typed_errors(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    with pytest.raises(InvalidArgumentError):
        await log.get_run('x' * 500)
    log.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs, so that a store really runs out of disk (needs root, as CI has; fails loudly elsewhere)."""
    mount_point = tmp_path / 'small'
    mount_point.mkdir()
    done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f'these tests mount a 3 MiB tmpfs (root, as in CI): mount failed: {done.stderr.decode().strip()}')
    try:
        yield mount_point
    finally:
        subprocess.run(['umount', '-l', str(mount_point)], check=False)


async def test_full_disk_is_a_typed_error_and_loses_nothing_committed(small_disk: Path) -> None:
    store = small_disk / 's'
    log = LmdbEventLog(store, map_size=512 * 1024)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    committed: list[int] = []
    text = 'z' * 8000

    async def fill() -> None:
        for i in range(10_000):
            committed.append(await log.append(message_entry(exchange(i, text)[0], conversation_id='c', run_id='r')))

    with pytest.raises(StorageError, match='is full'):
        await fill()
    assert len(committed) > 10
    log.close()
    reopened = LmdbEventLog(store)
    messages = await reopened.entries(kinds=['message'])
    assert [e.seq for e in messages] == committed
    assert (await reopened.verify()).ok
    reopened.close()


_WRITEMAP_FILLER = """
import os, sys, lmdb
env = lmdb.open(sys.argv[1], map_size=64 << 20, writemap=True)
n = 0
try:
    while True:
        with env.begin(write=True) as txn:
            txn.put(b'%08d' % n, os.urandom(3000))
        n += 1
except lmdb.Error as exc:
    print(type(exc).__name__)
"""


def test_the_store_is_never_mapped_for_writing(small_disk: Path) -> None:
    """LMDB's `writemap` would make each commit cheaper (no page copies) but turns a full disk
    into a SIGBUS that kills the process; the log keeps LMDB's default, where a full disk is the
    `StorageError` above. The second half shows the hazard on this machine: if LMDB ever stopped
    raising SIGBUS here, writemap could be reconsidered."""
    log = LmdbEventLog(small_disk / 'log')
    assert log.env.flags()['writemap'] is False
    log.close()
    filler = subprocess.run(
        [sys.executable, '-c', _WRITEMAP_FILLER, str(small_disk / 'mapped')],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert filler.returncode == -signal.SIGBUS, (filler.returncode, filler.stdout, filler.stderr)
