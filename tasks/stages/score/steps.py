"""The score stage's Prefect tasks (the plain functions are in tasks/scoring/stage.py and shards.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.lm import ModelSpec
from tasks.metrics import shards
from tasks.stages.score.stage import read_inputs, write_scores

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
