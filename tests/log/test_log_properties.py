"""Property-based tests: arbitrary interleavings keep the log's invariants (docs/invariants.md).

A small model tracks what each run's record and each conversation's transcript must be,
as a tree of message nodes; the state machine drives appends, forks, deletes, archive
changes and reopenings against a real backend and compares after every step.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import hypothesis.strategies as st
import pytest
from backends import make_log, postgres_dsn, schema_for
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from logtools import at
from pgserver import drop_schema
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from eventlog import (
    EventLogBase,
    InMemoryEventLog,
    InvalidArgumentError,
    LmdbEventLog,
    encode_message,
    message_entry,
    run_finished_entry,
    run_started_entry,
)

T = TypeVar('T')
LONG = bool(os.environ.get('EVENTLOG_LONG'))
CONVERSATIONS = ['alpha', 'beta', 'gamma']
TEXT = st.text(alphabet=st.characters(codec='utf-8', exclude_categories=['Cs']), max_size=30)


@dataclass
class Node:
    conversation: str
    run: str
    payload: bytes
    parent: int | None
    seq: int = 0


@dataclass
class Run:
    conversation: str
    start_parent: int | None
    nodes: list[int] = field(default_factory=list)
    finished: bool = False


@dataclass
class Conversation:
    archived: bool = False
    fork_parent: int | None = None
    forked: bool = False
    runs: list[str] = field(default_factory=list)
    messages: list[int] = field(default_factory=list)


class LogMachine(RuleBasedStateMachine):
    backend = 'memory'

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.log = self._open()
        self.nodes: dict[int, Node] = {}
        self.runs: dict[str, Run] = {}
        self.convs: dict[str, Conversation] = {}
        self.counter = 0

    def _open(self) -> EventLogBase:
        if self.backend == 'lmdb':
            return LmdbEventLog(self.tmp / 's', sync=False, map_size=1 << 20)
        if self.backend == 'postgres':
            return make_log('postgres', self.tmp)
        return InMemoryEventLog()

    def teardown(self) -> None:
        self.log.close()
        if self.backend == 'postgres':
            drop_schema(postgres_dsn(), schema_for(self.tmp / 'store.lmdb'))
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coro)

    # -- the model ----------------------------------------------------------------------------

    def tip(self, run_id: str) -> int | None:
        run = self.runs[run_id]
        return run.nodes[-1] if run.nodes else run.start_parent

    def branch(self, tip: int | None) -> list[bytes]:
        out: list[bytes] = []
        while tip is not None and tip in self.nodes:
            node = self.nodes[tip]
            out.append(node.payload)
            tip = node.parent
        return out[::-1]

    def live_runs(self) -> list[str]:
        return [r for r, run in self.runs.items() if run.conversation in self.convs]

    def expected_transcript(self, conv_id: str) -> list[bytes]:
        conv = self.convs[conv_id]
        prefix: list[bytes] = []
        first = conv.runs[0] if conv.runs else None
        start = self.runs[first].start_parent if first is not None else None
        if conv.forked:
            prefix = self.branch(conv.fork_parent)
        elif start is not None and start in self.nodes and self.nodes[start].conversation != conv_id:
            prefix = self.branch(start)
        return prefix + [self.nodes[n].payload for n in conv.messages if n in self.nodes]

    # -- rules --------------------------------------------------------------------------------

    @rule(data=st.data())
    def start_run(self, data: st.DataObject) -> None:
        forks = sorted(c for c, conv in self.convs.items() if conv.forked)
        conv = data.draw(st.sampled_from(CONVERSATIONS + forks))
        candidates = self.live_runs()
        source = data.draw(st.sampled_from([None, *candidates]))
        self.counter += 1
        run_id = f'run{self.counter}'
        if source is not None:
            # A run continues from the last message of the history it was handed.
            start_parent = self.tip(source)
            if start_parent not in self.nodes:
                start_parent = None
            parent_seq = None if start_parent is None else self.nodes[start_parent].seq
        elif conv in self.convs and self.convs[conv].forked and not self.convs[conv].runs:
            fork_entry = self.run_async(self.log.entries(conversation_id=conv, kinds=['forked_from']))
            parent_seq = fork_entry[-1].seq  # type: ignore[index]
            start_parent = self.convs[conv].fork_parent
        else:
            parent_seq = None
            start_parent = None
        self.run_async(self.log.append(run_started_entry(conversation_id=conv, run_id=run_id, parent=parent_seq)))
        self.runs[run_id] = Run(conv, start_parent)
        self.convs.setdefault(conv, Conversation()).runs.append(run_id)

    @precondition(lambda self: any(not self.runs[r].finished for r in self.live_runs()))
    @rule(data=st.data(), texts=st.lists(TEXT, min_size=1, max_size=3), batch=st.booleans())
    def add_messages(self, data: st.DataObject, texts: list[str], batch: bool) -> None:
        run_id = data.draw(st.sampled_from([r for r in self.live_runs() if not self.runs[r].finished]))
        run = self.runs[run_id]
        entries = []
        for text in texts:
            self.counter += 1
            if self.counter % 2:
                message = ModelRequest(parts=[UserPromptPart(text, timestamp=at(self.counter))], timestamp=at(1))
            else:
                message = ModelResponse(parts=[TextPart(text)], timestamp=at(self.counter))
            entries.append(message_entry(message, conversation_id=run.conversation, run_id=run_id))
            node_id = self.counter
            self.nodes[node_id] = Node(run.conversation, run_id, encode_message(message), self.tip(run_id))
            run.nodes.append(node_id)
            self.convs[run.conversation].messages.append(node_id)
        if batch:
            seqs = self.run_async(self.log.append_many(entries))
        else:
            seqs = [self.run_async(self.log.append(entry)) for entry in entries]
        for node_id, seq in zip(run.nodes[-len(entries) :], seqs, strict=True):
            self.nodes[node_id].seq = seq

    @precondition(lambda self: any(not self.runs[r].finished for r in self.live_runs()))
    @rule(data=st.data(), status=st.sampled_from(['completed', 'failed', 'cancelled']))
    def finish_run(self, data: st.DataObject, status: str) -> None:
        run_id = data.draw(st.sampled_from([r for r in self.live_runs() if not self.runs[r].finished]))
        run = self.runs[run_id]
        self.run_async(
            self.log.append(run_finished_entry(conversation_id=run.conversation, run_id=run_id, status=status))  # type: ignore[arg-type]
        )
        run.finished = True

    @precondition(lambda self: any(c.runs for c in self.convs.values()))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(sorted(c for c, conv in self.convs.items() if conv.runs)))
        self.counter += 1
        new_id = f'fork{self.counter}'
        latest = self.convs[source].runs[-1]
        tip = self.tip(latest)
        if tip is None or tip not in self.nodes:
            with pytest.raises(InvalidArgumentError, match='no messages'):
                self.run_async(self.log.fork(source, new_conversation_id=new_id))
            return
        self.run_async(self.log.fork(source, new_conversation_id=new_id))
        self.convs[new_id] = Conversation(fork_parent=tip, forked=True)

    @precondition(lambda self: bool(self.convs))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        conv_id = data.draw(st.sampled_from(sorted(self.convs)))
        self.run_async(self.log.delete_conversation(conv_id))
        del self.convs[conv_id]
        for run_id in [r for r, run in self.runs.items() if run.conversation == conv_id]:
            del self.runs[run_id]
        for node_id in [n for n, node in self.nodes.items() if node.conversation == conv_id]:
            del self.nodes[node_id]

    @precondition(lambda self: bool(self.convs))
    @rule(data=st.data(), archived=st.booleans())
    def archive(self, data: st.DataObject, archived: bool) -> None:
        conv_id = data.draw(st.sampled_from(sorted(self.convs)))
        if archived:
            self.run_async(self.log.archive(conv_id))
        else:
            self.run_async(self.log.unarchive(conv_id))
        self.convs[conv_id].archived = archived

    @rule()
    def reopen(self) -> None:
        if self.backend != 'memory':
            self.log.close()
            self.log = self._open()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def records_match_the_model(self) -> None:
        async def check() -> None:
            log = self.log
            for run_id in self.live_runs():
                expected = self.branch(self.tip(run_id))
                assert await log.run_message_payloads(run_id) == expected, run_id
            for conv_id in self.convs:
                assert await log.transcript_payloads(conv_id) == self.expected_transcript(conv_id), conv_id
            listed = {c.conversation_id for c in await log.list_conversations()}
            assert listed == {c for c, conv in self.convs.items() if not conv.archived}
            every = await log.entries()
            seqs = [e.seq for e in every]
            assert seqs == sorted(set(seqs))
            # Each message is stored once: the log holds exactly the model's live nodes.
            assert sum(1 for e in every if e.kind == 'message') == len(self.nodes)
            assert [r.run_id for r in await log.list_runs()] == self.live_runs()
            report = await log.verify()
            assert report.ok, report

        self.run_async(check())


class LmdbLogMachine(LogMachine):
    backend = 'lmdb'


class PostgresLogMachine(LogMachine):
    backend = 'postgres'


_settings = settings(
    max_examples=200 if LONG else 25,
    stateful_step_count=40 if LONG else 20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)

TestMemoryLog = LogMachine.TestCase
TestMemoryLog.settings = _settings
TestLmdbLog = LmdbLogMachine.TestCase
TestLmdbLog.settings = _settings
TestPostgresLog = PostgresLogMachine.TestCase
TestPostgresLog.settings = _settings
