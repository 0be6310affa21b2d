"""Validation statistics against hand-worked cases and scipy reference values."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from tasks.stages.validate.stats import (
    adjust_p_values,
    correct,
    mean_ci,
    paired_test,
    smd,
    smd_ci,
    spearman,
    validation_table,
)

ORIGINAL = [1.0, 2.0, 3.0, 4.0]
PERTURBED = [0.0, 1.0, 3.0, 2.0]   # changes -1, -1, 0, -2


def test_smd_and_interval_by_hand():
    # means 2.5 and 1.5, both sample variances 5/3, so s_pooled = sqrt(5/3) and d = -1 / sqrt(5/3)
    d = smd(np.array(ORIGINAL), np.array(PERTURBED))
    assert d == pytest.approx(-1 / math.sqrt(5 / 3))
    # Pearson r = (4/3) / (5/3) = 0.8; var(d) = (1/4 + d^2/8) * 2 * (1 - 0.8) = (0.25 + 0.075) * 0.4
    half = 1.959963984540054 * math.sqrt(0.13)
    low, high = smd_ci(d, 4, 0.8)
    assert (low, high) == pytest.approx((d - half, d + half))
    assert (low, high) == pytest.approx((-1.481272, -0.067922), abs=1e-6)


def test_degradation_one_sided_p_matches_scipy():
    result = paired_test(ORIGINAL, PERTURBED, "degradation")
    # mean change -1, sd of changes sqrt(2/3): t = -1 / (sqrt(2/3) / 2) with 3 degrees of freedom
    t = -1 / (math.sqrt(2 / 3) / 2)
    assert result.p_value == pytest.approx(stats.t.cdf(t, 3))
    assert result.p_value == pytest.approx(stats.ttest_rel(PERTURBED, ORIGINAL, alternative="less").pvalue)
    assert result.p_value == pytest.approx(0.045861, abs=1e-6)
    assert (result.n, result.n_dropped, result.mean_change) == (4, 0, -1.0)
    assert result.smd == pytest.approx(-0.774597, abs=1e-6)
    assert result.ci_low == pytest.approx(-1.481272, abs=1e-6)
    assert result.passed is True                 # the score fell significantly
    assert paired_test(ORIGINAL, PERTURBED, "degradation", alpha=0.01).passed is False


def test_manipulation_tests_the_other_direction():
    fell = paired_test(ORIGINAL, PERTURBED, "manipulation")
    assert fell.p_value == pytest.approx(stats.ttest_rel(PERTURBED, ORIGINAL, alternative="greater").pvalue)
    assert fell.p_value == pytest.approx(1 - 0.045861, abs=1e-6)
    assert fell.passed is True                   # no significant rise
    rose = paired_test(PERTURBED, ORIGINAL, "manipulation")
    assert rose.p_value == pytest.approx(0.045861, abs=1e-6)
    assert rose.smd == pytest.approx(0.774597, abs=1e-6)
    assert rose.passed is False                  # the score rose significantly
    assert paired_test(PERTURBED, ORIGINAL, "degradation").passed is False


def test_lower_is_better_flips_the_test_not_the_sign():
    result = paired_test(PERTURBED, ORIGINAL, "degradation", higher_is_better=False)
    assert result.smd > 0 and result.mean_change == 1.0
    assert result.p_value == pytest.approx(0.045861, abs=1e-6)
    assert result.passed is True


def test_against_scipy_on_random_data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=50)
    y = x + rng.normal(-0.3, 0.5, size=50)
    result = paired_test(x, y, "degradation")
    assert result.p_value == pytest.approx(stats.ttest_rel(y, x, alternative="less").pvalue)
    pooled = math.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2)
    assert result.smd == pytest.approx((y.mean() - x.mean()) / pooled)
    assert result.ci_low < result.smd < result.ci_high


def test_nan_pairs_are_dropped_and_counted():
    x = [1.0, np.nan, 2.0, 3.0, 4.0, 5.0]
    y = [0.0, 1.0, 1.0, 3.0, 2.0, np.nan]
    result = paired_test(x, y, "degradation")
    clean = paired_test([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 3.0, 2.0], "degradation")
    assert (result.n, result.n_dropped) == (4, 2)
    assert result.p_value == clean.p_value and result.smd == clean.smd


@pytest.mark.parametrize("x, y, n", [([], [], 0), ([1.0], [2.0], 1), ([1.0, np.nan], [np.nan, 2.0], 0)])
def test_too_few_pairs_give_nan_with_reason(x, y, n):
    result = paired_test(x, y, "degradation")
    assert result.n == n and math.isnan(result.smd) and math.isnan(result.p_value)
    assert result.passed is None and "need at least 2" in result.reason


def test_constant_change_and_constant_scores():
    shifted = paired_test([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], "degradation")
    assert shifted.p_value == 0.0 and shifted.passed is True
    assert shifted.ci_low == shifted.ci_high == pytest.approx(shifted.smd)   # r = 1
    unchanged = paired_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "manipulation")
    assert unchanged.p_value == 1.0 and unchanged.passed is True and unchanged.smd == 0.0
    flat = paired_test([2.0, 2.0, 2.0], [2.0, 2.0, 2.0], "degradation")
    assert math.isnan(flat.smd) and flat.passed is False and "do not vary" in flat.reason


def test_mismatched_lengths_and_bad_kind_raise():
    with pytest.raises(ValueError, match="differ in length"):
        paired_test([1.0, 2.0], [1.0], "degradation")
    with pytest.raises(ValueError, match="kind"):
        paired_test([1.0, 2.0], [1.0, 2.0], "upgrade")


def test_holm_and_bonferroni_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.06
    assert adjust_p_values(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust_p_values(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert adjust_p_values([0.5, 0.4], "bonferroni") == pytest.approx([1.0, 0.8])
    assert adjust_p_values(p, "bh") == pytest.approx(stats.false_discovery_control(p, method="bh"))
    assert adjust_p_values(p, "none") == pytest.approx(p)
    with_nan = adjust_p_values([0.01, np.nan, 0.04], "bonferroni")
    assert with_nan[0] == pytest.approx(0.02) and math.isnan(with_nan[1]) and with_nan[2] == pytest.approx(0.08)
    with pytest.raises(ValueError, match="unknown correction"):
        adjust_p_values(p, "sidak")


def test_correction_changes_verdicts():
    degradation = paired_test(ORIGINAL, PERTURBED, "degradation")      # p = 0.0459
    rise = paired_test(PERTURBED, ORIGINAL, "manipulation")            # p = 0.0459
    plain = correct([degradation, rise], "none")
    assert [t.passed for t in plain] == [True, False]
    bonferroni = correct([degradation, rise], "bonferroni")
    assert [t.p_adjusted for t in bonferroni] == pytest.approx([2 * degradation.p_value] * 2)
    assert [t.passed for t in bonferroni] == [False, True]
    assert bonferroni[0].p_value == degradation.p_value


def test_spearman_matches_scipy_and_drops_nan():
    scores = [0.1, 0.5, 0.3, 0.9, np.nan, 0.7]
    human = [1.0, 2.0, 2.0, 3.0, 3.0, np.nan]
    result = spearman(scores, human)
    reference = stats.spearmanr([0.1, 0.5, 0.3, 0.9], [1.0, 2.0, 2.0, 3.0])
    assert (result.n, result.n_dropped) == (4, 2)
    assert result.rho == pytest.approx(reference.statistic) and result.p_value == pytest.approx(reference.pvalue)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]).rho == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]).rho == pytest.approx(-1.0)
    assert "need at least 3" in spearman([1.0, 2.0], [1.0, 2.0]).reason
    assert "constant" in spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]).reason


def test_mean_ci_t_interval_by_hand():
    result = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0, np.nan])
    # sd sqrt(2.5), sem sqrt(0.5), t(0.95, df=4) = 2.131847
    half = 2.1318467863266504 * math.sqrt(0.5)
    assert (result.n, result.n_dropped, result.mean) == (5, 1, 3.0)
    assert (result.ci_low, result.ci_high) == pytest.approx((3 - half, 3 + half))
    wider = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0], confidence=0.95)
    assert wider.ci_low < result.ci_low


def test_mean_ci_bootstrap_is_seeded_scipy_bca():
    values = np.array([0.2, 1.5, 0.7, 2.2, 0.9, 1.1, 3.0, 0.4])
    result = mean_ci(values, method="bootstrap", n_resamples=2000, seed=3)
    reference = stats.bootstrap((values,), np.mean, confidence_level=0.9, n_resamples=2000, method="BCa",
                                rng=np.random.default_rng(3)).confidence_interval
    assert (result.ci_low, result.ci_high) == pytest.approx((reference.low, reference.high))
    assert result.ci_low < result.mean < result.ci_high
    assert mean_ci(values, method="bootstrap", n_resamples=2000, seed=3) == result


def test_mean_ci_edge_cases():
    single = mean_ci([4.0, np.nan])
    assert single.mean == 4.0 and math.isnan(single.ci_low) and "need at least 2" in single.reason
    constant = mean_ci([2.0, 2.0, 2.0])
    assert (constant.ci_low, constant.ci_high) == (2.0, 2.0)
    with pytest.raises(ValueError, match="interval method"):
        mean_ci([1.0, 2.0], method="jackknife")


def test_validation_table_corrects_within_each_metric():
    rows = []
    for metric, scale in (("gem", 1.0), ("bleu", 10.0)):
        for strategy, kind, after in (
            ("sentence_deletion", "degradation", PERTURBED),
            ("meaningless_elongation", "manipulation", ORIGINAL[::-1]),
        ):
            for o, p in zip(ORIGINAL, after, strict=True):
                rows.append({"metric": metric, "strategy": strategy, "kind": kind,
                             "original": o * scale, "perturbed": p * scale})
    pairs = pl.DataFrame(rows)
    table = validation_table(pairs)
    assert table.height == 4 and table.columns[:3] == ["metric", "strategy", "kind"]
    gem = table.filter(metric="gem", strategy="sentence_deletion").row(0, named=True)
    assert gem["smd"] == pytest.approx(-0.774597, abs=1e-6) and gem["passed"] is True
    holm = validation_table(pairs, correction="holm")
    gem_holm = holm.filter(metric="gem").sort("p_value")["p_adjusted"].to_list()
    gem_p = holm.filter(metric="gem").sort("p_value")["p_value"].to_list()
    assert gem_holm == pytest.approx([min(1, 2 * gem_p[0]), max(2 * gem_p[0], gem_p[1])])
    assert holm.filter(metric="gem", strategy="sentence_deletion")["passed"].item() is False
    with pytest.raises(ValueError, match="lacks columns"):
        validation_table(pairs.drop("kind"))
    assert validation_table(pairs.head(0)).height == 0
