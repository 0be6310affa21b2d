"""The generate stage's Prefect tasks (the plain functions are in reviews.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, as_completed

from tasks.core.config import Config
from tasks.core.retry import llm_task
from tasks.lm.local import sharing_cores
from tasks.stages.generate.reviews import (
    CandidateRun,
    local_jobs_at_once,
    read_generate_inputs,
    review_and_judge,
    write_generate_outputs,
)

read_generate_inputs_task = task(read_generate_inputs, name="read-generate-inputs", cache_policy=NO_CACHE)
review_papers_task = llm_task(review_and_judge, name="generate-reviews", task_run_name="generate-{candidate.name}")
write_generate_outputs_task = task(write_generate_outputs, name="write-generate-outputs", cache_policy=NO_CACHE)

__all__ = ["read_generate_inputs_task", "review_all_task_runs", "review_papers_task", "submit_at_most",
           "write_generate_outputs_task"]


Item = TypeVar("Item")


def submit_at_most(limit: int, submit: Callable[[Item], PrefectFuture[Any]], items: Iterable[Item]
                   ) -> list[PrefectFuture[Any]]:
    """`submit(item)` for each item in order, with at most `limit` futures running at once; the futures
    in item order (a sliding window: the next item starts as soon as any running one finishes)."""
    futures: list[PrefectFuture[Any]] = []
    running: list[PrefectFuture[Any]] = []
    for item in items:
        if len(running) >= limit:
            running.remove(next(as_completed(running)))
        futures.append(submit(item))
        running.append(futures[-1])
    return futures


def review_all_task_runs(papers: pl.DataFrame, pdf_texts: pl.DataFrame | None, cfg: Config) -> list[CandidateRun]:
    """Every candidate's `review_papers_task` run, `[generate] candidates_at_once` at a time, the local ones
    splitting the cores between them (tasks/lm/local.py `sharing_cores`); the runs in candidate order."""
    with sharing_cores(local_jobs_at_once(cfg)):
        futures = submit_at_most(cfg.generate.candidates_at_once,
                                 lambda candidate: review_papers_task.submit(papers, pdf_texts, candidate, cfg),
                                 cfg.generate.candidates)
        return [future.result() for future in futures]
