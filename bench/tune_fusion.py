"""How `'zscore'` fusion's weight and BM25's lead were chosen: recall@5 of hybrid per weight and rule,
on the development halves of both realistic sets only.

The sets: questions answered by the next turn in other words (`bench/_chitchat.py`, "qa") and
questions about facts stated in an earlier chat (`bench/_chitchat_facts.py`, "facts"). Each
question's BM25 rankings (default and english analyzers) and semantic ranking (all-MiniLM-L6-v2)
are read once through `SearchEngine`; the fusions are then recomputed from them with the library's
own functions (`fuse_scores`, `fuse_rankings`) for every fixed weight, for the default (weight
`HYBRID_LEXICAL_WEIGHT` with BM25's lead, `lexical_lead`) and its variants around the chosen point,
and for the previous default (a per-query weight, `bench._realistic.previous_fusion`); recall@5 is
printed per set, beside BM25 alone, semantic alone and reciprocal-rank fusion. `--split heldout`
prints the same for the held-out halves: run it only to confirm a choice made on the development
halves. `bench/learn_fusion.py` fits a candidate-level learned fusion from the same cache (measured,
not adopted: docs/semantic.md).

    python bench/tune_fusion.py [--limit 12000] [--facts-limit N] [--split dev] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import search.semantic
from bench._chitchat import Question
from bench._chitchat import load as load_qa
from bench._chitchat_facts import load as load_facts
from bench._realistic import TOP, engine, previous_fusion, ranking, store
from search import SearchOptions, get_analyzer
from search.backend import Hit, RankedHits
from search.semantic import fuse_rankings, fuse_scores

WEIGHTS = (0.0, 0.1, 0.15, 0.175, 0.2, 0.25, 0.3, 0.5, 1.0)
LEADS = (
    (0.15, 8.0, 1.0, 5),
    (0.2, 8.0, 1.0, 5),
    (0.175, 6.0, 1.0, 5),
    (0.175, 10.0, 1.0, 5),
    (0.175, 8.0, 0.5, 5),
    (0.175, 8.0, 1.5, 5),
    (0.175, 8.0, 2.0, 5),
    (0.175, 8.0, 1.0, 3),
    (0.175, 8.0, 1.0, 4),
    (0.175, 0.0, 1.0, 5),
)
"""Variants of the default rule around the chosen point (0.175, 8, 1, 5): lexical weight, the gap
BM25's first must stand above its second, the lead of its first match, how many matches lead."""


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


def lead(weight: float, gap: float, bonus: float, depth: int) -> Callable[[RankedHits, RankedHits], RankedHits]:
    def fuse(lex: RankedHits, sem: RankedHits) -> RankedHits:
        with (
            mock.patch.object(search.semantic, 'HYBRID_LEXICAL_WEIGHT', weight),
            mock.patch.object(search.semantic, 'HYBRID_LEAD_GAP', gap),
            mock.patch.object(search.semantic, 'HYBRID_LEAD_BONUS', bonus),
            mock.patch.object(search.semantic, 'HYBRID_LEAD_DEPTH', depth),
        ):
            return fuse_scores(lex, sem)

    return fuse


Rows = list[tuple[Question, dict[str, list[Hit]]]]
"""Each question with its rankings: BM25 with the default and the english analyzer, and semantic."""


async def rankings(name: str, split: str, limit: int | None, cache: Path | None = None) -> Rows:
    """The rankings of every question of one half of a set; read from `cache` (a directory) when it
    holds them for these arguments, and written there after they were searched."""
    saved = cache / f'{name}-{split}-{limit}.pickle' if cache is not None else None
    if saved is not None and saved.exists():
        with saved.open('rb') as file:
            rows: Rows = pickle.load(file)
        return rows
    rows = await search_rankings(name, split, limit)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        with saved.open('wb') as file:
            pickle.dump(rows, file)
    return rows


async def search_rankings(name: str, split: str, limit: int | None) -> Rows:
    from search.local_model import minilm_embedder

    minilm = minilm_embedder()
    loader = load_facts if name == 'facts' else load_qa
    half = 'dev' if split == 'dev' else 'heldout'
    stored = await store(loader(half, limit), minilm, english=True, english_vectors=False)
    engines = {
        'default': engine(stored, SearchOptions(context_lines=0)),
        'english': engine(stored, SearchOptions(context_lines=0, analyzer=get_analyzer('english'))),
        'semantic': engine(stored, SearchOptions(context_lines=0, mode='semantic', embedder=minilm)),
    }
    rows: Rows = []
    for question in stored.questions:
        rows.append(
            (question, {label: await ranking(search, question, keep_asked=True) for label, search in engines.items()})
        )
    return rows


async def main(split: str, limit: int, facts_limit: int | None, cache: Path | None) -> None:
    sets = {
        name: await rankings(name, split, limit if name == 'qa' else facts_limit, cache) for name in ('qa', 'facts')
    }
    print(f'{split} halves: ' + ', '.join(f'{name} {len(rows)} questions' for name, rows in sets.items()))
    fusions: dict[str, Callable[[RankedHits, RankedHits], RankedHits]] = {
        'rrf': lambda lex, sem: fuse_rankings([lex, sem]),
        'lead (default)': fuse_scores,
        'ramp (previous)': previous_fusion,
    }
    for weight in WEIGHTS:
        fusions[f'fixed {weight}'] = lambda lex, sem, weight=weight: fuse_scores(lex, sem, lexical_weight=weight)
    for weight, gap, bonus, depth in LEADS:
        fusions[f'lead w{weight} gap{gap:g} b{bonus:g} d{depth}'] = lead(weight, gap, bonus, depth)
    for lexical in ('default', 'english'):
        totals: dict[str, dict[str, int]] = {}
        for name, rows in sets.items():
            for question, ranked in rows:
                keys = sorted({(hit.run_id, hit.position) for hits in ranked.values() for hit in hits})
                ids = {key: number for number, key in enumerate(keys)}
                lex = as_ranked(ranked[lexical], ids, keys)
                sem = as_ranked(ranked['semantic'], ids, keys)
                counts = {'bm25': found(lex, question), 'semantic': found(sem, question)}
                counts |= {label: found(fuse(lex, sem), question) for label, fuse in fusions.items()}
                for label, hit in counts.items():
                    totals.setdefault(label, {}).setdefault(name, 0)
                    totals[label][name] += hit
        print(f'\nlexical half: bm25 {lexical} analyzer; questions recalled in the top {TOP} (recall)')
        print(f'{"fusion":<30}' + ''.join(f'{name:>16}' for name in sets))
        for label, row in totals.items():
            cells = ''.join(f'{row[name]:>6} ({row[name] / max(len(sets[name]), 1):.3f})' for name in sets)
            print(f'{label:<30}{cells}')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--split', choices=('dev', 'heldout'), default='dev')
    parser.add_argument('--limit', type=int, default=12_000, help='messages of the qa half (facts: all)')
    parser.add_argument('--facts-limit', type=int, default=None, help='messages of the facts half (all)')
    parser.add_argument(
        '--cache', type=Path, default=None, help='a directory keeping the rankings between runs (tuning reruns)'
    )
    args = parser.parse_args()
    asyncio.run(main(args.split, args.limit, args.facts_limit, args.cache))
