"""Checks of an LMDB store's file that LMDB itself does not make.

LMDB maps `data.mdb` and trusts it: a file shorter than its meta page says gives SIGBUS
when a page past its end is touched, and a damaged page header can trip an assertion
(SIGABRT) inside a cursor. Two checks keep a damaged file from killing the process:

- `check_files`, before the store is opened: `data.mdb` and `lock.mdb` are regular files
  (not symlinks, which would let two stores share one file under two locks), and
  `data.mdb` holds the pages its live meta page counts;
- `walk`, run by `verify` first: a pure-Python walk of every B-tree of the snapshot a
  read transaction pins (the free-page tree, the main tree and every named database):
  every page, node, key order, child and overflow page within the file, each page reached
  once, and the counts the trees' records state.

The layout read here is LMDB's 64-bit on-disk format (`mdb.c`: `MDB_page`, `MDB_meta`,
`MDB_db`, `MDB_node`), data version 1.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

from eventlog._keys import LMDB_TABLES, META_FORMAT, META_LAST_SEQ, Table, lmdb_key
from eventlog.errors import CorruptStoreError, StoreLocationError

__all__ = ['Finding', 'Meta', 'check_files', 'read_metas', 'walk']

PAGE_HEADER: Final = 16
_MAGIC: Final = 0xBEEFC0DE
_DATA_VERSION: Final = 1
_P_INVALID: Final = (1 << 64) - 1

P_BRANCH: Final = 0x01
P_LEAF: Final = 0x02
P_OVERFLOW: Final = 0x04
P_META: Final = 0x08
P_LEAF2: Final = 0x20
_P_TYPE: Final = P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2
_P_ALLOWED: Final = _P_TYPE | 0x10 | 0x40 | 0x4000 | 0x8000
"""Type bits plus the in-memory ones (dirty, sub-page, loose, keep) LMDB may leave set."""

F_BIGDATA: Final = 0x01
F_SUBDATA: Final = 0x02
F_DUPDATA: Final = 0x04
_MDB_DUPSORT: Final = 0x04
_MDB_INTEGERKEY: Final = 0x08
_MDB_DUPFIXED: Final = 0x10
_MDB_REVERSEKEY: Final = 0x02

_HEADER = struct.Struct('<QHHHH')
"""pgno, pad, flags, lower, upper."""
_DB = struct.Struct('<IHHQQQQQ')
"""MDB_db: pad (page size in the free tree's record), flags, depth, branch pages, leaf pages,
overflow pages, entries, root."""
_META = struct.Struct('<IIQQ48s48sQQ')
"""magic, version, address, map size, free tree, main tree, last page, txn id."""
_NODE = struct.Struct('<HHHH')
_OVERFLOW_PAGES = struct.Struct('<I')


class DbRecord(NamedTuple):
    """One B-tree's root record (`MDB_db`)."""

    pad: int
    flags: int
    depth: int
    branch_pages: int
    leaf_pages: int
    overflow_pages: int
    entries: int
    root: int


class Meta(NamedTuple):
    """One of the two meta pages."""

    page: int
    page_size: int
    map_size: int
    free: DbRecord
    main: DbRecord
    last_page: int
    txn_id: int


class Finding(NamedTuple):
    """One structural problem: where, and what."""

    where: str
    reason: str


def _parse_meta(raw: bytes, page: int) -> Meta | str:
    """The meta page `page` of `raw` (its page bytes), or why it is not one."""
    if len(raw) < PAGE_HEADER + _META.size:
        return f'meta page {page} is cut short'
    pgno, _, flags, _, _ = _HEADER.unpack_from(raw, 0)
    if not flags & P_META:
        return f'page {page} is not a meta page (flags {flags:#x})'
    magic, version, _, map_size, free, main, last_page, txn_id = _META.unpack_from(raw, PAGE_HEADER)
    if magic != _MAGIC:
        return f'meta page {page} has a bad magic number {magic:#x}'
    if version != _DATA_VERSION:
        return f'meta page {page} has an unknown data version {version}'
    free_db = DbRecord(*_DB.unpack(free))
    if pgno != page:
        return f'meta page {page} says it is page {pgno}'
    return Meta(page, free_db.pad, map_size, free_db, DbRecord(*_DB.unpack(main)), last_page, txn_id)


def read_metas(read: Callable[[int, int], bytes]) -> tuple[Meta, Meta | None]:
    """Both meta pages through `read(offset, size)`; the first returned is the live one.

    Raises `CorruptStoreError` when no usable meta page exists.
    """
    first = _parse_meta(read(0, PAGE_HEADER + _META.size), 0)
    if isinstance(first, str):
        raise CorruptStoreError(f'the store file is damaged: {first}')
    size = first.page_size
    if size < 512 or size > 65536 or size & (size - 1):
        raise CorruptStoreError(f'the store file is damaged: its page size {size} is impossible')
    second = _parse_meta(read(size, PAGE_HEADER + _META.size), 1)
    if isinstance(second, str):
        raise CorruptStoreError(f'the store file is damaged: {second}')
    if second.txn_id > first.txn_id:
        return second._replace(page_size=size), first
    return first, second._replace(page_size=size)


def _refuse_link(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreLocationError(f'cannot read {path}: {exc.strerror or exc}') from None
    mode = info.st_mode
    if stat.S_ISREG(mode) and info.st_nlink > 1:
        raise StoreLocationError(
            f'{path} has {info.st_nlink} hard links; a store keeps its own files (two stores sharing one file '
            'through links would each take their own lock and lose writes). Copy the file instead of linking it'
        )
    if stat.S_ISLNK(mode):
        raise StoreLocationError(
            f'{path} is a symbolic link; a store keeps its own files (two stores sharing one file through '
            'links would each take its own lock and lose writes). Replace the link with the file it points to'
        )
    if not stat.S_ISREG(mode):
        raise StoreLocationError(f'{path} is not a regular file')


_SETTLE_TRIES: Final = 20
_SETTLE_WAIT: Final = 0.05


def check_files(directory: Path) -> None:
    """Refuse a store directory whose files LMDB would misread, before LMDB opens them.

    `data.mdb` and `lock.mdb` must not be symlinks; an existing `data.mdb` must hold two
    readable meta pages and every page its live meta page counts. A file too short for its
    meta pages is re-read for a moment first, since a process creating the store writes them
    just after creating the file; so is one shorter than its meta page counts, since another
    process may commit between the two reads.
    """
    data = directory / 'data.mdb'
    _refuse_link(data)
    _refuse_link(directory / 'lock.mdb')
    try:
        fd = os.open(data, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreLocationError(f'cannot read {data}: {exc.strerror or exc}') from None
    try:
        for attempt in range(_SETTLE_TRIES):
            size = os.fstat(fd).st_size
            try:
                live, _ = read_metas(lambda offset, count: os.pread(fd, count, offset))
            except CorruptStoreError:
                if size >= 2 * 4096 or attempt == _SETTLE_TRIES - 1:
                    if size == 0:
                        raise CorruptStoreError(
                            f'{data} is empty: the store file was truncated or replaced. '
                            'Restore it from a backup or an export; nothing was opened'
                        ) from None
                    raise
                time.sleep(_SETTLE_WAIT)
                continue
            needed = (live.last_page + 1) * live.page_size
            if size < needed and attempt < _SETTLE_TRIES - 1:
                # A writer in another process may have grown the file and committed between the
                # size and the meta page read here: read both again before calling it truncated.
                time.sleep(_SETTLE_WAIT)
                continue
            if size < needed:
                raise CorruptStoreError(
                    f'{data} is truncated: it holds {size} bytes and its pages need {needed}. '
                    'Restore it from a backup or an export; nothing was opened'
                )
            _check_open_paths(data, lambda offset, count: os.pread(fd, count, offset))
            return
    finally:
        os.close(fd)


OPEN_KEYS: Final = {
    LMDB_TABLES[Table.META][0].decode(): (lmdb_key(Table.META, META_FORMAT), lmdb_key(Table.META, META_LAST_SEQ))
}
"""What opening a store reads besides the main tree: the format record and the last `seq`
(META rows of the shared `index` database)."""
_PATH_TRIES: Final = 5


def _check_open_paths(data: Path, read: Callable[[int, int], bytes]) -> None:
    """Refuse a file whose pages that opening reads are damaged, which would crash LMDB on open.

    Walks the main tree (the named databases; a page or two) and the lookup paths of
    `OPEN_KEYS`. Nothing pins the snapshot here, so a finding counts only when no commit
    happened during the walk (the live meta page is unchanged); otherwise it is walked again.
    """
    for _ in range(_PATH_TRIES):
        live, _ = read_metas(read)
        walker = _Walker(read, live)
        databases = dict(walker.tree('the main tree', live.main))
        if not walker.findings:
            for name, keys in OPEN_KEYS.items():
                record = databases.get(name)
                for key in keys if record is not None else ():
                    walker.descend(f'database {name!r}', record, key)  # pyright: ignore[reportArgumentType]
        if not walker.findings:
            return
        if read_metas(read)[0].txn_id == live.txn_id:
            where, reason = walker.findings[0]
            raise CorruptStoreError(
                f'{data} is damaged where opening reads it ({where}: {reason}); opening it would crash the '
                'storage engine. Restore it from a backup or an export; nothing was opened'
            )


class _Walker:
    """Walks the B-trees of one snapshot of the file, page by page."""

    def __init__(self, read: Callable[[int, int], bytes], meta: Meta) -> None:
        self.read = read
        self.meta = meta
        self.size = meta.page_size
        self.seen: set[int] = set()
        self.findings: list[Finding] = []

    def page(self, pgno: int) -> bytes:
        raw = self.read(pgno * self.size, self.size)
        if len(raw) < self.size:
            raise _Stop(f'page {pgno} lies past the end of the file')
        return raw

    def note(self, where: str, reason: str) -> None:
        self.findings.append(Finding(where, reason))

    def claim(self, pgno: int, name: str) -> bool:
        if pgno in self.seen:
            self.note(name, f'page {pgno} is reached twice')
            return False
        if pgno < 2 or pgno > self.meta.last_page:
            self.note(name, f'page {pgno} lies outside the file (last page {self.meta.last_page})')
            return False
        self.seen.add(pgno)
        return True

    def tree(self, name: str, db: DbRecord) -> list[tuple[str, DbRecord]]:
        """Walk one tree; return the named databases its leaves hold (for the main tree)."""
        counts = [0, 0, 0, 0]  # branch, leaf, overflow pages, entries
        subs: list[tuple[str, DbRecord]] = []
        if db.root == _P_INVALID:
            if db.depth or db.entries or db.branch_pages or db.leaf_pages or db.overflow_pages:
                self.note(name, 'an empty tree records pages or entries')
            return subs
        try:
            self._node_page(name, db, db.root, 1, None, None, counts, subs)
        except _Stop as stop:
            self.note(name, str(stop))
            return subs
        stated = (db.branch_pages, db.leaf_pages, db.overflow_pages)
        found = (counts[0], counts[1], counts[2])
        if stated != found:
            self.note(name, f'the tree records {stated} branch, leaf and overflow pages; the walk found {found}')
        if not db.flags & _MDB_DUPSORT and db.entries != counts[3]:
            self.note(name, f'the tree records {db.entries} entries; the walk found {counts[3]}')
        return subs

    def descend(self, name: str, db: DbRecord, key: bytes) -> None:
        """Check the pages a lookup of `key` reads, from `db`'s root down to its leaf.

        Cheap (one page per level), so it can run before every open; `tree` is the full walk.
        """
        if db.root == _P_INVALID:
            return
        order = self._key_order(db)
        target = order(key)
        pgno, level = db.root, 1
        while True:
            where = f'{name}, page {pgno}'
            if pgno < 2 or pgno > self.meta.last_page:
                self.note(where, f'the page lies outside the file (last page {self.meta.last_page})')
                return
            try:
                raw = self.page(pgno)
            except _Stop as stop:
                self.note(where, str(stop))
                return
            stored, _, flags, lower, upper = _HEADER.unpack_from(raw, 0)
            kind = flags & _P_TYPE
            if (
                stored != pgno
                or flags & ~_P_ALLOWED
                or kind not in (P_BRANCH, P_LEAF)
                or not PAGE_HEADER < lower <= upper <= self.size
                or (lower - PAGE_HEADER) % 2
            ):
                self.note(where, 'the page header is damaged')
                return
            if level > db.depth or (kind == P_LEAF) != (level == db.depth):
                self.note(where, f'a {"leaf" if kind == P_LEAF else "branch"} at depth {level} of {db.depth}')
                return
            count = (lower - PAGE_HEADER) // 2
            child: int | None = None
            for index, offset in enumerate(struct.unpack_from(f'<{count}H', raw, PAGE_HEADER)):
                if offset < upper or offset + _NODE.size > self.size:
                    self.note(where, f'node {index} lies outside the page (offset {offset})')
                    return
                lo, hi, node_flags, key_size = _NODE.unpack_from(raw, offset)
                start = offset + _NODE.size
                data_size = 8 if kind == P_BRANCH or node_flags & F_BIGDATA else lo | hi << 16
                if start + key_size + (0 if kind == P_BRANCH else data_size) > self.size:
                    self.note(where, f'node {index} runs past the page')
                    return
                if kind == P_BRANCH and (index == 0 or order(raw[start : start + key_size]) <= target):  # type: ignore[operator]
                    child = lo | hi << 16 | node_flags << 32
            if kind == P_LEAF or child is None:
                return
            pgno, level = child, level + 1

    def _key_order(self, db: DbRecord) -> Callable[[bytes], object]:
        if db.flags & _MDB_INTEGERKEY:
            return lambda key: int.from_bytes(key, 'little')
        if db.flags & _MDB_REVERSEKEY:
            return lambda key: key[::-1]
        return lambda key: key

    def _node_page(
        self,
        name: str,
        db: DbRecord,
        pgno: int,
        level: int,
        low: bytes | None,
        high: bytes | None,
        counts: list[int],
        subs: list[tuple[str, DbRecord]],
    ) -> None:
        where = f'{name}, page {pgno}'
        if not self.claim(pgno, name):
            return
        raw = self.page(pgno)
        stored, _, flags, lower, upper = _HEADER.unpack_from(raw, 0)
        if stored != pgno:
            self.note(where, f'the page says it is page {stored}')
            return
        kind = flags & _P_TYPE
        if flags & ~_P_ALLOWED or kind not in (P_BRANCH, P_LEAF):
            self.note(where, f'the page flags {flags:#x} are not those of a branch or leaf page')
            return
        if not (PAGE_HEADER <= lower <= upper <= self.size) or (lower - PAGE_HEADER) % 2:
            self.note(where, f'the page bounds lower={lower} upper={upper} are impossible')
            return
        count = (lower - PAGE_HEADER) // 2
        if count == 0:
            self.note(where, 'the page holds no nodes')
            return
        if kind == P_LEAF and level != db.depth:
            self.note(where, f'a leaf at depth {level} in a tree of depth {db.depth}')
        if kind == P_BRANCH and level >= db.depth:
            self.note(where, f'a branch at depth {level} in a tree of depth {db.depth}')
            return
        order = self._key_order(db)
        counts[0 if kind == P_BRANCH else 1] += 1
        previous: object = None if low is None else order(low)
        limit: object = None if high is None else order(high)
        pointers = struct.unpack_from(f'<{count}H', raw, PAGE_HEADER)
        children: list[tuple[int, bytes | None, bytes | None]] = []
        keys: list[bytes] = []
        for index, offset in enumerate(pointers):
            if offset < upper or offset + _NODE.size > self.size:
                self.note(where, f'node {index} lies outside the page (offset {offset})')
                return
            lo, hi, node_flags, key_size = _NODE.unpack_from(raw, offset)
            key_start = offset + _NODE.size
            if key_start + key_size > self.size:
                self.note(where, f'the key of node {index} runs past the page')
                return
            key = raw[key_start : key_start + key_size]
            keys.append(key)
            if kind == P_BRANCH:
                child = lo | hi << 16 | node_flags << 32
                if index > 0:
                    if key_size == 0:
                        self.note(where, f'branch node {index} has an empty key')
                        return
                    here = order(key)
                    if previous is not None and not previous < here:  # type: ignore[operator]
                        self.note(where, f'the keys are out of order at node {index}')
                        return
                    if limit is not None and not here < limit:  # type: ignore[operator]
                        self.note(where, f'node {index} has a key beyond its parent separator')
                        return
                    previous = here
                children.append((child, None, None))
                continue
            data_size = lo | hi << 16
            here = order(key)
            if previous is not None and not (previous <= here if index == 0 and low is not None else previous < here):  # type: ignore[operator]
                self.note(where, f'the keys are out of order at node {index}')
                return
            if limit is not None and not here < limit:  # type: ignore[operator]
                self.note(where, f'node {index} has a key beyond its parent separator')
                return
            previous = here
            data_start = key_start + key_size
            stored_size = 8 if node_flags & F_BIGDATA else data_size
            if data_start + stored_size > self.size:
                self.note(where, f'the data of node {index} runs past the page')
                return
            if node_flags & ~(F_BIGDATA | F_SUBDATA | F_DUPDATA):
                self.note(where, f'node {index} has unknown flags {node_flags:#x}')
                return
            counts[3] += 1
            if node_flags & F_BIGDATA:
                (first,) = struct.unpack_from('<Q', raw, data_start)
                self._overflow(name, first, data_size, counts)
            elif node_flags & F_SUBDATA and not node_flags & F_DUPDATA:
                if data_size != _DB.size:
                    self.note(where, f'node {index} names a database with a record of {data_size} bytes')
                    continue
                record = DbRecord(*_DB.unpack_from(raw, data_start))
                subs.append((key.decode('utf-8', errors='backslashreplace'), record))
        if kind == P_BRANCH:
            bounds = [low, *keys[1:], high]
            for index, (child, _, _) in enumerate(children):
                if child > self.meta.last_page:
                    self.note(where, f'node {index} points to page {child}, past the last page {self.meta.last_page}')
                    continue
                self._node_page(name, db, child, level + 1, bounds[index], bounds[index + 1], counts, subs)

    def _overflow(self, name: str, first: int, data_size: int, counts: list[int]) -> None:
        pages = (PAGE_HEADER - 1 + data_size) // self.size + 1
        where = f'{name}, overflow page {first}'
        if first < 2 or first + pages - 1 > self.meta.last_page:
            self.note(where, f'{pages} overflow pages from page {first} lie outside the file')
            return
        if not self.claim(first, name):
            return
        raw = self.page(first)
        stored, _, flags, _, _ = _HEADER.unpack_from(raw, 0)
        (count,) = _OVERFLOW_PAGES.unpack_from(raw, 12)
        if stored != first:
            self.note(where, f'the page says it is page {stored}')
            return
        if flags & _P_TYPE != P_OVERFLOW or flags & ~_P_ALLOWED:
            self.note(where, f'the page flags {flags:#x} are not those of an overflow page')
            return
        if count != pages:
            self.note(where, f'the page counts {count} overflow pages; its value needs {pages}')
            return
        for extra in range(first + 1, first + pages):
            if extra in self.seen:
                self.note(where, f'page {extra} is reached twice')
            self.seen.add(extra)
        counts[2] += pages


class _Stop(Exception):
    """The walk cannot go on (a page past the end of the file)."""


def walk(read: Callable[[int, int], bytes], txn_id: int) -> list[Finding]:
    """Walk the snapshot whose meta page records `txn_id` through `read(offset, size)`.

    The caller holds a read transaction with that id, so LMDB reuses none of the snapshot's
    pages while the walk reads them. Raises `LookupError` when neither meta page records
    `txn_id` any more (a writer committed twice since the transaction began).
    """
    try:
        live, other = read_metas(read)
    except CorruptStoreError as exc:
        return [Finding('meta', str(exc))]
    meta = live if live.txn_id == txn_id else other
    if meta is None or meta.txn_id != txn_id:
        raise LookupError(txn_id)
    walker = _Walker(read, meta)
    if other is not None and live.txn_id - other.txn_id not in (0, 1):
        # LMDB writes the two meta pages in turn, one transaction apart; anything else means
        # one was altered, and LMDB may be serving an older commit than the last one made.
        walker.note(
            'the meta pages',
            f'they record transactions {live.txn_id} and {other.txn_id}, which LMDB never leaves more than '
            'one apart: one meta page was altered, and the store may be showing an older state',
        )
    try:
        walker.page(meta.last_page)
    except _Stop:
        return [Finding('file', f'the file is shorter than its {meta.last_page + 1} pages')]
    walker.tree('the free-page tree', meta.free)
    for sub_name, record in walker.tree('the main tree', meta.main):
        walker.tree(f'database {sub_name!r}', record)
    return walker.findings
