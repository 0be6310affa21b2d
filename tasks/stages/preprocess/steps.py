"""The preprocess stage's Prefect tasks: curated reviews -> judgments, papers -> synopses (tasks/judgments/extract.py)."""

from __future__ import annotations

from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.config import Config, PreprocessConfig
from tasks.core.frames import read_curated
from tasks.core.retry import llm_task
from tasks.judgments.extract import (
    PreprocessOutput,
    Synopses,
    make_synopses,
    merged,
    preprocess_reviews,
    require_judgments,
)
from tasks.lm import runs_locally
from tasks.lm.local import sharing_cores
from tasks.metrics import get
from tasks.stages.preprocess.stage import preprocess_lm, write_outputs

read_inputs_task = task(read_curated, name="read-preprocess-inputs", cache_policy=NO_CACHE)
preprocess_reviews_task = llm_task(preprocess_reviews, name="preprocess-reviews")
make_synopses_task = llm_task(make_synopses, name="make-synopses")
write_outputs_task = task(write_outputs, name="write-preprocess-outputs", cache_policy=NO_CACHE)

__all__ = ["judgments_and_synopses", "needs_assw", "make_synopses_task", "preprocess_lm", "preprocess_reviews_task",
           "read_inputs_task", "write_outputs_task"]


def judgments_and_synopses(reviews: pl.DataFrame, papers: pl.DataFrame, pdf_texts: pl.DataFrame | None, backend: Any,
                           cfg: PreprocessConfig, assw: bool = True) -> tuple[PreprocessOutput, Synopses]:
    """The reviews' judgments and the papers' synopses, side by side (neither reads the other); a local
    model's cores split between the two (tasks/lm/local.py `sharing_cores`), a fixed split so no answer
    depends on which ends first. Without `assw` the synopses need no LLM (the abstracts alone), so the
    reviews are cut in two halves that take a core each instead."""
    ways = 2 if runs_locally(cfg) else 1
    with sharing_cores(ways):
        if assw:
            judged = preprocess_reviews_task.submit(reviews, backend, cfg)
            synopses = make_synopses_task.submit(papers, pdf_texts, backend, cfg)
            return judged.result(), synopses.result()
        each = cfg.model_copy(update={"allow_empty": True})   # the whole is checked, not each half
        cut = -(-reviews.height // ways)
        parts = [preprocess_reviews_task.submit(reviews.slice(k * cut, cut), backend, each) for k in range(ways)]
        judged = require_judgments(merged([part.result() for part in parts]), cfg)
        return judged, make_synopses(papers, pdf_texts, backend, cfg, assw=False)


def needs_assw(cfg: Config, pipeline: str) -> bool:
    """Whether to make the ASSW synopsis (an LLM call per paper): unless the pipeline scores or validates
    and none of the metrics those stages name reads a synopsis (a pipeline that stops at preprocess keeps
    it: the synopses are then its output). The abstract synopsis is always made."""
    stages = cfg.pipelines[pipeline].stages
    names = {*(cfg.score.all_metrics if "score" in stages else ()), *(cfg.validate.metrics if "validate" in stages else ())}
    if not names:
        return True
    return any(metric.conditioned_on != "none" for metric in get(sorted(names)))
