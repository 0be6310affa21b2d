"""Scoring perturbed candidates: the frame of perturbations and the rescoring of candidates, shared by
the workflow (tasks/stages/validate/workflow.py) and the adversary's search (adversary.py)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tasks.metrics import Resources, candidate_scores, get, score_metrics
from tasks.metrics.registry import MEMBER_NOTE

PERTURBATIONS = pl.Schema({"paper_id": pl.String, "review_id": pl.String, "candidate": pl.String,
                           "strategy": pl.String, "kind": pl.String, "review_text": pl.String,
                           "judgments": pl.String, "error": pl.String, "level": pl.String})
SEPARATOR = "~"   # perturbed candidate id: <review_id>~<strategy>


def score_candidates(candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                     metrics: Sequence[str], resources: Resources, negatives: int = 4,
                     negatives_seed: int = 0) -> pl.DataFrame:
    """Candidate scores (tasks.metrics.candidate_scores) of every metric named; a perturbed candidate gets
    the negative references of its original (tasks/metrics/negatives.py) when a metric reads them. With
    `resources.by_paper`, the metrics behind an LLM are scored through its paper shards (resumable, fanned
    out like the score stage's); the same scores as in this process. A judging panel's rows only, not its
    members' own beside them."""
    drawn = None
    if any(m.negatives for m in get(list(metrics))):
        from tasks.metrics.negatives import draw_negatives

        drawn = draw_negatives(candidates, references, negatives, negatives_seed)
    scores = score_metrics(metrics, candidates, references, synopses, resources, negatives=drawn)
    # a judging panel's score is validated, not each member's copy beside it (tasks/metrics/panel.py)
    return candidate_scores(scores.filter(pl.col("note").is_null() | (pl.col("note") != MEMBER_NOTE)))
