"""Materialize: (re)build the DuckDB results database from the Parquet outputs."""

from __future__ import annotations

from prefect import flow

from tasks.core.config import Config
from tasks.core.summary import StageSummary
from tasks.stages.materialize.steps import materialize_task


@flow(name="materialize", log_prints=True)
def materialize_flow(cfg: Config, pipeline: str) -> StageSummary:
    summary = materialize_task(cfg, pipeline).summary()
    print(f"materialize {pipeline}: {summary.as_dict()}")
    return summary
