"""The fan-out every sharded stage shares: one Prefect task per Parquet shard, mapped on the configured
task runner, behind the evaluation-LM concurrency limit while it scores: on threads, one slot of it
each (slot files the kernel frees when a holder dies: tasks/core/slots.py); on a Dask cluster, one
`GPU` worker resource each, so the bound holds across machines (tasks/scoring/cluster.py, which also
checks at the start that the workers can run them).

Two kinds of shard go through it: log-likelihood requests (tasks/scoring/shards.py; `fan_out(cfg)`, a
`ShardRunner`: the score stage's GEM requests and validation's rescoring) and paper shards of the
metrics behind an LLM (tasks/scoring/metric_shards.py; `fan_out_metrics(cfg)`, a `MetricShardRunner`:
the oracle cells, the judges, RevisEval, review quality). Both are subflows, so they run from a flow
body (score) or from inside a task (validation's); a shard already done is skipped by its task
without taking a slot.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait

from tasks.core.allocator import give_back_freed_memory
from tasks.core.config import Config, ScoreConfig
from tasks.core.slots import SlotLimit, holding_slot
from tasks.lm import ModelSpec
from tasks.scoring import metric_shards, shards
from tasks.scoring.cluster import eval_lm_placement
from tasks.scoring.metric_shards import MetricShardRunner
from tasks.scoring.shards import ShardRunner, make_task_runner


def holding_a_slot(limit: SlotLimit | None, done: bool, work: Callable[[], dict], ahead: bool = False) -> dict:
    """`work()`, inside one slot of the concurrency limit `limit` unless the shard is `done` (it only skips);
    `ahead`: the slot taken ahead for it, if one was (tasks/core/slots.py `take_ahead`)."""
    if done or limit is None:
        return work()
    with holding_slot(limit, ahead):
        return work()


@task(name="score-shard", cache_policy=NO_CACHE, tags=["eval-lm"])
def score_shard_task(requests_dir: Path, results_dir: Path, shard: str, spec: ModelSpec, token_budget: int,
                     limit: SlotLimit | None = None) -> dict:
    """`score_shard` holding one slot of the evaluation-LM concurrency limit while it scores."""
    return holding_a_slot(limit, (Path(results_dir) / f"{shard}.parquet").is_file(),
                          lambda: shards.score_shard(requests_dir, results_dir, shard, spec, token_budget))


@flow(name="score-shards")
def score_shards_flow(requests_dir: Path, results_dir: Path, shards: list[str], spec: ModelSpec,
                      token_budget: int, limit: SlotLimit | None = None) -> list[dict]:
    """One task per shard, on whatever task runner this flow was given, each in a slot of `limit`."""
    give_back_freed_memory()   # the step before (a preprocessor's readouts) left freed memory kept
    with eval_lm_placement(results_dir):
        futures = score_shard_task.map(unmapped(requests_dir), unmapped(results_dir), shards, unmapped(spec),
                                       unmapped(token_budget), unmapped(limit))
    wait(futures)
    return futures.result()


def fan_out(cfg: ScoreConfig, limit: SlotLimit | None = None) -> ShardRunner:
    """Run shards through `score_shards_flow` on the configured task runner, each in a slot of `limit`."""
    return partial(score_shards_flow.with_options(task_runner=make_task_runner(cfg)), limit=limit)


@task(name="metric-shard", cache_policy=NO_CACHE, tags=["eval-lm"])
def metric_shard_task(folder: Path, shard: str, names: tuple[str, ...], cfg: Config, pipeline: str,
                      llm_cache: Path | None, limit: SlotLimit | None = None) -> dict:
    """`score_metric_shard` holding one slot of the concurrency limit while it scores."""
    return holding_a_slot(limit, (Path(folder) / shard / "scores.parquet").is_file(),
                          lambda: metric_shards.score_metric_shard(folder, shard, names, cfg, pipeline, llm_cache),
                          ahead=True)


@flow(name="metric-shards")
def metric_shards_flow(folder: Path, shards: list[str], names: tuple[str, ...], cfg: Config, pipeline: str,
                       llm_cache: Path | None, limit: SlotLimit | None = None) -> list[dict]:
    """One task per metric shard, on whatever task runner this flow was given, each in a slot of `limit`."""
    with eval_lm_placement(folder):
        futures = metric_shard_task.map(unmapped(folder), shards, unmapped(names), unmapped(cfg), unmapped(pipeline),
                                        unmapped(llm_cache), unmapped(limit))
    wait(futures)
    return futures.result()


def fan_out_metrics(cfg: ScoreConfig, limit: SlotLimit | None = None) -> MetricShardRunner:
    """Run metric shards through `metric_shards_flow` on the configured task runner, each in a slot of `limit`."""
    return partial(metric_shards_flow.with_options(task_runner=make_task_runner(cfg)), limit=limit)
