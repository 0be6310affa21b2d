"""Validate: test every metric against degradations and manipulations, then publish the leaderboard."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.stages.validate.steps import build_leaderboard_task, validate_pipeline_task, write_outputs_task


@flow(name="validate", log_prints=True)
def validate_flow(cfg: Config, pipeline: str) -> StageSummary:
    result = validate_pipeline_task(cfg, pipeline, fan_out=True)   # rescoring: one task per shard
    boards = build_leaderboard_task(cfg, pipeline)
    summary = write_outputs_task(cfg, pipeline, result, boards)
    print(f"validate {pipeline}: {summary.as_dict()}")
    return summary
