"""The GRE-bench leaderboard (GEM paper section 5) from per-paper candidate scores.

A model's score on a paper is the mean over its candidates there (one generated review per paper,
usually; the human baseline has several: each held-out human review scored against the others).
The board row is the mean over papers with a confidence interval (90% by default) and the number
of papers used, missing (a NaN score: no reference, no judgments, ...) and excluded (the generate
stage's exclusions, e.g. a paper published before the model's cutoff). With scores from two
evaluation LMs, `agreement` gives Spearman's rho between their orderings of the models.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection

import polars as pl

from tasks.metrics import higher_is_better
from tasks.metrics.registry import predictor
from tasks.stages.validate.stats import mean_ci, spearman

HUMAN = "human"
LEADERBOARD = pl.Schema({"metric": pl.String, "eval_lm": pl.String, "model": pl.String, "is_human": pl.Boolean,
                         "n_papers": pl.Int64, "n_missing": pl.Int64, "n_excluded": pl.Int64,
                         "mean": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
                         "confidence": pl.Float64, "rank": pl.Int64, "reason": pl.String,
                         "predictor": pl.String,    # the model behind the column (tasks.metrics.registry.predictor)
                         # whether the judging models behind the column passed the exam (null: none), and what
                         # its numbers rest on (tasks/stages/validate/board_notes.py)
                         "qualified": pl.Boolean, "note": pl.String,
                         "kind": pl.String})        # human | generated | submitted (`grebench submit`)
AGREEMENT = pl.Schema({"metric": pl.String, "eval_lm_a": pl.String, "eval_lm_b": pl.String, "n_models": pl.Int64,
                       "rho": pl.Float64, "p_value": pl.Float64, "reason": pl.String})


def per_paper(candidate_scores: pl.DataFrame, exclusions: pl.DataFrame | None = None) -> pl.DataFrame:
    """metric, eval_lm, model, paper_id, score: each model's mean over its candidates on a paper (NaN if none
    scored); without the (model, paper) pairs of `exclusions`, when given."""
    valid = pl.col("score").is_not_null() & pl.col("score").is_not_nan()
    papers = (candidate_scores.rename({"source": "model"})
              .group_by("metric", "eval_lm", "model", "paper_id")
              .agg(pl.col("score").filter(valid).mean().fill_null(math.nan))
              .sort("metric", "eval_lm", "model", "paper_id"))
    if exclusions is not None and exclusions.height:
        excluded = exclusions.select(pl.col("model").cast(pl.String), pl.col("paper_id").cast(pl.String)).unique()
        papers = papers.join(excluded, on=["model", "paper_id"], how="anti")
    return papers


def leaderboard(candidate_scores: pl.DataFrame, exclusions: pl.DataFrame | None = None,
                confidence: float = 0.90, submitted: Collection[str] = ()) -> pl.DataFrame:
    """LEADERBOARD rows from candidate scores (paper_id, candidate, source, metric, eval_lm, score).

    `exclusions` (paper_id, model, ...) counts the papers a model was kept away from; their scores,
    if any, are left out. Ranks are 1 for the best mean within (metric, eval_lm), the human baseline
    included; "best" is the highest mean, or the lowest for a metric registered with
    higher_is_better=False. `kind` is "submitted" for the models named in `submitted`.
    """
    papers = per_paper(candidate_scores)
    excluded = pl.DataFrame(schema={"model": pl.String, "paper_id": pl.String})
    if exclusions is not None and exclusions.height:
        excluded = exclusions.select(pl.col("model").cast(pl.String), pl.col("paper_id").cast(pl.String)).unique()
        papers = papers.join(excluded, on=["model", "paper_id"], how="anti")
    n_excluded = dict(excluded.group_by("model").len().iter_rows())
    rows = []
    for (metric, lm, model), group in papers.group_by("metric", "eval_lm", "model", maintain_order=True):
        ci = mean_ci(group["score"].to_numpy(), confidence)
        rows.append({"metric": metric, "eval_lm": lm, "model": model, "is_human": model == HUMAN,
                     "n_papers": ci.n, "n_missing": ci.n_dropped, "n_excluded": n_excluded.get(model, 0),
                     "mean": ci.mean, "ci_low": ci.ci_low, "ci_high": ci.ci_high, "confidence": confidence,
                     "rank": None, "reason": ci.reason, "predictor": predictor(metric, lm),
                     "kind": HUMAN if model == HUMAN else "submitted" if model in submitted else "generated"})
    if not rows:
        return pl.DataFrame(schema=LEADERBOARD)
    board = pl.DataFrame(rows, schema=LEADERBOARD)
    sign = pl.col("metric").replace_strict({m: 1.0 if up else -1.0 for m, up in
                                            higher_is_better(board["metric"].unique().to_list()).items()},
                                           return_dtype=pl.Float64)
    rank = (pl.col("mean").fill_nan(None) * sign).rank("min", descending=True).over("metric", "eval_lm").cast(pl.Int64)
    return board.with_columns(rank=rank).sort("metric", "eval_lm", "rank", "model", nulls_last=True)


def agreement(board: pl.DataFrame, include_human: bool = False) -> pl.DataFrame:
    """Spearman rho between the model means of each pair of evaluation LMs, per metric (GEM section 4.4's
    cross-LM consistency). Over the models only: the human row is a reference point, not a model being ranked,
    and in a short board it would carry the correlation (`include_human` puts it back)."""
    rows = []
    for (metric,), group in board.group_by("metric", maintain_order=True):
        if not include_human:
            group = group.filter(~pl.col("is_human"))
        lms = sorted(group["eval_lm"].drop_nulls().unique().to_list())
        for a, b in itertools.combinations(lms, 2):
            both = (group.filter(pl.col("eval_lm") == a).select("model", pl.col("mean").alias("a"))
                    .join(group.filter(pl.col("eval_lm") == b).select("model", pl.col("mean").alias("b")), on="model"))
            c = spearman(both["a"].to_numpy(), both["b"].to_numpy())
            rows.append({"metric": metric, "eval_lm_a": a, "eval_lm_b": b, "n_models": c.n, "rho": c.rho,
                         "p_value": c.p_value, "reason": c.reason})
    return pl.DataFrame(rows, schema=AGREEMENT) if rows else pl.DataFrame(schema=AGREEMENT)
