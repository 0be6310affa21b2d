"""The ingest stage's Prefect task: one venue, retried on transient OpenReview failures."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.retry import transient
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.sources import venue_source

ingest_venue_task = task(ingest_venue, name="ingest-venue", retries=2, retry_delay_seconds=[30, 120],
                         retry_condition_fn=transient, cache_policy=NO_CACHE)

__all__ = ["ingest_venue_task", "venue_source"]
