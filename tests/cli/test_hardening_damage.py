"""Damaged files the project reads (a results database, a stage's Parquet output, a run record, the
LLM cache) stop a command with one line that names the file and what to do, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.damage import DamagedFileError, read_parquet
from tasks.lm.cache import LLMCache
from tasks.stages.materialize.build import build_database
from tests.site_data import write_database
from tests.stages.materialize.test_materialize import make_config, write_outputs

ROOT = Path(__file__).resolve().parents[2]


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "cut": data[: len(data) // 2], "garbage": os.urandom(max(len(data), 4096))}[how])


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli.main", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


@pytest.mark.parametrize("how", ["empty", "cut", "garbage"])
def test_plan_site_and_report_on_a_damaged_results_database_are_one_line(tmp_path, how):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/{pipeline}/grebench.duckdb'\n"
                                            "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    database = tmp_path / "data" / "t" / "grebench.duckdb"
    database.parent.mkdir(parents=True)
    damage(write_database(database), how)
    for args in (["plan", "--gap", "0.5"], ["site"], ["report"]):
        out = cli(*args, "-p", "t", "-c", str(tmp_path / "pipelines.toml"), cwd=tmp_path)
        errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr[-2000:])
        assert len(errors) == 1 and str(database) in errors[0] and "rebuild it" in errors[0], (args, errors)


@pytest.mark.parametrize("how", ["empty", "cut", "garbage"])
def test_materialize_over_a_damaged_stage_output_names_the_file(tmp_path, how):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    target = cfg.data_dir / "t" / "venue" / "curate" / "reviews.parquet"
    damage(target, how)
    with pytest.raises(DamagedFileError, match="curate/reviews.parquet is damaged") as raised:
        build_database(cfg, "t")
    assert "\n" not in str(raised.value) and "rerun the stage that writes it" in str(raised.value)


def test_papers_without_paper_id_are_one_line_in_materialize_and_every_reader(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    papers = cfg.data_dir / "t" / "venue" / "curate" / "papers.parquet"
    pl.read_parquet(papers).drop("paper_id").write_parquet(papers)
    with pytest.raises(DamagedFileError, match="papers.parquet is damaged"):
        build_database(cfg, "t")
    with pytest.raises(DamagedFileError, match="no column 'paper_id'"):
        read_parquet(papers, columns=["paper_id", "in_benchmark"])


def test_a_garbage_llm_cache_is_one_line(tmp_path):
    path = tmp_path / "llm.sqlite"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(DamagedFileError, match="llm.sqlite is damaged .* move it aside"):
        LLMCache(path)


def test_a_stage_output_without_a_column_a_data_test_reads_is_named(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    reviews = cfg.data_dir / "t" / "venue" / "curate" / "reviews.parquet"
    pl.read_parquet(reviews).drop("rating").write_parquet(reviews)
    with pytest.raises(DamagedFileError, match=r"curate/reviews.parquet is damaged .*no column 'rating'"):
        build_database(cfg, "t")


def test_export_over_curated_papers_without_paper_id_is_one_line(tmp_path):
    from tasks.core.config import load_config
    from tests.submit_data import write_config, write_curated

    config = write_config(tmp_path, ["bleu"], stages=("score", "validate", "materialize"))
    write_curated(load_config(config).for_pipeline("t"))
    papers = next(tmp_path.rglob("curate/papers.parquet"))
    pl.read_parquet(papers).drop("paper_id").write_parquet(papers)
    out = cli("export", "--out", str(tmp_path / "out"), "-c", str(config), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.count("\n") == 1 and f"{papers} is damaged" in out.stderr and "no column 'paper_id'" in out.stderr


@pytest.mark.parametrize(("folder", "name", "column", "value"), [
    ("curate", "reviews.parquet", "rating", pl.lit("six")),                       # a number as text
    ("curate", "curation_report.parquet", "rows_in", pl.lit("4")),
    ("curate", "papers.parquet", "paper_id", pl.concat_list(pl.col("paper_id"))),  # an id as a list
])
def test_a_stage_output_with_a_column_of_the_wrong_type_is_named(tmp_path, folder, name, column, value):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    path = cfg.data_dir / "t" / "venue" / folder / name
    pl.read_parquet(path).with_columns(value.alias(column)).write_parquet(path)
    with pytest.raises(DamagedFileError, match=rf"{folder}/{name} is damaged .*column '{column}' holds") as raised:
        build_database(cfg, "t")
    assert "\n" not in str(raised.value)
