"""How many papers a release needs to tell two models apart at a given gap (`grebench plan`).

The leaderboard's paired comparison (comparisons.py) tests the mean of the per-paper differences
between two models. Planning a release inverts it: for a true mean difference `gap` (in the
metric's units), the spread `sd` of the per-paper differences, a two-sided level `alpha` and a
wanted `power`, the papers needed are the smallest n at which the one-sample t-test on n paired
differences rejects with probability `power` (noncentral t distribution, scipy). The spread comes
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
from scipy import stats

from tasks.stages.validate.comparisons import boards

MIN_SHARED = 3
MAX_PAPERS = 10_000_000   # more papers than any venue has: a plan past it is no plan


class TooManyPapers(ValueError):
    """The gap is so small against the spread that no release could be large enough."""

PLAN = pl.Schema({"metric": pl.String, "eval_lm": pl.String, "pairs": pl.Int64, "sd_median": pl.Float64,
                  "sd_max": pl.Float64, "papers_median": pl.Int64, "papers_max": pl.Int64})


def paired_power(n: int, sd: float, gap: float, alpha: float) -> float:
    """The power of the two-sided one-sample t-test on n paired differences of mean `gap`."""
    df, shift = n - 1, gap / sd * math.sqrt(n)
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def papers_needed(sd: float, gap: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The smallest number of papers at which the paired test reaches `power` (module docstring)."""
    if not (sd > 0 and gap > 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ValueError("sd and gap must be positive, alpha and power between 0 and 1")
    with np.errstate(over="ignore"):
        normal = ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * sd / gap) ** 2
    if not math.isfinite(normal) or normal > MAX_PAPERS:
        raise TooManyPapers(f"a gap of {gap:g} with a spread of {sd:.4g} needs more than {MAX_PAPERS:,} papers: "
                            "plan for a larger --gap")
    n = max(2, math.floor(normal))
    while paired_power(n, sd, gap, alpha) < power:
        n += 1
    return n


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
