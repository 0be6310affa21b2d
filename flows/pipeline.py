"""Run a named pipeline from pipelines.toml: its stages, in order, as Prefect subflows.

Every run leaves a record (tasks/core/runs.py): one row per stage with its duration, rows in / out,
LLM calls, tokens and cost, written as the run goes (a stage's row from its start, status "running")
so a crashed run still shows how far it got.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable

from prefect import flow
from prefect.runtime import flow_run

from tasks.checks import load_checked_config
from tasks.core.allocator import give_back_freed_memory
from tasks.core.config import STAGES, Config, select_stages
from tasks.core.runs import StageRecord, code_version, config_hash, now, write_run
from tasks.core.stage_inputs import check_inputs, write_receipt
from tasks.core.summary import StageSummary
from tasks.lm import release_decoding_models, release_engines
from tasks.stages.materialize.steps import update_tables

# Each stage is a flow `<module>:<function>(cfg: Config, pipeline: str) -> StageSummary`, imported
# only when the pipeline runs it (the score stage pulls in torch).
STAGE_FLOWS = {stage: f"flows.{stage}:{stage}_flow" for stage in STAGES}
# The stages whose work is writing text with a model; after the last of them in a run, the int8
# models that only decode are dropped (a judge that decodes in score or validate loads its own again).
DECODING_STAGES = frozenset({"preprocess", "generate", "qualify"})


def stage_flow(stage: str) -> Callable[[Config, str], StageSummary]:
    module_name, _, name = STAGE_FLOWS[stage].partition(":")
    return getattr(importlib.import_module(module_name), name)


def stage_config(cfg: Config, pipeline: str, stage: str) -> Config:
    """The config a stage runs on: after ingest every venue without a venue table has the review
    form ingest read from the venue (tasks/stages/ingest/review_form.py); after the qualify stage,
    score and validate see only the judges, readout oracles and matchers that passed the exam
    (tasks/stages/qualify/stage.py)."""
    if stage != "ingest":
        from tasks.stages.ingest.review_form import with_venue_forms

        cfg = with_venue_forms(cfg, pipeline)
    if stage in ("score", "validate"):
        from tasks.stages.qualify.steps import qualified_config

        return qualified_config(cfg, pipeline)
    return cfg


@flow(name="grebench-pipeline", log_prints=True)
def pipeline_flow(
    pipeline: str,
    config_path: str = "pipelines.toml",
    stages: list[str] | None = None,
    venues: list[str] | None = None,
) -> dict[str, StageSummary]:
    """Resolve the config once (pipeline overrides, `venues`, the refresh year) and run the stages on it."""
    cfg = load_checked_config(config_path).for_pipeline(pipeline, venues)
    chosen = select_stages(cfg.pipelines[pipeline].stages, stages)
    check_inputs(cfg, pipeline, chosen)   # a stage left out whose outputs are missing: one line, nothing run
    identity = (str(flow_run.id or uuid.uuid4()), config_hash(cfg, pipeline), code_version())
    records: list[StageRecord] = []
    summary: dict[str, StageSummary] = {}
    try:
        for position, stage in enumerate(chosen):
            record = StageRecord(stage, position, now())
            records.append(record)
            write_run(cfg, pipeline, *identity, records)   # the record shows the stage running from its start
            try:
                summary[stage] = stage_flow(stage)(stage_config(cfg, pipeline, stage), pipeline)
            except BaseException as error:
                record.finish(None, error)
                raise
            record.finish(summary[stage])
            write_receipt(cfg, pipeline, stage, identity[0])
            write_run(cfg, pipeline, *identity, records)
            release_engines()   # the stage's prefix caches, one set per thread that scored
            if not DECODING_STAGES.intersection(chosen[position + 1:]):
                release_decoding_models()
            give_back_freed_memory()   # what this stage freed is not kept under the next one's peak
    finally:
        write_run(cfg, pipeline, *identity, records)
        update_tables(cfg, pipeline, {"staging.runs", "runs"})
    return summary
