"""The shipped sample of real ICLR 2023 reviews (tasks/stages/validate/samples/iclr2023_gem): what the
file itself promises (at most 30 papers, three reviews and GPT-4o judgment lines each, its license and
source beside it), a subset of the ICLR 2023 dev file where that file is present, how `[validate]
reviews` names it, and GEM's verdict on it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import ConfigError, load_config
from tasks.stages.validate.review_data import (
    SAMPLES,
    VALIDATION_DATA,
    load_review_data,
    review_file,
    shipped_samples,
    validation_data,
)
from tasks.stages.validate.reviews_file import load_reviews_file

ROOT = Path(__file__).resolve().parents[3]
FOLDER = SAMPLES / "iclr2023_gem"
DEV_FILE = ROOT.parent / "shared" / "data" / "iclr2023_dev.parquet"
STANCES = ("The reviewer appreciates", "The reviewer criticizes", "The reviewer questions", "The reviewer suggests")


def shipped() -> pl.DataFrame:
    return pl.read_csv(FOLDER / "reviews.csv", infer_schema=False)


def test_the_sample_holds_at_most_30_papers_of_three_reviews_with_judgments() -> None:
    frame = shipped()
    assert frame.columns == ["paper_id", "reviewer", "review", "judgments"]
    papers = frame["paper_id"].n_unique()
    assert 10 <= papers <= 30 and frame.height == 3 * papers
    assert frame.group_by("paper_id").agg(pl.col("reviewer").sort())["reviewer"].to_list() == [["1", "2", "3"]] * papers
    assert frame.null_count().sum_horizontal().item() == 0
    assert frame["review"].str.len_chars().min() > 200 and frame["judgments"].str.len_chars().min() > 50
    lines = [line for text in frame["judgments"].to_list() for line in text.splitlines() if line.strip()]
    assert sum(line.lstrip("-* 0123456789.").startswith(STANCES) for line in lines) / len(lines) > 0.9
    # read as a user's review file is read, every row usable
    assert load_reviews_file(FOLDER / "reviews.csv").height == frame.height


def test_license_source_and_rows_ship_beside_it() -> None:
    license_text = (FOLDER / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    readme = (FOLDER / "README.md").read_text(encoding="utf-8")
    assert "yx-lu/Benchmarking-LLMs--Judgments-with-No-Gold-Standard" in readme and "task_iclr23/dataset" in readme
    with (FOLDER / "provenance.toml").open("rb") as handle:
        provenance = tomllib.load(handle)
    assert provenance["license"] == "Apache-2.0" and provenance["file"] == "reviews.csv"
    assert "task_iclr23/dataset" in provenance["source"] and "30 papers" in provenance["release_rows"]
    assert shipped_samples() == ["iclr2023_gem"]


@pytest.mark.skipif(not DEV_FILE.is_file(), reason="the ICLR 2023 dev file is not on this machine")
def test_every_row_is_the_dev_files_own_and_the_script_recreates_it() -> None:
    import importlib.util

    dev = pl.read_parquet(DEV_FILE)
    frame = shipped().with_columns(pl.col("reviewer").cast(pl.Int64))
    joined = frame.join(dev.with_columns(pl.col("reviewer").cast(pl.Int64)), on=["paper_id", "reviewer"], how="left")
    assert joined["review_right"].null_count() == 0
    assert (joined["review"] == joined["review_right"]).all()
    assert (joined["judgments"] == joined["judgments_reference"]).all()
    spec = importlib.util.spec_from_file_location("real_sample", ROOT / "bench" / "tools" / "real_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.draw(dev).equals(frame)


def config_with(tmp_path: Path, reviews: str) -> Path:
    path = tmp_path / "pipelines.toml"
    path.write_text(f'[validate]\nreviews = "{reviews}"\n', encoding="utf-8")
    return path


def test_reviews_name_the_curated_reviews_a_shipped_sample_or_a_file(tmp_path) -> None:
    assert review_file(load_config(config_with(tmp_path, "curated"))) is None
    assert load_review_data(load_config(config_with(tmp_path, "curated"))) is None
    cfg = load_config(config_with(tmp_path, "iclr2023_gem"))
    data = load_review_data(cfg)
    assert data.reviews.height == 90 and data.provenance["license"] == "Apache-2.0"
    assert data.provenance["path"] == "tasks/stages/validate/samples/iclr2023_gem/reviews.csv"
    row = validation_data(data.provenance, cfg, 30)
    assert row.schema == VALIDATION_DATA and row["papers"][0] == 30 and row["papers_validated"][0] == 30
    # a user's own file: its provenance is not known, and the row says so
    shipped().head(6).write_csv(tmp_path / "mine.csv")
    mine = load_review_data(load_config(config_with(tmp_path, "mine.csv")))
    assert mine.provenance["license"] is None and "not recorded" in mine.provenance["note"]
    assert mine.provenance["papers"] == 2


def test_a_review_source_that_is_not_there_is_one_config_error(tmp_path) -> None:
    from tasks.checks import load_checked_config

    with pytest.raises(ConfigError, match=r"validate.reviews: 'iclr2099' is neither 'curated', a shipped sample "
                                          r"\(iclr2023_gem\) nor a review file"):
        load_checked_config(config_with(tmp_path, "iclr2099"))


def test_the_closing_line_says_which_data_the_verdicts_are_about(tmp_path) -> None:
    import duckdb

    from flows.cli.run import findings

    database = tmp_path / "r.duckdb"
    cfg = load_config(config_with(tmp_path, "iclr2023_gem"))
    row = validation_data(load_review_data(cfg).provenance, cfg.model_copy(update={"validate": cfg.validate.model_copy(
        update={"level": ("judgments",)})}), 30)
    with duckdb.connect(str(database)) as con:
        con.register("row", row.to_arrow())
        con.execute("create table validation_data as select * from row")
        con.execute("create table validation as select * from (values ('gem', 'sentence_deletion', 'pass'), "
                    "('gem', 'random_replacement', 'pass'), ('bleu', 'sentence_deletion', 'fail')) "
                    "t(metric, strategy, verdict)")
    line = findings(database, None)
    assert line == ("found: validation on 30 papers of real ICLR 2023 reviews (GEM release sample) (one candidate "
                    "a paper; judgment level: the lines perturbed; lines by GPT-4o (the release)) tests passed: gem 2/2; bleu 0/1 (fails "
                    "sentence_deletion)")


# 30 papers, one candidate each: 30 pairs of (original, sentence-deleted) GEM scores.
PAIRS = 30


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_gem_falls_when_judgment_lines_are_deleted_on_the_real_reviews_given_lines(tmp_path, embedded_lm) -> None:
    """At the judgments level on the release's GPT-4o lines (`judgments = "given"`, the named proxy), GEM's score
    of a candidate falls when judgment lines are deleted, on the shipped real reviews with the embedded SmolLM2
    as evaluation LM, read through `grebench validate --reviews`."""
    import typer
    from typer.testing import CliRunner

    from flows.cli.validate import validate

    app = typer.Typer(pretty_exceptions_enable=False)
    app.command()(validate)
    app.command()(lambda: None)   # two commands: typer keeps the subcommand name
    config = tmp_path / "pipelines.toml"
    config.write_text('[paths]\ndata_dir = "data"\n\n[score]\nnegatives = 1\n\n[validate]\nlevel = ["judgments"]\n'
                      f'judgments = "given"\ncandidates = "one"\nmax_papers = {PAIRS}\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", "--reviews", "iclr2023_gem", "--metric", "gem", "--strategies",
                                      "sentence_deletion", "--format", "json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout.strip().splitlines()[-1])
    assert (row["metric"], row["strategy"], row["n"]) == ("gem", "sentence_deletion", PAIRS)
    assert row["passed"] is True and row["smd"] < 0 and row["p_value"] < 0.05, row


def test_the_site_shows_where_the_validated_reviews_come_from(tmp_path) -> None:
    import duckdb

    from tasks.report.site.build import build_site
    from tests.site_data import write_database

    database = write_database(tmp_path / "r.duckdb")
    cfg = load_config(config_with(tmp_path, "iclr2023_gem"))
    row = validation_data(load_review_data(cfg).provenance, cfg, 30)
    with duckdb.connect(str(database)) as con:
        con.register("row", row.to_arrow())
        con.execute("create table validation_data as select * from row")
    page = (build_site(database, tmp_path / "site").out_dir / "validation.html").read_text(encoding="utf-8")
    assert "30 of the 30 papers of <strong>real ICLR 2023 reviews (GEM release sample)</strong>" in page
    assert "Apache-2.0" in page and "yx-lu/Benchmarking-LLMs--Judgments-with-No-Gold-Standard" in page
    assert "dataset_human_review1-3.parquet" in page
