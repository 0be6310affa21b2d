"""Qualify: examine the LLMs in a judging role (consistency, pertinence, self-confidence) before scoring."""

from __future__ import annotations

from prefect import flow

from tasks.config import Config
from tasks.qualify.steps import qualify_task
from tasks.summary import StageSummary


@flow(name="qualify", log_prints=True)
def qualify_flow(cfg: Config, pipeline: str) -> StageSummary:
    summary = qualify_task(cfg, pipeline)
    print(f"qualify {pipeline}: {summary.as_dict()}")
    return summary
