"""Materialize: (re)build the DuckDB results database from the Parquet outputs."""

from __future__ import annotations

from prefect import flow

from tasks.config import load_config
from tasks.materialize import materialize_task


@flow(name="materialize", log_prints=True)
def materialize_flow(config_path: str = "pipelines.toml", pipeline: str = "demo") -> dict:
    cfg = load_config(config_path).for_pipeline(pipeline)
    result = materialize_task(cfg, pipeline)
    print(f"built {result.database} with tables {result.tables}; {result.tests_run} data tests passed")
    return {
        "database": str(result.database),
        "tables": result.tables,
        "rows": sum(result.tables.values()),
        "skipped": result.skipped,
    }
