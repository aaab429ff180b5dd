"""Would a conversation-keyed index layout make an append cheaper? Raw LMDB, both layouts side by side.

Replays the keys and values the engine writes (and the records it reads) for a plain exchange,
three write transactions per run (the request with the run's start, the response, the run's
end), with `lmdb` directly, into stores of two index layouts:

- `current` (store format 3): in the shared `index` database, BY_CONV `ck(conv) + seq8`, RUNS
  `run id`, RUN_ORDER `seq8`, CONV_RUNS `ck(conv) + start seq8`, CONVS `conv id` (the whole
  record) and IDEM `b'r' + start seq8 + key`, each under its table's one-byte prefix; an append to
  a running run reads its run and conversation records and looks its idempotency key up, then
  writes four index leaves (BY_CONV, RUNS, CONVS, IDEM);
- `proposed`: every key an append of a running run writes under its conversation's prefix, at
  the tail of its range: the entry keys as now, the run's record at `ck(conv) + start seq8 +
  b'\\x01'` and its idempotency keys at `ck(conv) + start seq8 + b'\\x02' + key` (right after the
  run's `run_started` key), the part of the conversation record an append changes (counters,
  last seq, chain head) at `ck(conv) + b'\\xff' * 8` (after every seq); the rest of the record
  (title, flags, creation) stays in CONVS, written when the conversation is created; a run id ->
  `ck(conv) + start seq8` key, RUN_ORDER and CONV_RUNS written once at the run's start. A lookup
  by run id reads one key more;
- `lean`: `proposed` without CONV_RUNS (a conversation's runs found among its own keys, the
  tagged run records), so a run's start writes one leaf less.

Each store is pre-filled like a real one (`--conversations` conversations, `--runs` runs spread
over them at random, entries of a few hundred bytes to 1.5 KB in the `entries` database), then
the measured runs go to a conversation drawn at random, the six stores (three layouts, synced and
unsynced, LMDB's `sync` and `metasync` as `LmdbEventLog` opens a store) taking turns run by run in
a rotating order. Per store: pages written per commit (bytes handed to write system calls,
`wchar` of /proc/self/io, over 4096; LMDB writes each dirty page with `pwrite`), per commit kind;
ms per run (wall) and the thread CPU per run; medians. Load averages before and after.

    .venv/bin/python bench/bench_index_layout.py
    .venv/bin/python bench/bench_index_layout.py --measured 600 --runs 800
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lmdb
import msgspec
from _baseline import load_average

_SEQ = struct.Struct('>Q')
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.decode

META, BY_CONV, RUNS, RUN_ORDER, CONV_RUNS, CONVS, IDEM = b'\x00', b'\x02', b'\x04', b'\x05', b'\x06', b'\x07', b'\x08'
"""The one-byte prefixes of the tables in the `index` database (the current numbers)."""
RUN_IDS = b'\x04'
"""The proposed layout's run id -> (conversation, start) table, in the place of RUNS."""
TAG_RUN, TAG_IDEM = b'\x01', b'\x02'
HOT = b'\xff' * 8
"""After every seq8 of a conversation (seqs stay below 2**53)."""


def ck(conv: str) -> bytes:
    return conv.encode() + b'\x00'


def seq8(seq: int) -> bytes:
    return _SEQ.pack(seq)


class Step(msgspec.Struct):
    """One entry of a run: its kind, idempotency key and body size."""

    kind: str
    key: str
    size: int


def run_steps(rng: random.Random) -> list[list[Step]]:
    """The entries of one plain exchange, by write transaction."""
    return [
        [Step('run_started', 'start', 60), Step('message', 'msg:0', rng.randrange(250, 1200))],
        [Step('message', 'msg:1', rng.randrange(300, 1500))],
        [Step('run_finished', 'end', 90)],
    ]


def run_record(conv: str, start: int, last: int, count: int) -> list[Any]:
    """A run record as the engine stores it (the fields of `StoredRun`, values of the right size)."""
    return [conv, None, 'agent', {}, 1733150000.123456, None, 'running', None, {}, start, None, last, count, count - 1]


def conv_hot(last: int, count: int, runs: int, payload: int) -> list[Any]:
    """The part of a conversation record an append changes (counters, last seq, chain head, updated)."""
    return [1733150000.123456, count, count // 2, runs, 0, payload, last, b'h' * 32]


def conv_cold(conv: str, first: int) -> dict[str, Any]:
    """The part an append leaves alone."""
    return {'conversation_id': conv, 'title': 'a title of a few words', 'created_at': 1733150000.1, 'first_seq': first}


def conv_whole(conv: str, first: int, last: int, count: int, runs: int, payload: int) -> dict[str, Any]:
    """The whole conversation record (current layout: a msgpack map, as `ConversationRecord`)."""
    return {
        **conv_cold(conv, first),
        'updated_at': 1733150000.2,
        'archived': False,
        'deleted': False,
        'forked_from': None,
        'entry_count': count,
        'message_count': count // 2,
        'run_count': runs,
        'compaction_count': 0,
        'payload_bytes': payload,
        'last_seq': last,
        'head_hash': b'h' * 32,
    }


class Store:
    """One LMDB store of one layout; `commit` replays one write transaction of a run."""

    def __init__(self, path: Path, layout: str) -> None:
        path.mkdir(parents=True)
        self.path = path
        self.layout = layout
        self.open(sync=False)
        self.next_seq = 1
        self.convs: dict[str, tuple[int, int, int, int]] = {}
        """Per conversation: (first seq, entry count, run count, payload bytes), as a real store's
        records would hold them (the engine reads them back; this keeps the values' sizes right)."""

    def open(self, *, sync: bool) -> None:
        """(Re)open the environment, with synced commits or not."""
        self.env = lmdb.open(
            str(self.path), map_size=1 << 30, max_dbs=4, sync=sync, metasync=sync, readahead=False, mode=0o600
        )
        self.entries = self.env.open_db(b'entries')
        self.index = self.env.open_db(b'index')

    def commit(self, conv: str, run_id: str, steps: list[Step]) -> None:
        with self.env.begin(write=True) as txn:
            (self._current if self.layout == 'current' else self._proposed)(txn, conv, run_id, steps)

    @property
    def conv_runs(self) -> bool:
        """Whether the proposed layout keeps CONV_RUNS (`lean` drops it: a conversation's runs are
        then found among its keys, the tagged run records)."""
        return self.layout != 'lean'

    def _entry(self, txn: Any, conv: str, run_id: str, step: Step) -> int:
        seq = self.next_seq
        self.next_seq += 1
        body = _encode([seq, conv, run_id, step.kind, 1733150000.5, seq - 1, step.key, False, b'p' * step.size])
        txn.put(seq8(seq), body + b'c' * 32, True, True, True, self.entries)
        return seq

    def _current(self, txn: Any, conv: str, run_id: str, steps: list[Step]) -> None:
        index = self.index
        prefix = ck(conv)
        raw = txn.get(RUNS + run_id.encode(), None, index)
        run = None if raw is None else _decode(raw)
        raw_conv = txn.get(CONVS + conv.encode(), None, index)
        if raw_conv is not None:
            _decode(raw_conv)
        first, count, runs, payload = self.convs.get(conv, (self.next_seq, 0, 0, 0))
        for step in steps:
            if step.kind == 'run_started':
                start = self.next_seq
                run = run_record(conv, start, start, 0)
                runs += 1
                txn.put(RUN_ORDER + seq8(start), run_id.encode(), True, True, False, index)
                txn.put(CONV_RUNS + prefix + seq8(start), run_id.encode(), True, True, False, index)
            assert run is not None
            idem = IDEM + b'r' + seq8(run[9]) + step.key.encode()
            if step.kind != 'run_started' and run[9] < self.next_seq:
                assert txn.get(idem, None, index) is None
            self._step(txn, conv, run_id, step, run, BY_CONV + prefix, idem)
            count += 1
            payload += step.size
        assert run is not None
        txn.put(RUNS + run_id.encode(), _encode(run), True, True, False, index)
        whole = conv_whole(conv, first, self.next_seq - 1, count, runs, payload)
        txn.put(CONVS + conv.encode(), _encode(whole), True, True, False, index)
        self.convs[conv] = (first, count, runs, payload)

    def _step(self, txn: Any, conv: str, run_id: str, step: Step, run: list[Any], entries: bytes, idem: bytes) -> None:
        """One entry of a run: its body, its key under `entries` (the conversation's entry keys),
        its idempotency key `idem`, and the run record's last `seq` and count brought up to date."""
        seq = self._entry(txn, conv, run_id, step)
        txn.put(entries + seq8(seq), b'', True, True, False, self.index)
        txn.put(idem, seq8(seq), True, True, False, self.index)
        run[11] = seq
        run[12] += 1

    def _proposed(self, txn: Any, conv: str, run_id: str, steps: list[Step]) -> None:
        index = self.index
        prefix = BY_CONV + ck(conv)
        where = txn.get(RUN_IDS + run_id.encode(), None, index)
        run = None
        if where is not None:
            where = BY_CONV + where
            run = _decode(txn.get(where + TAG_RUN, None, index))
        new_conv = conv not in self.convs
        if not new_conv:
            _decode(txn.get(prefix + HOT, None, index))
        first, count, runs, payload = self.convs.get(conv, (self.next_seq, 0, 0, 0))
        if new_conv:
            txn.put(CONVS + conv.encode(), _encode(conv_cold(conv, first)), True, True, False, index)
        for step in steps:
            if step.kind == 'run_started':
                start = self.next_seq
                run = run_record(conv, start, start, 0)
                runs += 1
                where = prefix + seq8(start)
                txn.put(RUN_IDS + run_id.encode(), where[1:], True, True, False, index)
                txn.put(RUN_ORDER + seq8(start), run_id.encode(), True, True, False, index)
                if self.conv_runs:
                    txn.put(CONV_RUNS + ck(conv) + seq8(start), run_id.encode(), True, True, False, index)
            assert run is not None
            assert where is not None
            idem = where + TAG_IDEM + step.key.encode()
            if step.kind != 'run_started' and run[9] < self.next_seq:
                assert txn.get(idem, None, index) is None
            self._step(txn, conv, run_id, step, run, prefix, idem)
            count += 1
            payload += step.size
        assert run is not None
        assert where is not None
        txn.put(where + TAG_RUN, _encode(run), True, True, False, index)
        txn.put(prefix + HOT, _encode(conv_hot(self.next_seq - 1, count, runs, payload)), True, True, False, index)
        self.convs[conv] = (first, count, runs, payload)


def bytes_written() -> int:
    """Bytes this process has handed to write system calls (`wchar` of /proc/self/io)."""
    with open('/proc/self/io') as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith('wchar'))


def pages_and_depth(store: Store) -> str:
    with store.env.begin() as txn:
        index, entries = txn.stat(store.index), txn.stat(store.entries)
    return (
        f'index {index["entries"]} keys, depth {index["depth"]}, {index["leaf_pages"]} leaves; '
        f'entries depth {entries["depth"]}'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--conversations', type=int, default=12, help='conversations of the pre-filled store')
    parser.add_argument('--runs', type=int, default=600, help='runs the store holds before the measured ones')
    parser.add_argument('--measured', type=int, default=400, help='measured runs per store')
    parser.add_argument('--seed', type=int, default=42)
    args = parser.parse_args()
    print(f'load average before: {load_average()}', flush=True)
    variants = [(layout, sync) for sync in (True, False) for layout in ('current', 'proposed', 'lean')]
    with tempfile.TemporaryDirectory(prefix='bench-index-layout-') as tmp:
        stores: dict[tuple[str, bool], Store] = {}
        for layout, sync in variants:
            # The same pre-fill (same seed) in each store: unsynced commits, one per transaction of a run.
            store = Store(Path(tmp) / f'{layout}-{sync}', layout)
            rng = random.Random(args.seed)
            for _ in range(args.runs):
                conv = f'conv-{rng.randrange(args.conversations):03d}'
                run_id = f'{rng.getrandbits(128):032x}'
                for steps in run_steps(rng):
                    store.commit(conv, run_id, steps)
            store.env.sync(True)
            store.env.close()
            store.open(sync=sync)
            stores[layout, sync] = store
        for (layout, sync), store in stores.items():
            if sync:
                print(f'{layout}: {pages_and_depth(store)}')
        rng = random.Random(args.seed + 1)
        wall: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
        cpu: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
        pages: dict[tuple[str, bool], list[list[float]]] = {v: [[], [], []] for v in variants}
        for number in range(args.measured):
            conv = f'conv-{rng.randrange(args.conversations):03d}'
            run_id = f'{rng.getrandbits(128):032x}'
            steps = run_steps(rng)
            shift = number % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                store = stores[variant]
                commit: Callable[[str, str, list[Step]], None] = store.commit
                written: list[int] = []
                start, cpu_start = time.perf_counter(), time.thread_time()
                for batch in steps:
                    before = bytes_written()
                    commit(conv, run_id, batch)
                    written.append(bytes_written() - before)
                wall[variant].append(time.perf_counter() - start)
                cpu[variant].append(time.thread_time() - cpu_start)
                for kind, amount in enumerate(written):
                    pages[variant][kind].append(amount / 4096)
            if number == args.measured // 2:
                print(f'  half way; load average {load_average()}', flush=True)
        for store in stores.values():
            store.env.close()
    print(f'load average after: {load_average()}')
    print(
        f'\n{args.conversations} conversations, {args.runs} runs pre-filled, {args.measured} measured runs per store '
        f'(three commits each); medians'
    )
    header = (
        f'{"layout":>9} {"sync":>5} | {"pages/commit":>12} | {"start":>5} {"resp":>5} {"end":>5} | '
        f'{"ms per run":>10} | {"CPU ms/run":>10}'
    )
    print(header)
    print('-' * len(header))
    summary: dict[tuple[str, bool], tuple[float, float, float]] = {}
    for variant in variants:
        kinds = [statistics.median(values) for values in pages[variant]]
        per_commit = statistics.median([sum(p[i] for p in pages[variant]) / 3 for i in range(args.measured)])
        ms = statistics.median(wall[variant]) * 1e3
        cpu_ms = statistics.median(cpu[variant]) * 1e3
        summary[variant] = (per_commit, ms, cpu_ms)
        layout, sync = variant
        print(
            f'{layout:>9} {sync!s:>5} | {per_commit:12.1f} | {kinds[0]:5.1f} {kinds[1]:5.1f} {kinds[2]:5.1f} | '
            f'{ms:10.3f} | {cpu_ms:10.3f}'
        )
    for sync in (True, False):
        for layout in ('proposed', 'lean'):
            old, new = summary['current', sync], summary[layout, sync]
            diffs = [a - b for a, b in zip(wall['current', sync], wall[layout, sync], strict=True)]
            print(
                f'sync={sync}: {layout} / current pages {new[0] / old[0]:.2f}x, time per run {new[1] / old[1]:.2f}x; '
                f'saving per run {old[1] - new[1]:.3f} ms (median of the run-by-run differences '
                f'{statistics.median(diffs) * 1e3:.3f} ms), CPU {old[2] - new[2]:.3f} ms'
            )
    if os.environ.get('BENCH_RAW'):
        print({f'{k[0]}-{k[1]}': v for k, v in summary.items()})


if __name__ == '__main__':
    main()
