"""Validation's rescoring fans out like the score stage: Parquet shards, one Prefect task each, on the
configured task runner; a validate run killed mid-way resumes without recomputing a finished shard,
and the flow runs on a two-worker Dask cluster."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tests.crash import killed_when
from tests.scoring_data import note_shard_workers, write_pipeline

ROOT = Path(__file__).resolve().parents[3]
VALIDATE = ('\n[validate]\nmetrics = ["gem_s_abstract"]\nstrategies = ["sentence_deletion", "case_upper"]\n'
            'candidates = "one"\nmin_pairs = 2\nbootstrap_resamples = 0\nlevel = ["judgments"]\n')


def _config(tmp_path: Path, n_papers: int, n_reviews: int, **score: object) -> Path:
    config = write_pipeline(tmp_path, n_papers=n_papers, n_reviews=n_reviews, metrics=["gem_s_abstract"], **score)
    with config.open("a") as f:
        f.write(VALIDATE)
    return config


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_killed_validate_run_resumes_without_recomputing_a_finished_shard(tmp_path, embedded_lm) -> None:
    from tasks.stages.validate.stage import validate_pipeline

    config = _config(tmp_path, n_papers=2, n_reviews=3, shard_size=2)
    results = tmp_path / "data" / "t" / "validate" / "results"
    script = ("import sys; from tasks.core.config import load_config; from tasks.stages.validate.stage import validate_pipeline; "
              "validate_pipeline(load_config(sys.argv[1]).for_pipeline('t'), 't')")
    killed_when(script, [str(config)], lambda: bool(list(results.glob("shard-*.parquet"))), timeout=1200)
    finished = {p.name: p.stat().st_mtime_ns for p in results.glob("shard-*.parquet")}
    assert finished and not (tmp_path / "data" / "t" / "validate" / "validation.parquet").exists()

    result = validate_pipeline(load_config(config).for_pipeline("t"), "t")
    stats = result.stats
    # the finished shards' results are reused, only the other requests are cut into shards and scored
    assert stats["requests_reused"] > 0 and stats["shards_skipped"] == 0 and stats["shards_scored"] == stats["shards"] > 0
    assert all((results / name).stat().st_mtime_ns == ns for name, ns in finished.items())   # none rewritten
    assert result.validation.height == 2 and result.scores["score"].is_nan().sum() == 0

    again = validate_pipeline(load_config(config).for_pipeline("t"), "t").stats
    assert again["shards_scored"] == again["shards"] == 0 and again["requests_reused"] > 0


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_validate_flow_rescoring_on_a_two_worker_dask_cluster(tmp_path, prefect_harness, embedded_lm,
                                                               dask_cluster, monkeypatch) -> None:
    from flows.validate import validate_flow

    seen = note_shard_workers(tmp_path, monkeypatch)
    config = _config(tmp_path, n_papers=2, n_reviews=2, shard_size=2, task_runner="dask",
                     runner_address=dask_cluster.scheduler_address, gpu_concurrency=2)
    cfg = load_config(config).for_pipeline("t")
    summary = validate_flow(cfg, "t")
    assert summary.details["shards_scored"] == summary.details["shards"] >= 4
    assert len({p.read_text() for p in seen.iterdir()}) == 2, "both dask workers scored validation shards"
    validation = pl.read_parquet(stage_dir(cfg, "t", "validate") / "validation.parquet")
    assert set(validation["strategy"]) == {"sentence_deletion", "case_upper"}
