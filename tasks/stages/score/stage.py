"""The score stage's plain functions: score every configured metric, write the scores.

    score/requests/, results/       log-likelihood shards of the lm_logprobs metrics (tasks/scoring/shards.py)
    score/metric_shards/            paper shards of the metrics behind an LLM (tasks/scoring/metric_shards.py)
    score/scores.parquet            SCORES: one row per (candidate, reference, metric)
    score/candidate_scores.parquet  CANDIDATE_SCORES: per (paper, candidate, metric), the mean over references
    score/negatives.parquet         NEGATIVES: the negative references drawn, when a metric reads them
    score/<table>.parquet           the side tables the metric families leave (`FamilyResult.tables`), e.g.
                                    review quality's points, point_matches, question_checks (tasks/metrics/quality.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import stage_dir, write_parquet
from tasks.core.slots import SlotLimit
from tasks.core.summary import StageSummary
from tasks.lm import ModelSpec, eval_specs
from tasks.metrics import Resources, candidate_scores, get
from tasks.metrics.llm_log import LLMLog, write_llm_log
from tasks.metrics.registry import FamilyResult, PaperShards, score_with_tables
from tasks.metrics.resources import eval_spec, run_resources
from tasks.scoring.eval_lms import score_each_eval_lm
from tasks.scoring.metric_shards import MetricShardRunner, MetricShards, run_metric_shards_in_process
from tasks.scoring.shards import ShardedLoglikelihood, ShardRunner, run_in_process
from tasks.stages.score.inputs import ScoringInputs, load_inputs

OWN_TABLES = {"scores", "candidate_scores", "negatives", "usage", "llm_answers"}   # what the stage itself writes


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
                  run: MetricShardRunner = run_metric_shards_in_process, limit: SlotLimit | None = None
                  ) -> MetricShards:
    """The metrics behind an LLM as resumable paper shards under the score stage's folder (`run`'s tasks
    each holding a slot of `limit`, when given)."""
    return MetricShards(stage_dir(cfg, pipeline, "score") / "metric_shards", cfg, pipeline, llm_cache, run, limit)


def score_inputs_each_eval_lm(cfg: Config, pipeline: str, inputs: ScoringInputs, shards: list[ShardedLoglikelihood],
                              llm_cache: Path | None = None, by_paper: PaperShards | None = None,
                              log: LLMLog | None = None) -> tuple[FamilyResult, LLMLog]:
    """SCORES rows and side tables of every configured metric, the evaluation-LM ones once per evaluation LM
    (`shards`), and the log of the LLM calls the metrics made (oracle, judges; with an `llm_cache` folder;
    into `log` when given). With `by_paper`, the metrics behind an LLM are scored through its paper
    shards; the same rows as without."""
    by_key, log = {s.spec: s for s in shards}, log if log is not None else LLMLog()

    def resources(spec: ModelSpec) -> Resources:
        return run_resources(cfg, pipeline, cfg.score.all_metrics, by_key[spec], spec, llm_cache, log, by_paper)
    return score_each_eval_lm(cfg.score.all_metrics, [s.spec for s in shards], resources, inputs.candidates,
                              inputs.references, inputs.synopses, inputs.negatives,
                              side_by_side=by_paper is not None and by_paper.beside), log


def shards_details(shards: list[ShardedLoglikelihood]) -> dict[str, Any]:
    """`shard_details` summed over the evaluation LMs, with their keys (`eval_lms`)."""
    parts = [shard_details(s) for s in shards]
    return {**{k: sum(p[k] for p in parts) for k in parts[0]}, "eval_lms": [s.spec.resolved().key for s in shards]}


def score_inputs(cfg: Config, inputs: ScoringInputs, resources: Resources) -> FamilyResult:
    """SCORES rows and side tables of every configured metric (`score.metrics` then `score.baselines`)."""
    return score_with_tables(cfg.score.all_metrics, inputs.candidates, inputs.references, inputs.synopses, resources,
                             negatives=inputs.negatives)


def shard_details(shards: ShardedLoglikelihood) -> dict[str, Any]:
    return {"requests": shards.requests, "requests_reused": shards.reused, "shards": shards.shards,
            "shards_scored": sum(r["status"] == "scored" for r in shards.runs),
            "shards_skipped": sum(r["status"] == "skipped" for r in shards.runs)}


def write_scores(cfg: Config, pipeline: str, scored: FamilyResult, details: dict[str, Any],
                 negatives: pl.DataFrame | None = None, llm_log: LLMLog | None = None) -> StageSummary:
    """Write scores and candidate scores, the families' side tables (each `<name>.parquet`, whatever it
    holds), and the metrics' LLM usage and answers (score/usage.parquet and score/llm_answers.parquet);
    rows in: (candidate, reference) pairs, rows out: score rows."""
    scores = scored.scores
    clash = set(scored.tables) & OWN_TABLES
    if clash:
        raise ValueError(f"a metric family's side table would overwrite the score stage's {sorted(clash)}")
    dup = scores.filter(pl.struct("candidate", "reference", "metric", "eval_lm").is_duplicated())
    if not dup.is_empty():
        raise ValueError(f"{dup.height} score rows repeat a (candidate, reference, metric, eval_lm)")
    folder = stage_dir(cfg, pipeline, "score")
    per_candidate = candidate_scores(scores)
    write_parquet(scores, folder / "scores.parquet")
    write_parquet(per_candidate, folder / "candidate_scores.parquet")
    if negatives is not None:
        write_parquet(negatives, folder / "negatives.parquet")
    for name, frame in scored.tables.items():
        write_parquet(frame, folder / f"{name}.parquet")
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
            **({"tables": {n: f.height for n, f in sorted(scored.tables.items())}} if scored.tables else {}),
            **({"counts": dict(sorted(scored.counts.items()))} if scored.counts else {}),
            "gaps": dict(gaps.iter_rows()),
            "mean_score": {m: s for m, s in means.sort("metric").iter_rows()},
        },
    )
