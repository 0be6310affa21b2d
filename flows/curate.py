"""Curate: normalise ratings, apply the confidence / review-count / variance rules, sample."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.layout import stage_dir
from tasks.core.summary import StageSummary
from tasks.stages.curate.steps import curate_venue_task


@flow(name="curate", log_prints=True)
def curate_flow(cfg: Config, pipeline: str) -> StageSummary:
    results = [curate_venue_task(stage_dir(cfg, pipeline, "ingest", venue), venue, cfg,
                                 stage_dir(cfg, pipeline, "curate", venue))
               for venue in cfg.pipelines[pipeline].venues]
    summary = sum((result.summary() for result in results), StageSummary(0, 0))
    print(f"curate {pipeline}: {summary.as_dict()}")
    return summary
