"""What `AutoRecall` adds to a run: time per run with and without it, on an LMDB store that grows.

One conversation of seeded exchanges (`bench/_corpus.py`) is recorded run by run with
`EventLogPersistence` on an `LmdbEventLog` (each run a fresh context, as a memory-backed assistant
works: what earlier runs said comes back only through recall). At each checkpoint the next
exchanges are run twice each, interleaved: by an agent with persistence only, and by one that
also has `AutoRecall(log, k=3, max_tokens=1000)` (BM25 over the store's persistent index). Both
agents append to the same store, so they see the same history.

Printed per checkpoint: the median time per run of each, the median overhead (paired, exchange by
exchange), its ratio to the plain run, the median number of messages recalled and the block's
estimated tokens.

    .venv/bin/python bench/bench_autorecall.py            # checkpoints 250, 1000, 4000 exchanges
    .venv/bin/python bench/bench_autorecall.py --quick    # checkpoints 100, 400
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bench._corpus import make_exchanges
from capability import AutoRecall, EventLogPersistence, estimate_tokens
from eventlog import LmdbEventLog

SAMPLE = 40
"""Exchanges measured at each checkpoint (each run by both agents)."""


def _replying(replies: dict[str, str], recalled: list[str]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        prompts = [p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        if len(prompts) > 1:
            recalled.append(prompts[0])
        return ModelResponse(parts=[TextPart(replies.get(prompts[-1], 'ok'))])

    return FunctionModel(answer)


async def main(checkpoints: list[int]) -> None:
    exchanges = make_exchanges(max(checkpoints) + SAMPLE * len(checkpoints), seed=7)
    replies = {e.prompt: e.reply for e in exchanges}
    with tempfile.TemporaryDirectory() as tmp:
        log = LmdbEventLog(Path(tmp) / 'store.lmdb')
        recalled: list[str] = []
        plain = Agent(_replying(replies, recalled), capabilities=[EventLogPersistence(log)])
        recall = Agent(
            _replying(replies, recalled),
            capabilities=[EventLogPersistence(log), AutoRecall(log, k=3, max_tokens=1000)],
        )
        done = 0
        position = 0
        print(
            f'{"stored runs":>11} {"plain ms":>9} {"recall ms":>10} {"overhead ms":>12} {"ratio":>6} '
            f'{"recalled":>9} {"tokens":>7}'
        )
        for checkpoint in checkpoints:
            while done < checkpoint:
                await plain.run(exchanges[position].prompt, conversation_id='bench')
                done += 1
                position += 1
            plain_times: list[float] = []
            recall_times: list[float] = []
            recalled.clear()
            for exchange in exchanges[position : position + SAMPLE]:
                began = time.perf_counter()
                await plain.run(exchange.prompt, conversation_id='bench')
                middle = time.perf_counter()
                await recall.run(exchange.prompt, conversation_id='bench')
                recall_times.append(time.perf_counter() - middle)
                plain_times.append(middle - began)
            position += SAMPLE
            done += 2 * SAMPLE
            overhead = statistics.median(r - p for r, p in zip(recall_times, plain_times, strict=True))
            plain_ms = statistics.median(plain_times) * 1000
            counts = [block.count('<message ') for block in recalled] or [0]
            tokens = [estimate_tokens(block) for block in recalled] or [0]
            print(
                f'{checkpoint:>11} {plain_ms:>9.2f} {statistics.median(recall_times) * 1000:>10.2f} '
                f'{overhead * 1000:>12.2f} {(plain_ms + overhead * 1000) / plain_ms:>6.2f} '
                f'{statistics.median(counts):>9} {statistics.median(tokens):>7}'
            )
        log.close()


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true', help='smaller checkpoints')
    args = parser.parse_args()
    asyncio.run(main([100, 400] if args.quick else [250, 1000, 4000]))
