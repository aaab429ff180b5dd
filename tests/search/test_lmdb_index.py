"""The persistent LMDB index: same answers as the in-memory corpus, kept current, rebuildable."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from capability import ConversationSearch
from capability.search import backend_for
from eventlog import LmdbEventLog, ReplayHistorySource, message_entry, run_finished_entry, run_started_entry
from search import DefaultAnalyzer, SearchEngine, SearchOptions
from search.memory_index import HistorySourceBackend
from search.persistent_index import IndexAnalyzerMismatch
from search.persistent_index import PersistentIndex as LmdbIndex

WORDS = [
    'deploy',
    'server',
    'database',
    'migration',
    'alpha',
    'beta',
    'gamma',
    'kubernetes',
    'cluster',
    'backup',
    'restore',
    'invoice',
    'budget',
    'meeting',
    'friday',
    'monday',
    'report',
    'latency',
    'cache',
    'redis',
    'postgres',
    'index',
    'query',
    'search',
    'token',
    'model',
    'prompt',
    'compaction',
    'summary',
    'detail',
    'path',
    'number',
    'decision',
    'release',
    'branch',
    'merge',
    'review',
    'test',
    'failure',
    'retry',
]


def _at(i: int) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)


class Builder:
    """Builds a store of threaded, forked and deleted conversations from a seed."""

    def __init__(self, log: LmdbEventLog, seed: int) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.counter = 0
        self.tips: dict[str, int] = {}

    def text(self) -> str:
        self.counter += 1
        words = self.rng.choices(WORDS, k=self.rng.randint(1, 25))
        return ' '.join(words) + f' unique{self.counter}'

    def messages(self, n: int) -> list[ModelMessage]:
        out: list[ModelMessage] = []
        for _ in range(n):
            self.counter += 1
            i = self.counter
            roll = self.rng.random()
            if roll < 0.4:
                out.append(ModelRequest(parts=[UserPromptPart(self.text(), timestamp=_at(i))], timestamp=_at(i)))
            elif roll < 0.8:
                out.append(ModelResponse(parts=[TextPart(self.text())], timestamp=_at(i)))
            else:
                call = ToolCallPart('lookup', {'q': self.text()}, tool_call_id=f'c{i}')
                out.append(ModelResponse(parts=[call], timestamp=_at(i)))
                ret = ToolReturnPart('lookup', self.text(), tool_call_id=f'c{i}', timestamp=_at(i))
                out.append(ModelRequest(parts=[ret], timestamp=_at(i)))
        return out

    async def run(self, conversation: str, *, parent: int | None) -> str:
        self.counter += 1
        run_id = f'run{self.counter}'
        await self.log.append(run_started_entry(conversation_id=conversation, run_id=run_id, parent=parent))
        entries = [
            message_entry(m, conversation_id=conversation, run_id=run_id) for m in self.messages(self.rng.randint(1, 6))
        ]
        await self.log.append_many(entries)
        seq = await self.log.append(run_finished_entry(conversation_id=conversation, run_id=run_id, status='completed'))
        self.tips[conversation] = seq
        return run_id

    async def build(self, steps: int) -> None:
        conversations = ['c0', 'c1', 'c2']
        for _ in range(steps):
            roll = self.rng.random()
            conv = self.rng.choice(conversations)
            if roll < 0.6:
                await self.run(conv, parent=self.tips.get(conv) if self.rng.random() < 0.8 else None)
            elif roll < 0.7 and self.tips:
                source = self.rng.choice(sorted(self.tips))
                self.counter += 1
                new_id = f'f{self.counter}'
                await self.log.fork(source, new_conversation_id=new_id)
                conversations.append(new_id)
                fork_entry = (await self.log.entries(conversation_id=new_id))[-1].seq
                await self.run(new_id, parent=fork_entry)
            elif roll < 0.75 and self.tips:
                source = self.rng.choice(sorted(self.tips))
                await self.run(conv, parent=self.tips[source])  # continues another conversation
            elif roll < 0.8 and self.tips:
                victim = self.rng.choice(sorted(self.tips))
                await self.log.delete_conversation(victim)
                del self.tips[victim]
            else:
                await self.run(conv, parent=self.tips.get(conv))


async def _answers(backend: object, log: LmdbEventLog, queries: list[str], context_lines: int) -> list[str]:
    engine = SearchEngine(backend, SearchOptions(context_lines=context_lines, max_matches=8))  # type: ignore[arg-type]
    conversations = [c.conversation_id for c in await log.list_conversations(include_archived=True)]
    runs = [r.run_id for r in await log.list_runs()]
    out: list[str] = []
    for query in queries:
        out.append(await engine.search(query, scope='all', conversation_id=None))
        for conv in conversations:
            out.append(await engine.search(query, scope='conversation', conversation_id=conv))
        for run_id in runs[:3]:
            out.append(
                await engine.search(query, scope='conversation', conversation_id=conversations[0], run_id=run_id)
            )
    return out


@pytest.mark.parametrize('seed', range(6))
async def test_persistent_index_answers_exactly_like_the_in_memory_corpus(tmp_path: Path, seed: int) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
    builder = Builder(log, seed)
    await builder.build(25)
    queries = ['deploy server', 'unique3 unique40 budget', 'kubernetes', 'summary detail path', 'nothingmatches']
    for context_lines in (0, 3):
        memory = await _answers(HistorySourceBackend(ReplayHistorySource(log)), log, queries, context_lines)
        persistent = await _answers(LmdbIndex(log), log, queries, context_lines)
        for mine, theirs in zip(persistent, memory, strict=True):
            assert mine.splitlines() == theirs.splitlines()
    assert sum(a.startswith('Found ') for a in memory) > 5
    log.close()


async def test_conversation_scope_never_reaches_another_conversation(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
    await Builder(log, 11).build(30)
    conversations = {c.conversation_id for c in await log.list_conversations(include_archived=True)}
    runs = {r.run_id: r.conversation_id for r in await log.list_runs()}
    engine = SearchEngine(LmdbIndex(log), SearchOptions(max_matches=50, context_lines=2))
    for conv in conversations:
        own_text = (await log.transcript_json(conv)).decode()
        for query in ('deploy', 'unique1 unique2 unique3 unique50 unique90', 'cache friday'):
            answer = await engine.search(query, scope='conversation', conversation_id=conv)
            named_conversations = {
                line.rsplit('conversation ', 1)[1] for line in answer.splitlines() if '| conversation ' in line
            }
            assert named_conversations <= {conv}
            named_runs = {line.split('| run ')[1].split(' |')[0] for line in answer.splitlines() if '| run ' in line}
            assert all(runs[r] == conv for r in named_runs)
            # Every unique token shown comes from this conversation's own history.
            shown = '\n'.join(answer.splitlines()[1:])  # the first line echoes the query
            for token in {w for w in shown.replace('[', ' ').split() if w.startswith('unique')}:
                assert token.strip('.,"') in own_text
    log.close()


async def test_index_follows_appends_and_survives_restarts(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path, sync=False)
    builder = Builder(log, 1)
    await builder.build(10)
    index = LmdbIndex(log)
    engine = SearchEngine(index, SearchOptions())
    await engine.search('deploy', scope='all', conversation_id=None)
    state = index.state()
    assert state.position == state.log_position > 0
    assert state.documents > 0
    # New appends are seen by the next search.
    await log.append(run_started_entry(conversation_id='c0', run_id='late'))
    await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('zebracorn appears')]), conversation_id='c0', run_id='late')
    )
    answer = await engine.search('zebracorn', scope='conversation', conversation_id='c0')
    assert 'zebracorn appears' in answer
    log.close()
    reopened = LmdbEventLog(path)
    index2 = LmdbIndex(reopened)
    assert index2.state().position == index2.state().log_position  # nothing to redo after a restart
    answer2 = await SearchEngine(index2, SearchOptions()).search(
        'zebracorn', scope='conversation', conversation_id='c0'
    )
    assert answer2 == answer
    reopened.close()


async def test_index_sees_what_another_process_appended(tmp_path: Path) -> None:
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    engine = SearchEngine(LmdbIndex(log), SearchOptions())
    assert 'otterbridge' not in await engine.search('otterbridge', scope='all', conversation_id=None)
    code = (
        'import asyncio\n'
        'from pydantic_ai.messages import ModelRequest, UserPromptPart\n'
        'from eventlog import LmdbEventLog, message_entry, run_started_entry\n'
        'async def main():\n'
        f'    log = LmdbEventLog({str(path)!r})\n'
        "    await log.append(run_started_entry(conversation_id='other', run_id='x1'))\n"
        "    await log.append(message_entry(ModelRequest(parts=[UserPromptPart('the otterbridge code is 7731')]), "
        "conversation_id='other', run_id='x1'))\n"
        '    log.close()\n'
        'asyncio.run(main())\n'
    )
    subprocess.run([sys.executable, '-c', code], check=True, timeout=120)
    answer = await engine.search('otterbridge', scope='conversation', conversation_id='other')
    assert 'the otterbridge code is 7731' in answer
    log.close()


async def test_a_message_another_process_erased_is_not_shown_from_this_ones_cache(tmp_path: Path) -> None:
    """The erasure is applied to the shared index by the process that made it: this process's
    cache of shown messages must still let go of the erased text (the index's erasure mark)."""
    path = tmp_path / 's'
    log = LmdbEventLog(path)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    secret = ModelRequest(parts=[UserPromptPart('the vault password is hunter2')])
    await log.append(message_entry(secret, conversation_id='c', run_id='r'))
    engine = SearchEngine(LmdbIndex(log), SearchOptions())
    assert 'hunter2' in await engine.search('vault', scope='conversation', conversation_id='c')  # now cached
    code = (
        'import asyncio\n'
        'from eventlog import LmdbEventLog\n'
        'from search.persistent_index import PersistentIndex as LmdbIndex\n'
        'async def main():\n'
        f'    log = LmdbEventLog({str(path)!r})\n'
        "    await log.erase('c', run_id='r')\n"
        '    LmdbIndex(log).catch_up()\n'
        '    log.close()\n'
        'asyncio.run(main())\n'
    )
    subprocess.run([sys.executable, '-c', code], check=True, timeout=120)
    # The placeholder's own words find the erased message; it is shown as the placeholder.
    answer = await engine.search('erased', scope='conversation', conversation_id='c')
    assert answer.startswith('Found 1 match'), answer
    assert 'hunter2' not in answer and '[erased: ' in answer
    log.close()


async def test_rebuild_gives_identical_results(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
    await Builder(log, 3).build(20)
    index = LmdbIndex(log)
    queries = ['deploy cache', 'unique5', 'report friday']
    before = await _answers(index, log, queries, 2)
    state = index.state()
    index.rebuild()
    assert index.state() == state
    assert await _answers(index, log, queries, 2) == before
    log.close()


async def test_deleting_a_conversation_removes_its_postings(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
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
    for scope, conv in (('all', None), ('conversation', 'copy'), ('conversation', 'secret')):
        answer = await engine.search('hunter2', scope=scope, conversation_id=conv)  # type: ignore[arg-type]
        assert 'hunter2' not in answer.split("'hunter2'")[-1].replace('"hunter2"', '')
    memory = SearchEngine(HistorySourceBackend(ReplayHistorySource(log)), SearchOptions())
    assert await engine.search('fork talk', scope='conversation', conversation_id='copy') == await memory.search(
        'fork talk', scope='conversation', conversation_id='copy'
    )
    # No index key mentions the deleted conversation any more.
    env = log.env
    for name in (b'ix.post', b'ix.stats', b'ix.held', b'ix.convruns', b'ix.copies'):
        db = env.open_db(name)
        with env.begin(db=db) as txn:
            assert not [k for k, _ in txn.cursor() if bytes(k).startswith(b'secret\x00')]
    log.close()


async def test_another_analyzer_is_refused_until_rebuilt(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append(
        message_entry(ModelRequest(parts=[UserPromptPart('deploying now')]), conversation_id='c', run_id='r')
    )
    default = LmdbIndex(log)
    await SearchEngine(default, SearchOptions()).search('deploy', scope='all', conversation_id=None)
    with pytest.raises(IndexAnalyzerMismatch, match='default'):
        LmdbIndex(log, 'english')
    with pytest.raises(IndexAnalyzerMismatch, match='english'):
        ConversationSearch(ReplayHistorySource(log), scope='all', analyzer='english').build_engine()
    default.rebuild('english')
    english = LmdbIndex(log, 'english')
    from search import get_analyzer

    answer = await SearchEngine(english, SearchOptions(analyzer=get_analyzer('english'))).search(
        'deployed', scope='all', conversation_id=None
    )
    assert 'deploying now' in answer
    log.close()


async def test_capability_uses_the_persistent_index_for_an_lmdb_log(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    assert isinstance(backend_for(ReplayHistorySource(log), DefaultAnalyzer()), LmdbIndex)
    from eventlog import InMemoryEventLog

    memory_source = ReplayHistorySource(InMemoryEventLog())
    assert backend_for(memory_source, DefaultAnalyzer()) is memory_source
    log.close()


async def test_catch_up_reports_progress_and_runs_off_the_event_loop(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's', sync=False)
    await log.append(run_started_entry(conversation_id='c', run_id='r'))
    await log.append_many(
        [
            message_entry(ModelRequest(parts=[UserPromptPart(f'note {i}')]), conversation_id='c', run_id='r')
            for i in range(3000)
        ]
    )
    index = LmdbIndex(log)
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    answer = await SearchEngine(index, SearchOptions()).search('note 2999', scope='all', conversation_id=None)
    done = True
    await task
    assert 'note 2999' in answer
    assert ticks > 2
    calls: list[tuple[int, int]] = []
    index.rebuild(progress=lambda done_, total: calls.append((done_, total)))
    assert calls[-1][0] == calls[-1][1] == 3001
    log.close()


def test_index_tables_stay_out_of_the_logs_tables(tmp_path: Path) -> None:
    log = LmdbEventLog(tmp_path / 's')
    with pytest.raises(ValueError, match='own tables'):
        log.open_table(b'entries')
    LmdbIndex(log)
    names = set()
    with log.env.begin() as txn:
        for key, _ in txn.cursor():
            names.add(bytes(key))
    assert b'ix.post' in names and b'entries' in names
    log.close()


@pytest.mark.parametrize('backend', ['lmdb', 'memory'])
async def test_verify_walks_the_tables_and_finds_each_kind_of_damage(tmp_path: Path, backend: str) -> None:
    """`LmdbIndex.verify` rebuilds beside the stored index and walks both in key order: an extra
    posting, a missing one and a wrong statistic are each found where they are, many differences
    are counted past the first `MAX_INDEX_FINDINGS`, and a damaged key sorting after the rebuilt
    records (`0xff...`) is found too; the store is left as it was."""
    from eventlog import InMemoryEventLog
    from eventlog.projection import ProjectionWriter
    from search.index_check import MAX_INDEX_FINDINGS
    from search.index_format import INDEX_PROJECTION

    log = LmdbEventLog(tmp_path / 's', sync=False) if backend == 'lmdb' else InMemoryEventLog()
    try:
        await Builder(log, 5).build(12)  # pyright: ignore[reportArgumentType]
        index = LmdbIndex(log)
        index.catch_up()
        assert index.verify() == []

        def damage(fn: object) -> None:
            log.write_projection(INDEX_PROJECTION, lambda records, _: fn(records))  # pyright: ignore

        def tables(records: ProjectionWriter) -> dict[str, list[tuple[bytes, bytes]]]:
            return {name: list(records.scan(name)) for name in ('post', 'stats')}

        snapshot: dict[str, list[tuple[bytes, bytes]]] = log.read_projection(INDEX_PROJECTION, lambda r, _: tables(r))  # pyright: ignore
        (missing, _), (changed, stat) = snapshot['post'][0], snapshot['stats'][1]
        conversation = changed.split(b'\x00', 1)[0].decode()

        def three(records: ProjectionWriter) -> None:
            records.put('post', b'c0\x00ozzz-not-a-term\x00\x00\x00\x00\x00', b'')
            records.delete('post', missing)
            records.put('stats', changed, stat[:-1] + bytes([stat[-1] ^ 1]))

        damage(three)
        found = index.verify()
        reasons = {(f.table, f.reason.split(' ', 2)[1]) for f in found}
        assert reasons == {('post', 'holds'), ('post', 'lacks'), ('stats', 'holds')}, found
        assert any('ozzz-not-a-term' in f.reason and f.conversation_id == 'c0' for f in found)
        assert any('another value' in f.reason and f.conversation_id == conversation for f in found)
        assert any(f'lacks the key {missing[:60].decode("utf-8", "backslashreplace")!r}' in f.reason for f in found)

        extra = MAX_INDEX_FINDINGS + 7

        def many(records: ProjectionWriter) -> None:
            for i in range(extra):
                records.put('held', f'c1\x00junk{i:03}'.encode(), b'')
            records.put('runs', b'\xff\xff\xff\xff after every rebuilt key', b'x')

        damage(many)
        before = index.state()
        found = index.verify()
        held = [f for f in found if f.table == 'held']
        assert len(held) == MAX_INDEX_FINDINGS + 1
        assert held[-1].reason == 'ix.held: 7 more differences'
        assert [f.table for f in found if 'after every rebuilt key' in f.reason] == ['runs']
        assert index.state() == before, 'verify leaves the index as it was'
        assert log.read_projection(INDEX_PROJECTION, lambda r, _: tables(r)) != snapshot  # the damage is still there
        index.rebuild()
        assert index.verify() == []
    finally:
        log.close()
