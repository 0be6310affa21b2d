"""The score stage's plain functions: score every configured metric, write the scores.

    score/requests/, results/       log-likelihood shards of the lm_logprobs metrics (tasks/scoring/shards.py)
    score/metric_shards/            paper shards of the metrics behind an LLM (tasks/scoring/metric_shards.py)
    score/scores.parquet            SCORES: one row per (candidate, reference, metric)
    score/candidate_scores.parquet  CANDIDATE_SCORES: per (paper, candidate, metric), the mean over references
    score/negatives.parquet         NEGATIVES: the negative references drawn, when a metric reads them
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import stage_dir, write_parquet
from tasks.core.summary import StageSummary
from tasks.lm import eval_specs
from tasks.metrics import Resources, candidate_scores, get, score_metrics
from tasks.metrics.llm_log import LLMLog, write_llm_log
from tasks.metrics.resources import build_resources, eval_spec
from tasks.scoring.eval_lms import score_each_eval_lm
from tasks.scoring.metric_shards import (
    MetricShardRunner,
    MetricShards,
    run_metric_shards_in_process,
    sharded_metrics,
)
from tasks.scoring.shards import ShardedLoglikelihood, ShardRunner, run_in_process
from tasks.stages.score.inputs import ScoringInputs, load_inputs


def read_inputs(cfg: Config, pipeline: str) -> ScoringInputs:
    """References, candidates and synopses for every metric the score stage is configured with."""
    return load_inputs(cfg, pipeline, get(cfg.score.all_metrics))


def sharded_loglikelihood(cfg: Config, pipeline: str, run: ShardRunner = run_in_process) -> ShardedLoglikelihood:
    """The evaluation LM's log-likelihoods as resumable shards under the score stage's folder."""
    return ShardedLoglikelihood(stage_dir(cfg, pipeline, "score"), eval_spec(cfg.score), cfg.score.token_budget,
                                cfg.score.shard_size, run)


def sharded_loglikelihoods(cfg: Config, pipeline: str, run: ShardRunner = run_in_process) -> list[ShardedLoglikelihood]:
    """One `sharded_loglikelihood` per evaluation LM of `[score] eval_lms` (tasks/scoring/eval_lms.py),
    all under the score stage's folder: shard names hash request keys, which hash the evaluation LM."""
    return [ShardedLoglikelihood(stage_dir(cfg, pipeline, "score"), spec, cfg.score.token_budget,
                                 cfg.score.shard_size, run) for spec in eval_specs(cfg.score)]


def metric_shards(cfg: Config, pipeline: str, llm_cache: Path | None,
                  run: MetricShardRunner = run_metric_shards_in_process) -> MetricShards:
    """The metrics behind an LLM as resumable paper shards under the score stage's folder."""
    return MetricShards(stage_dir(cfg, pipeline, "score") / "metric_shards", cfg, pipeline, llm_cache, run)


def score_inputs_each_eval_lm(cfg: Config, inputs: ScoringInputs, shards: list[ShardedLoglikelihood],
                              llm_cache: Path | None = None, quality: object | None = None,
                              by_paper: MetricShards | None = None) -> tuple[pl.DataFrame, LLMLog]:
    """SCORES rows of every configured metric, the evaluation-LM ones once per evaluation LM (`shards`),
    and the log of the LLM calls the metrics made (oracle, judges; with an `llm_cache` folder). With
    `by_paper`, the metrics behind an LLM (`sharded_metrics`) are scored through its paper shards, their
    review-quality tables added to `quality`'s; the same rows as without it."""
    by_key, log = {s.spec: s for s in shards}, LLMLog()
    sharded = sharded_metrics(cfg.score.all_metrics) if by_paper is not None else ()
    rest = [n for n in cfg.score.all_metrics if n not in sharded]
    parts = []
    if rest:
        parts.append(score_each_eval_lm(rest, [s.spec for s in shards],
                                        lambda spec: build_resources(cfg.score, loglikelihood=by_key[spec], spec=spec,
                                                                     llm_cache=llm_cache, log=log, quality=quality),
                                        inputs.candidates, inputs.references, inputs.synopses, inputs.negatives))
    if sharded:
        assert by_paper is not None
        parts.append(by_paper(sharded, shards[0].spec.resolved().key, inputs.candidates, inputs.references,
                              inputs.synopses, inputs.negatives, log))
        if quality is not None:
            merge_quality(quality, by_paper)
    return pl.concat(parts), log


def merge_quality(work: Any, by_paper: MetricShards) -> None:
    """Add the shards' review-quality tables and counts to the work of the unsharded metrics (focus_kl_*):
    tables concatenated (a review's points, extracted by both, kept once), counts summed."""
    for name, frame in by_paper.quality_tables.items():
        have = work.tables.get(name)
        both = frame if have is None or not have.width else pl.concat([have, frame], how="diagonal_relaxed")
        work.tables[name] = both.unique(maintain_order=True) if name == "points" else both
    work.stats.update(by_paper.quality_stats)


def shards_details(shards: list[ShardedLoglikelihood]) -> dict[str, Any]:
    """`shard_details` summed over the evaluation LMs, with their keys (`eval_lms`)."""
    parts = [shard_details(s) for s in shards]
    return {**{k: sum(p[k] for p in parts) for k in parts[0]}, "eval_lms": [s.spec.resolved().key for s in shards]}


def score_inputs(cfg: Config, inputs: ScoringInputs, resources: Resources) -> pl.DataFrame:
    """SCORES rows of every configured metric (`score.metrics` then `score.baselines`)."""
    return score_metrics(cfg.score.all_metrics, inputs.candidates, inputs.references, inputs.synopses, resources,
                         negatives=inputs.negatives)


def shard_details(shards: ShardedLoglikelihood) -> dict[str, Any]:
    return {"requests": shards.requests, "requests_reused": shards.reused, "shards": shards.shards,
            "shards_scored": sum(r["status"] == "scored" for r in shards.runs),
            "shards_skipped": sum(r["status"] == "skipped" for r in shards.runs)}


def write_scores(cfg: Config, pipeline: str, scores: pl.DataFrame, details: dict[str, Any],
                 negatives: pl.DataFrame | None = None, llm_log: LLMLog | None = None) -> StageSummary:
    """Write scores and candidate scores (and the metrics' LLM usage and answers, score/usage.parquet and
    score/llm_answers.parquet); rows in: (candidate, reference) pairs, rows out: score rows."""
    dup = scores.filter(pl.struct("candidate", "reference", "metric", "eval_lm").is_duplicated())
    if not dup.is_empty():
        raise ValueError(f"{dup.height} score rows repeat a (candidate, reference, metric, eval_lm)")
    folder = stage_dir(cfg, pipeline, "score")
    per_candidate = candidate_scores(scores)
    write_parquet(scores, folder / "scores.parquet")
    write_parquet(per_candidate, folder / "candidate_scores.parquet")
    if negatives is not None:
        write_parquet(negatives, folder / "negatives.parquet")
    llm = write_llm_log(llm_log, folder) if llm_log is not None else {}
    gaps = scores.filter(pl.col("reason").is_not_null()).group_by("reason").len().sort("reason")
    means = per_candidate.group_by("metric").agg(pl.col("score").filter(pl.col("score").is_not_nan()).mean())
    if len(eval_specs(cfg.score)) > 1:   # one mean per metric and evaluation LM: "gem@<eval LM key>"
        means = (per_candidate.group_by("metric", "eval_lm")
                 .agg(pl.col("score").filter(pl.col("score").is_not_nan()).mean())
                 .select(pl.format("{}@{}", "metric", "eval_lm").alias("metric"), "score"))
    return StageSummary(
        rows_in=scores.select("candidate", "reference").unique().height,
        rows_out=scores.height,
        **llm,
        details={
            "eval_lm": eval_specs(cfg.score)[0].resolved().key,
            "pairs": scores.height,
            "scored_pairs": scores.height - int(gaps["len"].sum() if gaps.height else 0),
            **details,
            "gaps": dict(gaps.iter_rows()),
            "mean_score": {m: s for m, s in means.sort("metric").iter_rows()},
        },
    )
