"""Options at the edge of what they can mean: each is one line, exit 2, no traceback, and
nothing is started: `query --timeout inf / 1e308`, `--max-rows -1`, `schedule --on` far from today,
`export --out` at a file, under a file or in /proc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.core.config import load_config
from tests.submit_data import write_config, write_curated

ROOT = Path(__file__).resolve().parents[2]


def one_line_error(result, said: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.output.startswith("error: ") and result.output.count("\n") == 1 and said in result.output, \
        result.output


@pytest.fixture
def database(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/grebench.duckdb'\n")
    with duckdb.connect(str(tmp_path / "data" / "grebench.duckdb")) as con:
        con.execute("create table t as select range as i from range(3)")
    return tmp_path / "pipelines.toml"


@pytest.mark.parametrize(("args", "said"), [(["--timeout", "inf"], "--timeout inf"),
                                            (["--timeout", "1e308"], "--timeout 1e+308"),
                                            (["--max-rows", "-1"], "--max-rows -1")])
def test_query_limits_out_of_range_are_one_line(database, args, said):
    one_line_error(CliRunner().invoke(app, ["query", "select * from t", *args, "-c", str(database)]), said)


def test_query_timeout_inf_in_a_process_does_not_abort(database):
    done = subprocess.run([sys.executable, "-c", "from flows.cli.main import main; main()", "query", "select 1",
                           "--timeout", "inf", "-c", str(database)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31"])
def test_schedule_on_a_date_far_from_today_is_one_line(database, day):
    one_line_error(CliRunner().invoke(app, ["schedule", "--dry-run", "--on", day, "-c", str(database)]),
                   f"--on {day}: give a date in the years")


@pytest.fixture
def benchmark(tmp_path):
    cfg = load_config(write_config(tmp_path, ["bleu"], stages=("score", "validate", "materialize"))).for_pipeline("t")
    write_curated(cfg)
    return cfg


@pytest.mark.parametrize(("where", "said"), [("file", "is a file, not a folder"),
                                             ("under_file", "is a file, not a folder"),
                                             ("proc", "is not writable")])
def test_export_out_where_nothing_can_be_written_is_one_line(benchmark, tmp_path, where, said):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    out = {"file": a_file, "under_file": a_file / "export", "proc": Path("/proc/grebench-export")}[where]
    result = CliRunner().invoke(app, ["export", "--out", str(out), "-c", str(benchmark.root / "pipelines.toml")])
    one_line_error(result, said)
    assert "--out" in result.output and a_file.read_text() == "x"


@pytest.mark.parametrize("inside", [".", "t", "t/curate", "raw/x"])
def test_export_out_into_the_pipelines_own_folders_is_one_line(benchmark, inside):
    out = benchmark.data_dir / inside
    before = sorted(p for p in benchmark.data_dir.rglob("*"))
    result = CliRunner().invoke(app, ["export", "--out", str(out), "-c", str(benchmark.root / "pipelines.toml")])
    one_line_error(result, "lies in the data folder")
    assert sorted(p for p in benchmark.data_dir.rglob("*")) == before      # nothing written there
