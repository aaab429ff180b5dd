"""Subprocess worker for the import memory test: writes an export, or imports one and reports
the process's peak resident memory.

    python import_worker.py make PATH RUNS      # an export of RUNS runs of 10 messages (~20 KiB each run)
    python import_worker.py import PATH STORE   # prints "<entries> <peak RSS KiB> <peak Python heap KiB>"

The Python heap is measured with `tracemalloc`, which sees what the import itself allocates
but not LMDB's own buffers (a write transaction keeps its dirty pages in memory until it
commits, so the process's RSS grows with the store whatever the import holds).
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tracemalloc
from pathlib import Path

from logtools import exchange
from transfertools import Crafted

from eventlog import LmdbEventLog, encode_message


def make(path: Path, runs: int) -> None:
    with path.open('wb') as out:
        crafted = Crafted()
        out.write(crafted.header())
        seq = 0
        for run in range(runs):
            conv, run_id = f'c{run % 50}', f'r{run}'
            seq += 1
            crafted.add(seq, conv, 'run_started', b'{}', run_id=run_id, parent=None)
            for i in range(5):
                for message in exchange(run * 10 + i, f'{run}-{i} ' + 'lorem ipsum dolor ' * 110):
                    seq += 1
                    crafted.add(seq, conv, 'message', encode_message(message), run_id=run_id, parent=seq - 1)
            out.write(crafted.body())
            crafted.lines.clear()
        out.write(crafted.closing().replace(b'"entries":0', b'"entries":%d' % seq))


async def load(path: Path, store: Path) -> int:
    log = LmdbEventLog(store)
    try:
        return await log.import_(path)
    finally:
        log.close()


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    if mode == 'make':
        make(path, int(sys.argv[3]))
        return
    tracemalloc.start()
    count = asyncio.run(load(path, Path(sys.argv[3])))
    _, heap_peak = tracemalloc.get_traced_memory()
    print(count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, heap_peak // 1024)


if __name__ == '__main__':
    main()
