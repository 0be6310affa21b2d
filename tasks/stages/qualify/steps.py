"""The qualify stage's Prefect tasks (the plain functions are in stage.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.stages.qualify.stage import qualified_config, qualify

qualify_task = task(qualify, name="qualify", cache_policy=NO_CACHE)

__all__ = ["qualified_config", "qualify_task"]
