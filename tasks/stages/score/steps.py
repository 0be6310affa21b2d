"""The score stage's Prefect tasks, and what flows/score.py needs to fan the shards out.

The plain functions are in stage.py (inputs, scoring, outputs), tasks/scoring/shards.py (the sharded
log-likelihood engine) and tasks/scoring/metric_shards.py (the paper shards of the metrics behind an
LLM); the shard tasks and their fan-out subflows, shared with validation, in tasks/scoring/fanout.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.config import Config
from tasks.lm import ModelSpec
from tasks.metrics.llm_log import LLMLog
from tasks.metrics.registry import FamilyResult, Metric, PaperShards, Resources
from tasks.scoring.fanout import fan_out, fan_out_metrics, score_shard_task
from tasks.scoring.shards import (
    CONCURRENCY_LIMIT,
    ShardedLoglikelihood,
    ShardRunner,
    eval_lm_slots,
    make_task_runner,
)
from tasks.stages.score.flagged import mark_flagged
from tasks.stages.score.injection import score_injected, write_injection
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
score_injected_task = task(score_injected, name="score-injection-track", cache_policy=NO_CACHE)
write_injection_task = task(write_injection, name="write-injection-track", cache_policy=NO_CACHE)
mark_flagged_task = task(mark_flagged, name="mark-flagged-submissions", cache_policy=NO_CACHE)
write_reference_flags_task = task(write_reference_flags, name="write-reference-flags", cache_policy=NO_CACHE)


class ShardsThen:
    """Paper shards (`PaperShards`: the metrics behind an LLM) that run `after` once, in their own thread,
    as soon as they are done (or when `after()` is asked for first)."""

    def __init__(self, shards: PaperShards, after: Callable[[], Any]) -> None:
        self._shards, self._after = shards, after
        self._lock, self._ran, self._result = threading.Lock(), False, None

    @property
    def beside(self) -> bool:
        return self._shards.beside

    def take_ahead(self) -> None:
        self._shards.take_ahead()

    def __call__(self, metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 synopses: pl.DataFrame, negatives: pl.DataFrame | None, resources: Resources) -> FamilyResult:
        scored = self._shards(metrics, candidates, references, synopses, negatives, resources)
        self.after()
        return scored

    def after(self) -> Any:
        with self._lock:
            if not self._ran:
                self._result, self._ran = self._after(), True
            return self._result


def score_all_task_runs(cfg: Config, pipeline: str, inputs: Any, shards: list[ShardedLoglikelihood],
                        by_paper: PaperShards, llm_cache: Path | None
                        ) -> tuple[FamilyResult, LLMLog, dict[str, Any], pl.DataFrame | None]:
    """Every metric (`score_inputs_each_eval_lm`), the reference flags (Binoculars per human reference,
    which need none of the scores) and the injection track's reviews (`score_injected`): (scores, the
    LLM log, the flags' figures, the injected reviews' scores).

    Where the paper shards run beside GEM's shards (`[score] gpu_concurrency` >= 2), they end first on
    the demo's CPU (90 s against 105): the flags (about 8 s) and then the injection track follow them
    in their thread while GEM's shards go on, instead of after both with one core idle in between. The
    track's log-likelihoods come in small shards, so the slot GEM's shards free takes the rest of them.
    Inside that section every local-model job runs on its share of the cores (tasks/lm/local.py
    `sharing_cores`), so no value depends on timing."""
    log = LLMLog()

    def side_jobs() -> tuple[dict[str, Any], pl.DataFrame | None]:
        flags = write_reference_flags_task(cfg, pipeline, inputs.references)
        return flags, score_injected_task(cfg, pipeline, inputs, shards, llm_cache, log)
    then = ShardsThen(by_paper, side_jobs)
    # in the flow itself: the shard fan-outs it triggers are subflows of the stage's flow
    scored, log = score_inputs_each_eval_lm(cfg, pipeline, inputs, shards, llm_cache, then, log)
    flags, injected = then.after()     # already done beside the shards, else now
    return scored, log, flags, injected


__all__ = ["CONCURRENCY_LIMIT", "ModelSpec", "ShardRunner", "eval_lm_slots", "fan_out", "fan_out_metrics",
           "make_task_runner", "mark_flagged_task", "metric_shards", "read_inputs_task", "score_all_task_runs", "score_injected_task",
           "score_inputs_each_eval_lm", "score_shard_task", "sharded_loglikelihoods", "shards_details",
           "write_injection_task", "write_reference_flags_task", "write_scores_task"]
