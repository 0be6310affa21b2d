"""Generate stage: candidate LLMs review the benchmark papers they cannot have seen; their reviews
are preprocessed into judgments exactly like the human ones."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.stages.generate.steps import (
    read_generate_inputs_task,
    review_all_task_runs,
    write_generate_outputs_task,
)


@flow(name="generate", log_prints=True)
def generate_flow(cfg: Config, pipeline: str) -> StageSummary:
    papers, pdf_texts = read_generate_inputs_task(cfg, pipeline)
    runs = review_all_task_runs(papers, pdf_texts, cfg)   # candidates_at_once at a time, each judged as it ends
    summary = write_generate_outputs_task(cfg, pipeline, papers, runs)
    print(f"generate {pipeline}: {summary.as_dict()}")
    return summary
