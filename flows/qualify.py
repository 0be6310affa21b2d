"""Qualify: examine the LLMs in a judging role (consistency, pertinence, self-confidence) before scoring."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.stages.qualify.steps import qualify_task


@flow(name="qualify", log_prints=True)
def qualify_flow(cfg: Config, pipeline: str) -> StageSummary:
    summary = qualify_task(cfg, pipeline)
    print(f"qualify {pipeline}: {summary.as_dict()}")
    return summary
