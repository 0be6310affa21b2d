"""Score: GEM and GEM-S of every candidate against the human references, sharded over Prefect tasks."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, unmapped
from prefect.futures import wait

from tasks.config import load_config
from tasks.lm import ModelSpec
from tasks.scoring.shards import (
    CONCURRENCY_LIMIT,
    ensure_concurrency_limit,
    make_task_runner,
    score_shard_task,
)
from tasks.scoring.stage import baseline_scores_task, finish_scoring_task, plan_scoring_task


@flow(name="score-shards")
def score_shards_flow(requests_dir: Path, results_dir: Path, shards: list[str], spec: ModelSpec,
                      token_budget: int) -> list[dict]:
    """One task per shard, on whatever task runner this flow was given."""
    futures = score_shard_task.map(unmapped(requests_dir), unmapped(results_dir), shards, unmapped(spec),
                                   unmapped(token_budget))
    wait(futures)
    return futures.result()


@flow(name="score", log_prints=True)
def score_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict:
    cfg = load_config(config_path).for_pipeline(pipeline)
    plan = plan_scoring_task(cfg, pipeline)
    ensure_concurrency_limit(CONCURRENCY_LIMIT, cfg.score.gpu_concurrency)
    runner = make_task_runner(cfg.score)
    runs = score_shards_flow.with_options(task_runner=runner)(
        plan.requests_dir, plan.results_dir, list(plan.shards), plan.spec, cfg.score.token_budget
    )
    summary = finish_scoring_task(plan, baseline_scores_task(cfg, pipeline))
    summary["shards_scored"] = sum(r["status"] == "scored" for r in runs)
    summary["shards_skipped"] = sum(r["status"] == "skipped" for r in runs)
    print(summary)
    return summary
