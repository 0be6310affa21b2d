"""`grebench plan --gap G`: the papers needed to separate two models, checked
against a simulation of the paired test, and the command on a results database."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
from scipy import stats
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.stages.validate.planning import paired_power, papers_needed, plan

runner = CliRunner()


def test_the_paper_count_reaches_the_power_in_a_simulation_and_one_paper_fewer_does_not():
    sd, gap = 1.0, 0.2
    n = papers_needed(sd, gap, alpha=0.05, power=0.8)
    assert 190 <= n <= 205                    # (z_0.975 + z_0.8)^2 / 0.2^2 = 196.2, t-test a little more
    rng = np.random.default_rng(7)

    def simulated(papers: int, trials: int = 4000) -> float:
        diffs = rng.normal(gap, sd, size=(trials, papers))
        return float((stats.ttest_1samp(diffs, 0.0, axis=1).pvalue < 0.05).mean())

    assert abs(simulated(n) - 0.8) < 0.03
    assert paired_power(n - 1, sd, gap, 0.05) < 0.8 <= paired_power(n, sd, gap, 0.05)


def scores_frame(rng: np.random.Generator, papers: int = 30) -> pl.DataFrame:
    """Three models on the same papers; model b is 0.3 worse than a, per-paper noise sd 0.5."""
    rows = []
    for p in range(papers):
        base = rng.normal(0, 1)
        for model, shift in (("a", 0.0), ("b", -0.3), ("human", 0.1)):
            rows.append({"paper_id": f"p{p}", "candidate": f"{model}/p{p}", "source": model, "reference": "r1",
                         "metric": "gem", "eval_lm": "smollm2", "score": base + shift + rng.normal(0, 0.5),
                         "reason": None})
    return pl.DataFrame(rows, schema_overrides={"reason": pl.String})


def test_plan_takes_the_spread_of_the_paired_differences():
    from tasks.metrics.registry import candidate_scores
    from tasks.stages.validate.leaderboard import per_paper

    table = plan(per_paper(candidate_scores(scores_frame(np.random.default_rng(3)))), gap=0.2)
    row = table.row(0, named=True)
    assert row["pairs"] == 3 and 0.5 < row["sd_median"] < 0.9       # differences of two 0.5-sd noises: ~0.71
    assert row["papers_median"] == papers_needed(row["sd_median"], 0.2) and row["papers_max"] >= row["papers_median"]


def test_grebench_plan_prints_a_paper_count_from_the_results_database(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/t.duckdb'\n"
                                             "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    (tmp_path / "data").mkdir()
    frame = scores_frame(np.random.default_rng(5))
    with duckdb.connect(str(tmp_path / "data" / "t.duckdb")) as con:
        con.register("frame", frame.to_arrow())
        con.execute("create table scores as select * from frame")
    result = runner.invoke(app, ["plan", "--gap", "0.2", "-c", str(tmp_path / "pipelines.toml"), "-p", "t"])
    assert result.exit_code == 0, result.output
    assert "papers needed to detect a gap of 0.2" in result.output
    assert "- gem (smollm2): " in result.output and "papers for the median pair" in result.output
    bad = runner.invoke(app, ["plan", "--gap", "-1", "-c", str(tmp_path / "pipelines.toml")])
    assert bad.exit_code == 2 and "--gap -1: give a positive, finite difference" in bad.output
