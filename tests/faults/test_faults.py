"""Fault injection with real processes, in the spirit of Jepsen's checkers.

A seeded mix of worker processes (`_fault_worker.py`) shares one store, each doing one role in a
loop: appenders (with and without idempotency keys), compactors, erasers, deleters, retainers,
durable runs, resumers, an attacker (catalogue entries naming code, tool calls nested 600 deep:
no process may run that code, and a search of the whole store must find every deep call) and,
on pydantic-ai 2.66+, a saver (conversations kept with `EventLogConversationStore`: turns saved
with and without `EventLogPersistence`, forks, deletes). The driver (`faultdriver.py`) sends SIGKILL and SIGSTOP/SIGCONT to
random workers at random moments (and, on PostgreSQL, kills the server with SIGKILL and starts
it again); killed workers start again and pick up from their acknowledgement files. Once
everything has stopped, a fresh process (`faultcheck.py`) checks the store against what the
workers were told succeeded. A failure lists each violated invariant with the seed, the worker
and its acknowledgement record; `EVENTLOG_FAULTS_SEED=<seed>` runs the same mix again
(the faults' timing still varies with the machine).

`make test` runs each mix for a few tens of seconds; `make test-long` (EVENTLOG_LONG=1) for
minutes. `EVENTLOG_FAULTS_KEEP=1` keeps the temporary directory (acks, effects, worker output).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _fault_worker import Acks
from faultdriver import Spec, has_conversation_store, run_mix, seed_from_env

LONG = bool(os.environ.get('EVENTLOG_LONG'))
MIX_SECONDS = 240.0 if LONG else 30.0
RACE_SECONDS = 60.0 if LONG else 15.0


@pytest.mark.timeout(3600 if LONG else 240)
@pytest.mark.parametrize('backend', ['lmdb', 'postgres'])
def test_random_mix_under_kills_and_stops_loses_nothing_acknowledged(backend: str) -> None:
    result = run_mix(f'random mix ({backend})', backend, None, MIX_SECONDS, seed=seed_from_env())
    print(result.summary())
    assert not result.violations, result.failure()
    assert result.counts.get('append', 0) > 0, result.summary()
    if has_conversation_store():
        assert result.counts.get('saved', 0) > 0, result.summary()
        assert result.counts.get('saver conversations loaded', 0) > 0, result.summary()


@pytest.mark.timeout(3600 if LONG else 180)
def test_many_lmdb_processes_racing_keep_every_acknowledged_append() -> None:
    """No faults: appenders that also compact, compactors (one that never pauses), an eraser, a
    retainer and a deleter (these close the store between operations, as short-lived processes
    do) on one LMDB store, and on pydantic-ai 2.66+ a saver (forks, deletes); every acknowledged
    append and save is there, once, in a fresh process afterwards."""
    specs = [
        Spec('a0', 'appender', ['compact', 'tight']),
        Spec('a1', 'appender', ['compact', 'idem', 'reopen']),
        Spec('a2', 'appender', ['idem', 'reopen']),
        Spec('c0', 'compactor', ['tight']),
        Spec('e0', 'eraser', ['reopen']),
        Spec('r0', 'retainer', ['reopen']),
        Spec('d0', 'deleter', ['reopen']),
    ]
    if has_conversation_store():
        specs.append(Spec('v0', 'saver'))
    result = run_mix('racing LMDB processes', 'lmdb', specs, RACE_SECONDS, seed=seed_from_env(), faults=False)
    print(result.summary())
    assert not result.violations, result.failure()
    assert result.counts.get('append', 0) > 0, result.summary()
    if has_conversation_store():
        assert result.counts.get('saved', 0) > 0 and result.counts.get('store_deleted', 0) > 0, result.summary()


def test_a_line_cut_by_a_kill_hides_no_later_record(tmp_path: Path) -> None:
    """A SIGKILL can cut a write short where the line crosses a page boundary; the records a
    later incarnation appends after it must still reach the checker (they once did not, and the
    checker reported that incarnation's appends as phantoms)."""
    path = tmp_path / 'a0.jsonl'
    first = Acks(path, 'a0', 0)
    first.intent(kind='message', token='tk-1')
    first.ack(op='append', token='tk-1', seq=1)
    os.write(first.fd, b'{"op": "intent", "kind": "mess')  # what the kill left
    os.close(first.fd)
    second = Acks(path, 'a0', 1)
    assert [r['token'] for r in second.previous] == ['tk-1', 'tk-1']
    second.intent(kind='message', token='tk-2')
    second.ack(op='append', token='tk-2', seq=2)
    os.close(second.fd)
    assert [(r['op'], r['token'], r['inc']) for r in Acks.read(path)] == [
        ('intent', 'tk-1', 0),
        ('append', 'tk-1', 0),
        ('intent', 'tk-2', 1),
        ('append', 'tk-2', 1),
    ]
