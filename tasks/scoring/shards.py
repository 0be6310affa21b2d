"""Scoring requests as Parquet shards, one Prefect task per shard, resumable.

    score/requests/<shard>.parquet   key, system, user, continuation
    score/results/<shard>.parquet    key, logprob, n_tokens

A shard's name hashes the keys it holds, so the same requests always give the same shards. Files
are written atomically (a temporary file renamed into place): a results file exists only when the
shard is complete, and a shard with results is skipped, so a crashed run resumes where it stopped.
The GPU-bound task holds a slot of a Prefect global concurrency limit while it scores.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import ScoreConfig
from tasks.layout import write_parquet
from tasks.lm import LoglikelihoodRequest, ModelSpec, local_lm

RESULTS = pl.Schema({"key": pl.String, "logprob": pl.Float64, "n_tokens": pl.Int64})
CONCURRENCY_LIMIT = "grebench-eval-lm"




def write_request_shards(requests: pl.DataFrame, folder: Path, shard_size: int) -> list[str]:
    """Write the requests as shards of `shard_size` (prompts kept together for prefix reuse); their names."""
    ordered = requests.unique("key").sort("system", "user", "continuation", "key")
    names = []
    for offset in range(0, ordered.height, shard_size):
        shard = ordered.slice(offset, shard_size)
        name = "shard-" + hashlib.sha256("\n".join(shard["key"]).encode()).hexdigest()[:16]
        path = folder / f"{name}.parquet"
        if not path.is_file():
            write_parquet(shard, path)
        names.append(name)
    return names


def score_shard(requests_dir: Path, results_dir: Path, shard: str, spec: ModelSpec, token_budget: int) -> dict:
    """Score one shard and write its results; a shard already done is skipped."""
    out = Path(results_dir) / f"{shard}.parquet"
    if out.is_file():
        return {"shard": shard, "status": "skipped", "requests": 0, "seconds": 0.0}
    frame = pl.read_parquet(Path(requests_dir) / f"{shard}.parquet")
    requests = [LoglikelihoodRequest(r["system"], r["user"], r["continuation"]) for r in frame.iter_rows(named=True)]
    lm = local_lm(spec, token_budget)
    started = time.perf_counter()
    results = lm.loglikelihood(requests)
    seconds = time.perf_counter() - started
    write_parquet(
        pl.DataFrame({"key": frame["key"], "logprob": [r.logprob for r in results],
                      "n_tokens": [r.n_tokens for r in results]}, schema=RESULTS),
        out,
    )
    return {"shard": shard, "status": "scored", "requests": len(requests), "seconds": round(seconds, 3)}


@task(name="score-shard", cache_policy=NO_CACHE, tags=["eval-lm"])
def score_shard_task(requests_dir: Path, results_dir: Path, shard: str, spec: ModelSpec, token_budget: int,
                     limit: str | None = CONCURRENCY_LIMIT) -> dict:
    """`score_shard` holding one slot of the evaluation-LM concurrency limit while it scores."""
    if (Path(results_dir) / f"{shard}.parquet").is_file():
        return score_shard(requests_dir, results_dir, shard, spec, token_budget)
    from prefect.concurrency.sync import concurrency

    slot = concurrency(limit, occupy=1, strict=True) if limit else contextlib.nullcontext()
    with slot:
        return score_shard(requests_dir, results_dir, shard, spec, token_budget)


def read_results(results_dir: Path, shards: list[str]) -> pl.DataFrame:
    """All results of the given shards; a missing shard is an error (the run is not complete)."""
    missing = [s for s in shards if not (Path(results_dir) / f"{s}.parquet").is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} shard(s) have no results, e.g. {missing[0]}")
    if not shards:
        return pl.DataFrame(schema=RESULTS)
    return pl.concat([pl.read_parquet(Path(results_dir) / f"{s}.parquet") for s in shards]).cast(dict(RESULTS))


def ensure_concurrency_limit(name: str, slots: int) -> None:
    """Create (or resize) the Prefect global concurrency limit the scoring tasks occupy."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, slots)


def make_task_runner(cfg: ScoreConfig) -> Any:
    """The task runner named in the config: threads here, or a Dask / Ray cluster (local or remote)."""
    if cfg.task_runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=max(cfg.workers, cfg.gpu_concurrency))
    if cfg.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        if cfg.runner_address:
            return DaskTaskRunner(address=cfg.runner_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": cfg.workers, "threads_per_worker": 1,
                                              "processes": True, "dashboard_address": None})
    try:
        from prefect_ray import RayTaskRunner  # type: ignore[import-not-found]
    except ImportError:
        raise RuntimeError("score.task_runner = 'ray' needs the prefect-ray package (pip install prefect-ray)") from None
    if cfg.runner_address:
        return RayTaskRunner(address=cfg.runner_address)
    return RayTaskRunner(init_kwargs={"num_cpus": cfg.workers})
