"""The materialize stage's Prefect task (the build is in build.py)."""

from __future__ import annotations

from prefect import task

from tasks.stages.materialize.build import build_database, update_tables

materialize_task = task(build_database, name="materialize", task_run_name="materialize-{pipeline}")

__all__ = ["materialize_task", "update_tables"]
