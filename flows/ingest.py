"""Ingest: pull each venue's submissions and reviews from OpenReview into Parquet."""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow
from tasks.ingest import ingest_venue_task

from tasks.config import load_config
from tasks.layout import stage_dir
from tasks.sources import venue_source


@flow(name="ingest", log_prints=True)
def ingest_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict[str, dict]:
    cfg = load_config(config_path).for_pipeline(pipeline)
    with venue_source(cfg, pipeline) as baseurls:
        futures = {
            venue: ingest_venue_task.submit(venue, cfg, stage_dir(cfg, pipeline, "ingest", venue), baseurl)
            for venue, baseurl in baseurls.items()
        }
        return {venue: asdict(future.result()) for venue, future in futures.items()}
