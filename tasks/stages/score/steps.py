"""The score stage's Prefect tasks, and what flows/score.py needs to fan the shards out.

The plain functions are in stage.py (inputs, scoring, outputs), tasks/scoring/shards.py (the sharded
log-likelihood engine) and tasks/scoring/metric_shards.py (the paper shards of the metrics behind an
LLM); the shard tasks and their fan-out subflows, shared with validation, in tasks/scoring/fanout.py.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.lm import ModelSpec
from tasks.scoring.fanout import fan_out, fan_out_metrics, score_shard_task
from tasks.scoring.shards import CONCURRENCY_LIMIT, ShardRunner, eval_lm_slots, make_task_runner
from tasks.stages.score.flagged import mark_flagged
from tasks.stages.score.injection import score_injection
from tasks.stages.score.reference_flags import write_reference_flags
from tasks.stages.score.stage import (
    metric_shards,
    read_inputs,
    score_inputs_each_eval_lm,
    sharded_loglikelihoods,
    shards_details,
    write_scores,
)

read_inputs_task = task(read_inputs, name="read-scoring-inputs", cache_policy=NO_CACHE)
write_scores_task = task(write_scores, name="write-scores", cache_policy=NO_CACHE)
score_injection_task = task(score_injection, name="score-injection-track", cache_policy=NO_CACHE)
mark_flagged_task = task(mark_flagged, name="mark-flagged-submissions", cache_policy=NO_CACHE)
write_reference_flags_task = task(write_reference_flags, name="write-reference-flags", cache_policy=NO_CACHE)


__all__ = ["CONCURRENCY_LIMIT", "ModelSpec", "ShardRunner", "eval_lm_slots", "fan_out", "fan_out_metrics",
           "make_task_runner", "mark_flagged_task", "metric_shards", "read_inputs_task", "score_injection_task",
           "score_inputs_each_eval_lm", "score_shard_task", "sharded_loglikelihoods", "shards_details",
           "write_reference_flags_task", "write_scores_task"]
