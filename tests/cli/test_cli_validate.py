"""`grebench validate` / `grebench report` through typer's CliRunner, plus the validate flow on a tiny pipeline."""

from __future__ import annotations

import json

import duckdb
import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from flows.cli.validate import JSON_KEYS, report, validate
from tasks.testing.pipelines import results_config
from tests.stages.validate.test_validate_workflow import make_reviews

app = typer.Typer(pretty_exceptions_enable=False)
app.command()(validate)
app.command()(report)
runner = CliRunner()


@pytest.fixture
def config(tmp_path):
    return results_config(tmp_path / "pipelines.toml", '[validate]\nmax_papers = 10\nmin_pairs = 2\nlevel = ["judgments"]\n')


def review_file(tmp_path, name: str = "reviews.csv", n_papers: int = 3, **changes) -> str:
    frame = make_reviews(n_papers=n_papers, lines=3).select(
        "paper_id", pl.col("review_id").str.split("/").list.last().alias("reviewer"),
        pl.col("review_text").alias("review"), "judgments", "quality")
    for column, value in changes.items():
        frame = frame.drop(column) if value is None else frame.with_columns(pl.lit(value).alias(column))
    path = tmp_path / name
    frame.write_parquet(path) if name.endswith(".parquet") else frame.write_csv(path)
    return str(path)


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.slow
def test_json_contract(tmp_path, config, embedded_lm):
    result = invoke("validate", "--reviews", review_file(tmp_path, "r.parquet"), "--metric", "gem", "--metric",
                    "rouge_l", "--strategies", "sentence_deletion,meaningless_elongation_proxy", "--format", "json",
                    "--config", str(config))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["metric"], r["strategy"]) for r in rows] == [
        (m, s) for m in ("gem", "rouge_l") for s in ("sentence_deletion", "meaningless_elongation_proxy")]
    for row in rows:
        assert tuple(row) == JSON_KEYS
        assert row["n"] == 3 and isinstance(row["passed"], bool) and isinstance(row["p_value"], float)


def test_table_output_and_recorded_failure(tmp_path, config):
    single = review_file(tmp_path, n_papers=1)
    result = invoke("validate", "--reviews", single, "--metric", "bleu", "--strategies",
                    "random_replacement,sentence_deletion", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert "metric" in result.stdout and "sentence_deletion" in result.stdout
    assert "perturbation failed: random_replacement: no review of another paper in the group (1 candidate(s))" \
        in result.stdout
    assert "Spearman correlation with the human quality score" in result.stdout
    result = invoke("validate", "--reviews", single, "--metric", "bleu", "--strategies", "random_replacement",
                    "--format", "json", "--config", str(config))
    [row] = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["n"] == 0 and row["passed"] is None and row["smd"] is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"review": None}, "missing required column(s) review"),
    ({"paper_id": None, "reviewer": None}, "missing required column(s) paper_id, reviewer"),
    ({"review": "  "}, "unusable rows: empty review in row(s) 1, 2, 3, 4, 5, 6, 7, 8 and 1 more"),
    ({"quality": "good"}, "column quality is not numeric in row(s) 1"),
])
def test_bad_files_fail_with_one_clear_line(tmp_path, config, changes, message):
    result = invoke("validate", "--reviews", review_file(tmp_path, **changes), "--metric", "bleu", "--config",
                    str(config))
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_bad_rows_named_and_bad_options(tmp_path, config):
    path = tmp_path / "mixed.csv"
    pl.DataFrame({"paper_id": ["a", "a", "b", ""], "reviewer": ["1", "1", "1", "2"],
                  "review": ["One. Two.", "Three. Four.", "Five. Six.", "Seven."]}).write_csv(path)
    result = invoke("validate", "--reviews", str(path), "--metric", "bleu", "--config", str(config))
    assert result.exit_code == 2
    assert "empty paper_id in row(s) 4" in result.stderr and "repeat in row(s) 1, 2" in result.stderr
    ok = review_file(tmp_path)
    result = invoke("validate", "--reviews", ok, "--strategies", "shuffle", "--config", str(config))
    assert result.exit_code == 2 and "unknown strategy ['shuffle']" in result.stderr
    result = invoke("validate", "--reviews", ok, "--metric", "nope", "--config", str(config))
    assert result.exit_code == 2 and "unknown metric(s) ['nope']" in result.stderr
    result = invoke("validate", "--reviews", str(tmp_path / "absent.csv"), "--config", str(config))
    assert result.exit_code == 2 and "file not found" in result.stderr
    text = tmp_path / "reviews.txt"
    text.write_text("x")
    result = invoke("validate", "--reviews", str(text), "--config", str(config))
    assert result.exit_code == 2 and "use .parquet or .csv" in result.stderr


def test_report_command(tmp_path, config):
    from tests.report.test_validate_report import frames

    database = tmp_path / "data" / "r.duckdb"
    database.parent.mkdir(parents=True)
    with duckdb.connect(str(database)) as con:
        for name, frame in frames().items():
            con.register("frame", frame.to_arrow())
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            con.unregister("frame")
    result = invoke("report", "--config", str(config), "--out-dir", str(tmp_path / "rep"))
    assert result.exit_code == 0, result.output
    paths = result.stdout.strip().splitlines()
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["leaderboard.png", "validation.png", "report.md"]
    database.unlink()
    result = invoke("report", "--config", str(config))
    assert result.exit_code == 2 and "no results database" in result.stderr
