"""What signed checkpoints cost on an LMDB store: making one (the first lists every entry, a
later one only those since), its size, and `verify` with and without checkpoints.

Run: `.venv/bin/python bench/bench_checkpoint.py [conversations] [entries per conversation]`.
Prints times and ratios; nothing is asserted.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from eventlog import LmdbEventLog, NewEntry, run_finished_entry, run_started_entry
from eventlog.checkpoint import Signer


async def main(conversations: int, per_conversation: int) -> None:
    signer = Signer.generate()
    with tempfile.TemporaryDirectory() as tmp:
        log = LmdbEventLog(Path(tmp) / 'store.lmdb')
        payload = b'{"title":"' + b'x' * 400 + b'"}'
        for c in range(conversations):
            batch = [run_started_entry(conversation_id=f'c{c}', run_id=f'r{c}')]
            batch += [
                NewEntry(conversation_id=f'c{c}', kind='title', payload=payload) for _ in range(per_conversation - 2)
            ]
            batch.append(run_finished_entry(conversation_id=f'c{c}', run_id=f'r{c}', status='completed'))
            await log.append_many(batch)
        total = await log.last_seq()
        start = time.perf_counter()
        first = await log.checkpoint(signer, path=Path(tmp) / 'cp1.json')
        first_s = time.perf_counter() - start
        for c in range(conversations // 10):
            await log.append_many(
                [
                    NewEntry(conversation_id=f'c{c}', kind='title', payload=payload)
                    for _ in range(per_conversation // 10)
                ]
            )
        start = time.perf_counter()
        second = await log.checkpoint(signer, path=Path(tmp) / 'cp2.json')
        second_s = time.perf_counter() - start
        start = time.perf_counter()
        plain = await log.verify()
        plain_s = time.perf_counter() - start
        start = time.perf_counter()
        checked = await log.verify(checkpoints=[first, second], public_key=signer.public_key)
        checked_s = time.perf_counter() - start
        assert plain.ok
        assert checked.ok
        size1 = (Path(tmp) / 'cp1.json').stat().st_size
        size2 = (Path(tmp) / 'cp2.json').stat().st_size
        log.close()
    print(f'store: {conversations} conversations, {total} entries, then {second.last_seq - total} more')
    print(
        f'first checkpoint (lists {total} entries): {first_s * 1000:.0f} ms, {size1 / 1024:.0f} KiB '
        f'({size1 / total:.0f} bytes per entry)'
    )
    print(
        f'second checkpoint (lists {second.last_seq - first.last_seq} entries): {second_s * 1000:.0f} ms, '
        f'{size2 / 1024:.0f} KiB'
    )
    print(
        f'verify: {plain_s * 1000:.0f} ms; with both checkpoints: {checked_s * 1000:.0f} ms '
        f'(ratio {checked_s / plain_s:.2f})'
    )


if __name__ == '__main__':
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(*(args or [200, 100])))
