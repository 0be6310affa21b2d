"""Preprocess stage: curated reviews -> atomic judgments; papers -> abstract and ASSW synopses."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.stages.preprocess.steps import (
    judgments_and_synopses,
    needs_assw,
    preprocess_lm,
    read_inputs_task,
    write_outputs_task,
)


@flow(name="preprocess", log_prints=True)
def preprocess_flow(cfg: Config, pipeline: str) -> StageSummary:
    reviews, papers, pdf_texts = read_inputs_task(cfg, pipeline)
    backend = preprocess_lm(cfg)
    judged, synopses = judgments_and_synopses(reviews, papers, pdf_texts, backend, cfg.preprocess,
                                               assw=needs_assw(cfg, pipeline))
    summary = write_outputs_task(cfg, pipeline, judged, synopses)
    print(f"preprocess {pipeline}: {summary.as_dict()}")
    return summary
