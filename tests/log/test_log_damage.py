"""A damaged LMDB file: refused or reported with a typed error, never a native crash.

Each test damages a real store on disk (truncations, flipped bits in page headers, a damaged
overflow page, symlinked files) and runs the API in-process or the `eventlog` command in a
subprocess, where a SIGBUS or SIGABRT would show as a negative exit status.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from logtools import add_run, exchange

from eventlog import CorruptStoreError, EventLogError, LmdbEventLog, StoreLocationError

PAGE = 4096
_HEADER = struct.Struct('<QHHHH')
_NODE = struct.Struct('<HHHH')
_DB = struct.Struct('<IHHQQQQQ')


def _build(path: Path, runs: int = 40, big: int = 3) -> None:
    """A store whose `entries` tree has a branch root, several leaves and overflow pages."""

    async def fill() -> None:
        log = LmdbEventLog(path, sync=False)
        try:
            for i in range(runs):
                text = 'x' * (6000 if i < big else 10)
                await add_run(log, f'c{i % 4}', f'r{i}', exchange(i, f'{text} {i}'))
        finally:
            log.close()

    asyncio.run(fill())


@pytest.fixture(scope='module')
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp('damage') / 'store'
    _build(path)
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / 'store'
    copy.mkdir(mode=0o700)
    shutil.copyfile(pristine / 'data.mdb', copy / 'data.mdb')
    return copy


def _live_meta(data: bytes) -> tuple[int, dict[str, tuple[int, int]]]:
    """(last page, {database: (root, depth)}) from the meta page with the larger txn id."""
    metas: list[tuple[int, int, bytes]] = []
    for page in (0, 1):
        base = page * PAGE + 16
        main = data[base + 24 + 48 : base + 24 + 96]
        last_pg, txnid = struct.unpack_from('<QQ', data, base + 24 + 96)
        metas.append((txnid, last_pg, main))
    _, last_pg, main = max(metas)
    main_root = _DB.unpack(main)[7]
    found: dict[str, tuple[int, int]] = {}
    for name, value in _nodes(data, main_root):
        fields = _DB.unpack(value[1:49])
        found[name.decode()] = (fields[7], fields[2])
    return last_pg, found


def _nodes(data: bytes, pgno: int) -> list[tuple[bytes, bytes]]:
    """(key, first bytes of data) of a leaf page, or (key, 8-byte child pgno) of a branch page."""
    base = pgno * PAGE
    _, _, flags, lower, _ = _HEADER.unpack_from(data, base)
    out: list[tuple[bytes, bytes]] = []
    for i in range((lower - 16) // 2):
        (ptr,) = struct.unpack_from('<H', data, base + 16 + 2 * i)
        lo, hi, nflags, ksize = _NODE.unpack_from(data, base + ptr)
        key = data[base + ptr + 8 : base + ptr + 8 + ksize]
        if flags & 1:
            out.append((key, struct.pack('<Q', lo | hi << 16 | nflags << 32)))
        else:
            start = base + ptr + 8 + ksize
            out.append((key, bytes([nflags]) + data[start : start + 48]))
    return out


def _pages(store: Path) -> dict[str, int]:
    """A branch page, a leaf page and an overflow page of the `entries` tree, and a leaf of `index`."""
    data = (store / 'data.mdb').read_bytes()
    _, dbs = _live_meta(data)
    root, depth = dbs['entries']
    assert depth >= 2, 'the test store needs a branch page'
    children = [struct.unpack('<Q', child)[0] for _, child in _nodes(data, root)]
    overflow = None
    for child in children:
        for _, value in _nodes(data, child):
            if value[0] & 0x01:  # F_BIGDATA: the data is an overflow page number
                overflow = struct.unpack('<Q', value[1:9])[0]
                break
        if overflow is not None:
            break
    assert overflow is not None
    index_root, _ = dbs['index']
    return {'branch': root, 'leaf': children[-1], 'overflow': overflow, 'index': index_root}


def _flip(path: Path, offset: int, mask: int) -> None:
    with open(path, 'r+b') as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ mask]))


def _cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, '-m', 'eventlog_cli', *args, '--store', str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, 'COLUMNS': '200'},
    )


def _one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert 'Traceback' not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


async def _verify(store: Path) -> list[tuple[str, str]]:
    log = LmdbEventLog(store)
    try:
        report = await log.verify()
    finally:
        log.close()
    assert report.ok == (not report.problems)
    return [(p.code, p.reason) for p in report.problems]


def test_the_pristine_store_walks_clean(store: Path) -> None:
    assert asyncio.run(_verify(store)) == []
    assert _cli(store, 'verify').returncode == 0


@pytest.mark.parametrize('size', ['zero', '8k', 'half'])
def test_a_truncated_data_file_is_refused_not_mapped(store: Path, size: str) -> None:
    data = store / 'data.mdb'
    full = data.stat().st_size
    cut = {'zero': 0, '8k': 8192, 'half': full // 2}[size]
    os.truncate(data, cut)
    with pytest.raises(CorruptStoreError, match=r'empty|truncated'):
        LmdbEventLog(store)
    assert data.stat().st_size == cut, 'the damaged file was left as it was'
    commands = [['verify'], ['runs'], ['show', 'c1']] if size == 'half' else [['conversations']]
    for command in commands:
        line = _one_line_failure(_cli(store, *command))
        assert 'empty' in line or 'truncated' in line


def test_bad_meta_pages_are_refused(store: Path) -> None:
    _flip(store / 'data.mdb', 16, 0xFF)  # the magic number of meta page 0
    with pytest.raises(CorruptStoreError, match='magic'):
        LmdbEventLog(store)
    _one_line_failure(_cli(store, 'verify'))


@pytest.mark.parametrize(
    ('page', 'field', 'mask'),
    [
        ('branch', 'flags', 0x02),  # a branch page that says it is also a leaf
        ('branch', 'lower', 0x40),
        ('leaf', 'flags', 0x01),
        ('leaf', 'upper', 0x80),
        ('leaf', 'pgno', 0x01),
        ('overflow', 'flags', 0x04),
        ('overflow', 'pgno', 0x02),
        ('overflow', 'pages', 0x01),
    ],
)
def test_damaged_page_headers_are_structure_findings(store: Path, page: str, field: str, mask: int) -> None:
    pgno = _pages(store)[page]
    offset = {'pgno': 0, 'flags': 10, 'lower': 12, 'upper': 14, 'pages': 12}[field]
    if field in ('lower', 'upper'):
        # Raise the bound (a lowered `upper` only understates the free space, which no read
        # notices): flip the lowest clear bit at or above the mask's, whatever the page holds.
        value = struct.unpack_from('<H', (store / 'data.mdb').read_bytes(), pgno * PAGE + offset)[0]
        bit = next(b for b in range(mask.bit_length() - 1, 16) if not value >> b & 1)
        offset, mask = offset + bit // 8, 1 << bit % 8
    _flip(store / 'data.mdb', pgno * PAGE + offset, mask)
    findings = asyncio.run(_verify(store))
    assert findings, 'verify passed a damaged page'
    assert {code for code, _ in findings} == {'structure'}
    assert any(f'page {pgno}' in reason for _, reason in findings), findings


@pytest.mark.parametrize('page', ['branch', 'leaf'])
def test_the_command_reports_a_damaged_page_without_dying_of_a_signal(store: Path, page: str) -> None:
    """A damaged header once passed verify, then `show` died of SIGABRT in mdb_cursor_next."""
    pgno = _pages(store)[page]
    _flip(store / 'data.mdb', pgno * PAGE + 10, 0x03)  # branch <-> leaf
    result = _cli(store, 'verify', '--json')
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert '"structure"' in result.stdout and 'Traceback' not in result.stderr


def test_a_child_pointer_past_the_file_is_a_structure_finding(store: Path) -> None:
    data = (store / 'data.mdb').read_bytes()
    branch = _pages(store)['branch']
    (ptr,) = struct.unpack_from('<H', data, branch * PAGE + 16 + 2)
    _flip(store / 'data.mdb', branch * PAGE + ptr + 2, 0x01)  # the child pgno's high half
    findings = asyncio.run(_verify(store))
    assert any('past the last page' in reason or 'outside the file' in reason for _, reason in findings), findings


def test_out_of_order_keys_are_a_structure_finding(store: Path) -> None:
    """Swap two node pointers of a leaf: every header stays valid, the keys run backwards."""
    leaf = _pages(store)['leaf']
    path = store / 'data.mdb'
    with open(path, 'r+b') as fh:
        fh.seek(leaf * PAGE + 16)
        first, second = struct.unpack('<HH', fh.read(4))
        fh.seek(leaf * PAGE + 16)
        fh.write(struct.pack('<HH', second, first))
    findings = asyncio.run(_verify(store))
    assert any('out of order' in reason for _, reason in findings), findings


@pytest.mark.parametrize('name', ['data.mdb', 'lock.mdb'])
def test_symlinked_store_files_are_refused(tmp_path: Path, store: Path, name: str) -> None:
    """Two directories whose data.mdb are links to one file take two locks and lose appends."""
    LmdbEventLog(store).close()
    other = tmp_path / 'other'
    other.mkdir(mode=0o700)
    if name == 'lock.mdb':
        shutil.copyfile(store / 'data.mdb', other / 'data.mdb')
    (other / name).symlink_to(store / name)
    with pytest.raises(StoreLocationError, match='symbolic link'):
        LmdbEventLog(other)
    _one_line_failure(_cli(other, 'conversations'))
    assert asyncio.run(_verify(store)) == []


def test_an_empty_data_file_is_not_a_new_store(store: Path) -> None:
    os.truncate(store / 'data.mdb', 0)
    for _ in range(2):
        with pytest.raises(CorruptStoreError):
            LmdbEventLog(store)
    assert (store / 'data.mdb').stat().st_size == 0


def test_a_new_store_still_opens(tmp_path: Path) -> None:
    path = tmp_path / 'fresh'
    log = LmdbEventLog(path)
    log.close()
    log = LmdbEventLog(path)
    log.close()
    assert asyncio.run(_verify(path)) == []


def test_every_error_is_typed(store: Path) -> None:
    os.truncate(store / 'data.mdb', 8192)
    with pytest.raises(EventLogError):
        LmdbEventLog(store)


# --- fuzz: random bit flips in the pages of the entries tree --------------------------------------

FUZZ_TRIALS = 300 if os.environ.get('EVENTLOG_LONG') else 30


def _tree_pages(data: bytes, root: int) -> list[int]:
    """Every branch, leaf and overflow page of the tree under `root`."""
    pages: list[int] = []
    todo = [root]
    while todo:
        pgno = todo.pop()
        pages.append(pgno)
        flags = _HEADER.unpack_from(data, pgno * PAGE)[2]
        for _, value in _nodes(data, pgno):
            if flags & 1:
                todo.append(struct.unpack('<Q', value)[0])
            elif value[0] & 0x01:
                pages.append(struct.unpack('<Q', value[1:9])[0])
    return pages


async def _answers(store: Path) -> dict[str, bytes]:
    log = LmdbEventLog(store)
    try:
        out = {
            f'c:{c.conversation_id}': await log.transcript_json(c.conversation_id)
            for c in await log.list_conversations()
        }
        for run in await log.list_runs():
            out[f'r:{run.run_id}'] = await log.run_messages_json(run.run_id)
        return out
    finally:
        log.close()


def _fuzz(pristine: Path, workdir: Path, trials: int, seed: int) -> None:
    """Flip one random bit in a random page of the entries tree per trial; verify must fail
    whenever the answers differ from the undamaged store's. Prints one line per trial."""
    import random

    rng = random.Random(seed)
    expected = asyncio.run(_answers(pristine))
    data = (pristine / 'data.mdb').read_bytes()
    _, dbs = _live_meta(data)
    pages = _tree_pages(data, dbs['entries'][0])
    for trial in range(trials):
        store = workdir / f't{trial}'
        store.mkdir(mode=0o700)
        shutil.copyfile(pristine / 'data.mdb', store / 'data.mdb')
        pgno = rng.choice(pages)
        offset = pgno * PAGE + (rng.randrange(16) if rng.random() < 0.5 else rng.randrange(PAGE))
        _flip(store / 'data.mdb', offset, 1 << rng.randrange(8))
        print(f'trial {trial} page {pgno} offset {offset}', flush=True)
        try:
            findings = asyncio.run(_verify(store))
        except EventLogError as exc:
            print(f'  typed error {type(exc).__name__}', flush=True)
            continue
        if findings:
            print(f'  found {sorted({code for code, _ in findings})}', flush=True)
            continue
        try:
            answers = asyncio.run(_answers(store))
        except EventLogError as exc:
            print(f'  verify passed but reading failed: {exc!r}', flush=True)
            raise SystemExit(2) from None
        if answers != expected:
            print('  verify passed but the answers differ', flush=True)
            raise SystemExit(2)
        print('  harmless: verify ok, answers unchanged', flush=True)
        shutil.rmtree(store)


def test_fuzzed_page_damage_never_passes_verify_with_different_answers(pristine: Path, tmp_path: Path) -> None:
    """Each trial runs in a worker process: a native crash shows as a negative exit status."""
    result = subprocess.run(
        [sys.executable, __file__, str(pristine), str(tmp_path), str(FUZZ_TRIALS), '20261201'],
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=Path(__file__).parent,
    )
    assert result.returncode == 0, (result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    lines = result.stdout.splitlines()
    assert sum(line.startswith('trial ') for line in lines) == FUZZ_TRIALS
    assert any('found' in line for line in lines), 'no trial damaged anything verify could see'


if __name__ == '__main__':
    sys.path.insert(0, str(Path(__file__).parent))
    _fuzz(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))


def test_meta_pages_that_disagree_are_a_finding(store: Path) -> None:
    """Lowering the live meta page's transaction id makes LMDB serve the commit before the last
    one, a store that is consistent on its own: only the two meta pages tell it apart."""
    data = store / 'data.mdb'
    raw = data.read_bytes()
    txnids = [struct.unpack_from('<Q', raw, page * PAGE + 16 + 128)[0] for page in (0, 1)]
    live = 0 if txnids[0] > txnids[1] else 1
    assert abs(txnids[0] - txnids[1]) == 1 and txnids[live] >= 2
    high = txnids[live].bit_length() - 1
    _flip(data, live * PAGE + 16 + 128 + high // 8, 1 << (high % 8))
    problems = asyncio.run(_verify(store))
    assert any(code == 'structure' and 'meta pages' in reason for code, reason in problems), problems
    assert _cli(store, 'verify').returncode == 1


@pytest.mark.parametrize(('field', 'mask'), [('flags', 0x03), ('lower', 0x80), ('pgno', 0x01)])
def test_damage_on_the_pages_opening_reads_is_refused_before_lmdb_reads_them(
    store: Path, field: str, mask: int
) -> None:
    """Opening reads the `index` database's root on the way to the format record; damaged, LMDB
    would read garbage there or abort the process (verify included). Now the open is refused
    with a typed error naming the page, before LMDB reads it."""
    pgno = _pages(store)['index']
    _flip(store / 'data.mdb', pgno * PAGE + {'pgno': 0, 'flags': 10, 'lower': 12}[field], mask)
    opened = subprocess.run(
        [sys.executable, '-c', f'from eventlog import LmdbEventLog; LmdbEventLog({str(store)!r})'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert opened.returncode == 1, (opened.returncode, opened.stderr[-500:])  # not killed by a signal
    assert 'CorruptStoreError' in opened.stderr and 'where opening reads it' in opened.stderr
    line = _one_line_failure(_cli(store, 'verify'))
    assert 'damaged where opening reads it' in line and f'page {pgno}' in line


@pytest.mark.parametrize('name', ['data.mdb', 'lock.mdb'])
def test_hard_linked_store_files_are_refused(tmp_path: Path, store: Path, name: str) -> None:
    """A hard link shares the file just as a symbolic one does, and is refused the same way."""
    LmdbEventLog(store).close()
    other = tmp_path / 'other'
    other.mkdir(mode=0o700)
    if name == 'lock.mdb':
        shutil.copyfile(store / 'data.mdb', other / 'data.mdb')
    os.link(store / name, other / name)
    with pytest.raises(StoreLocationError, match='hard links'):
        LmdbEventLog(other)
    with pytest.raises(StoreLocationError, match='hard links'):
        LmdbEventLog(store)  # the original is shared too while the link exists
    (other / name).unlink()
    assert asyncio.run(_verify(store)) == []
