"""The validate stage's Prefect tasks (the plain functions are in tasks/stages/validate/stage.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.retry import llm_task
from tasks.stages.validate.stage import build_leaderboard, validate_pipeline, write_outputs

# Retried only when an LLM call failed transiently (the LLM cache makes a retry cheap).
validate_pipeline_task = llm_task(validate_pipeline, name="validate-metrics")
build_leaderboard_task = task(build_leaderboard, name="build-leaderboard", cache_policy=NO_CACHE)
write_outputs_task = task(write_outputs, name="write-validate-outputs", cache_policy=NO_CACHE)
