"""The hybrid fusion's choice on LoCoMo's development half, cross-validated by conversation.

Each question's BM25 and semantic rankings are caught once where hybrid search fuses them
(`bench._locomo.rankings`, through `SearchEngine`), for the default and the english analyzer; then
every candidate fusion ranks them again, and recall@5 is counted per conversation. A candidate with a
free parameter is cross-validated leaving one conversation out: the parameter is chosen on the other
four (ties to the smaller value) and counted on the one left out; the sum over the five is its
cross-validated figure. Candidates:

- `library default`: `fuse_scores` as the library ships it;
- `weight w`: `fuse_scores(lexical_weight=w)`, weighted standardised scores, `w` from 0 to 1;
- `rrf`: `fuse_rankings`.

Measured before the change (when the default was 0.175 with a lead for BM25's first matches when its
first stood 8 deviations above its second): the lead changed no question's recall at any weight from
0.3 up, so it was dropped with the move to 0.6.

Usage: python bench/tune_locomo.py [--models minilm,e5] [--locomo DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

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
    parser.add_argument('--analyzers', default='default,english', help='lexical halves, comma-separated')
    args = parser.parse_args()
    if not args.locomo.is_dir():
        print(f'LoCoMo development half not found at {args.locomo}: nothing measured.')
        return
    conversations = load(args.locomo)
    total = sum(len(c.questions) for c in conversations)
    for name, make in embedders([m for m in args.models.split(',') if m]).items():
        embedder = make()
        stored = await store(conversations, embedder)
        for analyzer in args.analyzers.split(','):
            options = SearchOptions(context_lines=0, mode='hybrid', embedder=embedder, analyzer=get_analyzer(analyzer))
            caught = await rankings(stored, options)
            print(f'\n{name}, {analyzer} analyzer, {total} questions (load {loadavg()})')
            fixed: dict[str, Callable[..., RankedHits]] = {'library default': library, 'rrf': rrf}
            for label, fusion in fixed.items():
                found = counts(stored, caught, fusion)
                print(f'  {label:<22} {sum(found.values()):>4}  {found}')
            grid = {w: counts(stored, caught, weighted(w)) for w in WEIGHTS}
            for w, found in grid.items():
                print(f'  weight {w:<15} {sum(found.values()):>4}  {found}')
            cv, chosen = cross_validated(grid)
            print(f'  weight, cross-validated: {cv} (chosen per fold {chosen})')


if __name__ == '__main__':
    asyncio.run(main())
