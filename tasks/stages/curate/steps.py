"""The curate stage's Prefect task (the rules are in rules.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.stages.curate.rules import curate_venue

curate_venue_task = task(curate_venue, name="curate-venue", cache_policy=NO_CACHE)


