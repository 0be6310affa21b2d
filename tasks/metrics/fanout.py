"""The fan-out every sharded stage shares: one Prefect task per Parquet shard (tasks/metrics/shards.py),
mapped on the configured task runner (threads, or a Dask cluster), each holding one slot of the
evaluation-LM concurrency limit while it scores.

`fan_out(cfg)` is a `ShardRunner`: the score stage's log-likelihoods and validation's rescoring both
hand it their shards. It is a subflow, so it runs from a flow body (score) or from inside a task
(validation's); a shard whose results exist is skipped by its task without taking a slot.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait

from tasks.core.config import ScoreConfig
from tasks.lm import ModelSpec
from tasks.metrics import shards
from tasks.metrics.shards import ShardRunner, make_task_runner


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


@flow(name="score-shards")
def score_shards_flow(requests_dir: Path, results_dir: Path, shards: list[str], spec: ModelSpec,
                      token_budget: int) -> list[dict]:
    """One task per shard, on whatever task runner this flow was given."""
    futures = score_shard_task.map(unmapped(requests_dir), unmapped(results_dir), shards, unmapped(spec),
                                   unmapped(token_budget))
    wait(futures)
    return futures.result()


def fan_out(cfg: ScoreConfig) -> ShardRunner:
    """Run shards through `score_shards_flow` on the configured task runner."""
    return score_shards_flow.with_options(task_runner=make_task_runner(cfg))
