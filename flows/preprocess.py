"""Preprocess stage: curated reviews -> atomic judgments; papers -> abstract and ASSW synopses."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.layout import cache_dir
from tasks.core.summary import StageSummary
from tasks.lm import make_lm
from tasks.stages.preprocess.judgments import (
    make_synopses_task,
    preprocess_reviews_task,
    read_inputs_task,
    write_outputs_task,
)


@flow(name="preprocess", log_prints=True)
def preprocess_flow(cfg: Config, pipeline: str) -> StageSummary:
    reviews, papers, pdf_texts = read_inputs_task(cfg, pipeline)
    backend = make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
    judged = preprocess_reviews_task(reviews, backend, cfg.preprocess)
    synopses = make_synopses_task(papers, pdf_texts, backend, cfg.preprocess)
    summary = write_outputs_task(cfg, pipeline, judged, synopses)
    print(f"preprocess {pipeline}: {summary.as_dict()}")
    return summary
