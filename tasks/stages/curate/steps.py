"""The curate stage's Prefect task (the rules are in rules.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.stages.curate.rules import curate_venue, papers_to_read

curate_venue_task = task(curate_venue, name="curate-venue", cache_policy=NO_CACHE)

__all__ = ["curate_venue_task", "papers_to_read"]   # papers_to_read: which PDFs ingest fetches


