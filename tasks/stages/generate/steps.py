"""The generate stage's Prefect tasks (the plain functions are in reviews.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.retry import llm_task
from tasks.stages.generate.reviews import (
    judge_reviews,
    read_generate_inputs,
    review_papers,
    write_generate_outputs,
)

read_generate_inputs_task = task(read_generate_inputs, name="read-generate-inputs", cache_policy=NO_CACHE)
review_papers_task = llm_task(review_papers, name="generate-reviews", task_run_name="generate-{candidate.name}")
judge_reviews_task = llm_task(judge_reviews, name="judge-candidate-reviews")
write_generate_outputs_task = task(write_generate_outputs, name="write-generate-outputs", cache_policy=NO_CACHE)
