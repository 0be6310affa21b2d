"""Ingest: pull each venue's submissions and reviews from OpenReview into Parquet, then the PDFs of
the papers the curate rules put in the benchmark sample (the rest are never downloaded)."""

from __future__ import annotations

from functools import partial

from prefect import flow

from tasks.core.config import Config
from tasks.core.layout import stage_dir
from tasks.core.summary import StageSummary
from tasks.stages.curate.steps import papers_to_read
from tasks.stages.ingest.steps import ingest_venue_task, venue_source


@flow(name="ingest", log_prints=True)
def ingest_flow(cfg: Config, pipeline: str) -> StageSummary:
    with venue_source(cfg, pipeline) as sources:
        futures = [ingest_venue_task.submit(venue, cfg, stage_dir(cfg, pipeline, "ingest", venue), source.baseurl,
                                            partial(papers_to_read, venue_id=venue, cfg=cfg), source.cache_key)
                   for venue, source in sources.items()]
        summary = sum((future.result().summary() for future in futures), StageSummary(0, 0))
    print(f"ingest {pipeline}: {summary.as_dict()}")
    return summary
