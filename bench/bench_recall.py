"""Recall and cost of the search modes: bm25 (default and english analyzers), semantic and hybrid.

1. Recall@5. A generated conversation states 30 facts early on, then runs `--filler` messages of
   ordinary chat, then asks about each fact twice: once with the fact's own words (high lexical
   overlap) and once paraphrased, sharing no content word with it (low overlap). A question is
   recalled when the fact's message is among the first 5 ranked messages of a conversation search.
   Semantic and hybrid use all-MiniLM-L6-v2 (the packaged model, CPU, extra `semantic`).
2. Embedding cost per appended message: the model's time to embed the conversation's messages in
   batches of 64 (what `VectorIndex.catch_up` spends), and the index's own time beside it.
3. Search latency per mode at 10,000 and 100,000 stored messages (LMDB store, conversation scope,
   one conversation). The stored vectors there come from a stand-in model of the same dimension
   (384) that hashes words, so that building 100,000 vectors does not take the CPU model minutes;
   ranking cost depends on the count and dimension only. The MiniLM query embedding, which every
   semantic or hybrid search adds, is measured separately and added to the semantic and hybrid rows.

Usage: python bench/bench_recall.py [--quick] [--filler N] [--sizes 10000,100000]
`--quick`: filler 600, sizes 10,000 only.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.embeddings.settings import EmbeddingSettings
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from bench._search_corpus import conversation_messages
from eventlog import LmdbEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchOptions, get_analyzer
from search.lmdb_index import LmdbIndex
from search.vector_index import VectorIndex

# (statement, question with the statement's words, paraphrased question sharing no content word)
FACTS: list[tuple[str, str, str]] = [
    (
        'The staging database password rotates every ninety days.',
        'how often does the staging database password rotate',
        'how frequently is the test environment credential changed',
    ),
    (
        'My sister Alice lives in Lisbon and works as an architect.',
        'where does my sister Alice live',
        'which city is my sibling based in',
    ),
    (
        'We chose PostgreSQL over MongoDB because of transactional guarantees.',
        'why did we choose PostgreSQL over MongoDB',
        'reason for picking a relational store instead of a document store',
    ),
    (
        'The quarterly budget for cloud infrastructure is 40,000 euros.',
        'quarterly budget cloud infrastructure',
        'how much money can we spend on hosting servers this quarter',
    ),
    (
        'Our dog is called Biscuit and he is afraid of thunderstorms.',
        'what is our dog called',
        'name of the family pet',
    ),
    (
        'Deployments to production happen on Tuesdays after the standup.',
        'when do deployments to production happen',
        'which weekday do we ship releases live',
    ),
    (
        'The customer churn rate last month was 3.2 percent.',
        'customer churn rate last month',
        'what share of clients left us recently',
    ),
    (
        'I am allergic to peanuts, so avoid recipes with them.',
        'am I allergic to peanuts',
        'which food must I never eat',
    ),
    (
        'The office wifi network is named Orchard and the router sits in the kitchen.',
        'office wifi network name',
        'what is the wireless SSID at work',
    ),
    (
        'Our biggest client, Northwind, renews its contract in March.',
        'when does Northwind renew its contract',
        'month our largest account signs again',
    ),
    (
        'The API rate limit is 600 requests per minute per key.',
        'API rate limit requests per minute',
        'how many calls can one token make each minute',
    ),
    ('My flight to Tokyo departs on the 14th from gate B22.', 'flight to Tokyo departs', 'when do I leave for Japan'),
    (
        'We store backups in an S3 bucket with versioning enabled.',
        'where do we store backups',
        'location of our disaster recovery copies',
    ),
    (
        'The team lunch is booked at the Thai place on Friday.',
        'team lunch booked',
        'where are colleagues eating together at the end of the week',
    ),
    (
        'Our mobile app crashes on Android 12 when the camera opens.',
        'mobile app crashes on Android 12 camera',
        'phone software failing while taking pictures',
    ),
    ('The logo color is teal, hex 008080.', 'logo color hex', 'what shade is our brand mark'),
    ('Payroll runs on the 25th of each month.', 'when does payroll run', 'what date are salaries paid'),
    (
        'The conference talk is titled Scaling Event Logs.',
        'conference talk title',
        'name of my presentation at the summit',
    ),
    (
        'Grandma turns ninety on June 3rd; we are planning a surprise party.',
        'grandma ninety surprise party',
        'elderly relative birthday celebration plans',
    ),
    (
        'The legacy billing service is written in Perl and nobody wants to touch it.',
        'legacy billing service written in Perl',
        'old invoicing code in an obscure scripting language',
    ),
    (
        'Our support hours are 8am to 6pm Central European Time.',
        'support hours Central European Time',
        'when can customers reach the help desk',
    ),
    (
        'The sofa we ordered is dark green velvet and arrives next week.',
        'sofa ordered green velvet',
        'furniture purchase for the living room',
    ),
    (
        'Kubernetes pods are evicted when memory exceeds 2 GiB.',
        'Kubernetes pods evicted memory',
        'containers killed for using too much RAM',
    ),
    (
        'My running goal this year is a marathon under four hours.',
        'running goal marathon under four hours',
        'athletic target for the year',
    ),
    (
        'The design review moved to Thursday at 3pm.',
        'design review moved to Thursday',
        'rescheduled meeting about the mockups',
    ),
    (
        'We use Sentry for error tracking and PagerDuty for alerts.',
        'Sentry error tracking PagerDuty alerts',
        'tools that notify on-call engineers about exceptions',
    ),
    (
        'The rent for the flat went up to 1,450 a month.',
        'rent for the flat went up',
        'how much do I pay for housing now',
    ),
    (
        'Our newsletter has 12,000 subscribers and a 41 percent open rate.',
        'newsletter subscribers open rate',
        'how many people read our email digest',
    ),
    (
        'The car needs new brake pads before the winter trip.',
        'car needs new brake pads',
        'vehicle maintenance before travelling in the cold season',
    ),
    (
        'Feature flags are managed in LaunchDarkly, not in the config file.',
        'feature flags managed in LaunchDarkly',
        'where do we toggle experimental functionality',
    ),
]

_WORD = re.compile(r'\w+')


class HashModel(EmbeddingModel):
    """A stand-in model for the latency tables: words hashed into 384 dimensions (fast, deterministic)."""

    @property
    def model_name(self) -> str:
        return 'hash-384'

    @property
    def system(self) -> str:
        return 'bench'

    async def embed(
        self, inputs: str | Sequence[str], *, input_type: EmbedInputType, settings: EmbeddingSettings | None = None
    ) -> EmbeddingResult:
        texts, _ = self.prepare_embed(inputs, settings)
        rows: list[list[float]] = []
        for text in texts:
            row = [0.0] * 384
            for word in _WORD.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                row[int.from_bytes(digest, 'little') % 384] += 1.0
            rows.append(row)
        return EmbeddingResult(
            embeddings=rows, inputs=texts, input_type=input_type, model_name='hash-384', provider_name='bench'
        )


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


RUN_SIZE = 40


async def store_conversation(path: Path, messages: list[ModelMessage], run_size: int = RUN_SIZE) -> LmdbEventLog:
    log = LmdbEventLog(path, sync=False)
    tip: int | None = None
    for start in range(0, len(messages), run_size):
        run_id = f'run{start // run_size}'
        tip = await log.append(run_started_entry(conversation_id='c', run_id=run_id, parent=tip))
        seqs = await log.append_many(
            [message_entry(m, conversation_id='c', run_id=run_id) for m in messages[start : start + run_size]]
        )
        tip = seqs[-1]
    return log


async def recall(filler: int, minilm: Embedder) -> None:
    messages: list[ModelMessage] = []
    for statement, _, _ in FACTS:
        messages += [user(statement), reply('Noted, I will remember that.')]
    messages += conversation_messages(filler, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        log = await store_conversation(Path(tmp) / 'store', messages)
        # the same conversation in a second store, whose BM25 index uses the english analyzer
        english_log = await store_conversation(Path(tmp) / 'store-english', messages)
        try:
            began = time.perf_counter()
            embedded = await VectorIndex.for_log(log, minilm).catch_up()
            embed_s = time.perf_counter() - began
            engines = {
                'bm25 default': SearchEngine(LmdbIndex.for_log(log), SearchOptions(context_lines=0)),
                'bm25 english': SearchEngine(
                    LmdbIndex(english_log, 'english'),
                    SearchOptions(analyzer=get_analyzer('english'), context_lines=0),
                ),
                'semantic': SearchEngine(LmdbIndex.for_log(log), SearchOptions(mode='semantic', embedder=minilm)),
                'hybrid': SearchEngine(LmdbIndex.for_log(log), SearchOptions(mode='hybrid', embedder=minilm)),
            }
            print(
                f'\nRecall@5: {len(FACTS)} facts stated first, then {filler} messages of chat ({len(messages)} messages in all)'
            )
            print(f'{"mode":<14} {"high overlap":>13} {"low overlap":>12} {"both":>6}')
            for label, engine in engines.items():
                found = {'high': 0, 'low': 0}
                for number, (_, high, low) in enumerate(FACTS):
                    # the fact is the run's message at position 2 * number (runs continue one another)
                    where = (f'run{2 * number // RUN_SIZE}', 2 * number)
                    for kind, question in (('high', high), ('low', low)):
                        result = await engine.find(question, scope='conversation', conversation_id='c')
                        found[kind] += where in [(hit.run_id, hit.position) for hit in result.ranked[:5]]
                n = len(FACTS)
                print(
                    f'{label:<14} {found["high"] / n:>13.2f} {found["low"] / n:>12.2f} {(found["high"] + found["low"]) / (2 * n):>6.2f}'
                )
            print(
                f'\nEmbedding cost (MiniLM, CPU, batches of 64): {embedded} messages in {embed_s:.1f} s = '
                f'{embed_s / max(embedded, 1) * 1000:.2f} ms per appended message (model and index writes together)'
            )
        finally:
            log.close()
            english_log.close()


async def latency(sizes: list[int], minilm: Embedder, repeats: int) -> None:
    queries = [q for _, high, low in FACTS for q in (high, low)]
    began = time.perf_counter()
    for query in queries:
        await minilm.embed_query(query)
    query_embed_ms = (time.perf_counter() - began) / len(queries) * 1000
    print(f'\nMiniLM query embedding: {query_embed_ms:.1f} ms per query (added to the semantic and hybrid rows below)')
    hasher = Embedder(HashModel())
    print(f'{"messages":>9} {"mode":<9} {"median ms":>10} {"p90 ms":>8} {"+ query embedding":>18}')
    for size in sizes:
        messages = conversation_messages(size, seed=11)
        with tempfile.TemporaryDirectory() as tmp:
            log = await store_conversation(Path(tmp) / 'store', messages)
            try:
                LmdbIndex.for_log(log).catch_up()
                t0 = time.perf_counter()
                await VectorIndex.for_log(log, hasher).catch_up()
                index_s = time.perf_counter() - t0
                print(
                    f'{"":>9} (vector index of {size} messages with the stand-in model: {index_s:.1f} s, {index_s / size * 1e6:.0f} us per message)'
                )
                for mode in ('bm25', 'semantic', 'hybrid'):
                    engine = SearchEngine(
                        LmdbIndex.for_log(log),
                        SearchOptions(mode=mode, embedder=hasher if mode != 'bm25' else None),  # type: ignore[arg-type]
                    )
                    await engine.search(queries[0], scope='conversation', conversation_id='c')  # warm
                    times: list[float] = []
                    for index in range(repeats):
                        query = queries[index % len(queries)]
                        t = time.perf_counter()
                        await engine.search(query, scope='conversation', conversation_id='c')
                        times.append((time.perf_counter() - t) * 1000)
                    times.sort()
                    median = statistics.median(times)
                    p90 = times[int(len(times) * 0.9) - 1]
                    extra = '' if mode == 'bm25' else f'{median + query_embed_ms:.1f}'
                    print(f'{size:>9} {mode:<9} {median:>10.1f} {p90:>8.1f} {extra:>18}')
            finally:
                log.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--filler', type=int, default=None)
    parser.add_argument('--sizes', default=None)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--no-latency', action='store_true', help='recall and embedding cost only')
    args = parser.parse_args()
    filler = args.filler if args.filler is not None else (600 if args.quick else 2000)
    sizes = [int(s) for s in args.sizes.split(',')] if args.sizes else ([10_000] if args.quick else [10_000, 100_000])
    from search.local_model import minilm_embedder

    minilm = minilm_embedder()
    await recall(filler, minilm)
    if not args.no_latency:
        await latency(sizes, minilm, args.repeats)


if __name__ == '__main__':
    asyncio.run(main())
