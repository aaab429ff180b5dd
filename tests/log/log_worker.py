"""A writer process for the crash and multi-process tests (run as a script).

Usage: log_worker.py STORE NAME COUNT [MAP_SIZE]

Appends COUNT messages to conversation NAME (one run per ten messages, mixing single
appends and batches) and prints `ack <seq> <index>` after each append call returns, so
the parent knows exactly which appends were acknowledged.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from pydantic_ai.messages import ModelRequest, UserPromptPart

from eventlog import LmdbEventLog, message_entry, run_finished_entry, run_started_entry


def message(name: str, index: int) -> ModelRequest:
    text = f'{name} message {index} ' + 'x' * (index % 7 * 300)
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    return ModelRequest(parts=[UserPromptPart(text, timestamp=stamp)], timestamp=stamp)


async def main(store: str, name: str, count: int, map_size: int) -> None:
    log = LmdbEventLog(store, map_size=map_size)
    print('ready', flush=True)
    index = 0
    run = 0
    while index < count:
        run_id = f'{name}-run-{run}'
        run += 1
        await log.append(run_started_entry(conversation_id=name, run_id=run_id))
        end = min(index + 10, count)
        if run % 2:
            for i in range(index, end):
                seq = await log.append(message_entry(message(name, i), conversation_id=name, run_id=run_id))
                print(f'ack {seq} {i}', flush=True)
        else:
            batch = [message_entry(message(name, i), conversation_id=name, run_id=run_id) for i in range(index, end)]
            seqs = await log.append_many(batch)
            for seq, i in zip(seqs, range(index, end), strict=True):
                print(f'ack {seq} {i}', flush=True)
        await log.append(run_finished_entry(conversation_id=name, run_id=run_id, status='completed'))
        index = end
    log.close()
    print('done', flush=True)


if __name__ == '__main__':
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 64 * 1024 * 1024
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), size))
