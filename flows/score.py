"""Score: every configured metric of every candidate against the human references.

The log-likelihoods of the lm_logprobs metrics (GEM) go through Parquet shards, one Prefect task
per shard (`.map`) on the configured task runner, behind the evaluation-LM concurrency limit;
finished shards are skipped, so a crashed run resumes. The metrics behind an LLM (the registry's
`Metric.by_paper`) are paper shards fanned out the same way (tasks/scoring/metric_shards.py). With
several evaluation LMs
(`[score] eval_lms`) those metrics are scored once per evaluation LM (tasks/scoring/eval_lms.py).
"""

from __future__ import annotations

from dataclasses import replace

from prefect import flow

from tasks.core.config import Config
from tasks.core.layout import cache_dir
from tasks.core.summary import StageSummary
from tasks.stages.score.steps import (
    eval_lm_slots,
    fan_out,
    fan_out_metrics,
    mark_flagged_task,
    metric_shards,
    read_inputs_task,
    score_all_task_runs,
    sharded_loglikelihoods,
    shards_details,
    write_injection_task,
    write_scores_task,
)


@flow(name="score", log_prints=True)
def score_flow(cfg: Config, pipeline: str) -> StageSummary:
    inputs = read_inputs_task(cfg, pipeline)
    slots = eval_lm_slots(cfg)
    shards = sharded_loglikelihoods(cfg, pipeline, run=fan_out(cfg.score, slots))   # one per evaluation LM
    by_paper = metric_shards(cfg, pipeline, cache_dir(cfg, "llm"), run=fan_out_metrics(cfg.score, slots), limit=slots)
    scored, log, flags, injected = score_all_task_runs(cfg, pipeline, inputs, shards, by_paper, cache_dir(cfg, "llm"))
    injection = write_injection_task(cfg, pipeline, injected, scored.scores)
    details = {**shards_details(shards), **by_paper.details(), **flags, **injection}
    # an LLM's score of a submitted review flagged at submit says so in its note
    scored = replace(scored, scores=mark_flagged_task(cfg, pipeline, scored.scores))
    summary = write_scores_task(cfg, pipeline, scored, details, inputs.negatives, log)
    print(f"score {pipeline}: {summary.as_dict()}")
    return summary
