"""The preprocess stage's Prefect tasks: curated reviews -> judgments, papers -> synopses (tasks/judgments/extract.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.frames import read_curated
from tasks.core.retry import llm_task
from tasks.judgments.extract import make_synopses, preprocess_reviews
from tasks.stages.preprocess.stage import preprocess_lm, write_outputs

read_inputs_task = task(read_curated, name="read-preprocess-inputs", cache_policy=NO_CACHE)
preprocess_reviews_task = llm_task(preprocess_reviews, name="preprocess-reviews")
make_synopses_task = llm_task(make_synopses, name="make-synopses")
write_outputs_task = task(write_outputs, name="write-preprocess-outputs", cache_policy=NO_CACHE)

__all__ = ["make_synopses_task", "preprocess_lm", "preprocess_reviews_task", "read_inputs_task", "write_outputs_task"]
