"""`grebench report --benchmarks` and `grebench site --benchmarks`: the pipeline's own leaderboard beside other
benchmarks (Spearman per metric and benchmark, n, interval), unmatched names listed, the size plot."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.report.benchmarks import Comparison, match_models

runner = CliRunner()
MODELS = ["acme/a-1b", "acme/a-7b", "acme/a-70b", "zeta/z-3b", "zeta/z-30b", "solo-13b"]
MEANS = [0.10, 0.25, 0.40, 0.15, 0.30, 0.20]
MMLU = {"acme/a-1b": 30.0, "acme/a-7b": 55.0, "acme/a-70b": 80.0, "zeta/z-3b": 58.0, "zeta/z-30b": 60.0}
SIZES = {"acme/a-1b": 1e9, "acme/a-7b": 7e9, "acme/a-70b": 7e10, "zeta/z-3b": 3e9, "zeta/z-30b": 3e10}


def board() -> pl.DataFrame:
    rows = [{"metric": "gem", "eval_lm": "smollm2", "model": m, "is_human": False, "mean": v}
            for m, v in zip(MODELS, MEANS, strict=True)]
    rows.append({"metric": "gem", "eval_lm": "smollm2", "model": "human", "is_human": True, "mean": 0.5})
    return pl.DataFrame(rows).with_columns(rank=pl.col("mean").rank(descending=True).cast(pl.Int64),
                                           ci_low=pl.col("mean") - 0.05, ci_high=pl.col("mean") + 0.05,
                                           confidence=pl.lit(0.9), n_papers=pl.lit(4), n_missing=pl.lit(0),
                                           n_excluded=pl.lit(0), reason=pl.lit(None, pl.String))


def bench_csv(path, extra: str = "") -> str:
    lines = ["model,benchmark,score"]
    lines += [f"{m},MMLU,{v}" for m, v in MMLU.items()]
    lines += [f"{m},parameter_size,{v}" for m, v in SIZES.items()]
    lines += ["Acme/A-1B,GPQA,31", "other/unknown,MMLU,50"]   # names not on the board: listed, not matched
    path.write_text("\n".join(lines) + "\n" + extra)
    return str(path)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'd'\ndatabase = 'd/r.duckdb'\n")
    (tmp_path / "d").mkdir()
    with duckdb.connect(str(tmp_path / "d" / "r.duckdb")) as con:
        con.register("frame", board())
        con.execute('CREATE TABLE "leaderboard" AS SELECT * FROM frame')
    return tmp_path


def test_the_comparison_ranks_the_models_with_both_scores_and_lists_the_rest():
    bench = pl.DataFrame({"model": [*MMLU, "other/unknown"], "benchmark": "MMLU",
                          "score": [*MMLU.values(), 50.0]})
    comparison = Comparison(board(), bench)
    row = comparison.table.row(0, named=True)
    means = dict(zip(MODELS, MEANS, strict=True))
    assert row["n"] == 5 and row["spearman"] == pytest.approx(spearmanr([means[m] for m in MMLU],
                                                                        list(MMLU.values())).statistic)
    assert row["ci_low"] < row["spearman"] <= row["ci_high"] <= 1
    assert comparison.board_only == ["solo-13b"] and comparison.file_only == ["other/unknown"]
    assert "human" not in comparison.board_only       # the human baseline is no model to match
    assert match_models(["a", "B"], ["b", "a"]) == (["B"], ["b"])   # case counts: listed, not guessed


def test_report_adds_the_correlation_table_the_unmatched_names_and_the_size_plot(project, tmp_path):
    csv = bench_csv(tmp_path / "bench.csv")
    result = runner.invoke(app, ["report", "-c", str(project / "pipelines.toml"), "--benchmarks", csv])
    assert result.exit_code == 0, result.output
    text = (project / "d" / "report" / "report.md").read_text()
    assert "## Agreement with other benchmarks" in text and "Bonett-Wright" in text
    assert "| gem | smollm2 | MMLU | 0.900 | 5 |" in text
    assert "| gem | smollm2 | GPQA | nan | 0 | nan | nan | fewer_than_4_models |" in text
    assert "does not name (not in any correlation): solo-13b." in text
    assert "not on the leaderboard: Acme/A-1B, other/unknown." in text
    assert (project / "d" / "report" / "benchmark_size.png").read_bytes()[:4] == b"\x89PNG"
    assert "![score against parameter size](benchmark_size.png)" in text


def test_the_site_shows_the_same_comparison(project, tmp_path):
    csv = bench_csv(tmp_path / "bench.csv")
    result = runner.invoke(app, ["site", "-c", str(project / "pipelines.toml"), "--benchmarks", csv])
    assert result.exit_code == 0, result.output
    page = (project / "d" / "site" / "leaderboard.html").read_text()
    assert "Agreement with other benchmarks" in page and "solo-13b" in page and "other/unknown" in page
    assert "charts/benchmark-size.svg" in page
    assert (project / "d" / "site" / "charts" / "benchmark-size.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("name,bench,value\na,b,1\n", "missing column(s) model, benchmark, score"),
    ("model,benchmark,score\na,MMLU,high\n", "'high' of a on MMLU is not a number"),
    ("model,benchmark,score\na,MMLU,1\na,MMLU,2\n", "a has 2 rows for MMLU"),
])
def test_a_bad_benchmark_file_fails_with_one_line(project, tmp_path, content, message):
    path = tmp_path / "b.csv"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["report", "-c", str(project / "pipelines.toml"), "--benchmarks", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --benchmarks: ") and message in lines[0], result.output
