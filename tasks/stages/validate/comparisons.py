"""Paired comparisons of the leaderboard's models and rank intervals, from one bootstrap over papers.

Two models scored on the same papers are compared paper by paper: the difference of their scores
on each paper they share (a model's score on a paper is the mean over its candidates there, as on
the leaderboard; papers the contamination guard kept from either model are left out). Per board
(metric, evaluation LM) and pair:

- `mean_diff`: the mean paired difference, model_a - model_b, in the metric's units;
- `ci_low`, `ci_high`: its percentile bootstrap interval (papers resampled with replacement);
- `p_value`: a two-sided sign-flip permutation test of the mean difference, exact (every sign
  pattern) for up to 16 shared papers, the one-sample t-test on the differences beyond (its
  large-sample equivalent; a Monte Carlo permutation p-value would floor at 1 / resamples, which a
  correction over many pairs multiplies past any alpha), then `p_adjusted` corrected across the
  board's pairs (Holm by default, or Benjamini-Hochberg);
- `significant`: p_adjusted < alpha; `better`: the model the metric prefers when significant.

Rank intervals come from the same resampled papers: in each bootstrap replicate every model's
mean over the drawn papers it was scored on gives a ranking (1 = best, ties share the better
rank); a model's rank interval is the central `confidence` share of its ranks. Two neighbours on
the board are tied when their paired difference is not significant.

An expected gap (fewer than 2 shared papers) is NaN with a reason, never an error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import special

from tasks.metrics import higher_is_better
from tasks.stages.validate.stats import adjust_p_values

EXACT_UP_TO = 16                  # papers up to which the sign-flip test enumerates every sign pattern
COMPARISONS = pl.Schema({
    "metric": pl.String, "eval_lm": pl.String, "model_a": pl.String, "model_b": pl.String,
    "n_papers": pl.Int64, "mean_diff": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "confidence": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64, "correction": pl.String,
    "significant": pl.Boolean, "better": pl.String, "reason": pl.String,
})
RANKS = pl.Schema({"metric": pl.String, "eval_lm": pl.String, "model": pl.String,
                   "rank_low": pl.Int64, "rank_high": pl.Int64})


@dataclass(frozen=True)
class CompareSettings:
    confidence: float = 0.90      # of the bootstrap intervals (mean difference, rank)
    alpha: float = 0.05           # a corrected p-value below it makes a difference significant
    correction: str = "holm"      # across the pairs of one board: holm, bh, bonferroni or none
    resamples: int = 2000         # bootstrap replicates over papers
    seed: int = 0


@dataclass(frozen=True)
class Board:
    """One (metric, evaluation LM): models x papers, NaN where a model has no score on a paper."""

    metric: str
    eval_lm: str
    models: list[str]
    papers: list[str]
    scores: np.ndarray            # models x papers

    @property
    def present(self) -> np.ndarray:
        return ~np.isnan(self.scores)


def boards(per_paper: pl.DataFrame) -> list[Board]:
    """Per (metric, eval_lm) the score matrix of a `tasks.stages.validate.leaderboard.per_paper` frame."""
    out = []
    for (metric, lm), group in per_paper.sort("metric", "eval_lm").group_by("metric", "eval_lm", maintain_order=True):
        wide = group.pivot(on="paper_id", index="model", values="score", aggregate_function="first").sort("model")
        papers = sorted(c for c in wide.columns if c != "model")
        matrix = wide.select(papers).to_numpy().astype(np.float64) if papers else np.empty((wide.height, 0))
        out.append(Board(metric, lm, wide["model"].to_list(), papers, matrix))
    return out


def resample_counts(n_papers: int, resamples: int, seed: int) -> np.ndarray:
    """resamples x papers: how often each paper is drawn in each bootstrap replicate."""
    rng = np.random.default_rng(seed)
    if n_papers == 0:
        return np.zeros((resamples, 0))
    return rng.multinomial(n_papers, np.full(n_papers, 1.0 / n_papers), size=resamples).astype(np.float64)


def _weighted_means(counts: np.ndarray, values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """replicates x rows: the mean of each row over the drawn papers where it is present."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ np.where(present, values, 0.0).T) / (counts @ present.T.astype(np.float64))


def rank_intervals(board: Board, counts: np.ndarray, up: bool, confidence: float) -> list[dict[str, object]]:
    """Per model with at least one score: the central `confidence` interval of its bootstrap ranks."""
    scored = board.present.any(axis=1)
    if not scored.any():
        return []
    sign = 1.0 if up else -1.0
    means = sign * _weighted_means(counts, board.scores[scored], board.present[scored])
    means = np.where(np.isnan(means), -np.inf, means)      # a model with no drawn paper ranks last
    ranks = 1 + (means[:, None, :] > means[:, :, None]).sum(axis=2)   # replicates x models
    tail = (1.0 - confidence) / 2.0
    low = np.quantile(ranks, tail, axis=0, method="lower")
    high = np.quantile(ranks, 1.0 - tail, axis=0, method="higher")
    models = [m for m, keep in zip(board.models, scored, strict=True) if keep]
    return [{"metric": board.metric, "eval_lm": board.eval_lm, "model": m, "rank_low": int(lo), "rank_high": int(hi)}
            for m, lo, hi in zip(models, low, high, strict=True)]


def sign_flip_p(diff: np.ndarray) -> float:
    """Two-sided p-value of mean(diff) = 0: the exact sign-flip permutation test (all 2^n sign
    patterns) for up to EXACT_UP_TO papers, the one-sample t-test, its large-sample equivalent, beyond;
    differences that are all equal and not zero give the exact test's 2 / 2^n."""
    n = diff.size
    if not np.any(diff):
        return 1.0
    if n <= EXACT_UP_TO:
        signs = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0
        observed = abs(float(diff.sum()))
        flipped = np.abs(signs @ diff)
        return float(np.mean(flipped >= observed - 1e-9 * max(1.0, observed)))
    if np.all(diff == diff[0]):
        return float(2.0 ** (1 - n))
    t = float(diff.mean()) / (float(diff.std(ddof=1)) / math.sqrt(n))
    return float(min(1.0, 2.0 * special.stdtr(n - 1, -abs(t))))   # scipy.stats.ttest_1samp, without its overhead


def compare_pair(board: Board, a: int, b: int, counts: np.ndarray, settings: CompareSettings) -> dict[str, object]:
    """One pair of models of a board, before the correction across pairs."""
    shared = board.present[a] & board.present[b]
    diff = (board.scores[a] - board.scores[b])[shared]
    row: dict[str, object] = {"metric": board.metric, "eval_lm": board.eval_lm, "model_a": board.models[a],
                              "model_b": board.models[b], "n_papers": int(shared.sum()),
                              "confidence": settings.confidence, "correction": settings.correction}
    if diff.size < 2:
        return {**row, "mean_diff": float(diff.mean()) if diff.size else math.nan, "ci_low": math.nan,
                "ci_high": math.nan, "p_value": math.nan,
                "reason": f"only {diff.size} shared paper(s); need at least 2"}
    replicate = _weighted_means(counts, np.where(shared, board.scores[a] - board.scores[b], 0.0)[None, :],
                                shared[None, :])[:, 0]
    replicate = replicate[~np.isnan(replicate)]
    tail = (1.0 - settings.confidence) / 2.0
    low, high = np.quantile(replicate, [tail, 1.0 - tail]) if replicate.size else (math.nan, math.nan)
    reason = "identical scores on every shared paper" if not np.any(diff) else None
    return {**row, "mean_diff": float(diff.mean()), "ci_low": float(low), "ci_high": float(high),
            "p_value": sign_flip_p(diff), "reason": reason}


def compare_board(board: Board, settings: CompareSettings, order: Sequence[str] | None = None
                  ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(pair rows, rank rows) of one board; pairs are ordered as `order` (the board's ranking) gives."""
    up = higher_is_better([board.metric])[board.metric]
    counts = resample_counts(len(board.papers), settings.resamples, settings.seed)
    position = {m: k for k, m in enumerate(order or board.models)}
    index = sorted(range(len(board.models)), key=lambda k: (position.get(board.models[k], len(position)),
                                                            board.models[k]))
    pairs = [compare_pair(board, a, b, counts, settings) for a, b in itertools.combinations(index, 2)]
    adjusted = adjust_p_values([float(p["p_value"]) for p in pairs], settings.correction)  # type: ignore[arg-type]
    for pair, p in zip(pairs, adjusted, strict=True):
        pair["p_adjusted"] = float(p)
        pair["significant"] = None if math.isnan(p) else bool(p < settings.alpha)
        diff = float(pair["mean_diff"])  # type: ignore[arg-type]
        pair["better"] = None if not pair["significant"] else (
            pair["model_a"] if (diff > 0) == up else pair["model_b"])
    return pairs, rank_intervals(board, counts, up, settings.confidence)


def compare(per_paper: pl.DataFrame, settings: CompareSettings,
            ranking: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(COMPARISONS, RANKS) over every board of a per-paper frame. `ranking` (metric, eval_lm, model,
    rank) orders each pair as the leaderboard does: model_a is the better-ranked model."""
    orders: dict[tuple[str, str], list[str]] = {}
    if ranking is not None and ranking.height:
        for (metric, lm), group in ranking.sort("rank", "model", nulls_last=True).group_by(
                "metric", "eval_lm", maintain_order=True):
            orders[(metric, lm)] = group["model"].to_list()
    pairs: list[dict[str, object]] = []
    ranks: list[dict[str, object]] = []
    for board in boards(per_paper):
        p, r = compare_board(board, settings, orders.get((board.metric, board.eval_lm)))
        pairs += p
        ranks += r
    return (pl.DataFrame(pairs, schema=COMPARISONS) if pairs else pl.DataFrame(schema=COMPARISONS),
            pl.DataFrame(ranks, schema=RANKS) if ranks else pl.DataFrame(schema=RANKS))


def with_ranks_and_ties(board: pl.DataFrame, comparisons: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """The leaderboard with `rank_low`, `rank_high` and `tied_with`: the neighbours (the next model up
    and down the board) whose paired difference from this model is not significant."""
    out = board.join(ranks, on=["metric", "eval_lm", "model"], how="left")
    tied: dict[tuple[str, str, str], list[str]] = {}
    not_significant = {(r["metric"], r["eval_lm"], frozenset((r["model_a"], r["model_b"])))
                       for r in comparisons.iter_rows(named=True) if r["significant"] is False}
    for (metric, lm), group in out.sort("rank", "model", nulls_last=True).group_by("metric", "eval_lm",
                                                                                  maintain_order=True):
        models = group.filter(pl.col("rank").is_not_null())["model"].to_list()
        for above, below in itertools.pairwise(models):
            if (metric, lm, frozenset((above, below))) in not_significant:
                tied.setdefault((metric, lm, above), []).append(below)
                tied.setdefault((metric, lm, below), []).append(above)
    column = [tied.get((m, lm, model), []) for m, lm, model in out.select("metric", "eval_lm", "model").iter_rows()]
    return out.with_columns(pl.Series("tied_with", column, dtype=pl.List(pl.String)))
