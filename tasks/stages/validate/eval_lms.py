"""Validation under each evaluation LM of `[score] eval_lms` (tasks/scoring/eval_lms.py).

The workflow runs once per evaluation LM: every metric with the first, then only the metrics that
read an evaluation LM (GEM, the f-MI cells, the logit oracle) with each further one, so the
validation table has one row per (metric, strategy, level, eval_lm). The perturbed candidates are
made once, by the first run, and every later run tests the same texts (`made`: no rewrite or
preprocessing is asked again, not even one that failed, which the LLM cache does not keep), so
`perturbations` and `rejects` come from the first run. `pairs`, `adversary` and
`length_confound` get an `eval_lm` column (the evaluation LM behind each metric's scores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.lm import ModelSpec, eval_specs
from tasks.metrics import Resources
from tasks.scoring.eval_lms import metrics_per_eval_lm
from tasks.stages.validate.workflow import ValidationResult


def tag_eval_lm(result: ValidationResult) -> ValidationResult:
    """`result` with an `eval_lm` column on pairs, adversary and length_confound (from its scores)."""
    lms = result.scores.group_by("metric").agg(pl.col("eval_lm").drop_nulls().first())

    def tag(frame: pl.DataFrame) -> pl.DataFrame:
        if "eval_lm" in frame.columns or "metric" not in frame.columns:
            return frame
        return frame.join(lms, on="metric", how="left", maintain_order="left")
    return replace(result, pairs=tag(result.pairs), adversary=tag(result.adversary),
                   length_confound=tag(result.length_confound))


def merge_results(results: list[ValidationResult]) -> ValidationResult:
    """One result from the runs of several evaluation LMs (each already `tag_eval_lm`-ed), first run first."""
    first = results[0]
    if len(results) == 1:
        return first

    def stack(name: str) -> pl.DataFrame:
        return pl.concat([getattr(r, name) for r in results], how="diagonal_relaxed")
    inflation = dict(first.stats.get("adversary_largest_inflation") or {})
    for r in results[1:]:
        lm = r.validation["eval_lm"].drop_nulls().first() if r.validation.height else None
        inflation |= {f"{m}@{lm}": v for m, v in (r.stats.get("adversary_largest_inflation") or {}).items()}
    stats = {**first.stats, "eval_lms": [r.validation["eval_lm"].drop_nulls().first() for r in results
                                         if r.validation.height]}
    if inflation:
        stats["adversary_largest_inflation"] = inflation
    return replace(first, validation=stack("validation"), human_correlation=stack("human_correlation"),
                   scores=stack("scores"), pairs=stack("pairs"), adversary=stack("adversary"),
                   length_confound=stack("length_confound"), stats=stats)


def validate_each_eval_lm(cfg: Config, reviews: pl.DataFrame, resources: Callable[[ModelSpec], Resources],
                          validate: Callable[..., ValidationResult]) -> ValidationResult:
    """`validate(cfg, reviews, resources, metrics, made=...)` once per evaluation LM, merged; the runs share
    the perturbations the first one made."""
    specs = eval_specs(cfg.score)
    made: dict[bool, Any] = {}
    results = [tag_eval_lm(validate(cfg, reviews, resources(spec), metrics, made=made))
               for spec, metrics in zip(specs, metrics_per_eval_lm(cfg.validate.metrics, len(specs)), strict=True)
               if metrics]
    return merge_results(results)
