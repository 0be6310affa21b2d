"""Several evaluation LMs in one run (GEM section 5: do the boards of two evaluation LMs agree?).

`[score] eval_lms` lists them (a model name, or a table with eval_lm / eval_lm_cuda / dtype /
quantization); left empty, the single `[score] eval_lm` is a one-element list. The metrics that
read an evaluation LM (`Need.reads_eval_lm`) are scored once per evaluation LM; the others (BLEU,
ROUGE-L, BERTScore, judges) once, with the first. Every score row carries its `eval_lm` (the
resolved spec's key), so the leaderboard has one board per evaluation LM and
`tasks.stages.validate.leaderboard.agreement` compares them.

Log-likelihood shards of every evaluation LM live in the same requests/ and results/ folders
without colliding: a request key hashes the evaluation LM's key (tasks/metrics/gem.py
`request_key`), and a shard's name hashes its keys, so each evaluation LM has its own shards and a
finished shard of one is never taken for another's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import polars as pl

from tasks.lm import ModelSpec
from tasks.metrics import Resources, get
from tasks.metrics.registry import FamilyResult, merge_results, score_with_tables

Out = TypeVar("Out")


def eval_lm_metrics(names: Sequence[str]) -> tuple[str, ...]:
    """The metrics among `names` that read an evaluation LM (scored once per evaluation LM)."""
    return tuple(m.name for m in get(list(dict.fromkeys(names))) if m.needs.reads_eval_lm)


def metrics_per_eval_lm(names: Sequence[str], n_lms: int) -> list[tuple[str, ...]]:
    """What each evaluation LM scores: every metric with the first, the evaluation-LM metrics with the rest."""
    return [tuple(dict.fromkeys(names)) if i == 0 else eval_lm_metrics(names) for i in range(n_lms)]


def score_each_eval_lm(names: Sequence[str], specs: Sequence[ModelSpec], resources: Callable[[ModelSpec], Resources],
                       candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                       negatives: pl.DataFrame | None = None, side_by_side: bool = False) -> FamilyResult:
    """SCORES rows and side tables of `names` under every evaluation LM in `specs`; `resources(spec)` builds
    one evaluation LM's Resources (the score stage: over its shards). `side_by_side`: the evaluation LMs
    score at once, each in its own thread (their shards take the concurrency limit's slots as they come),
    so the later ones' work fills the cores the first one leaves idle at its end, instead of following it."""
    runs = [(spec, metrics) for spec, metrics in zip(specs, metrics_per_eval_lm(names, len(specs)), strict=True)
            if metrics]

    def score(spec: ModelSpec, metrics: tuple[str, ...]) -> FamilyResult:
        return score_with_tables(metrics, candidates, references, synopses, resources(spec), negatives)
    if not side_by_side or len(runs) < 2:
        return merge_results([score(*run) for run in runs])
    return merge_results(side_by_side_runs(score, runs))


def side_by_side_runs(run: Callable[..., Out], arguments: Sequence[tuple]) -> list[Out]:
    """`run(*args)` for each of `arguments` at once, the first in this thread and each other in its own (in
    this thread's context: a Prefect flow stays their subflows' parent), results in order. The local models
    take half the cores throughout (tasks/lm/local.py `sharing_cores`), as they do in a run's paper shards
    beside its other families, so no number depends on which run happens to be going at a moment."""
    from tasks.lm.local import sharing_cores

    with sharing_cores(2), ThreadPoolExecutor(len(arguments) - 1, thread_name_prefix="eval-lm") as pool:
        later = [pool.submit(contextvars.copy_context().run, run, *args) for args in arguments[1:]]
        first = run(*arguments[0])
        return [first, *(f.result() for f in later)]
