"""The score stage's two ends: plan the requests (pairs + shards) and assemble the scores.

    score/pairs.parquet             one row per (candidate, reference, metric) with its request keys
    score/scores.parquet            SCORES: per pair score, log p(y|x,s), log p(y|s), eval_lm
    score/candidate_scores.parquet  per (paper, candidate, metric): the mean over references
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Config
from tasks.layout import stage_dir, write_parquet
from tasks.lm import ModelSpec, eval_spec
from tasks.scoring.inputs import load_inputs
from tasks.scoring.metrics import (
    PAIRS,
    SCORES,
    assemble_scores,
    build_requests,
    candidate_scores,
    get_metrics,
)
from tasks.scoring.shards import read_results, write_request_shards


@dataclass(frozen=True)
class ScorePlan:
    folder: Path
    spec: ModelSpec
    eval_lm: str              # the resolved model key written into every score row
    shards: tuple[str, ...]
    pairs: int
    requests: int

    @property
    def requests_dir(self) -> Path:
        return self.folder / "requests"

    @property
    def results_dir(self) -> Path:
        return self.folder / "results"


def plan_scoring(cfg: Config, pipeline: str) -> ScorePlan:
    """Build every (candidate, reference, metric) pair and write the unique requests as shards."""
    metrics = get_metrics(cfg.score.metrics)
    spec = eval_spec(cfg.score)
    eval_lm = spec.resolved().key
    inputs = load_inputs(cfg, pipeline, metrics)
    pairs, requests = build_requests(inputs.candidates, inputs.references, inputs.synopses, metrics, eval_lm)
    folder = stage_dir(cfg, pipeline, "score")
    write_parquet(pairs, folder / "pairs.parquet")
    shards = write_request_shards(requests, folder / "requests", cfg.score.shard_size)
    (folder / "results").mkdir(exist_ok=True)
    return ScorePlan(folder, spec, eval_lm, tuple(shards), pairs.height, requests.height)


def baseline_scores(cfg: Config, pipeline: str) -> pl.DataFrame:
    """BLEU / ROUGE-L / BERTScore rows (SCORES layout) for the same candidate-reference pairs."""
    from tasks.validate.workflow import baseline_scores as score_baselines

    if not cfg.score.baselines:
        return pl.DataFrame(schema=SCORES)
    inputs = load_inputs(cfg, pipeline, [])
    return score_baselines(inputs.candidates, inputs.references, cfg.score.baselines).cast(dict(SCORES))


def finish_scoring(plan: ScorePlan, baselines: pl.DataFrame | None = None) -> dict:
    """Join the result shards onto the pairs (plus any baseline rows); write scores, candidate scores."""
    pairs = pl.read_parquet(plan.folder / "pairs.parquet").cast(dict(PAIRS))
    results = read_results(plan.results_dir, list(plan.shards))
    scores = assemble_scores(pairs, results, plan.eval_lm)
    if baselines is not None and baselines.height:
        scores = pl.concat([scores, baselines.select(scores.columns)])
    dup = scores.filter(pl.struct("candidate", "reference", "metric").is_duplicated())
    if not dup.is_empty():
        raise ValueError(f"{dup.height} score rows repeat a (candidate, reference, metric)")
    per_candidate = candidate_scores(scores)
    write_parquet(scores, plan.folder / "scores.parquet")
    write_parquet(per_candidate, plan.folder / "candidate_scores.parquet")
    gaps = scores.filter(pl.col("reason").is_not_null()).group_by("reason").len().sort("reason")
    means = per_candidate.group_by("metric").agg(pl.col("score").filter(pl.col("score").is_not_nan()).mean())
    return {
        "eval_lm": plan.eval_lm,
        "pairs": scores.height,
        "scored_pairs": scores.height - int(gaps["len"].sum() if gaps.height else 0),
        "requests": plan.requests,
        "shards": len(plan.shards),
        "gaps": dict(gaps.iter_rows()),
        "mean_score": {m: s for m, s in means.sort("metric").iter_rows()},
    }


plan_scoring_task = task(plan_scoring, name="plan-scoring", cache_policy=NO_CACHE)
finish_scoring_task = task(finish_scoring, name="finish-scoring", cache_policy=NO_CACHE)
baseline_scores_task = task(baseline_scores, name="baseline-scores", cache_policy=NO_CACHE)
