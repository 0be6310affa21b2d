"""The fan-out every sharded stage shares: one Prefect task per Parquet shard, mapped on the
configured task runner (threads, or a Dask cluster), each behind the evaluation-LM concurrency limit.

`fan_out(cfg)` is a `ShardRunner` (tasks/scoring/shards.py): the score stage's log-likelihoods and
validation's rescoring both hand it their shards. It is a subflow, so it may be called from a flow
body or from inside a task (validation calls it from its task); a shard whose results exist is
skipped by its task without taking a slot.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, unmapped
from prefect.futures import wait

from tasks.config import ScoreConfig
from tasks.lm import ModelSpec
from tasks.scoring.shards import ShardRunner, make_task_runner
from tasks.scoring.steps import score_shard_task


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
