"""One process of the fault-injection suite (run as a script by `faultdriver.py`): one role, in a loop.

Usage: _fault_worker.py WORKDIR NAME ROLE INCARNATION SEED OPTIONS lmdb
       _fault_worker.py WORKDIR NAME ROLE INCARNATION SEED OPTIONS postgres DSN SCHEMA

ROLE is one of `ROLES`. OPTIONS is a comma-separated list of flags (`-` for none): `idem` (give
every append an idempotency key), `compact` (also compact now and then, as an application that
appends and compacts would), `tight` (a compactor that does not pause between attempts; an
appender that compacts after every append), `reopen` (close the store between operations and
open it again, as short-lived processes do).

The saver (pydantic-ai 2.66+) keeps conversations of its own with `EventLogConversationStore`
as an app does: each turn loads (or starts) the conversation, adds a request holding a fresh
token and its reply, and saves it, through a run `EventLogPersistence` records or built by hand;
a `ConversationConflict` loads again, a storage error sends the same save again. Some
conversations are forked at their first turn and the fork saves turns of its own; some are
deleted: the fork, the source, both (in either order) or neither.

A worker imports what it needs, writes `ready-NAME-INCARNATION` in WORKDIR and waits for the
file `go`, which holds the deadline (a `time.time()`) after which it starts no new operation and
exits.

Every worker writes, to `acks/NAME.jsonl` in WORKDIR, one JSON line per operation:
`intent` records before the call (written, not synced: they only tell the checker what may have
happened), and acknowledgement records after the call returned success, flushed and fsynced
before the next operation starts, so an acknowledgement on file implies the call returned.
A worker killed and started again (INCARNATION + 1) reads its own file to pick up where it was.
The saver's records: `intent` kind `save` (conv, token) / `saved`, `fork` (conv, source, shared:
the tokens the fork keeps) / `forked`, `store_delete` (conv) / `store_deleted`.

Durable runs write one line per tool execution (`exec`) and one per committed tool unit
(`committed`, written after the journal append returned) to `effects/<run>.jsonl`, fsynced.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext

from eventlog import NewEntry, message_entry, run_finished_entry, run_started_entry
from eventlog.errors import EventLogError, RunLeaseError, StoreBusyError, StoreConnectionError
from eventlog.log import EventLogBase

ROLES = ('appender', 'compactor', 'eraser', 'deleter', 'retainer', 'durable', 'resumer', 'attacker', 'saver')
TOOL_CALLS = 3
"""Tool units each durable run executes (one per model response), before its final answer."""
LEASE_SECONDS = 1.5
AGENT = 'fault_agent'
EXEC_RE = re.compile(rb'exec ([0-9a-f]{32})')
DEEP = 600
"""How deep the attacker's tool calls nest (3.6 KB of JSON, within reach of a prompt injection)."""
DEEP_WORD = 'wolverine'
"""The word at the bottom of every deep call: the checker's search must find it."""
ATTACKED = 'attacked-'
REPLY = 're:'
"""A saver's response to a request holding `tk-<hex>` is `re:<hex>`: the checker finds its copies too."""
FORK_AT = 2
"""How many messages of its conversation a saver's fork keeps: the first turn."""
"""What `attacked` leaves in WORKDIR: a process ran code a store named (it must never exist)."""


def attacked(store: object) -> None:
    """What the attacker's catalogue entries name as a maintainer (`_fault_worker:attacked`): run by
    any process that took a store's word for code, it leaves a file in that process's WORKDIR."""
    Path(sys.argv[1], f'{ATTACKED}{os.getpid()}').touch()


def deep_call(depth: int) -> Any:
    """A model response whose tool call's arguments nest `depth` objects deep."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    args = '{"a":' * depth + json.dumps(DEEP_WORD) + '}' * depth
    return ModelResponse(parts=[ToolCallPart('inspect', args, tool_call_id='deep')])


def token() -> str:
    """A unique payload token; the checker finds every copy of it in the log."""
    return f'tk-{uuid.uuid4().hex}'


def reply_to(tok: str) -> str:
    """A saver's response text to the request holding `tok`."""
    return REPLY + tok.removeprefix('tk-')


def answer_for(run_id: str) -> str:
    return f'done {run_id}'


class Acks:
    """The worker's acknowledgement file."""

    def __init__(self, path: Path, name: str, incarnation: int) -> None:
        self.path = path
        self.name = name
        self.incarnation = incarnation
        self.previous = self.read(path)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size and not path.read_bytes().endswith(b'\n'):
            # A kill can cut a write short where the line crosses a page boundary; end that line
            # so this incarnation's first record does not run on from it.
            os.write(self.fd, b'\n')

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        """The complete records on file, in order; a line a kill cut short is left out (a cut
        intent's call never started, and a cut acknowledgement was never acknowledged)."""
        if not path.exists():
            return []
        records: list[dict[str, Any]] = []
        for line in path.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(record, dict):
                records.append(record)  # pyright: ignore[reportUnknownArgumentType]
        return records

    def intent(self, **record: Any) -> None:
        """What the next call is about to do (written through to the file, not synced)."""
        self._write({'op': 'intent', **record}, sync=False)

    def ack(self, **record: Any) -> None:
        """What a call that returned did: on disk before the worker goes on."""
        self._write(record, sync=True)

    def _write(self, record: dict[str, Any], *, sync: bool) -> None:
        record = {**record, 'inc': self.incarnation, 't': time.time()}
        os.write(self.fd, (json.dumps(record, sort_keys=True) + '\n').encode())
        if sync:
            os.fsync(self.fd)


def user_message(text: str) -> Any:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return ModelRequest(parts=[UserPromptPart(text)])


class Worker:
    def __init__(self, argv: Sequence[str]) -> None:
        self.workdir = Path(argv[0])
        self.name = argv[1]
        self.role = argv[2]
        self.incarnation = int(argv[3])
        self.deadline = 0.0
        self.rng = random.Random(f'{argv[4]}/{self.name}/{self.incarnation}')
        self.options = set() if argv[5] == '-' else set(argv[5].split(','))
        self.store = list(argv[6:])
        self.acks = Acks(self.workdir / 'acks' / f'{self.name}.jsonl', self.name, self.incarnation)
        self.log: EventLogBase | None = None
        self.counter = sum(1 for r in self.acks.previous if r.get('op') == 'intent')
        """Makes run and conversation ids of this incarnation differ from the earlier ones'."""

    # -- the store ---------------------------------------------------------------------------

    def log_class(self) -> type[EventLogBase]:
        if self.store[0] == 'lmdb':
            from eventlog import LmdbEventLog

            return LmdbEventLog
        from eventlog.postgres_log import PostgresEventLog

        return PostgresEventLog

    def open(self, cls: type[EventLogBase] | None = None) -> EventLogBase:
        cls = cls or self.log_class()
        while True:
            try:
                if self.store[0] == 'lmdb':
                    return cls(self.workdir / 'store')  # type: ignore[call-arg]
                return cls(self.store[1], schema=self.store[2])  # type: ignore[call-arg]
            except EventLogError as error:  # the server is down: wait for it
                if self.left() < 1:
                    raise
                self.note_error('open', error)
                time.sleep(0.3)

    def left(self) -> float:
        return self.deadline - time.time()

    def fresh_id(self, prefix: str) -> str:
        self.counter += 1
        return f'{prefix}-{self.name}-{self.incarnation}-{self.counter}'

    def note_error(self, what: str, error: BaseException) -> None:
        self.acks.ack(op='error', what=what, error=f'{type(error).__name__}: {str(error)[:300]}')

    async def pause(self, longest: float = 0.05) -> None:
        await asyncio.sleep(self.rng.random() * longest)

    # -- appends -----------------------------------------------------------------------------

    async def call(self, make: Callable[[], Any], *, idem: bool, what: str) -> Any:
        """Await `make()`; an idempotent call is repeated until it succeeds (or the deadline passes).

        Returns `None` when it failed (outcome unknown)."""
        while True:
            try:
                return await make()
            except EventLogError as error:
                self.note_error(what, error)
                if not idem or self.left() < 0.5:
                    return None
                await asyncio.sleep(0.1 + self.rng.random() * 0.3)

    async def append_run(self, conv: str, run: str, count: int, *, idem: bool, finish: bool = True) -> list[str]:
        """Start run `run` in `conv`, append `count` messages (some in one batch), finish it.

        Returns the tokens acknowledged (the run is abandoned at the first unknown outcome)."""
        log = self.log
        assert log is not None
        start = run_started_entry(conversation_id=conv, run_id=run, idempotency_key='start' if idem else None)
        self.acks.intent(kind='run_started', conv=conv, run=run, key=start.idempotency_key)
        seq = await self.call(lambda: log.append(start), idem=idem, what='append run_started')
        if seq is None:
            return []
        self.acks.ack(op='run_started', conv=conv, run=run, seq=seq)
        done: list[str] = []
        index = 0
        while index < count and self.left() > 0:
            size = min(count - index, self.rng.choice([1, 1, 2, 3]))
            items = []
            for k in range(index, index + size):
                tok = token()
                key = f'm{k}' if idem else None
                items.append(
                    (
                        tok,
                        key,
                        message_entry(
                            user_message(f'{tok} {conv}'), conversation_id=conv, run_id=run, idempotency_key=key
                        ),
                    )
                )
            for tok, key, _ in items:
                self.acks.intent(kind='message', token=tok, conv=conv, run=run, key=key)
            entries = [e for _, _, e in items]
            seqs = await self.call(lambda entries=entries: log.append_many(entries), idem=idem, what='append')
            if seqs is None:
                return done
            for (tok, key, _), s in zip(items, seqs, strict=True):
                self.acks.ack(op='append', token=tok, conv=conv, run=run, key=key, seq=s)
                done.append(tok)
            index += size
            if 'compact' in self.options and ('tight' in self.options or self.rng.random() < 0.25):
                await self.compact_once()
            await self.pause()
        if finish:
            end = run_finished_entry(
                conversation_id=conv, run_id=run, status='completed', idempotency_key='finish' if idem else None
            )
            self.acks.intent(kind='run_finished', conv=conv, run=run)
            if await self.call(lambda: log.append(end), idem=idem, what='append run_finished') is not None:
                self.acks.ack(op='run_finished', conv=conv, run=run)
        return done

    async def resend(self) -> None:
        """After a kill: send again, with the same key, what an idempotent appender last tried and
        a few keys it was told succeeded; each must come back with the seq of its first append."""
        log = self.log
        assert log is not None
        acked = {(r['run'], r['key']): r for r in self.acks.previous if r.get('op') == 'append' and r.get('key')}
        intents = [
            r for r in self.acks.previous if r.get('op') == 'intent' and r.get('kind') == 'message' and r.get('key')
        ]
        pending = [r for r in intents[-3:] if (r['run'], r['key']) not in acked]
        again = self.rng.sample(sorted(acked.values(), key=lambda r: r['seq']), min(3, len(acked)))
        for record in pending + again:
            entry = message_entry(
                user_message(f'{record["token"]} {record["conv"]}'),
                conversation_id=record['conv'],
                run_id=record['run'],
                idempotency_key=record['key'],
            )
            seq = await self.call(lambda entry=entry: log.append(entry), idem=True, what='resend')
            if seq is None:
                return
            first = acked.get((record['run'], record['key']))
            self.acks.ack(
                op='resend',
                token=record['token'],
                conv=record['conv'],
                run=record['run'],
                key=record['key'],
                seq=seq,
                expected=None if first is None else first['seq'],
            )

    # -- roles -------------------------------------------------------------------------------

    async def appender(self) -> None:
        idem = 'idem' in self.options
        if idem and self.incarnation > 0:
            await self.resend()
        conv = f'app-{self.name}'
        while self.left() > 0:
            await self.append_run(conv, self.fresh_id('run'), self.rng.randint(2, 8), idem=idem)
            await self.between()

    async def between(self) -> None:
        """What a worker does between two operations: compact (`compact`), close and reopen (`reopen`)."""
        if 'compact' in self.options and self.rng.random() < 0.5:
            await self.compact_once()
        if 'reopen' in self.options and self.log is not None:
            self.log.close()
            self.log = None
            await asyncio.sleep(self.rng.uniform(0.3, 1.2))
            self.log = self.open()

    async def compact_once(self) -> None:
        log = self.log
        assert log is not None
        self.acks.intent(kind='compact')
        try:
            if hasattr(log, 'compact'):
                await log.compact()  # type: ignore[attr-defined]
                self.acks.ack(op='compact', result='ok')
            else:
                problem = await log.scrub()
                self.acks.ack(op='compact', result='ok' if problem is None else 'busy')
        except StoreBusyError:
            self.acks.ack(op='compact', result='busy')
        except EventLogError as error:
            self.note_error('compact', error)

    async def compactor(self) -> None:
        while self.left() > 0:
            await self.compact_once()
            if 'tight' not in self.options:
                await self.pause(0.2)
            await self.between()

    async def eraser(self) -> None:
        while self.left() > 0:
            log = self.log
            assert log is not None
            conv, run = self.fresh_id('era'), self.fresh_id('run')
            tokens = await self.append_run(conv, run, self.rng.randint(3, 6), idem='idem' in self.options)
            if len(tokens) < 2 or self.left() < 0:
                continue
            chosen = set(self.rng.sample(tokens, self.rng.randint(1, len(tokens) - 1)))
            marks = [t.encode() for t in chosen]

            def picked(entry: Any, marks: list[bytes] = marks) -> bool:
                return any(m in entry.payload for m in marks)

            self.acks.intent(kind='erase', conv=conv, run=run, tokens=sorted(chosen))
            try:
                done = await log.erase(
                    conv, run_id=run, where=picked, reason='fault suite', scrub=self.rng.random() < 0.5
                )
            except EventLogError as error:
                self.note_error('erase', error)
                continue
            self.acks.ack(op='erase', conv=conv, run=run, tokens=sorted(chosen), seqs=done.seqs)
            await self.between()

    async def deleter(self) -> None:
        while self.left() > 0:
            log = self.log
            assert log is not None
            conv = self.fresh_id('del')
            tokens = await self.append_run(
                conv, self.fresh_id('run'), self.rng.randint(2, 5), idem='idem' in self.options
            )
            if not tokens or self.left() < 0:
                continue
            self.acks.intent(kind='delete', conv=conv)
            try:
                removed = await log.delete_conversation(conv)
            except EventLogError as error:
                self.note_error('delete', error)
                continue
            self.acks.ack(op='delete', conv=conv, removed=removed)
            await self.between()

    async def retainer(self) -> None:
        from eventlog.retention import RetentionPolicy

        while self.left() > 1.5:
            log = self.log
            assert log is not None
            conv = self.fresh_id('ret')
            tokens = await self.append_run(
                conv, self.fresh_id('run'), self.rng.randint(2, 4), idem='idem' in self.options
            )
            if not tokens:
                continue
            if 'reopen' in self.options:
                log.close()
                self.log = None
            await asyncio.sleep(1.2)  # older than the policy's one second
            if self.log is None:
                self.log = log = self.open()
            action = self.rng.choice(['erase', 'delete'])
            policy = RetentionPolicy(conversations={conv: '1s'}, action=action)  # type: ignore[arg-type]
            self.acks.intent(kind='retain', conv=conv, action=action)
            try:
                report = await log.retain(policy, scrub=self.rng.random() < 0.5)
            except EventLogError as error:
                self.note_error('retain', error)
                continue
            self.acks.ack(op='retain', conv=conv, action=action, erased=report.erased, deleted=report.deleted)
            await self.between()

    async def durable(self) -> None:
        durable = Durable(self)
        if self.incarnation > 0:  # resume what this worker's earlier incarnation left running
            mine = [r['run'] for r in self.acks.previous if r.get('op') == 'intent' and r.get('kind') == 'durable']
            for run in mine:
                if self.left() < 0:
                    return
                await durable.resume(run)
        while self.left() > 0:
            await durable.start(self.fresh_id('dur'))

    async def resumer(self) -> None:
        durable = Durable(self)
        log = self.log
        assert log is not None
        while self.left() > 0:
            try:
                running = [r.run_id for r in await log.list_runs(status='running') if r.run_id.startswith('dur-')]
            except EventLogError as error:
                self.note_error('list_runs', error)
                running = []
            if running:
                await durable.resume(self.rng.choice(running))
            await self.pause(0.5)

    async def attacker(self) -> None:
        """What an attacker with write access to the store and a prompt injection does, between the
        other roles' operations: catalogue entries naming code (a projection of its own, and the
        index's kind), and runs holding tool calls nested `DEEP` levels deep."""
        from eventlog._keys import META_PROJECTION_PREFIX, Table

        log = self.log
        assert log is not None
        while self.left() > 0:
            name = self.rng.choice(['evil', 'ix', 'vx'])
            entry = json.dumps(
                {'name': name, 'tables': ['t'], 'format': '1', 'maintainer': '_fault_worker:attacked'}
            ).encode()

            def plant(txn: Any, name: str = name, entry: bytes = entry) -> None:
                txn.put(Table.META, META_PROJECTION_PREFIX + name.encode(), entry)

            try:
                log._write_sync(plant)  # pyright: ignore[reportPrivateUsage]  (the attacker's raw access)
                self.acks.ack(op='planted', name=name)
            except EventLogError as error:
                self.note_error('plant', error)
            conv, run = self.fresh_id('deep'), self.fresh_id('run')
            entries = [
                run_started_entry(conversation_id=conv, run_id=run),
                message_entry(user_message(f'call deep {conv}'), conversation_id=conv, run_id=run),
                message_entry(deep_call(DEEP), conversation_id=conv, run_id=run),
                run_finished_entry(conversation_id=conv, run_id=run, status='completed'),
            ]
            if await self.call(lambda entries=entries: log.append_many(entries), idem=False, what='deep') is not None:
                self.acks.ack(op='deep', conv=conv, run=run)
            await self.pause(0.3)
            await self.between()

    async def saver(self) -> None:
        """What an app does with `EventLogConversationStore`, on conversations of its own: turns
        loaded and saved (through a run `EventLogPersistence` records, or built by hand), a fork
        at the first turn with turns of its own, deletes of either, both or neither."""
        while self.left() > 0:
            assert self.log is not None
            store, agent = saver_tools(self.log)
            conv = self.fresh_id('sav')
            recorded = self.rng.random() < 0.5
            acked = await self.save_turns(store, agent if recorded else None, conv, self.rng.randint(2, 4))
            if len(acked) < 2 or self.left() < 0:
                continue
            fork = None
            if self.rng.random() < 0.5:
                fork = self.fresh_id('fork')
                self.acks.intent(kind='fork', conv=fork, source=conv, shared=acked[:1])
                try:
                    forked = await store.fork(conv, at=FORK_AT, new_conversation_id=fork)
                except EventLogError as error:
                    self.note_error('fork', error)
                    continue  # the fork may or may not exist: the checker allows both
                self.acks.ack(op='forked', conv=fork, source=conv, shared=tokens_in(forked.messages))
                # Recorded or by hand, whatever the source's turns were
                # (tests/capability/test_conversation_store_fork_recorded.py).
                recorded_fork = self.rng.random() < 0.5
                await self.save_turns(store, agent if recorded_fork else None, fork, self.rng.randint(1, 2))
            doomed = self.rng.choice([[], [conv], [conv], *([[fork], [conv, fork], [fork, conv]] if fork else [])])
            for target in doomed:
                if not await self.delete_saved(store, target):
                    break
            await self.between()

    async def save_turns(self, store: Any, agent: Any, conv: str, turns: int) -> list[str]:
        """Save up to `turns` turns to `conv` (stopping at the first whose outcome stays unknown);
        the tokens acknowledged, in order."""
        acked: list[str] = []
        for _ in range(turns):
            if self.left() < 0:
                break
            tok = token()
            self.acks.intent(kind='save', conv=conv, token=tok, recorded=agent is not None)
            if not await self.save_turn(store, agent, conv, tok):
                break
            self.acks.ack(op='saved', conv=conv, token=tok)
            acked.append(tok)
            await self.pause()
        return acked

    async def save_turn(self, store: Any, agent: Any, conv: str, tok: str) -> bool:
        """Load `conv` (or start it), add a turn holding `tok`, save it; on a conflict load again
        and retry, on a storage error send the same save again. Whether the turn was saved."""
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.conversation_store import ConversationConflict
        from pydantic_ai.messages import ModelResponse, TextPart

        attempt: Any = None
        """The save being made: a conversation, or a recorded run's result (sent again after an error)."""
        while True:
            try:
                if attempt is None:
                    conversation = await store.load(conv) or Conversation(conversation_id=conv)
                    if tok in tokens_in(conversation.messages):
                        return True  # the save an error left unknown took: the conflict said so
                    if agent is None:
                        conversation.messages.extend(
                            [user_message(tok), ModelResponse(parts=[TextPart(reply_to(tok))])]
                        )
                        attempt = conversation
                    else:
                        try:
                            attempt = await agent.run(tok, conversation=conversation)
                        except Exception as error:  # the run may have recorded its request: never run it again
                            self.note_error('saver run', error)
                            return False
                await store.save(attempt)
                return True
            except ConversationConflict:
                attempt = None
            except EventLogError as error:
                self.note_error('save', error)
                if self.left() < 0.5:
                    return False
                await asyncio.sleep(0.1 + self.rng.random() * 0.3)

    async def delete_saved(self, store: Any, conv: str) -> bool:
        """Delete `conv` from the store, retrying after a storage error; whether it was acknowledged."""
        self.acks.intent(kind='store_delete', conv=conv)
        while True:
            try:
                await store.delete(conv)
            except EventLogError as error:
                self.note_error('store delete', error)
                if self.left() < 0.5:
                    return False
                await asyncio.sleep(0.1 + self.rng.random() * 0.3)
                continue
            self.acks.ack(op='store_deleted', conv=conv)
            return True

    async def main(self) -> None:
        user_message('warm up')  # the imports, before the clock starts
        if self.role in ('durable', 'resumer', 'saver'):
            import pydantic_ai.models.function  # noqa: F401

            import capability  # noqa: F401
        if self.role == 'saver':
            importlib.import_module('capability.conversation_store')
        (self.workdir / f'ready-{self.name}-{self.incarnation}').touch()
        go = self.workdir / 'go'
        while not go.exists():
            time.sleep(0.05)
        self.deadline = float(go.read_text())
        if self.role in ('durable', 'resumer'):
            self.log = self.open(durable_log_class(self.log_class(), self.workdir))
        else:
            self.log = self.open()
        try:
            while True:
                try:
                    await getattr(self, self.role)()
                    break
                except StoreConnectionError as error:  # the server went away under a call the role does not retry
                    self.note_error(f'{self.role} (started again)', error)
                    if self.left() < 1:
                        break
                    await asyncio.sleep(0.3)
        finally:
            if self.log is not None:
                self.log.close()
        self.acks.ack(op='exit')


TOKEN_TEXT_RE = re.compile(r'tk-[0-9a-f]{32}')


def tokens_in(messages: Sequence[Any]) -> list[str]:
    """The tokens of the requests in `messages`, in order (a saver's turns)."""
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return [
        found
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        for found in TOKEN_TEXT_RE.findall(part.content)
    ]


def saver_tools(log: EventLogBase) -> tuple[Any, Any]:
    """A saver's `EventLogConversationStore` on `log`, and an agent whose runs `EventLogPersistence`
    records there, answering each request `tk-<hex>` with `re:<hex>`."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from capability import EventLogPersistence
    from capability.conversation_store import EventLogConversationStore

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(reply_to(tokens_in(messages)[-1]))])

    agent = Agent(FunctionModel(model), name='fault_saver', capabilities=[EventLogPersistence(log)])
    return EventLogConversationStore(log), agent


def durable_log_class(base: type[EventLogBase], workdir: Path) -> type[EventLogBase]:
    """`base` that records, once a journal append returned, which tool units it committed."""

    class Marking(base):  # type: ignore[valid-type,misc]
        async def append_many(self, entries: Sequence[NewEntry]) -> list[int]:
            seqs = await super().append_many(entries)
            for entry in entries:
                if entry.kind == 'durable_step' and entry.run_id and entry.run_id.startswith('dur-'):
                    found = EXEC_RE.search(entry.payload)
                    if found is not None:
                        unit = unit_of(entry.payload)
                        effect_line(workdir, entry.run_id, {'committed': unit, 'exec': found.group(1).decode()})
            return seqs

    return Marking


UNIT_RE = re.compile(rb'effect (\d+) exec')


def unit_of(payload: bytes) -> int:
    found = UNIT_RE.search(payload)
    assert found is not None
    return int(found.group(1))


def effect_line(workdir: Path, run_id: str, record: dict[str, Any]) -> None:
    """One line of the run's effect file, on disk before this returns."""
    record = {**record, 'pid': os.getpid(), 't': time.time()}
    fd = os.open(workdir / 'effects' / f'{run_id}.jsonl', os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + '\n').encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def build_agent(log: EventLogBase, workdir: Path, who: str) -> tuple[Any, Any]:
    """A durable agent whose tool `effect(n)` writes one line per execution to the run's effect file."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from capability import EventLogDurability, EventLogPersistence

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        if step <= TOOL_CALLS:
            return ModelResponse(parts=[ToolCallPart('effect', {'n': step}, tool_call_id=f'call-{step}')])
        first = messages[0].parts[0]
        run_id = str(getattr(first, 'content', '')).split(':', 1)[0]
        return ModelResponse(parts=[TextPart(answer_for(run_id))])

    async def effect(ctx: RunContext[None], n: int) -> str:
        """A side effect: one line in the run's effect file per execution."""
        exec_id = uuid.uuid4().hex
        assert ctx.run_id is not None
        effect_line(workdir, ctx.run_id, {'exec': exec_id, 'unit': n, 'who': who})
        return f'effect {n} exec {exec_id}'

    durability = EventLogDurability(log, lease_seconds=LEASE_SECONDS)
    agent = Agent(FunctionModel(model), name=AGENT, tools=[effect], capabilities=[EventLogPersistence(log), durability])
    return agent, durability


class Durable:
    """Starts and resumes durable runs for one worker."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        assert worker.log is not None
        self.agent, self.durability = build_agent(worker.log, worker.workdir, f'{worker.name}.{worker.incarnation}')

    async def start(self, run: str) -> None:
        acks = self.worker.acks
        acks.intent(kind='durable', run=run)
        try:
            result = await self.agent.run(f'{run}: go', run_id=run, conversation_id=f'conv-{run}')
        except RunLeaseError as error:
            acks.ack(op='run_lost', run=run, error=str(error)[:300])
        except Exception as error:  # a storage failure fails the run: the checker resumes what still runs
            acks.ack(op='run_failed', run=run, error=f'{type(error).__name__}: {str(error)[:300]}')
        else:
            acks.ack(op='run_done', run=run, output=str(result.output))

    async def resume(self, run: str) -> None:
        acks = self.worker.acks
        acks.intent(kind='resume', run=run)
        try:
            result = await self.durability.resume(self.agent, run)
        except RunLeaseError:
            acks.ack(op='resume_busy', run=run)
        except Exception as error:
            acks.ack(op='resume_failed', run=run, error=f'{type(error).__name__}: {str(error)[:300]}')
        else:
            acks.ack(op='resume_done', run=run, output=str(result.output))


if __name__ == '__main__':
    worker = Worker(sys.argv[1:])
    asyncio.run(worker.main())
    os._exit(0)
