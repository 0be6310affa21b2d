"""The score stage's Prefect tasks, and what flows/score.py needs to fan the shards out.

The plain functions are in stage.py (inputs, scoring, outputs), quality_tables.py (Beyond Rating's
tables) and tasks/metrics/shards.py (the sharded log-likelihood engine).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.lm import ModelSpec
from tasks.metrics import shards
from tasks.metrics.review_quality.setup import quality_work
from tasks.metrics.shards import CONCURRENCY_LIMIT, ShardRunner, ensure_concurrency_limit, make_task_runner
from tasks.stages.score.quality_tables import write_quality_tables
from tasks.stages.score.stage import (
    read_inputs,
    score_inputs_each_eval_lm,
    sharded_loglikelihoods,
    shards_details,
    write_scores,
)

read_inputs_task = task(read_inputs, name="read-scoring-inputs", cache_policy=NO_CACHE)
write_scores_task = task(write_scores, name="write-scores", cache_policy=NO_CACHE)


@task(name="score-shard", cache_policy=NO_CACHE, tags=["eval-lm"])
def score_shard_task(requests_dir: Path, results_dir: Path, shard: str, spec: ModelSpec, token_budget: int,
                     limit: str | None = shards.CONCURRENCY_LIMIT) -> dict:
    """`score_shard` holding one slot of the evaluation-LM concurrency limit while it scores."""
    if (Path(results_dir) / f"{shard}.parquet").is_file():
        return shards.score_shard(requests_dir, results_dir, shard, spec, token_budget)
    from prefect.concurrency.sync import concurrency

    slot = concurrency(limit, occupy=1, strict=True) if limit else contextlib.nullcontext()
    with slot:
        return shards.score_shard(requests_dir, results_dir, shard, spec, token_budget)


__all__ = ["CONCURRENCY_LIMIT", "ModelSpec", "ShardRunner", "ensure_concurrency_limit", "make_task_runner",
           "quality_work", "read_inputs_task", "score_inputs_each_eval_lm", "score_shard_task",
           "sharded_loglikelihoods", "shards_details", "write_quality_tables", "write_scores_task"]
