"""Validation reuses the log-likelihoods the score stage already has.

The score stage scores every human review as a candidate (leave-one-out) and every reference's
marginal; validation asks many of the same questions again for its unperturbed candidates. A
log-likelihood request's `key` hashes everything that changes its answer (the prompt version, the
evaluation LM, system, user and continuation: tasks/metrics/gem.py `request_key`), so a key found
in the score stage's finished result shards (score/results/*.parquet) is answered from there, and
only the rest goes on to validation's own shards. A different evaluation LM, metric, reference set,
synopsis or negative reference gives a different key, so it is scored afresh: reuse can never mix
answers of different questions.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tasks.core.schema import LOGLIK_RESULTS, with_truncated
from tasks.metrics.registry import Loglikelihood


def finished_results(folder: Path) -> pl.DataFrame:
    """Every LOGLIK_RESULTS row of the finished shards under `folder`/results (one row per key)."""
    paths = sorted((Path(folder) / "results").glob("shard-*.parquet"))
    if not paths:
        return pl.DataFrame(schema=LOGLIK_RESULTS)
    frame = pl.concat([with_truncated(pl.read_parquet(p)).select(list(LOGLIK_RESULTS)) for p in paths]).cast(
        dict(LOGLIK_RESULTS))
    return frame.unique("key", keep="first", maintain_order=True)


class ReusingLoglikelihood:
    """A `Loglikelihood` resource: keys already answered under `known` (the score stage's folder) are
    taken from there, the others asked of `inner`. `reused` and `asked` count the requests."""

    def __init__(self, inner: Loglikelihood, known: Path) -> None:
        self.inner, self.known = inner, Path(known)
        self.reused = self.asked = 0
        self._results: pl.DataFrame | None = None

    def results(self) -> pl.DataFrame:
        if self._results is None:
            self._results = finished_results(self.known)
        return self._results

    def __call__(self, requests: pl.DataFrame) -> pl.DataFrame:
        wanted = requests["key"].unique()
        hit = self.results().filter(pl.col("key").is_in(wanted.implode()))
        todo = requests.filter(~pl.col("key").is_in(hit["key"].implode()))
        self.reused += hit.height
        self.asked += todo["key"].n_unique()
        parts = [hit]
        if todo.height:
            parts.append(with_truncated(self.inner(todo)).select(list(LOGLIK_RESULTS)).cast(dict(LOGLIK_RESULTS)))
        return pl.concat(parts)
