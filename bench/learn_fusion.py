"""Candidate-level learned fusion for `'hybrid'` (issue 30): a linear score over features of each
message, fitted on the development halves of both realistic sets only, cross-validated by
conversation, bootstrapped, and (with `--split heldout`) evaluated once on the held-out halves.

Per-query features (BM25's gap, semantic's margin, the overlap of the two tops) did not tell the
questions BM25 recalls from those semantic recalls (docs/semantic.md). This family reads features
of each candidate message instead: its standardised score in each ranking (as `fuse_scores`
computes them), its reciprocal rank in each (0 beyond `DEPTH`), whether it is in both tops, and
interactions with the query's BM25 gap, semantic margin and the cosine of semantic's first (the
"dense score threshold" of the issue). A message's fused score is `features @ coefficients`; the
coefficients are fitted by a listwise softmax (conditional logit) loss, the labelled evidence
against the other candidates of its question (the union of both rankings' first `DEPTH`, less the
asking turn), with an L2 penalty, by Newton's method in numpy.

The model is chosen by 5-fold cross-validation over the development pairs (a pair's qa and facts
conversations fall in the same fold; `FOLD_SEEDS` assignments of pairs to folds): every candidate
depth (`DEPTHS`), feature set (`SETS`), L2 penalty (`L2S`) and weight of a fact question in the loss
(`FACTS_WEIGHTS`), scored by the recall@5 of the left-out folds against max(bm25, semantic) on each
set. The chosen one (`CHOSEN`) is refitted on all development questions and its coefficients
printed; a bootstrap over development pairs (2,000 resamples) gives how often it stays at or above
both halves on both sets.

Result (2026-12-02, docs/semantic.md): chosen depth 30, every feature but the lead, L2 1, facts
weight 1; development in sample qa 175 / facts 46 (cross-validated 175.3 / 47.0), held-out, run
once, qa 362 / facts 31 against max(bm25, semantic) 363 / 36: not adopted; the default stays the
lead (`search.semantic.lexical_lead`).

    python bench/learn_fusion.py --cache DIR                  # development: CV, choice, fit, bootstrap
    python bench/learn_fusion.py --cache DIR --split heldout  # the chosen fit, once, on the held-out halves

`DIR` is `bench/tune_fusion.py`'s ranking cache (the same rankings, read through `SearchEngine`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from numpy.typing import NDArray

from bench._realistic import TOP
from bench.tune_fusion import Rows, as_ranked, rankings
from search.backend import RankedHits
from search.semantic import _standardised, _union, fuse_scores, lexical_lead  # pyright: ignore[reportPrivateUsage]

DEPTH = 30
"""How far down each ranking the candidate features read (reciprocal ranks are 0 beyond it)."""

FEATURES = (
    'z_bm25',
    'z_sem',
    'rr_bm25',
    'rr_sem',
    'both',
    'gap_z_bm25',
    'gap_rr_bm25',
    'margin_z_sem',
    'cos_z_sem',
    'cos_z_bm25',
    'lead',
)
"""Per candidate: standardised BM25 and semantic scores; reciprocal ranks (to `DEPTH`); in both top
10s; BM25's gap (first minus second, in deviations, over 10) times z_bm25 and times rr_bm25;
semantic's margin (first minus second z) times z_sem; the cosine of semantic's first times z_sem
and times z_bm25; and the default rule's lead (`lexical_lead`), so the family holds the default."""

Arrays = NDArray[np.float64]


@dataclass
class Question:
    """One question's candidates: their features, which is the evidence, and the group for CV."""

    features: Arrays
    evidence: int
    """Row of the evidence among the candidates, -1 when it is not a candidate."""
    group: str
    default_hit: bool
    """Whether the default fusion recalls it (for reference)."""
    bm25_hit: bool
    semantic_hit: bool


def features(lex: RankedHits, sem: RankedHits, depth: int = DEPTH) -> tuple[NDArray[np.int64], Arrays]:
    """Every document of the union and its feature row (`FEATURES`), computed as `fuse_scores` does."""
    lex_ids, lex_scores = lex.scored()
    sem_ids, sem_scores = sem.scored()
    union = _union(lex_ids, sem_ids)
    count = int(union.shape[0])
    z_b = np.zeros(count)
    z_s = np.zeros(count)
    lex_at = np.searchsorted(union, lex_ids)
    sem_at = np.searchsorted(union, sem_ids)
    lex_z = _standardised(lex_scores, count)
    z_b[lex_at] = lex_z
    z_s[sem_at] = _standardised(sem_scores, int(sem_ids.shape[0]))
    rank_b = np.full(count, np.inf)
    rank_s = np.full(count, np.inf)
    order_b = np.lexsort((lex_ids, -lex_scores))
    rank_b[lex_at[order_b]] = np.arange(1, lex_ids.shape[0] + 1)
    order_s = np.lexsort((sem_ids, -sem_scores))
    rank_s[sem_at[order_s]] = np.arange(1, sem_ids.shape[0] + 1)
    rr_b = np.where(rank_b <= depth, 1.0 / rank_b, 0.0)
    rr_s = np.where(rank_s <= depth, 1.0 / rank_s, 0.0)
    both = ((rank_b <= 10) & (rank_s <= 10)).astype(np.float64)
    gap = 0.0
    if lex_ids.shape[0]:
        top = np.sort(lex_z)[::-1]
        second = float(top[1]) if top.shape[0] > 1 else -np.inf
        if count > lex_ids.shape[0]:
            second = max(second, 0.0)
        gap = min(float(top[0]) - second, 30.0) / 10.0 if np.isfinite(second) else 1.0
    margin = 0.0
    cosine = 0.0
    if sem_ids.shape[0] > 1:
        zs = np.sort(z_s[sem_at])[::-1]
        margin = float(zs[0] - zs[1])
        cosine = float(sem_scores.max())
    lead = np.zeros(count)
    lead[lex_at] = lexical_lead(lex_ids, lex_z, count)
    rows = np.stack(
        [z_b, z_s, rr_b, rr_s, both, gap * z_b, gap * rr_b, margin * z_s, cosine * z_s, cosine * z_b, lead], axis=1
    )
    return union, rows


def prepare(rows: Rows, depth: int) -> tuple[list[Question], list[tuple[NDArray[np.int64], Arrays, int, int]]]:
    """Each question's candidates (the union of both rankings' first `DEPTH`, less the asking turn)
    for fitting, and every document's features with the rows of the asking turn and the evidence
    (for recall, over every document, as the engine ranks)."""
    questions: list[Question] = []
    full: list[tuple[NDArray[np.int64], Arrays, int, int]] = []
    for question, ranked in rows:
        keys = sorted({(hit.run_id, hit.position) for hits in ranked.values() for hit in hits})
        ids = {key: number for number, key in enumerate(keys)}
        lex = as_ranked(ranked['default'], ids, keys)
        sem = as_ranked(ranked['semantic'], ids, keys)
        union, x = features(lex, sem, depth)
        asked = int(np.searchsorted(union, ids[question.asked]))
        evidence_id = ids.get(question.evidence, -1)
        at = int(np.searchsorted(union, evidence_id))
        evidence = at if evidence_id >= 0 and at < union.shape[0] and union[at] == evidence_id else -1
        full.append((union, x, asked, evidence))
        positions: NDArray[np.int64] = np.arange(union.shape[0], dtype=np.int64)
        candidate: NDArray[np.bool_] = np.logical_and(np.logical_or(x[:, 2] > 0, x[:, 3] > 0), positions != asked)
        rows_at = np.flatnonzero(candidate)
        ev = int(np.searchsorted(rows_at, evidence)) if evidence >= 0 and candidate[evidence] else -1
        questions.append(
            Question(
                x[rows_at],
                ev,
                question.conversation_id.split('-', 1)[1],
                hit(fuse_scores(lex, sem), asked_key=question.asked, evidence_key=question.evidence),
                hit(lex, asked_key=question.asked, evidence_key=question.evidence),
                hit(sem, asked_key=question.asked, evidence_key=question.evidence),
            )
        )
    return questions, full


def hit(ranked: RankedHits, *, asked_key: tuple[str, int], evidence_key: tuple[str, int]) -> bool:
    keys = [(h.run_id, h.position) for h in ranked[: TOP + 1]]
    return evidence_key in [key for key in keys if key != asked_key][:TOP]


def recalled(full: tuple[NDArray[np.int64], Arrays, int, int], w: Arrays) -> bool:
    """Whether the linear score `w` puts the evidence in the first `TOP` of every document (asking turn
    passed over; equal scores to the semantically closer, then corpus order, as `fuse_scores`)."""
    union, x, asked, evidence = full
    if evidence < 0:
        return False
    score = x @ w + x[:, 1] * 1e-12
    # only the candidates (within either ranking's first DEPTH) are ranked by the model; the rest after
    score[(x[:, 2] == 0) & (x[:, 3] == 0)] -= 1e6
    score[asked] = -np.inf
    order = np.lexsort((union, -score))
    return bool(evidence in order[:TOP])


def fit(questions: Sequence[Question], mask: Sequence[int], l2: float, weights: Arrays) -> Arrays:
    """The coefficients (over `mask`'s features) minimising the weighted listwise softmax loss of the
    evidence among each question's candidates, plus `l2 * |w|^2`, by Newton's method."""
    usable = [i for i, q in enumerate(questions) if q.evidence >= 0 and q.features.shape[0] > 0]
    x = np.concatenate([questions[i].features[:, mask] for i in usable])
    sizes = np.array([questions[i].features.shape[0] for i in usable])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    segment = np.repeat(np.arange(len(usable)), sizes)
    evidence = starts + np.array([questions[i].evidence for i in usable])
    wq = weights[usable]
    wr = wq[segment]
    dim = len(mask)
    w: Arrays = np.zeros(dim)

    def loss(v: Arrays) -> float:
        s = x @ v
        top = np.maximum.reduceat(s, starts)
        lse = np.log(np.add.reduceat(np.exp(s - top[segment]), starts)) + top
        return float((wq * (lse - s[evidence])).sum() + l2 * (v @ v))

    for _ in range(100):
        s: Arrays = x @ w
        s = s - np.maximum.reduceat(s, starts)[segment]
        e: Arrays = np.exp(s)
        p = e / np.add.reduceat(e, starts)[segment]
        mean: Arrays = np.add.reduceat(x * p[:, None], starts)
        grad: Arrays = 2 * l2 * w + (wq[:, None] * (mean - x[evidence])).sum(axis=0)
        hess: Arrays = 2 * l2 * np.eye(dim) + (x * (wr * p)[:, None]).T @ x - (mean * wq[:, None]).T @ mean
        step: Arrays = np.linalg.solve(hess, grad).astype(np.float64)
        # damped: halve the step until the loss does not rise
        base = loss(w)
        t = 1.0
        while t > 1e-4 and loss(w - t * step) > base + 1e-12:
            t /= 2
        w = w - t * step
        if float(np.abs(step).max()) < 1e-9:
            break
    return w


def full_weights(mask: Sequence[int], w: Arrays) -> Arrays:
    out = np.zeros(len(FEATURES))
    out[list(mask)] = w
    return out


SETS: dict[str, tuple[int, ...]] = {
    'z': (0, 1),
    'z+rr': (0, 1, 2, 3),
    'z+rr+both': (0, 1, 2, 3, 4),
    'z+rr+gap': (0, 1, 2, 3, 5, 6),
    'z+rr+gap+both': (0, 1, 2, 3, 4, 5, 6),
    'z+rr+margin+cos': (0, 1, 2, 3, 7, 8, 9),
    'all but lead': (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
    'z+lead': (0, 1, 10),
    'all': tuple(range(len(FEATURES))),
}
"""Feature sets compared by cross-validation (indices into `FEATURES`)."""

DEPTHS = (20, 30, 50)
L2S = (1.0, 3.0, 10.0, 30.0, 100.0)
FACTS_WEIGHTS = (1.0, 1.5, 2.0, 3.0)
"""The grid cross-validated: every candidate depth, feature set, L2 penalty (on the summed loss) and
weight of a facts question against a qa one in the loss."""

FOLDS = 5
FOLD_SEEDS = (0, 1, 2)
"""Cross-validation: 5 folds of development pairs, three different assignments of pairs to folds."""

CHOSEN = (30, 'all but lead', 1.0, 1.0)
"""The configuration chosen on the development halves (depth, feature set, L2, facts weight): the best
smaller margin over max(bm25, semantic) of the cross-validated recall (averaged over the fold
assignments), then the best sum of both margins, then the default depth."""

RESAMPLES = 2000

Prepared = tuple[list[Question], list[tuple[NDArray[np.int64], Arrays, int, int]]]


def fold_of(group: str, seed: int) -> int:
    return int(hashlib.blake2b(f'{seed}:{group}'.encode(), digest_size=4).hexdigest(), 16) % FOLDS


def weights_of(kinds: Sequence[str], facts_weight: float) -> Arrays:
    return np.array([facts_weight if kind == 'facts' else 1.0 for kind in kinds])


def fit_all(sets: dict[str, Prepared], mask: Sequence[int], l2: float, facts_weight: float) -> Arrays:
    """The coefficients over every `FEATURES` (0 outside `mask`), fitted on every question of `sets`."""
    questions = [q for name in sets for q in sets[name][0]]
    kinds = [name for name in sets for _ in sets[name][0]]
    return full_weights(mask, fit(questions, mask, l2, weights_of(kinds, facts_weight)))


def cross_validated(
    sets: dict[str, Prepared], mask: Sequence[int], l2: float, facts_weight: float, seed: int
) -> dict[str, NDArray[np.bool_]]:
    """Per set, whether each question is recalled by a model fitted on the other folds."""
    questions = [q for name in sets for q in sets[name][0]]
    fulls = [f for name in sets for f in sets[name][1]]
    kinds = [name for name in sets for _ in sets[name][0]]
    folds = np.array([fold_of(q.group, seed) for q in questions])
    hits = np.zeros(len(questions), dtype=bool)
    for f in range(FOLDS):
        train = np.flatnonzero(folds != f)
        w = fit([questions[i] for i in train], mask, l2, weights_of([kinds[i] for i in train], facts_weight))
        wf = full_weights(mask, w)
        for i in np.flatnonzero(folds == f):
            hits[i] = recalled(fulls[i], wf)
    out: dict[str, NDArray[np.bool_]] = {}
    at = 0
    for name in sets:
        out[name] = hits[at : at + len(sets[name][0])]
        at += len(sets[name][0])
    return out


def bootstrap(sets: dict[str, Prepared], hits: dict[str, NDArray[np.bool_]]) -> float:
    """The share of resamples of the development pairs (with replacement, both sets resampled by the
    same pairs) in which `hits` recall at least max(bm25, semantic) on both sets."""
    groups = sorted({q.group for name in sets for q in sets[name][0]})
    index = {g: i for i, g in enumerate(groups)}
    rng = np.random.default_rng(30)
    draws = rng.integers(0, len(groups), size=(RESAMPLES, len(groups)))
    counts = np.stack([np.bincount(row, minlength=len(groups)) for row in draws])  # resample x pair
    ok = np.ones(RESAMPLES, dtype=bool)
    for name, (questions, _) in sets.items():
        g = np.array([index[q.group] for q in questions])
        per_pair = {
            label: np.bincount(g, weights=values.astype(np.float64), minlength=len(groups))
            for label, values in (
                ('model', hits[name]),
                ('bm25', np.array([q.bm25_hit for q in questions])),
                ('semantic', np.array([q.semantic_hit for q in questions])),
            )
        }
        totals = {label: counts @ v for label, v in per_pair.items()}
        ok &= totals['model'] >= np.maximum(totals['bm25'], totals['semantic'])
    return float(ok.mean())


def in_sample(sets: dict[str, Prepared], w: Arrays) -> dict[str, NDArray[np.bool_]]:
    return {name: np.array([recalled(f, w) for f in sets[name][1]]) for name in sets}


async def load(split: str, depth: int, cache: Path | None) -> dict[str, Prepared]:
    return {
        name: prepare(await rankings(name, split, 12_000 if name == 'qa' else None, cache), depth)
        for name in ('qa', 'facts')
    }


def describe(split: str, sets: dict[str, Prepared]) -> dict[str, int]:
    best: dict[str, int] = {}
    for name, (questions, _) in sets.items():
        bm25 = sum(q.bm25_hit for q in questions)
        semantic = sum(q.semantic_hit for q in questions)
        default = sum(q.default_hit for q in questions)
        reachable = sum(q.evidence >= 0 for q in questions)
        best[name] = max(bm25, semantic)
        print(
            f'{split} {name}: {len(questions)} questions (evidence among the candidates in {reachable}); '
            f'bm25 {bm25}, semantic {semantic}, default hybrid (lead) {default}'
        )
    return best


async def develop(cache: Path | None, grid: bool) -> None:
    """Cross-validate the grid on the development halves, then fit and bootstrap the chosen one."""
    results: list[tuple[float, float, int, str, float, float, float, float]] = []
    for depth in DEPTHS if grid else ():
        sets = await load('dev', depth, cache)
        best = describe(f'dev, depth {depth}', sets)
        print(
            f'{"depth":>5} {"features":<16}{"l2":>6}{"facts w":>8}{"qa":>8}{"facts":>8}  (mean over {len(FOLD_SEEDS)} fold assignments)'
        )
        for name, mask in SETS.items():
            for l2 in L2S:
                for fw in FACTS_WEIGHTS:
                    runs = [cross_validated(sets, mask, l2, fw, seed) for seed in FOLD_SEEDS]
                    qa = float(np.mean([r['qa'].sum() for r in runs]))
                    facts = float(np.mean([r['facts'].sum() for r in runs]))
                    margins = (qa - best['qa'], facts - best['facts'])
                    results.append((min(margins), sum(margins), depth, name, l2, fw, qa, facts))
                    print(f'{depth:>5} {name:<16}{l2:>6g}{fw:>8g}{qa:>8.1f}{facts:>8.1f}')
    results.sort(key=lambda r: (round(r[0], 6), round(r[1], 6), r[2] == DEPTH), reverse=True)
    print('\nbest 10 by the smaller margin over max(bm25, semantic), then the sum:')
    for r in results[:10] if grid else ():
        print(f'  depth {r[2]} {r[3]} l2 {r[4]:g} facts w {r[5]:g}: qa {r[6]:.1f} facts {r[7]:.1f}')
    depth, name, l2, fw = CHOSEN
    sets = await load('dev', depth, cache)
    describe('dev', sets)
    w = fit_all(sets, SETS[name], l2, fw)
    print(f'\nchosen {CHOSEN}; coefficients fitted on every development question:')
    for feature, value in zip(FEATURES, w, strict=True):
        print(f'  {feature:<14}{value: .6f}')
    hits = in_sample(sets, w)
    print(
        f'in sample: qa {int(hits["qa"].sum())}, facts {int(hits["facts"].sum())}; at or above both halves '
        f'on both sets in {bootstrap(sets, hits):.1%} of {RESAMPLES} bootstrap resamples of the pairs'
    )
    for seed in FOLD_SEEDS:
        oof = cross_validated(sets, SETS[name], l2, fw, seed)
        print(
            f'out of fold (assignment {seed}): qa {int(oof["qa"].sum())}, facts {int(oof["facts"].sum())}; '
            f'bootstrap {bootstrap(sets, oof):.1%}'
        )
    default = {n: np.array([q.default_hit for q in sets[n][0]]) for n in sets}
    print(f'default rule (lead), in sample where it was tuned: bootstrap {bootstrap(sets, default):.1%}')


async def held_out(cache: Path | None) -> None:
    """The chosen configuration, fitted on the development halves, evaluated on the held-out halves."""
    depth, name, l2, fw = CHOSEN
    w = fit_all(await load('dev', depth, cache), SETS[name], l2, fw)
    print(f'chosen {CHOSEN}; coefficients fitted on the development halves:')
    for feature, value in zip(FEATURES, w, strict=True):
        print(f'  {feature:<14}{value: .6f}')
    sets = await load('heldout', depth, cache)
    describe('held-out', sets)
    hits = in_sample(sets, w)
    print(f'learned fusion on the held-out halves: qa {int(hits["qa"].sum())}, facts {int(hits["facts"].sum())}')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=(__doc__ or '').splitlines()[0])
    parser.add_argument('--split', choices=('dev', 'heldout'), default='dev')
    parser.add_argument('--cache', type=Path, default=None, help="bench/tune_fusion.py's ranking cache")
    parser.add_argument('--chosen-only', action='store_true', help='development: skip the grid, fit the chosen one')
    args = parser.parse_args()
    asyncio.run(develop(args.cache, not args.chosen_only) if args.split == 'dev' else held_out(args.cache))
