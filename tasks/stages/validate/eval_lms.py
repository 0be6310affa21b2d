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

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import polars as pl

from tasks.core.config import Config
from tasks.lm import ModelSpec, eval_specs
from tasks.lm.local import sharing_cores
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
                          validate: Callable[..., ValidationResult], side_by_side: bool = False) -> ValidationResult:
    """`validate(cfg, reviews, resources, metrics, made=..., adversary_turn=...)` once per evaluation LM, merged;
    the runs share the perturbations the first one made.

    `side_by_side`: each later run starts, in a thread of its own, as soon as the first has made the
    perturbations, and scores them beside the first (their shards take the concurrency limit's slots as
    they come) instead of after it; meanwhile every local model takes half the cores (tasks/lm/local.py
    `sharing_cores`). The adversaries then run one at a time on every core, the first run's first: a
    search is a chain of small steps that one core would run alone while the other, its side done, sat
    idle. The cores are split from a fixed point to a fixed point (the perturbations made, the first
    adversary's turn, which waits for every later run's scoring), so no number depends on timing."""
    specs = eval_specs(cfg.score)
    runs = [(spec, metrics) for spec, metrics in zip(specs, metrics_per_eval_lm(cfg.validate.metrics, len(specs)),
                                                      strict=True) if metrics]

    def one(spec: ModelSpec, metrics: tuple[str, ...], made: dict[bool, Any], turn: Any = None) -> ValidationResult:
        return tag_eval_lm(validate(cfg, reviews, resources(spec), metrics, made=made, adversary_turn=turn))
    if not side_by_side or len(runs) < 2:
        made: dict[bool, Any] = {}
        return merge_results([one(spec, metrics, made) for spec, metrics in runs])
    with contextlib.ExitStack() as split, ThreadPoolExecutor(len(runs) - 1, thread_name_prefix="eval-lm") as pool:
        shared = MadeOnce(lambda: split.enter_context(sharing_cores(2)))
        scored = [threading.Event() for _ in runs[1:]]   # each later run has scored (or ended)
        done = [threading.Event() for _ in runs]          # each run's adversary is over (or the run ended)

        @contextlib.contextmanager
        def turn(k: int) -> Iterator[None]:
            if k == 0 and shared.ready.is_set():   # the later runs score first, then the split ends
                for event in scored:
                    event.wait()
                split.close()
            elif k > 0:
                scored[k - 1].set()
                done[k - 1].wait()
            try:
                yield
            finally:
                done[k].set()

        def later(k: int, spec: ModelSpec, metrics: tuple[str, ...]) -> ValidationResult | None:
            try:
                shared.ready.wait()
                return None if shared.given_up else one(spec, metrics, shared, lambda: turn(k))
            finally:
                scored[k - 1].set()
                done[k].set()
        others = [pool.submit(contextvars.copy_context().run, later, k, *run) for k, run in enumerate(runs) if k]
        try:
            first = one(*runs[0], shared, lambda: turn(0))
        except BaseException:
            shared.given_up = True
            raise
        finally:
            shared.ready.set()   # a first run that made no perturbation lets the others start now
            done[0].set()
        return merge_results([first, *(f.result() for f in others)])


class MadeOnce(dict):
    """The perturbations the first evaluation LM's run makes (`made`), for runs waiting on `ready`: set when
    the first run puts them, right after `on_ready()` (called in that run's thread)."""

    def __init__(self, on_ready: Callable[[], Any]) -> None:
        super().__init__()
        self.ready = threading.Event()
        self.given_up = False
        self._on_ready = on_ready

    def __setitem__(self, key: bool, value: Any) -> None:
        super().__setitem__(key, value)
        if not self.ready.is_set():
            self._on_ready()
            self.ready.set()
