"""Generate stage: candidate LLMs review the benchmark papers they cannot have seen; their reviews
are preprocessed into judgments exactly like the human ones."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.lm.local import sharing_cores
from tasks.stages.generate.steps import (
    judge_reviews_task,
    local_jobs_at_once,
    read_generate_inputs_task,
    review_papers_task,
    submit_at_most,
    write_generate_outputs_task,
)


@flow(name="generate", log_prints=True)
def generate_flow(cfg: Config, pipeline: str) -> StageSummary:
    papers, pdf_texts = read_generate_inputs_task(cfg, pipeline)
    with sharing_cores(local_jobs_at_once(cfg)):   # local candidates side by side split the cores
        futures = submit_at_most(cfg.generate.candidates_at_once,
                                 lambda candidate: review_papers_task.submit(papers, pdf_texts, candidate, cfg),
                                 cfg.generate.candidates)
        runs = [future.result() for future in futures]
    judged = judge_reviews_task(runs, cfg)
    summary = write_generate_outputs_task(cfg, pipeline, papers, runs, judged)
    print(f"generate {pipeline}: {summary.as_dict()}")
    return summary
