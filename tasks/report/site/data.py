"""What the site reads from the results database: the marts, each as a polars frame.

A table the pipeline has not built yet reads as an empty frame, so a partial run still renders.
"""

from __future__ import annotations

import math
import re

import polars as pl

TABLES = ("papers", "reviews", "candidates", "judgments", "scores", "leaderboard", "validation", "validation_data",
          "human_correlation", "exclusions", "runs", "qualification", "review_quality_models", "points",
          "comparisons", "releases", "release_changes", "release_models", "submissions", "rejects", "injection_shifts",
          "candidate_costs", "overview")


def clean(value: object) -> object:
    """NaN as None, so templates and chart data see one kind of missing value."""
    return None if isinstance(value, float) and math.isnan(value) else value


def rows(frame: pl.DataFrame) -> list[dict[str, object]]:
    return [{k: clean(v) for k, v in row.items()} for row in frame.iter_rows(named=True)]


def year_of(venue_id: str | None) -> str:
    found = re.search(r"(?:19|20)\d\d", venue_id or "")
    return found.group(0) if found else "undated"


def site_papers(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The papers that get a page: the benchmark sample and any paper a candidate reviewed."""
    papers, candidates = tables["papers"], tables["candidates"]
    if papers.is_empty():
        return papers
    reviewed = set(candidates["paper_id"].to_list()) if "paper_id" in candidates.columns else set()
    keep = pl.col("paper_id").is_in(list(reviewed))
    if "in_benchmark" in papers.columns:
        keep = keep | pl.col("in_benchmark").fill_null(False)
    return papers.filter(keep).sort("venue_id", "paper_id")


def _where(frame: pl.DataFrame, column: str, values: list[str]) -> pl.DataFrame:
    return frame.filter(pl.col(column).is_in(values)) if column in frame.columns else frame.clear()


def paper_bundle(tables: dict[str, pl.DataFrame], paper: dict[str, object]) -> dict[str, object]:
    """Everything a paper page shows: reviews (with their judgments), candidates, per-pair scores."""
    pid = str(paper["paper_id"])
    reviews = _where(tables["reviews"], "paper_id", [pid])
    candidates = _where(tables["candidates"], "paper_id", [pid])
    judgments = tables["judgments"]
    by_review: dict[str, list[dict[str, object]]] = {}
    ids = reviews["review_id"].to_list() if reviews.height else []
    ids += candidates["candidate_id"].to_list() if candidates.height else []
    found = _where(judgments, "review_id", ids)
    for row in rows(found.sort("review_id", "position") if found.height else found):
        by_review.setdefault(str(row["review_id"]), []).append(row)
    scores = _where(tables["scores"], "paper_id", [pid])
    pairs: list[dict[str, object]] = []
    metrics: list[str] = []
    if scores.height:
        metrics = sorted(set(scores["metric"].to_list()))
        wide = scores.pivot(on="metric", index=["source", "candidate", "reference"], values="score",
                            aggregate_function="first").sort("source", "candidate", "reference")
        pairs = rows(wide)
    return {
        "paper": paper,
        "reviews": rows(reviews.sort("review_id")) if reviews.height else [],
        "candidates": rows(candidates.sort("model")) if candidates.height else [],
        "judgments": by_review,
        "metrics": metrics,
        "pairs": pairs,
    }


def model_costs(candidates: pl.DataFrame) -> dict[str, dict[str, float | None]]:
    """Per model: tokens and US dollars per review (None where any review's figure is unknown, as the
    `candidate_costs` table defines them)."""
    if candidates.is_empty() or "cost" not in candidates.columns:
        return {}
    per_model = candidates.group_by("model").agg(
        tokens=pl.when(pl.col("tokens").null_count() == 0).then(pl.col("tokens").mean()),
        usd=pl.when(pl.col("cost").null_count() == 0).then(pl.col("cost").mean()))
    return {m: {"tokens_per_review": t, "usd_per_review": u} for m, t, u in per_model.iter_rows()}
