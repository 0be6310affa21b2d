"""Verdicts (pass / fail / inconclusive), the bootstrap SMD interval, table-wide correction, length confound."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tasks.core.config import ValidateConfig
from tasks.stages.validate.stats import (
    _smd_axis,
    correct,
    length_confound,
    paired_test,
    smd,
    smd_bootstrap_ci,
    validation_table,
)

RNG = np.random.default_rng(7)
BASE = RNG.normal(0.0, 1.0, 40)


def test_two_pairs_are_inconclusive_not_fail():
    # At n = 2 a constant shift gives p = 0 and a normal interval collapsed to a point.
    test = paired_test([1.0, 2.0], [1.5, 2.5], "manipulation", min_pairs=10)
    assert test.p_value == 0.0 and test.ci_low == test.ci_high
    assert test.verdict == "inconclusive" and test.passed is None
    assert "fewer than min_pairs = 10" in test.reason
    # the same numbers with the old rule (min_pairs = 2) fail
    assert paired_test([1.0, 2.0], [1.5, 2.5], "manipulation").verdict == "fail"


def test_verdicts_and_passed_agree():
    down = paired_test(BASE, BASE - 0.5 + RNG.normal(0, 0.1, 40), "degradation", min_pairs=10)
    assert (down.verdict, down.passed) == ("pass", True)
    up = paired_test(BASE, BASE + 0.5 + RNG.normal(0, 0.1, 40), "manipulation", min_pairs=10)
    assert (up.verdict, up.passed) == ("fail", False)
    none = paired_test([], [], "degradation", min_pairs=10)
    assert (none.verdict, none.passed) == ("inconclusive", None)


def test_correction_keeps_small_tests_inconclusive_and_does_not_repeat_the_note():
    small = paired_test([1.0, 2.0, 3.0], [0.0, 1.0, 2.5], "degradation", min_pairs=5)
    again = correct(correct([small], "bh", min_pairs=5), "holm", min_pairs=5)[0]
    assert again.verdict == "inconclusive" and again.reason.count("min_pairs") == 1


def test_bootstrap_interval_is_seeded_and_brackets_the_smd():
    y = BASE + 0.3 + RNG.normal(0, 0.5, 40)
    d = smd(BASE, y)
    low, high = smd_bootstrap_ci(BASE, y, n_resamples=2000, seed=3)
    assert low < d < high
    assert (low, high) == smd_bootstrap_ci(BASE, y, n_resamples=2000, seed=3)
    assert (low, high) != smd_bootstrap_ci(BASE, y, n_resamples=2000, seed=4)
    # the vectorized statistic equals smd on one resample
    assert _smd_axis(BASE[None, :], y[None, :])[0] == pytest.approx(d)
    assert all(math.isnan(v) for v in smd_bootstrap_ci([1.0, 2.0], [2.0, 3.0]))
    test = paired_test(BASE, y, "manipulation", seed=3)
    assert (test.boot_low, test.boot_high) == (low, high)


def test_bh_over_the_whole_table():
    rows = []
    for metric, shift in (("a", -0.3), ("b", -0.35)):
        for o, p in zip(BASE, BASE + shift + RNG.normal(0, 0.9, 40), strict=True):
            rows.append({"metric": metric, "strategy": "sentence_deletion", "kind": "degradation",
                         "original": o, "perturbed": p})
    pairs = pl.DataFrame(rows)
    per_metric = validation_table(pairs, correction="bh")
    whole = validation_table(pairs, correction="bh", family=())
    # one test per metric: per-metric BH changes nothing; over the table it sees both
    assert per_metric["p_adjusted"].to_list() == pytest.approx(per_metric["p_value"].to_list())
    p = sorted(whole["p_value"].to_list())       # BH by hand for m = 2: min(2 p1, p2), p2
    assert sorted(whole["p_adjusted"].to_list()) == pytest.approx([min(2 * p[0], p[1]), p[1]])
    assert set(whole.columns) >= {"verdict", "boot_low", "boot_high"}


def test_length_confound_per_metric():
    words = [10, 20, 30, 40, 50]
    scores = pl.DataFrame({"metric": ["long"] * 5 + ["flat"] * 5, "candidate": [f"c{i}" for i in range(5)] * 2,
                           "score": [1.0, 2.0, 3.0, 4.0, 5.0] + [1.0] * 5})
    lengths = pl.DataFrame({"candidate": [f"c{i}" for i in range(5)], "words": [float(w) for w in words]})
    table = length_confound(scores, lengths)
    long = table.filter(metric="long").row(0, named=True)
    assert long["rho"] == pytest.approx(1.0) and long["n"] == 5 and long["mean_words"] == 30.0
    flat = table.filter(metric="flat").row(0, named=True)
    assert math.isnan(flat["rho"]) and "constant" in flat["reason"]


def test_workflow_writes_verdicts_and_length_confound_and_the_sql_accepts_them():
    import duckdb

    from tasks.metrics import Resources
    from tasks.stages.validate.workflow import run_validation
    from tests.stages.validate.test_validate_workflow import make_reviews

    result = run_validation(make_reviews(n_papers=4), ValidateConfig(strategies=["sentence_deletion", "meaningless_elongation_proxy"], metrics=["bleu", "rouge_l"], min_pairs=10, correction="bh", correction_scope="table", bootstrap_resamples=200), resources=Resources())
    table = result.validation
    assert table["verdict"].to_list() == ["inconclusive"] * 4 and table["passed"].is_null().all()
    assert result.length_confound["metric"].to_list() == ["bleu", "rouge_l"]
    assert result.length_confound["n"].to_list() == [12, 12]   # every review is scored: they carry quality
    con = duckdb.connect()
    con.execute("CREATE SCHEMA staging")
    con.register("v", table.to_arrow())
    con.execute("CREATE TABLE staging.validation AS SELECT * FROM v")
    con.execute(Path("sql/marts/validation.sql").read_text())
    assert con.sql("SELECT count(*) FROM validation WHERE verdict = 'inconclusive'").fetchall() == [(4,)]
    assert con.sql(Path("sql/tests/validation_verdicts.sql").read_text()).fetchall() == []
    con.execute(Path("sql/marts/failing_metrics.sql").read_text())
    assert con.sql("SELECT count(*) FROM failing_metrics").fetchall() == [(0,)]   # inconclusive is no failure


def test_report_marks_inconclusive_cells_and_levels(tmp_path):
    from tasks.report.validation import write_report

    rows = [{"metric": "gem", "strategy": "sentence_deletion", "kind": "degradation", "original": o, "perturbed": o - 1,
             "level": level} for level in ("raw", "judgments") for o in (1.0, 2.0, 4.0)]
    table = validation_table(pl.DataFrame(rows), min_pairs=10)
    paths = write_report({"validation": table}, tmp_path)
    text = paths["summary"].read_text()
    assert "| gem | sentence_deletion | degradation | raw | 3 |" in text and "inconclusive" in text
    assert paths["validation"].stat().st_size > 0
