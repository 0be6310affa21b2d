"""Statistics of the validation workflow (GEM paper section 4, Scoring Rules paper section 3).

Pure, NaN-aware functions on score arrays:

- `paired_test`: one metric under one perturbation strategy. Scores of the original and the
  perturbed candidate are paired per item; a pair with a NaN on either side is dropped and counted.
- `adjust_p_values` / `correct`: family-wise (Holm, Bonferroni) or false-discovery (BH) correction.
- `spearman`: agreement of metric scores with human quality ratings (or of two leaderboards).
- `mean_ci`: a leaderboard cell, the mean over papers with a 90% confidence interval.
- `validation_table`: `paired_test` over a long frame of pairs, one row per (metric, strategy).
- `smd_bootstrap_ci`: a seeded paired-bootstrap interval of the SMD, reported beside the normal one.
- `length_confound`: per metric, Spearman of the score with the candidate's length in words.

Verdicts. Each test ends as "pass", "fail" or "inconclusive". It is inconclusive when it could not
run (fewer than 2 complete pairs) or when it has fewer than `min_pairs` pairs: with a handful of
pairs a paired t-test on a deterministic perturbation is significant or not by accident, and the
normal interval of the SMD collapses to a point (r = +-1 at n = 2). `passed` is true for "pass",
false for "fail" and null for "inconclusive".

An expected gap (too few pairs, scores that do not vary) gives NaN and a `reason`, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

import numpy as np
import polars as pl
from scipy import stats

Kind = Literal["degradation", "manipulation"]
Correction = Literal["none", "holm", "bonferroni", "bh"]
ArrayLike = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class PairedTest:
    """One metric under one strategy. `smd` is (mean' - mean) / pooled sd; see `paired_test`."""

    kind: Kind
    n: int                  # pairs used
    n_dropped: int          # pairs dropped because one side was NaN
    mean_change: float      # mean of perturbed - original
    smd: float
    ci_low: float           # confidence interval of smd (95% by default)
    ci_high: float
    p_value: float          # one-sided paired t-test, direction set by `kind`
    p_adjusted: float       # p_value after correction (equal to p_value when uncorrected)
    passed: bool | None     # None when the verdict is "inconclusive"
    reason: str | None = None
    verdict: str = "inconclusive"   # pass / fail / inconclusive (see the module docstring)
    boot_low: float = math.nan      # paired-bootstrap interval of smd (percentile, seeded)
    boot_high: float = math.nan

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Correlation:
    n: int
    n_dropped: int
    rho: float
    p_value: float          # two-sided, from scipy.stats.spearmanr
    reason: str | None = None


@dataclass(frozen=True)
class MeanCI:
    n: int
    n_dropped: int
    mean: float
    ci_low: float
    ci_high: float
    reason: str | None = None


def _pairs(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray, int]:
    """Both arrays as float64 with every pair holding a NaN removed, and how many were removed."""
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired arrays differ in length: {x.size} vs {y.size}")
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep], y[keep], int(x.size - keep.sum())


NUMERIC_SPREAD = 1e-9   # a spread below this share of the means' scale is rounding, not variation


def smd(original: np.ndarray, perturbed: np.ndarray) -> float:
    """Standardized mean difference d = (mean(perturbed) - mean(original)) / s_pooled.

    s_pooled = sqrt((s^2 + s'^2) / 2) with sample standard deviations (ddof=1) of the two score
    sets. This is the form of the GEM paper (Algorithm 1, Cohen's d with the average variance), not
    the mean difference over the sd of the differences (d_z). NaN when the scores do not vary:
    exactly, or only by rounding (a spread below `NUMERIC_SPREAD` of the means' scale: six identical
    long reviews scoring -1e5 give a spread of 1e-11 from float sums, and a d of -3.7e15 that says
    nothing about the metric).
    """
    pooled = math.sqrt((np.var(original, ddof=1) + np.var(perturbed, ddof=1)) / 2)
    scale = max(abs(float(np.mean(original))), abs(float(np.mean(perturbed))))
    if pooled == 0 or not math.isfinite(pooled) or pooled <= NUMERIC_SPREAD * scale:
        return math.nan
    return float((perturbed.mean() - original.mean()) / pooled)


def smd_ci(d: float, n: int, r: float, confidence: float = 0.95) -> tuple[float, float]:
    """Normal-approximation interval of d for a paired (matched) design.

    The sampling variance used is (1/n + d^2 / (2n)) * 2(1 - r), r being the Pearson correlation of
    original and perturbed scores: the large-sample variance of d with an average-variance
    standardizer when the two score sets come from the same items (the matched-groups formula of
    Borenstein et al., Introduction to Meta-Analysis, 2009, chapter 4). Pairing shrinks the interval
    as r approaches 1; with r = 1 it collapses to d.
    """
    if not (math.isfinite(d) and math.isfinite(r)) or n < 2:
        return math.nan, math.nan
    variance = (1 / n + d * d / (2 * n)) * 2 * (1 - r)
    half = stats.norm.ppf(0.5 + confidence / 2) * math.sqrt(max(variance, 0.0))
    return d - half, d + half


def _one_sided_p(diff: np.ndarray, alternative: Literal["less", "greater"]) -> float:
    """Paired t-test p-value of mean(diff) < 0 ('less') or > 0 ('greater')."""
    if np.all(diff == diff[0]):
        # Zero spread: t is infinite (or undefined at 0). Decide by the sign of the constant change.
        moved = diff[0] < 0 if alternative == "less" else diff[0] > 0
        return 0.0 if moved else 1.0
    result = stats.ttest_rel(diff, np.zeros_like(diff), alternative=alternative)
    return float(result.pvalue)


def _verdict(kind: Kind, p: float, alpha: float) -> bool | None:
    if math.isnan(p):
        return None
    return p < alpha if kind == "degradation" else p >= alpha


def _judge(test: PairedTest, p: float, alpha: float, min_pairs: int) -> PairedTest:
    """`test` with p_adjusted = p and its verdict: inconclusive below `min_pairs` pairs or without a p-value."""
    passed = _verdict(test.kind, p, alpha)
    reason = test.reason
    if passed is not None and test.n < min_pairs:
        passed = None
        note = f"only {test.n} pair(s), fewer than min_pairs = {min_pairs}: inconclusive"
        reason = f"{reason}; {note}" if reason else note
    verdict = "inconclusive" if passed is None else "pass" if passed else "fail"
    return replace(test, p_adjusted=p, passed=passed, verdict=verdict, reason=reason)


def _smd_axis(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """`smd` along an axis (vectorized for scipy.stats.bootstrap); NaN where the scores do not vary."""
    pooled = np.sqrt((np.var(x, ddof=1, axis=axis) + np.var(y, ddof=1, axis=axis)) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (np.mean(y, axis=axis) - np.mean(x, axis=axis)) / pooled
    return np.where(pooled > 0, d, np.nan)


def smd_bootstrap_ci(original: np.ndarray, perturbed: np.ndarray, confidence: float = 0.95, *,
                     n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the SMD from a paired bootstrap (items resampled with both scores).

    Items are drawn with replacement (numpy's seeded generator), each keeping its pair of scores;
    resamples in which the scores do not vary give no SMD and are left out (scipy.stats.bootstrap
    would return a NaN interval for the whole set instead). NaN with fewer than 3 pairs or fewer than half the
    resamples usable, since the interval would then say nothing.
    """
    x = np.asarray(original, dtype=np.float64)
    y = np.asarray(perturbed, dtype=np.float64)
    if x.size < 3 or n_resamples < 1:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_resamples, x.size))
    values = _smd_axis(x[idx], y[idx], axis=-1)
    values = values[np.isfinite(values)]
    if values.size < n_resamples / 2:
        return math.nan, math.nan
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def paired_test(
    original: ArrayLike,
    perturbed: ArrayLike,
    kind: Kind,
    *,
    higher_is_better: bool = True,
    alpha: float = 0.05,
    confidence: float = 0.95,
    min_pairs: int = 2,
    n_resamples: int = 2000,
    seed: int = 0,
) -> PairedTest:
    """Compare scores of original and perturbed candidates, item by item.

    A degradation passes when the score gets significantly worse (one-sided paired t-test,
    p < alpha); a manipulation passes when the score does not get significantly better
    (p >= alpha for the test of an improvement). "Worse" is lower for a metric whose higher scores
    are better and higher otherwise. `smd` and `mean_change` keep their raw sign. Below
    `min_pairs` pairs the verdict is "inconclusive" (`passed` None) whatever the p-value; the
    bootstrap interval uses `n_resamples` resamples drawn with `seed`.
    """
    if kind not in ("degradation", "manipulation"):
        raise ValueError(f"kind must be 'degradation' or 'manipulation', got {kind!r}")
    x, y, dropped = _pairs(original, perturbed)
    n = int(x.size)
    if n < 2:
        return PairedTest(kind, n, dropped, float(np.mean(y - x)) if n else math.nan, math.nan, math.nan,
                          math.nan, math.nan, math.nan, None, f"only {n} complete pair(s); need at least 2",
                          "inconclusive")
    diff = y - x
    worse: Literal["less", "greater"] = "less" if higher_is_better else "greater"
    better: Literal["less", "greater"] = "greater" if higher_is_better else "less"
    p = _one_sided_p(diff, worse if kind == "degradation" else better)
    d = smd(x, y)
    reason = None
    if math.isnan(d):
        reason = "scores do not vary (or only by rounding); smd undefined"
        low = high = math.nan
    else:
        if np.all(diff == diff[0]):
            r = 1.0
        elif np.all(x == x[0]) or np.all(y == y[0]):
            r, reason = math.nan, "one side is constant; no interval for smd"
        else:
            r = float(np.corrcoef(x, y)[0, 1])
        low, high = smd_ci(d, n, r, confidence)
    boot = smd_bootstrap_ci(x, y, confidence, n_resamples=n_resamples, seed=seed) if not math.isnan(d) \
        else (math.nan, math.nan)
    test = PairedTest(kind, n, dropped, float(diff.mean()), d, low, high, p, p, None, reason,
                      boot_low=boot[0], boot_high=boot[1])
    return _judge(test, p, alpha, min_pairs)


def adjust_p_values(p_values: ArrayLike, method: Correction = "holm") -> np.ndarray:
    """Corrected p-values in the input order; NaNs stay NaN and do not count as tests.

    bonferroni: min(1, m p). holm: step-down, the i-th smallest p times (m - i + 1), made
    non-decreasing in rank order and capped at 1. bh: Benjamini-Hochberg through
    scipy.stats.false_discovery_control.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    valid = p[ok]
    m = valid.size
    if method == "none" or m == 0:
        return p.copy()
    if method == "bonferroni":
        adjusted = np.minimum(1.0, valid * m)
    elif method == "holm":
        order = np.argsort(valid, kind="stable")
        stepped = np.maximum.accumulate(valid[order] * (m - np.arange(m)))
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(1.0, stepped)
    elif method == "bh":
        adjusted = stats.false_discovery_control(valid, method="bh")
    else:
        raise ValueError(f"unknown correction {method!r} (none, holm, bonferroni, bh)")
    out[ok] = adjusted
    return out


def correct(tests: Sequence[PairedTest], method: Correction, alpha: float = 0.05,
            min_pairs: int = 2) -> list[PairedTest]:
    """The tests with `p_adjusted`, `passed` and `verdict` recomputed under a correction for their number.

    A correction makes a degradation harder to pass and a manipulation easier to pass, since both
    verdicts hinge on whether the change is significant. Tests below `min_pairs` stay inconclusive.
    """
    adjusted = adjust_p_values([t.p_value for t in tests], method)
    return [_judge(replace(t, reason=_base_reason(t.reason)), float(p), alpha, min_pairs)
            for t, p in zip(tests, adjusted, strict=True)]


def _base_reason(reason: str | None) -> str | None:
    """The reason without the note `_judge` adds, so that judging twice does not repeat it."""
    if reason is None:
        return None
    kept = [part for part in reason.split("; ") if "fewer than min_pairs" not in part]
    return "; ".join(kept) or None


def spearman(scores: ArrayLike, human: ArrayLike) -> Correlation:
    """Spearman's rho and its two-sided p-value between metric scores and human ratings.

    Items with a NaN on either side are dropped; fewer than 3 pairs or a constant side gives NaN.
    """
    x, y, dropped = _pairs(scores, human)
    n = int(x.size)
    if n < 3:
        return Correlation(n, dropped, math.nan, math.nan, f"only {n} complete pair(s); need at least 3")
    if np.all(x == x[0]) or np.all(y == y[0]):
        return Correlation(n, dropped, math.nan, math.nan, "one side is constant; rho undefined")
    result = stats.spearmanr(x, y)
    return Correlation(n, dropped, float(result.statistic), float(result.pvalue))


def mean_ci(
    values: ArrayLike,
    confidence: float = 0.90,
    method: Literal["t", "bootstrap"] = "t",
    *,
    n_resamples: int = 9999,
    seed: int = 0,
) -> MeanCI:
    """Mean over papers with a confidence interval (90% by default, as on the GEM leaderboard).

    t: mean +- t_{n-1} quantile * standard error (scipy.stats.t.interval). bootstrap: BCa interval
    of the mean from scipy.stats.bootstrap with `n_resamples` resamples and a seeded generator.
    NaN values are dropped and counted; fewer than 2 values gives a NaN interval.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    keep = ~np.isnan(v)
    v, dropped = v[keep], int(v.size - keep.sum())
    n = int(v.size)
    if n < 2:
        mean = float(v[0]) if n else math.nan
        return MeanCI(n, dropped, mean, math.nan, math.nan, f"only {n} value(s); need at least 2")
    mean = float(v.mean())
    if np.all(v == v[0]):
        return MeanCI(n, dropped, mean, mean, mean, "values are constant")
    if method == "t":
        low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=stats.sem(v))
    elif method == "bootstrap":
        result = stats.bootstrap((v,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                                 method="BCa", rng=np.random.default_rng(seed))
        low, high = result.confidence_interval
    else:
        raise ValueError(f"unknown interval method {method!r} (t, bootstrap)")
    return MeanCI(n, dropped, mean, float(low), float(high))


VALIDATION_COLUMNS = ("metric", "strategy", "kind", "level", "n", "n_dropped", "mean_change", "smd", "ci_low",
                      "ci_high", "p_value", "p_adjusted", "passed", "reason", "verdict", "boot_low", "boot_high")


def validation_table(
    pairs: pl.DataFrame,
    *,
    correction: Correction = "none",
    family: Sequence[str] = ("metric",),
    alpha: float = 0.05,
    confidence: float = 0.95,
    min_pairs: int = 2,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pl.DataFrame:
    """One `paired_test` per (metric, strategy) of a long frame of score pairs.

    `pairs` needs columns metric, strategy, kind, original, perturbed and may carry
    higher_is_better (default true) and level (raw / judgments: one test per level, else null). The correction runs within each group of `family` columns
    (by default the strategies one metric was tested on; an empty `family` corrects over all tests,
    the whole table). `min_pairs`, `n_resamples` and `seed` go to `paired_test`.
    """
    needed = {"metric", "strategy", "kind", "original", "perturbed"}
    missing = needed - set(pairs.columns)
    if missing:
        raise ValueError(f"pairs frame lacks columns {sorted(missing)}")
    if "higher_is_better" not in pairs.columns:
        pairs = pairs.with_columns(higher_is_better=pl.lit(True))
    if "level" not in pairs.columns:
        pairs = pairs.with_columns(level=pl.lit(None, pl.String))
    rows: list[dict[str, object]] = []
    tests: list[PairedTest] = []
    for (metric, strategy, level), group in pairs.group_by(["metric", "strategy", "level"], maintain_order=True):
        kinds = group["kind"].unique().to_list()
        better = group["higher_is_better"].unique().to_list()
        if len(kinds) != 1 or len(better) != 1:
            raise ValueError(f"{metric}/{strategy}: kind and higher_is_better must be constant per group")
        test = paired_test(group["original"].to_numpy(), group["perturbed"].to_numpy(), kinds[0],
                           higher_is_better=bool(better[0]), alpha=alpha, confidence=confidence,
                           min_pairs=min_pairs, n_resamples=n_resamples, seed=seed)
        rows.append({"metric": metric, "strategy": strategy, "kind": kinds[0], "level": level})
        tests.append(test)
    if not rows:
        return pl.DataFrame(schema=_VALIDATION_SCHEMA)
    unknown = set(family) - {"metric", "strategy", "kind", "level"}
    if unknown:
        raise ValueError(f"family columns must be among metric, strategy, kind, level; got {sorted(unknown)}")
    keys = [tuple(r[c] for c in family) for r in rows]
    for key in dict.fromkeys(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        for i, t in zip(idx, correct([tests[i] for i in idx], correction, alpha, min_pairs),
                            strict=True):
            tests[i] = t
    records = [{**row, **t.as_dict()} for row, t in zip(rows, tests, strict=True)]
    return pl.DataFrame(records, schema=_VALIDATION_SCHEMA).select(VALIDATION_COLUMNS)


_VALIDATION_SCHEMA = pl.Schema({
    "metric": pl.String, "strategy": pl.String, "kind": pl.String, "level": pl.String, "n": pl.Int64, "n_dropped": pl.Int64,
    "mean_change": pl.Float64, "smd": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "p_value": pl.Float64, "p_adjusted": pl.Float64, "passed": pl.Boolean, "reason": pl.String,
    "verdict": pl.String, "boot_low": pl.Float64, "boot_high": pl.Float64,
})


LENGTH_CONFOUND = pl.Schema({"metric": pl.String, "n": pl.Int64, "n_dropped": pl.Int64, "rho": pl.Float64,
                             "p_value": pl.Float64, "mean_words": pl.Float64, "reason": pl.String})


def word_count(text: str | None) -> float:
    """Words (whitespace-separated tokens) of a text; NaN when it is missing."""
    return float(len(text.split())) if isinstance(text, str) else math.nan


def length_confound(scores: pl.DataFrame, lengths: pl.DataFrame) -> pl.DataFrame:
    """Per metric, Spearman's rho of the candidate score with the candidate's length in words.

    `scores` has metric, candidate, score; `lengths` has candidate, words. A metric that mostly
    tracks length (rho near +-1) can be inflated by padding whatever the content; read it beside
    the elongation and padding rows of the validation table.
    """
    joined = scores.select("metric", "candidate", "score").join(lengths.select("candidate", "words"),
                                                                 on="candidate", how="left")
    rows = []
    for metric, part in joined.group_by("metric", maintain_order=True):
        words = part["words"].fill_null(math.nan).to_numpy()
        c = spearman(part["score"].fill_null(math.nan).to_numpy(), words)
        rows.append({"metric": metric[0], "n": c.n, "n_dropped": c.n_dropped, "rho": c.rho, "p_value": c.p_value,
                     "mean_words": float(np.nanmean(words)) if np.isfinite(words).any() else math.nan,
                     "reason": c.reason})
    return pl.DataFrame(rows, schema=LENGTH_CONFOUND)
