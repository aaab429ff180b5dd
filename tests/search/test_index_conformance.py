"""One conformance suite for the search index, run on the in-memory, LMDB and PostgreSQL backends,
and on PostgreSQL with the index kept in a local LMDB directory (`LocalProjections`).

The index (`search.persistent_index.PersistentIndex`) stands
on the storage protocol's projection API, so the same code runs on both backends. On each: catching up step by step gives exactly
the records a rebuild gives, the ranking is the in-memory `HistorySourceBackend`'s, and
deletes, archives, context compactions, forks and store compaction are followed. Both
backends hold byte-identical records for the same log. On LMDB, a catch-up killed with
SIGKILL inside its write transaction leaves the last committed batch, records and
position together, and the next catch-up ends where a rebuild does.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from backends import make_log, postgres_dsn, schema_for
from pgserver import drop_schema
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from eventlog import (
    InMemoryEventLog,
    LmdbEventLog,
    ReplayHistorySource,
    compaction_entry,
    message_entry,
    run_finished_entry,
    run_started_entry,
)
from eventlog.log import EventLogBase
from eventlog.postgres_log import PostgresEventLog
from search import SearchEngine, SearchOptions
from search.index_format import INDEX_PROJECTION
from search.memory_index import HistorySourceBackend
from search.persistent_index import PersistentIndex as LmdbIndex
from tests.log.logtools import at
from tests.search.test_lmdb_index import WORDS

IndexDump = tuple[int | None, dict[str, list[tuple[bytes, bytes]]]]


def dump(log: EventLogBase) -> IndexDump:
    """Every record of the index and its position."""
    index = LmdbIndex.open_existing(log)
    return index.log.read_projection(
        INDEX_PROJECTION, lambda r, _: (r.position(), {t: list(r.scan(t)) for t in INDEX_PROJECTION.tables})
    )


def make(backend: str, path: Path) -> EventLogBase:
    if backend == 'memory':
        return InMemoryEventLog()
    if backend == 'lmdb':
        return LmdbEventLog(path, sync=False)
    if backend == 'postgres':
        return make_log('postgres', path)
    # The index in a local LMDB directory that follows the PostgreSQL log (one machine's copy).
    return PostgresEventLog(
        postgres_dsn(), schema=schema_for(path / 'store.lmdb'), projections_dir=path / 'local-index'
    )


@pytest.fixture(params=['memory', 'lmdb', 'postgres', 'postgres-local'])
async def log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLogBase]:
    instance = make(request.param, tmp_path / 'store')
    try:
        yield instance
    finally:
        instance.close()
        if request.param.startswith('postgres'):
            drop_schema(postgres_dsn(), schema_for(tmp_path / 'store' / 'store.lmdb'))


class History:
    """A seeded history of threaded, restarted, forked, cross-continued, archived, compacted and
    deleted conversations, appended step by step."""

    def __init__(self, log: EventLogBase, seed: int) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.counter = 0
        self.tips: dict[str, int] = {}
        self.conversations = ['c0', 'c1', 'c2']

    def message(self) -> ModelMessage:
        self.counter += 1
        words = ' '.join(self.rng.choices(WORDS, k=self.rng.randint(1, 20)))
        return ModelRequest(parts=[UserPromptPart(f'{words} unique{self.counter}', timestamp=at(self.counter))])

    async def run(self, conversation: str, parent: int | None) -> None:
        self.counter += 1
        run_id = f'run{self.counter}'
        log = self.log
        await log.append(run_started_entry(conversation_id=conversation, run_id=run_id, parent=parent))
        messages = [self.message() for _ in range(self.rng.randint(1, 5))]
        seqs = list(
            await log.append_many([message_entry(m, conversation_id=conversation, run_id=run_id) for m in messages])
        )
        if len(seqs) >= 3 and self.rng.random() < 0.3:
            summary = [self.message()]
            await log.append(
                compaction_entry(conversation_id=conversation, run_id=run_id, replaced=seqs[:2], summary=summary)
            )
        self.tips[conversation] = await log.append(
            run_finished_entry(conversation_id=conversation, run_id=run_id, status='completed')
        )

    async def step(self) -> None:
        roll = self.rng.random()
        conv = self.rng.choice(self.conversations)
        log = self.log
        if roll < 0.55 or not self.tips:
            await self.run(conv, self.tips.get(conv) if self.rng.random() < 0.85 else None)
        elif roll < 0.65:
            source = self.rng.choice(sorted(self.tips))
            self.counter += 1
            new_id = f'f{self.counter}'
            history = await log.entries(conversation_id=source, kinds=['message'])
            at_seq = self.rng.choice(history).seq if history and self.rng.random() < 0.5 else None
            await log.fork(source, at_seq=at_seq, new_conversation_id=new_id)
            self.conversations.append(new_id)
            await self.run(new_id, (await log.entries(conversation_id=new_id))[-1].seq)
        elif roll < 0.72:
            await self.run(conv, self.tips[self.rng.choice(sorted(self.tips))])  # continues another conversation
        elif roll < 0.8:
            victim = self.rng.choice(sorted(self.tips))
            await (log.archive(victim) if self.rng.random() < 0.7 else log.unarchive(victim))
        elif roll < 0.86:
            victim = self.rng.choice(sorted(self.tips))
            await log.delete_conversation(victim)
            del self.tips[victim]
            self.conversations.remove(victim)
            if not self.conversations:
                self.conversations.append(f'c{self.counter}')
        else:
            await self.run(conv, self.tips.get(conv))


async def answers(backend: object, log: EventLogBase, queries: list[str]) -> list[str]:
    engine = SearchEngine(backend, SearchOptions(context_lines=2, max_matches=8))  # type: ignore[arg-type]
    conversations = [c.conversation_id for c in await log.list_conversations(include_archived=True)]
    runs = [r.run_id for r in await log.list_runs()]
    out = [await engine.search(query, scope='all', conversation_id=None) for query in queries]
    for conv in conversations:
        out.extend([await engine.search(query, scope='conversation', conversation_id=conv) for query in queries])
    for run_id in runs[:3]:
        out.append(
            await engine.search(queries[0], scope='conversation', conversation_id=conversations[0], run_id=run_id)
        )
    return out


QUERIES = ['deploy server', 'unique3 unique40 budget', 'kubernetes cache', 'nothingmatches']


@pytest.mark.parametrize('seed', range(3))
async def test_catching_up_step_by_step_gives_what_a_rebuild_gives(log: EventLogBase, seed: int) -> None:
    history = History(log, seed)
    index = LmdbIndex(log)
    for step in range(30):
        await history.step()
        if step % 4 == 0:
            index.catch_up()
        if step % 7 == 0:  # a search catches up by itself
            await SearchEngine(index, SearchOptions()).search('deploy', scope='all', conversation_id=None)
    if isinstance(log, LmdbEventLog):
        await log.compact()  # brings the index up to date first
    else:
        index.catch_up()
    incremental = dump(log)
    assert incremental[0] == await log.last_seq()
    assert sum(len(records) for records in incremental[1].values()) > 100
    index.rebuild()
    assert dump(log) == incremental
    assert index.verify() == []


@pytest.mark.parametrize('seed', range(3))
async def test_ranking_equals_the_in_memory_corpus(log: EventLogBase, seed: int) -> None:
    history = History(log, 10 + seed)
    for _ in range(25):
        await history.step()
    index = LmdbIndex(log)
    mine = await answers(index, log, QUERIES)
    reference = await answers(HistorySourceBackend(ReplayHistorySource(log)), log, QUERIES)
    assert mine == reference
    assert sum(answer.startswith('Found ') for answer in mine) > 5


async def test_both_backends_hold_the_same_records(tmp_path: Path) -> None:
    dumps: list[IndexDump] = []
    for backend in ('memory', 'lmdb'):
        log = make(backend, tmp_path / 'store')
        try:
            history = History(log, 5)
            index = LmdbIndex(log)
            for step in range(30):
                await history.step()
                if step % 5 == 0:
                    index.catch_up()
            index.catch_up()
            dumps.append(dump(log))
        finally:
            log.close()
    assert dumps[0] == dumps[1]


async def test_a_deleted_conversation_leaves_no_record(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='secret', run_id='s1'))
    await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('password hunter2')]), conversation_id='secret', run_id='s1')
    )
    await log.fork('secret', new_conversation_id='copy')
    fork_tip = (await log.entries(conversation_id='copy'))[-1].seq
    await log.append(run_started_entry(conversation_id='copy', run_id='c1', parent=fork_tip))
    await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('fork talk')]), conversation_id='copy', run_id='c1')
    )
    index = LmdbIndex(log)
    engine = SearchEngine(index, SearchOptions())
    assert 'hunter2' in await engine.search('hunter2', scope='conversation', conversation_id='copy')
    await log.delete_conversation('secret')
    answer = await engine.search('hunter2', scope='all', conversation_id=None)
    assert answer.startswith('No matches for ')
    _, tables = dump(log)
    assert not any(
        b'hunter2' in key + value or key.startswith(b'secret\x00') for rows in tables.values() for key, value in rows
    )
    assert 'fork talk' in await engine.search('fork talk', scope='conversation', conversation_id='copy')


async def test_the_position_of_a_message_maps_to_its_entry(log: EventLogBase) -> None:
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    seqs = list(
        await log.append_many(
            [
                message_entry(ModelRequest(parts=[UserPromptPart(f'm{i}')]), conversation_id='c', run_id='r')
                for i in range(3)
            ]
        )
    )
    index = LmdbIndex(log)
    index.catch_up()
    assert [index.seq_at('r', position) for position in range(4)] == [*seqs, None]
    assert index.seq_at('nope', 0) is None and index.seq_at('r', -1) is None


# --- LMDB: a catch-up killed inside its transaction -----------------------------------------------

_KILLED_CATCH_UP = """
import sys
import search.index_writer as iw
import search.persistent_index as ix
from eventlog import LmdbEventLog
ix._CATCH_UP_BATCH = 40
flush = iw.IndexWriter.flush
batches = 0
def flush_then_hang(self, position):
    global batches
    flush(self, position)  # records and the new position written, the transaction still open
    batches += 1
    if batches == 2:
        print('inside', flush=True)
        sys.stdin.readline()
iw.IndexWriter.flush = flush_then_hang
log = LmdbEventLog(sys.argv[1], sync=False)
ix.PersistentIndex(log).catch_up()
"""


async def test_a_catch_up_killed_mid_transaction_keeps_its_last_committed_batch(tmp_path: Path) -> None:
    path = tmp_path / 'store'
    log = LmdbEventLog(path, sync=False)
    history = History(log, 21)
    for _ in range(30):
        await history.step()
    entries = [entry.seq for entry in await log.entries()]
    assert len(entries) > 2 * 40
    log.close()

    child = subprocess.Popen(
        [sys.executable, '-c', _KILLED_CATCH_UP, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == 'inside'
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:  # pragma: no cover - only when the test failed before the kill
            child.kill()
    assert child.returncode == -signal.SIGKILL

    # The same entries, indexed in memory and stopped after one batch of 40, hold exactly what
    # the killed process committed.
    replica = InMemoryEventLog()
    replay = History(replica, 21)
    for _ in range(30):
        await replay.step()
    import search.persistent_index as ix

    class _Stop(Exception):
        pass

    def stop(done: int, total: int) -> None:
        raise _Stop

    saved = ix._CATCH_UP_BATCH  # pyright: ignore[reportPrivateUsage]
    ix._CATCH_UP_BATCH = 40  # pyright: ignore[reportPrivateUsage]
    try:
        with pytest.raises(_Stop):
            LmdbIndex(replica).catch_up(progress=stop)
    finally:
        ix._CATCH_UP_BATCH = saved  # pyright: ignore[reportPrivateUsage]
    one_batch = dump(replica)
    assert one_batch[0] == entries[39]

    reopened = LmdbEventLog(path)
    try:
        assert dump(reopened) == one_batch
        index = LmdbIndex(reopened)
        index.catch_up()
        caught_up = dump(reopened)
        assert caught_up[0] == entries[-1]
        index.rebuild()
        assert dump(reopened) == caught_up
    finally:
        reopened.close()
