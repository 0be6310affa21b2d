"""The score flow: shards, crash and resume, the concurrency limit, a two-worker Dask cluster."""

from __future__ import annotations

import threading
import time

import polars as pl
import pytest
from scoring_data import write_pipeline

import tasks.scoring.shards as shards_module
from flows.score import score_flow
from tasks.config import ScoreConfig, load_config
from tasks.layout import stage_dir
from tasks.lm import LoglikelihoodRequest, eval_lm
from tasks.scoring.shards import make_task_runner
from tasks.scoring.stage import plan_scoring


def _score_dir(config):
    return stage_dir(load_config(config), "t", "score")


def test_plan_is_content_addressed_and_stable(tmp_path) -> None:
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem", "gem_s_abstract"], shard_size=7)
    cfg = load_config(config).for_pipeline("t")
    first, again = plan_scoring(cfg, "t"), plan_scoring(cfg, "t")
    assert first.shards == again.shards and first.pairs == 2 * 3 * 2 * 2
    assert len(first.shards) == -(-first.requests // 7)
    written = sorted(p.stem for p in first.requests_dir.glob("*.parquet"))
    assert written == sorted(first.shards)
    assert sum(pl.read_parquet(p).height for p in first.requests_dir.glob("*.parquet")) == first.requests


def test_task_runner_comes_from_config() -> None:
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner(ScoreConfig()), ThreadPoolTaskRunner)
    dask = make_task_runner(ScoreConfig(task_runner="dask", workers=3))
    assert isinstance(dask, DaskTaskRunner) and dask.cluster_kwargs["n_workers"] == 3
    assert make_task_runner(ScoreConfig(task_runner="dask", runner_address="tcp://h:8786")).address == "tcp://h:8786"
    try:
        import prefect_ray  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="prefect-ray"):
            make_task_runner(ScoreConfig(task_runner="ray"))


@pytest.mark.slow
def test_crashed_run_resumes_and_writes_each_pair_once(tmp_path, prefect_harness, embedded_lm, monkeypatch):
    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["gem"], shard_size=5, workers=2)
    plan = plan_scoring(load_config(config).for_pipeline("t"), "t")
    doomed = plan.shards[-1]
    real = shards_module.score_shard
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def crashing(requests_dir, results_dir, shard, spec, token_budget):
        if shard == doomed:
            raise RuntimeError("worker killed")
        start = time.monotonic()
        out = real(requests_dir, results_dir, shard, spec, token_budget)
        with lock:
            spans.append((start, time.monotonic()))
        return out

    monkeypatch.setattr(shards_module, "score_shard", crashing)
    with pytest.raises(Exception, match="worker killed"):
        score_flow(str(config), "t")
    folder = _score_dir(config)
    done = {p.name: p.stat().st_mtime_ns for p in (folder / "results").glob("*.parquet")}
    assert len(done) == len(plan.shards) - 1 and not (folder / "scores.parquet").exists()
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "two shards scored at once"

    monkeypatch.undo()
    summary = score_flow(str(config), "t")
    assert summary["shards_scored"] == 1 and summary["shards_skipped"] == len(plan.shards) - 1
    assert all((folder / "results" / name).stat().st_mtime_ns == ns for name, ns in done.items())
    scores = pl.read_parquet(folder / "scores.parquet")
    assert scores.height == 2 * 3 * 2 and summary["scored_pairs"] == scores.height
    assert not scores.select("candidate", "reference", "metric").is_duplicated().any()
    assert scores["score"].is_nan().sum() == 0 and set(scores["eval_lm"]) == {"smollm2|float32|none"}

    # a stored pair equals a fresh computation of its two requests
    pair = pl.read_parquet(folder / "pairs.parquet").row(0, named=True)
    requests = pl.concat(pl.read_parquet(p) for p in (folder / "requests").glob("*.parquet"))
    by_key = {r["key"]: LoglikelihoodRequest(r["system"], r["user"], r["continuation"]) for r in requests.iter_rows(named=True)}
    cond, marg = eval_lm(load_config(config).score).loglikelihood([by_key[pair["cond_key"]], by_key[pair["marg_key"]]])
    row = scores.filter((pl.col("candidate") == pair["candidate"]) & (pl.col("reference") == pair["reference"]))
    assert row["score"][0] == pytest.approx(cond.logprob - marg.logprob, abs=1e-3)

    again = score_flow(str(config), "t")
    assert again["shards_scored"] == 0
    assert pl.read_parquet(folder / "scores.parquet").equals(scores)


@pytest.mark.slow
def test_score_flow_on_a_two_worker_dask_cluster(tmp_path, prefect_harness, embedded_lm, monkeypatch):
    from distributed import LocalCluster, get_worker

    seen = tmp_path / "workers"
    seen.mkdir()
    real = shards_module.score_shard

    def recording(requests_dir, results_dir, shard, spec, token_budget):
        # the task travels to the workers pickled by value, so note the worker in a file, not a variable
        (seen / shard).write_text(get_worker().address)
        return real(requests_dir, results_dir, shard, spec, token_budget)

    monkeypatch.setattr(shards_module, "score_shard", recording)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        config = write_pipeline(tmp_path, n_papers=2, n_reviews=2, metrics=["gem_raw", "gem_s_assw"], shard_size=3,
                                task_runner="dask", runner_address=cluster.scheduler_address, gpu_concurrency=2)
        summary = score_flow(str(config), "t")
    assert summary["shards_scored"] == summary["shards"] >= 4
    assert len({p.read_text() for p in seen.iterdir()}) == 2, "both dask workers scored shards"
    scores = pl.read_parquet(_score_dir(config) / "scores.parquet")
    assert scores.height == 2 * 2 * 1 * 2 and scores["score"].is_nan().sum() == 0
    means = pl.read_parquet(_score_dir(config) / "candidate_scores.parquet")
    assert means.height == 2 * 2 * 2 and set(means["n_references"]) == {1}
