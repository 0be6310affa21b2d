"""Negative references: reviews of other papers, drawn per (candidate, reference) pair.

The f-variational estimators (tasks/metrics/fmi.py) compare a candidate's agreement with its
paper's reference y against its agreement with references y- drawn from the marginal P_Y, i.e.
reviews of *other* papers of the same group (the venue). Each pair gets K of them, without
replacement, from a random generator seeded by (seed, the candidate's anchor, the reference): the
draw does not depend on which other pairs are scored, and a perturbed copy of a human review (same
`review_id`) gets the same negatives as the original, so paired validation tests compare like with
like. The frame (NEGATIVES, tasks/core/schema.py) is written next to the scores.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping

import polars as pl

from tasks.core.schema import NEGATIVES
from tasks.metrics.registry import reference_sets


def _rng(seed: int, anchor: str, reference: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x1f{anchor}\x1f{reference}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_negatives(candidates: pl.DataFrame, references: pl.DataFrame, k: int, seed: int,
                   groups: Mapping[str, str] | None = None) -> pl.DataFrame:
    """NEGATIVES: for each (candidate, reference) pair, up to `k` references of other papers of the
    candidate's group (`groups`: paper_id -> group; one group when None). A pair whose group has
    fewer than `k` other-paper references gets all of them; none at all gives no rows (the metric
    then reports the gap)."""
    if k < 1:
        raise ValueError(f"negatives: k must be at least 1, got {k}")
    def group(paper: str) -> str:
        return "" if groups is None else groups.get(paper, "")

    pools: dict[str, list[dict]] = {}
    for ref in references.sort("review_id").iter_rows(named=True):
        pools.setdefault(group(ref["paper_id"]), []).append(ref)
    own: dict[str, int] = {}
    for ref in references.iter_rows(named=True):
        own[ref["paper_id"]] = own.get(ref["paper_id"], 0) + 1
    rows = []
    for cand, refs in reference_sets(candidates, references):
        paper = cand["paper_id"]
        pool = pools.get(group(paper), [])
        anchor = cand["review_id"] or cand["candidate"]
        for ref in refs:
            rng = _rng(seed, anchor, ref["review_id"])
            # k + (this paper's references) indices without replacement always hold k others (when there are)
            picks = rng.sample(range(len(pool)), min(len(pool), k + own.get(paper, 0)))
            others = [pool[i] for i in picks if pool[i]["paper_id"] != paper][:k]
            rows += [{"paper_id": paper, "candidate": cand["candidate"], "reference": ref["review_id"], "draw": d,
                      "negative": neg["review_id"], "negative_paper": neg["paper_id"]}
                     for d, neg in enumerate(others)]
    return pl.DataFrame(rows, schema=NEGATIVES) if rows else pl.DataFrame(schema=NEGATIVES)
