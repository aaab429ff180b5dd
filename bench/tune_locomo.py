"""The hybrid fusion's choice on LoCoMo's development half, cross-validated by conversation.

Each question's BM25 and semantic rankings are caught once where hybrid search fuses them
(`bench._locomo.rankings`, through `SearchEngine`), for the default and the english analyzer; then
every candidate fusion ranks them again, and recall@5 is counted per conversation. A candidate with a
free parameter is cross-validated leaving one conversation out: the parameter is chosen on the other
four (ties to the smaller value) and counted on the one left out; the sum over the five is its
cross-validated figure. Candidates:

- `lead` (the fusion before this bench): `fuse_scores` with its defaults;
- `weight w`: `fuse_scores(lexical_weight=w)`, plain weighted standardised scores;
- `rrf`: `fuse_rankings`;
- `library`: `fuse_scores` as the library now ships it (whatever its default is).

Usage: python bench/tune_locomo.py [--models minilm,e5] [--locomo DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._locomo import DEFAULT_FOLDER, Fusion, Rankings, Stored, fused_recall, load, rankings, store
from bench.bench_locomo import embedders, loadavg
from search import SearchOptions, get_analyzer
from search.backend import RankedHits
from search.semantic import fuse_rankings, fuse_scores

WEIGHTS = [round(0.05 * i, 2) for i in range(21)]


def weighted(w: float) -> Fusion:
    def fuse(lexical: RankedHits, semantic: RankedHits) -> RankedHits:
        return fuse_scores(lexical, semantic, lexical_weight=w)

    return fuse


def weighted_lead(w: float) -> Fusion:
    """`w * z_lexical + (1 - w) * z_semantic` plus `lexical_lead` (the fusion before, at another weight)."""

    def fuse(lexical: RankedHits, semantic: RankedHits) -> RankedHits:
        with mock.patch('search.semantic.HYBRID_LEXICAL_WEIGHT', w):
            return fuse_scores(lexical, semantic)

    return fuse


def rrf(lexical: RankedHits, semantic: RankedHits) -> RankedHits:
    return fuse_rankings([lexical, semantic])


def library(lexical: RankedHits, semantic: RankedHits) -> RankedHits:
    return fuse_scores(lexical, semantic)


def counts(stored: Stored, caught: list[Rankings], fusion: Fusion) -> dict[str, int]:
    return {cid: sum(row) for cid, row in fused_recall(stored, caught, fusion).items()}


def cross_validated(grid: dict[float, dict[str, int]]) -> tuple[int, list[float]]:
    """Leave one conversation out: the parameter best on the others, counted on the one left out."""
    conversations = list(next(iter(grid.values())))
    total, chosen = 0, []
    for left in conversations:
        best = max(grid, key=lambda p: (sum(n for cid, n in grid[p].items() if cid != left), -p))
        chosen.append(best)
        total += grid[best][left]
    return total, chosen


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--models', default='minilm,e5')
    parser.add_argument('--locomo', type=Path, default=DEFAULT_FOLDER)
    parser.add_argument('--lead', action='store_true', help='also the lead at every weight')
    args = parser.parse_args()
    if not args.locomo.is_dir():
        print(f'LoCoMo development half not found at {args.locomo}: nothing measured.')
        return
    conversations = load(args.locomo)
    total = sum(len(c.questions) for c in conversations)
    for name, make in embedders([m for m in args.models.split(',') if m]).items():
        embedder = make()
        stored = await store(conversations, embedder)
        for analyzer in ('default', 'english'):
            options = SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, analyzer=get_analyzer(analyzer))
            caught = await rankings(stored, options)
            print(f'\n{name}, {analyzer} analyzer, {total} questions (load {loadavg()})')
            fixed: dict[str, Callable[..., RankedHits]] = {'lead (before)': library, 'rrf': rrf}
            for label, fusion in fixed.items():
                found = counts(stored, caught, fusion)
                print(f'  {label:<22} {sum(found.values()):>4}  {found}')
            grid = {w: counts(stored, caught, weighted(w)) for w in WEIGHTS}
            for w, found in grid.items():
                print(f'  weight {w:<15} {sum(found.values()):>4}  {found}')
            cv, chosen = cross_validated(grid)
            print(f'  weight, cross-validated: {cv} (chosen per fold {chosen})')
            if args.lead:
                grid = {w: counts(stored, caught, weighted_lead(w)) for w in WEIGHTS}
                for w, found in grid.items():
                    print(f'  lead, weight {w:<9} {sum(found.values()):>4}  {found}')
                cv, chosen = cross_validated(grid)
                print(f'  lead and weight, cross-validated: {cv} (chosen per fold {chosen})')


if __name__ == '__main__':
    asyncio.run(main())
