"""How many papers a release needs to tell two models apart at a given gap (`grebench plan`).

The leaderboard's paired comparison (comparisons.py) tests the mean of the per-paper differences
between two models. Planning a release inverts it: for a true mean difference `gap` (in the
metric's units), the spread `sd` of the per-paper differences, a two-sided level `alpha` and a
wanted `power`, the papers needed are the smallest n at which the one-sample t-test on n paired
differences rejects with probability `power` (the noncentral t's tail, integrated so it is never NaN). The spread comes
from the last release's scores: per board (metric, evaluation LM), the standard deviation of the
per-paper differences of every pair of models scored on at least 3 common papers; the plan gives
the papers for the median pair and for the most spread pair. Assumptions: the differences are
roughly normal and independent across papers, and the next release's papers and models spread
like the last one's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
from scipy import integrate, stats

from tasks.stages.validate.comparisons import boards

MIN_SHARED = 3
MAX_PAPERS = 10_000_000   # more papers than any venue has: a plan past it is no plan


class TooManyPapers(ValueError):
    """The gap is so small against the spread that no release could be large enough."""

PLAN = pl.Schema({"metric": pl.String, "eval_lm": pl.String, "pairs": pl.Int64, "sd_median": pl.Float64,
                  "sd_max": pl.Float64, "papers_median": pl.Int64, "papers_max": pl.Int64})


def paired_power(n: int, sd: float, gap: float, alpha: float) -> float:
    """The power of the two-sided one-sample t-test on n paired differences of mean `gap`.

    The noncentral t's tail as an integral over the chi-square of the sample variance: with
    c the critical value, d = n - 1 and delta = gap / sd * sqrt(n), power = E[Phi(delta - c s) +
    Phi(-delta - c s)] with s = sqrt(V / d), V ~ chi2(d), integrated over V's quantiles. Every
    term lies in [0, 1], so the result is a number in [0, 1] for any n, where scipy's `nct`
    returns NaN for small n and a large shift."""
    df, shift = n - 1, gap / sd * math.sqrt(n)
    critical = float(stats.t.ppf(1 - alpha / 2, df))

    def at(u: float) -> float:
        spread = math.sqrt(float(stats.chi2.ppf(u, df)) / df)
        return float(stats.norm.cdf(shift - critical * spread) + stats.norm.cdf(-shift - critical * spread))

    value, _ = integrate.quad(at, 0.0, 1.0, limit=200, epsabs=1e-9)
    return min(1.0, max(0.0, value))


def papers_needed(sd: float, gap: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The smallest number of papers at which the paired test reaches `power` (module docstring).

    The power grows with n, so the answer is found by doubling n from 2 and then bisecting: more
    papers for a higher power, never fewer for a wider spread."""
    if not (sd > 0 and gap > 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ValueError("sd and gap must be positive, alpha and power between 0 and 1")
    too_many = TooManyPapers(f"a gap of {gap:g} with a spread of {sd:.4g} needs more than {MAX_PAPERS:,} "
                             "papers: plan for a larger --gap")
    with np.errstate(over="ignore"):
        normal = (max(0.0, stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * sd / gap) ** 2
    if not math.isfinite(normal) or normal > MAX_PAPERS:   # a lower bound already past the end
        raise too_many
    low, high = 1, 2                  # power(low) < power <= power(high) once the doubling stops
    while paired_power(high, sd, gap, alpha) < power:
        if high >= MAX_PAPERS:
            raise too_many
        low, high = high, min(2 * high, MAX_PAPERS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if paired_power(middle, sd, gap, alpha) >= power else (middle, high)
    return high


def pair_spreads(scores: np.ndarray) -> list[float]:
    """Per pair of rows (models) of a models x papers matrix: the sd of their per-paper differences."""
    spreads = []
    for a, b in itertools.combinations(range(scores.shape[0]), 2):
        diff = scores[a] - scores[b]
        diff = diff[~np.isnan(diff)]
        if diff.size >= MIN_SHARED and float(diff.std(ddof=1)) > 0:
            spreads.append(float(diff.std(ddof=1)))
    return spreads


def plan(per_paper: pl.DataFrame, gap: float, alpha: float = 0.05, power: float = 0.8) -> pl.DataFrame:
    """PLAN rows: per board, the spread of paired differences and the papers needed at `gap`."""
    rows = []
    for board in boards(per_paper):
        spreads = pair_spreads(board.scores)
        if not spreads:
            continue
        median, widest = float(np.median(spreads)), max(spreads)
        rows.append({"metric": board.metric, "eval_lm": board.eval_lm, "pairs": len(spreads), "sd_median": median,
                     "sd_max": widest, "papers_median": papers_needed(median, gap, alpha, power),
                     "papers_max": papers_needed(widest, gap, alpha, power)})
    return pl.DataFrame(rows, schema=PLAN)
