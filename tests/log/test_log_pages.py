"""The pages an append writes to an LMDB store, read from the store file's B-trees.

LMDB copies every page a commit changes to a page number the previous snapshot's trees did not
hold, so the pages of each tree that are new after a commit are the pages it wrote. Deterministic:
no timing, only the layout of the file (the write path's cost per commit is `bench_commit_cost.py`'s).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from logtools import add_run, exchange

from eventlog import LmdbEventLog
from eventlog._lmdb_check import _Walker, read_metas  # pyright: ignore[reportPrivateUsage]
from eventlog.entries import message_entry, run_finished_entry, run_started_entry


class Tree(NamedTuple):
    pages: frozenset[int]
    depth: int


def _trees(data: Path) -> dict[str, Tree]:
    """Every B-tree of the file's live snapshot: the main tree, the free-page tree, each database."""
    fd = os.open(data, os.O_RDONLY)
    try:

        def read(offset: int, count: int) -> bytes:
            return os.pread(fd, count, offset)

        live, _ = read_metas(read)
        walker = _Walker(read, live)
        trees: dict[str, Tree] = {}
        for name, record in [('main', live.main), ('free', live.free)]:
            seen = set(walker.seen)
            found = walker.tree(name, record)
            trees[name] = Tree(frozenset(walker.seen - seen), record.depth)
            if name == 'main':
                for sub, sub_record in found:
                    seen = set(walker.seen)
                    walker.tree(sub, sub_record)
                    trees[sub] = Tree(frozenset(walker.seen - seen), sub_record.depth)
        assert not walker.findings, walker.findings
        return trees
    finally:
        os.close(fd)


def _written(before: dict[str, Tree], after: dict[str, Tree]) -> dict[str, int]:
    return {name: len(tree.pages - before[name].pages) for name, tree in after.items()}


async def test_an_append_to_a_running_run_writes_four_index_leaves_and_their_root(tmp_path: Path) -> None:
    """A message or a run's end writes its entry, its conversation's BY_CONV key, its run's record,
    its conversation's record and its idempotency key: four leaves of the shared `index` tree
    (the last `seq` comes from the entries table, so no META page), one of `entries`, and the
    pages above them; with the main tree's page, 9 pages for two-level trees."""
    data = tmp_path / 's' / 'data.mdb'
    log = LmdbEventLog(tmp_path / 's', sync=False)
    try:
        for round_ in range(8):
            for conv in range(30):
                await add_run(log, f'conv-{conv:02d}', f'run-{conv:02d}-{round_}', exchange(round_))
        start = run_started_entry(conversation_id='conv-15', run_id='new', idempotency_key='start')
        await log.append_many([start])
        messages = exchange(99)
        steps = [
            message_entry(messages[0], conversation_id='conv-15', run_id='new', idempotency_key='m0'),
            message_entry(messages[1], conversation_id='conv-15', run_id='new', idempotency_key='m1'),
            run_finished_entry(conversation_id='conv-15', run_id='new', status='completed', idempotency_key='end'),
        ]
        for entry in steps:
            before = _trees(data)
            assert before['index'].depth == before['entries'].depth == 2, 'the store is big enough for branches'
            await log.append_many([entry])
            written = _written(before, _trees(data))
            assert written['entries'] == 2, written  # its leaf and the root above it
            assert written['index'] <= 4 + 1, written  # four leaves, one root
            assert written['main'] == 1, written
            assert sum(written.values()) <= 9, written
        assert (await log.verify()).ok
    finally:
        log.close()
