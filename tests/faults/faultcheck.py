"""The fault suite's checker: run in a fresh process once every worker has stopped.

Usage: faultcheck.py WORKDIR lmdb
       faultcheck.py WORKDIR postgres DSN SCHEMA

Reads every worker's acknowledgement file and the store, resumes the durable runs left running,
and prints one JSON object: `counts` (operations acknowledged, by kind) and `violations`, each
naming the invariant, the worker, the acknowledgement record and what the store holds instead.

The invariants:
- `acknowledged append present once`: every acknowledged append not covered by an acknowledged
  erasure, deletion or retention is in the log exactly once (found by its unique token), at the
  seq it was acknowledged with.
- `no duplicate`: no token is in the log twice, acknowledged or not; an idempotency key is used
  once per run.
- `idempotent resend returns the first seq`: a key sent again after a kill gets the seq it got first.
- `erased is gone`: what an acknowledged erase, delete or retention covered is not in the log.
- `no phantom`: every token in the log was one some worker tried to append.
- `verify`: the chains verify.
- `committed unit never executes again`: no tool unit of a durable run executes after a process
  saw its journal entry committed; the journal's result is one of the unit's executions.
- `interrupted run resumes`: every durable run still running resumes to completion here.
- `run messages consistent`: a completed durable run replays each tool return once, and its answer.
- The savers' conversations (loaded through a fresh `EventLogConversationStore`), unless a delete
  of them was attempted: `acknowledged save loads once` (each acknowledged save's token once in
  its conversation's `load()`), `history is what was saved` (the acknowledged tokens in order,
  besides saves whose outcome is unknown, each request followed by its reply), `fork loads its
  shared history` (the source's first turn, then its own turns).
- `deleted conversation does not load`, and `deleted conversation erased`: no token (or reply)
  any save of it tried is in a `message` entry of the log, but what a fork that may survive shares.
- `each message once`: no saver's token or reply is in two `message` entries of the log.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fault_worker import (
    ATTACKED,
    DEEP_WORD,
    LEASE_SECONDS,
    Acks,
    answer_for,
    build_agent,
    durable_log_class,
    reply_to,
    tokens_in,
)

from eventlog.log import EventLogBase

TOKEN_RE = re.compile(rb'tk-[0-9a-f]{32}')
SAVER_RE = re.compile(r'(?:tk-|re:)[0-9a-f]{32}')
"""A request's token or a saver's reply to one."""


class Checker:
    def __init__(self, workdir: Path, store: list[str]) -> None:
        self.workdir = workdir
        self.store = store
        self.violations: list[dict[str, Any]] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.acks: dict[str, list[dict[str, Any]]] = {}
        for path in sorted((workdir / 'acks').glob('*.jsonl')):
            self.acks[path.stem] = Acks.read(path)
            lines = path.read_bytes().count(b'\n')
            if lines > len(self.acks[path.stem]):  # lines a kill cut short (the reader skips them)
                self.counts[f'cut ack lines ({path.stem})'] += lines - len(self.acks[path.stem])

    def violate(self, invariant: str, worker: str | None, record: Any, detail: str) -> None:
        self.violations.append({'invariant': invariant, 'worker': worker, 'record': record, 'detail': detail})

    def records(self, *ops: str) -> Iterable[tuple[str, dict[str, Any]]]:
        for worker, records in self.acks.items():
            for record in records:
                if record.get('op') in ops:
                    yield worker, record

    def open(self) -> EventLogBase:
        if self.store[0] == 'lmdb':
            from eventlog import LmdbEventLog

            cls: type[EventLogBase] = LmdbEventLog
            return durable_log_class(cls, self.workdir)(self.workdir / 'store')  # type: ignore[call-arg]
        from eventlog.postgres_log import PostgresEventLog

        return durable_log_class(PostgresEventLog, self.workdir)(self.store[1], schema=self.store[2], create=False)  # type: ignore[call-arg]

    async def run(self) -> dict[str, Any]:
        for _, records in self.acks.items():
            for record in records:
                op = record.get('op')
                self.counts[f'intent:{record.get("kind")}' if op == 'intent' else str(op)] += 1
                if op == 'error':
                    self.counts[f'error:{record.get("what")}'] += 1
        log = self.open()
        try:
            await self.check_log(log)
            await self.check_durable(log)
            await self.check_attacks(log)
            await self.check_saves(log)
            report = await log.verify()
            if not report.ok:
                self.violate('verify', None, None, '; '.join(str(p) for p in report.problems[:10]))
        finally:
            log.close()
        return {'counts': dict(sorted(self.counts.items())), 'violations': self.violations}

    async def check_log(self, log: EventLogBase) -> None:
        entries = await log.entries()
        self.counts['entries in the log'] = len(entries)
        found: dict[str, list[Any]] = collections.defaultdict(list)
        keys: collections.Counter[tuple[str, str]] = collections.Counter()
        for entry in entries:
            for tok in set(TOKEN_RE.findall(entry.payload)):
                found[tok.decode()].append(entry)
            if entry.idempotency_key is not None and entry.run_id is not None:
                keys[(entry.run_id, entry.idempotency_key)] += 1
        for (run, key), n in keys.items():
            if n > 1:
                self.violate('no duplicate', None, {'run': run, 'key': key}, f'idempotency key stored {n} times')

        intended = {r['token']: w for w, r in self.records('intent') if 'token' in r}
        erased = {t for _, r in self.records('erase') for t in r['tokens']}
        removed = {r['conv'] for _, r in self.records('delete', 'retain')}
        maybe_erased = {t for _, r in self.records('intent') if r.get('kind') == 'erase' for t in r['tokens']}
        maybe_removed = {r['conv'] for _, r in self.records('intent') if r.get('kind') in ('delete', 'retain')}

        for tok, held in found.items():
            if tok not in intended:
                self.violate('no phantom', None, {'token': tok}, f'in the log at seqs {[e.seq for e in held]}')
            if len(held) > 1:
                self.violate('no duplicate', intended.get(tok), {'token': tok}, f'at seqs {[e.seq for e in held]}')

        for worker, record in self.records('append'):
            tok = record['token']
            held = found.get(tok, [])
            if tok in erased or record['conv'] in removed:
                if held:
                    self.violate('erased is gone', worker, record, f'still at seqs {[e.seq for e in held]}')
                continue
            if tok in maybe_erased or record['conv'] in maybe_removed:
                continue  # an erasure whose outcome is unknown may or may not have removed it
            if not held:
                at = next((e for e in entries if e.seq == record['seq']), None)
                instead = 'nothing' if at is None else f'{at.kind} of {at.conversation_id}/{at.run_id}'
                self.violate(
                    'acknowledged append present once',
                    worker,
                    record,
                    f'lost: not in the log (seq {record["seq"]} holds {instead}; last seq {entries[-1].seq if entries else 0})',
                )
            elif held[0].seq != record['seq']:
                self.violate('acknowledged append present once', worker, record, f'at seq {held[0].seq} instead')
        for worker, record in self.records('resend'):
            if record['expected'] is not None and record['seq'] != record['expected']:
                self.violate('idempotent resend returns the first seq', worker, record, f'got {record["seq"]}')
        for worker, record in self.records('erase'):
            missing = sorted(set(record['tokens']) - erased)
            assert not missing, missing
            if len(record['seqs']) != len(record['tokens']):
                self.violate('erased is gone', worker, record, f'erase reported {len(record["seqs"])} entries erased')

    async def check_attacks(self, log: EventLogBase) -> None:
        """No process ran the code the attacker's catalogue entries named, and the deep calls stop
        no search: every acknowledged one is found by a search of the whole store."""
        for ran in sorted(self.workdir.glob(f'{ATTACKED}*')):
            self.violate('a store is data, never code', None, {'file': ran.name}, 'a process ran code a store named')
        deep = {r['conv'] for _, r in self.records('deep')}
        self.counts['deep calls'] = len(deep)
        if not deep:
            return
        from search import SearchEngine, SearchOptions
        from search.persistent_index import PersistentIndex

        try:
            result = await SearchEngine(PersistentIndex.for_log(log), SearchOptions(max_matches=10_000)).find(
                DEEP_WORD, scope='all', conversation_id=None, decode=False
            )
        except Exception as error:
            self.violate('a deep call stops no search', None, None, f'{type(error).__name__}: {str(error)[:300]}')
            return
        found = {hit.conversation_id for hit in result.hits}
        removed = {r['conv'] for _, r in self.records('delete', 'retain')}
        removed |= {r['conv'] for _, r in self.records('intent') if r.get('kind') in ('delete', 'retain')}
        for conv in sorted(deep - found - removed):
            self.violate('a deep call stops no search', None, {'conv': conv}, 'its deep call was not found')

    async def check_durable(self, log: EventLogBase) -> None:
        runs = {r.run_id: r for r in await log.list_runs() if r.run_id.startswith('dur-')}
        self.counts['durable runs'] = len(runs)
        running = [run_id for run_id, r in runs.items() if r.status == 'running']
        self.counts['durable runs left running'] = len(running)
        self.counts['durable runs failed'] = sum(r.status == 'failed' for r in runs.values())
        if running:
            time.sleep(LEASE_SECONDS + 0.5)  # every lease a stopped worker held has expired
            agent, durability = build_agent(log, self.workdir, 'checker')
            for run_id in running:
                try:
                    result = await durability.resume(agent, run_id)
                except Exception as error:
                    self.violate('interrupted run resumes', None, {'run': run_id}, f'{type(error).__name__}: {error}')
                    continue
                if result.output != answer_for(run_id):
                    self.violate('interrupted run resumes', None, {'run': run_id}, f'answered {result.output!r}')
        for run_id, record in runs.items():
            await self.check_run(log, run_id, record.status)

    async def check_run(self, log: EventLogBase, run_id: str, status_before: str) -> None:
        path = self.workdir / 'effects' / f'{run_id}.jsonl'
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        committed: set[int] = set()
        executions: dict[str, dict[str, Any]] = {}
        for line in lines:
            if 'committed' in line:
                committed.add(line['committed'])
                continue
            executions[line['exec']] = line
            self.counts['tool executions'] += 1
            if line['unit'] in committed:
                self.violate(
                    'committed unit never executes again',
                    line['who'],
                    {'run': run_id, **line},
                    f'unit {line["unit"]} executed after its journal entry was seen committed',
                )
        for entry in await log.entries(run_id=run_id, kinds=['durable_step']):
            exec_ids = re.findall(rb'exec ([0-9a-f]{32})', entry.payload)
            for exec_id in exec_ids:
                if exec_id.decode() not in executions:
                    self.violate(
                        'committed unit never executes again',
                        None,
                        {'run': run_id, 'seq': entry.seq},
                        f'the journal holds a result of execution {exec_id.decode()}, which the tool never recorded',
                    )
        run = await log.get_run(run_id)
        if run is None or run.status != 'completed':
            return
        from pydantic_ai.messages import ModelResponse, TextPart, ToolReturnPart

        messages = await log.run_messages(run_id)
        returns = collections.Counter(
            part.tool_call_id for m in messages for part in m.parts if isinstance(part, ToolReturnPart)
        )
        twice = {k: n for k, n in returns.items() if n > 1}
        if twice or len(returns) != self.tool_calls():
            self.violate(
                'run messages consistent',
                None,
                {'run': run_id},
                f'tool returns {dict(returns)} (status before {status_before})',
            )
        texts = [
            p.content for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart)
        ]
        if texts != [answer_for(run_id)]:
            self.violate('run messages consistent', None, {'run': run_id}, f'answers {texts}')

    async def check_saves(self, log: EventLogBase) -> None:
        """The savers' conversations, loaded through a fresh `EventLogConversationStore` and read
        from the log's message entries (see the module docstring)."""
        intents = [(w, r) for w, r in self.records('intent') if r.get('kind') in ('save', 'fork', 'store_delete')]
        if not intents:
            return
        from pydantic_ai.messages import TextPart

        from capability.conversation_store import EventLogConversationStore

        store = EventLogConversationStore(log)
        convs = {r['conv'] for _, r in intents}
        worker_of = {r['conv']: w for w, r in intents}
        deleted = {r['conv'] for _, r in self.records('store_deleted')}
        maybe_deleted = {r['conv'] for _, r in intents if r['kind'] == 'store_delete'}
        tried: dict[str, list[str]] = collections.defaultdict(list)  # every token a save of conv was about to store
        for _, r in intents:
            if r['kind'] == 'save':
                tried[r['conv']].append(r['token'])
        acked: dict[str, list[str]] = collections.defaultdict(list)
        for _, r in self.records('saved'):
            acked[r['conv']].append(r['token'])
        shared: dict[str, list[str]] = {}  # fork -> what it shares with its source (when it may exist)
        source_of: dict[str, str] = {}
        for _, r in intents:
            if r['kind'] == 'fork':
                shared[r['conv']], source_of[r['conv']] = r['shared'], r['source']
        forked = {r['conv']: r for _, r in self.records('forked')}

        marks = {m for toks in tried.values() for t in toks for m in (t, reply_to(t))}
        held: dict[str, list[int]] = collections.defaultdict(list)  # a saver's token or reply -> message seqs
        for entry in await log.entries(kinds=['message']):
            for found in set(SAVER_RE.findall(entry.payload.decode(errors='replace'))) & marks:
                held[found].append(entry.seq)
        save_of = {m: (w, r) for w, r in intents if r['kind'] == 'save' for m in (r['token'], reply_to(r['token']))}
        for mark, seqs in held.items():
            if len(seqs) > 1:
                worker, record = save_of[mark]
                self.violate('each message once', worker, record, f'{mark} in the message entries at seqs {seqs}')

        for conv in sorted(convs):
            worker = worker_of[conv]
            loaded = await store.load(conv)
            if conv in deleted:
                if loaded is not None:
                    self.violate('deleted conversation does not load', worker, {'conv': conv}, 'it loads')
                continue
            if conv in maybe_deleted:
                continue
            record = forked.get(conv)
            if record is not None and record['shared'] != shared[conv]:
                self.violate(
                    'fork loads its shared history',
                    worker,
                    record,
                    f'forked with {record["shared"]}, not the first turn',
                )
            if loaded is None:
                if acked[conv] or record is not None:
                    self.violate(
                        'acknowledged save loads once', worker, {'conv': conv}, 'the conversation does not load'
                    )
                continue
            self.counts['saver conversations loaded'] += 1
            got = tokens_in(loaded.messages)
            prefix = shared.get(conv, []) if conv in source_of else []
            own = got[len(prefix) :]
            if got[: len(prefix)] != prefix:
                self.violate('fork loads its shared history', worker, {'conv': conv}, f'loads {got}, shares {prefix}')
            for tok in acked[conv]:
                if own.count(tok) != 1:
                    self.violate(
                        'acknowledged save loads once',
                        worker,
                        {'conv': conv, 'token': tok},
                        f'{own.count(tok)} times in {got}',
                    )
            unknown = set(tried[conv]) - set(acked[conv])
            if [t for t in own if t not in unknown] != acked[conv] or not set(own) <= set(tried[conv]):
                self.violate(
                    'history is what was saved', worker, {'conv': conv}, f'loads {own}, acknowledged {acked[conv]}'
                )
            texts = [p.content for m in loaded.messages for p in m.parts if isinstance(p, TextPart)]
            replies = [reply_to(t) for t in got]
            if texts != replies:
                self.violate(
                    'history is what was saved', worker, {'conv': conv}, f'replies {texts}, expected {replies}'
                )

        # What a fork that may still exist shares stays in the log; everything else of a deleted
        # conversation is gone from every message entry.
        kept = {t for fork, toks in shared.items() if fork not in deleted for t in toks}
        for conv in sorted(deleted):
            for tok in tried[conv]:
                if tok in kept:
                    continue
                for mark in (tok, reply_to(tok)):
                    if held.get(mark):
                        self.violate(
                            'deleted conversation erased',
                            worker_of[conv],
                            {'conv': conv, 'token': tok},
                            f'{mark} still in the message entries at seqs {held[mark]}',
                        )
        self.counts['saver tokens in the log'] = sum(m.startswith('tk-') for m in held)

    @staticmethod
    def tool_calls() -> int:
        from _fault_worker import TOOL_CALLS

        return TOOL_CALLS


def main() -> None:
    workdir = Path(sys.argv[1])
    result = asyncio.run(Checker(workdir, sys.argv[2:]).run())
    sys.stdout.write(json.dumps(result) + '\n')
    sys.stdout.flush()
    os._exit(0)


if __name__ == '__main__':
    main()
