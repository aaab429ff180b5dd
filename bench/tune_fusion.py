"""How `search.semantic.HYBRID_LEXICAL_WEIGHT` was chosen: recall@5 of hybrid fusion per weight, on the
development half of the realistic set (`bench/_chitchat.py`) only.

Each question's BM25 ranking (default and english analyzers) and semantic ranking (all-MiniLM-L6-v2)
are read once through `SearchEngine`; the fusions are then recomputed from them with the library's own
functions (`fuse_scores`, `fuse_rankings`) for every weight, and recall@5 printed per weight, beside
BM25 alone, semantic alone and reciprocal-rank fusion. `--split heldout` prints the same for the
held-out half: run it only to confirm a choice made on the development half.

    python bench/tune_fusion.py [--limit 12000] [--split dev]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench._chitchat import Question
from bench._chitchat import load as load_realistic
from bench._realistic import TOP, engine, ranking, store
from search import SearchOptions, get_analyzer
from search.backend import Hit, RankedHits
from search.semantic import fuse_rankings, fuse_scores

WEIGHTS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 1.0)


def as_ranked(hits: list[Hit], ids: dict[tuple[str, int], int], keys: list[tuple[str, int]]) -> RankedHits:
    doc_ids = np.array([ids[(hit.run_id, hit.position)] for hit in hits], dtype=np.int64)
    scores = np.array([hit.score for hit in hits], dtype=np.float64)
    order = np.argsort(doc_ids, kind='stable')
    return RankedHits(doc_ids[order], scores[order], keys.__getitem__, ranked=False)


def found(hits: object, question: Question) -> bool:
    """Whether the evidence is among the first `TOP` hits other than the turn that asked (which was
    ranked and fused like every message, as the bench's searches do, and is passed over only here)."""
    assert isinstance(hits, RankedHits)
    keys = [(hit.run_id, hit.position) for hit in hits[: TOP + 1]]
    return question.evidence in [key for key in keys if key != question.asked][:TOP]


async def main(split: str, limit: int) -> None:
    from search.local_model import minilm_embedder

    minilm = minilm_embedder()
    stored = await store(load_realistic('dev' if split == 'dev' else 'heldout', limit), minilm)
    engines = {
        'default': engine(stored, SearchOptions(context_lines=0)),
        'english': engine(stored, SearchOptions(context_lines=0, analyzer=get_analyzer('english'))),
        'semantic': engine(stored, SearchOptions(context_lines=0, mode='semantic', embedder=minilm)),
    }
    rows: list[tuple[Question, dict[str, list[Hit]]]] = []
    for question in stored.questions:
        rows.append(
            (question, {name: await ranking(search, question, keep_asked=True) for name, search in engines.items()})
        )
    print(f'{split}: {len(rows)} questions, {sum(c.message_count for c in stored.conversations)} messages')
    for lexical in ('default', 'english'):
        totals = {'bm25': 0, 'semantic': 0, 'rrf': 0} | {f'zscore {w}': 0 for w in WEIGHTS}
        for question, rankings in rows:
            keys = sorted({(hit.run_id, hit.position) for hits in rankings.values() for hit in hits})
            ids = {key: number for number, key in enumerate(keys)}
            lex = as_ranked(rankings[lexical], ids, keys)
            sem = as_ranked(rankings['semantic'], ids, keys)
            totals['bm25'] += found(lex, question)
            totals['semantic'] += found(sem, question)
            totals['rrf'] += found(fuse_rankings([lex, sem]), question)
            for weight in WEIGHTS:
                totals[f'zscore {weight}'] += found(fuse_scores(lex, sem, lexical_weight=weight), question)
        print(f'\nlexical half: bm25 {lexical} analyzer; recall@{TOP}')
        for label, count in totals.items():
            print(f'  {label:<14} {count / max(len(rows), 1):.4f}')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--split', choices=('dev', 'heldout'), default='dev')
    parser.add_argument('--limit', type=int, default=12_000, help='messages of the half')
    args = parser.parse_args()
    asyncio.run(main(args.split, args.limit))
