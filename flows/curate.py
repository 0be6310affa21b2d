"""Curate: normalise ratings, apply the confidence / review-count / variance rules, sample."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow
from tasks.curate import curate_venue_task

from tasks.config import load_config
from tasks.layout import stage_dir


@flow(name="curate", log_prints=True)
def curate_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict[str, dict]:
    cfg = load_config(config_path).for_pipeline(pipeline)
    results = {}
    for venue in cfg.pipelines[pipeline].venues:
        ingest_dir = stage_dir(cfg, pipeline, "ingest", venue)
        out_dir = stage_dir(cfg, pipeline, "curate", venue)
        results[venue] = asdict(curate_venue_task(ingest_dir, venue, cfg, out_dir))
    return results
