"""Inputs that used to end in a traceback end in one `error:` line with a non-zero exit: a gap so
small no release could detect it, `extends` naming a list."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tests.stages.validate.test_plan import scores_frame

runner = CliRunner()


def scores_database(root: Path) -> Path:
    """root/pipelines.toml of a pipeline t whose database holds a `scores` table (tests/stages/validate/test_plan.py
    `scores_frame`) and nothing else: what `grebench plan` reads."""
    (root / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/t.duckdb'\n"
                                         "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    (root / "data").mkdir()
    with duckdb.connect(str(root / "data" / "t.duckdb")) as con:
        con.register("frame", scores_frame(np.random.default_rng(5)).to_arrow())
        con.execute("create table scores as select * from frame")
    return root / "pipelines.toml"


@pytest.mark.parametrize("gap", ["1e-300", "1e-8", "1e-12"])
def test_a_gap_too_small_to_plan_for_is_one_line(tmp_path, gap):
    scores_database(tmp_path)
    result = runner.invoke(app, ["plan", "--gap", gap, "-c", str(tmp_path / "pipelines.toml"), "-p", "t"])
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert f"--gap {float(gap):g}" in line and "more than 10,000,000 papers" in line


def test_extends_naming_a_list_is_one_line(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[pipelines.demo]\nvenues = ['T.cc/2025/Conference']\n"
                                             "stages = ['materialize']\n[pipelines.full]\nextends = 'demo'\n"
                                             "[pipelines.both]\nextends = ['demo', 'full']\n")
    result = runner.invoke(app, ["pipelines", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2 and not isinstance(result.exception, TypeError), result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert result.output.strip().endswith('pipelines.both.extends: name one pipeline as a string (extends = "demo"), '
                                          "not a list")


@pytest.mark.slow   # a CLI process of its own (its imports take seconds)
def test_schedule_dry_run_creates_nothing_and_sends_no_request(project_config, tmp_path):
    import os
    import subprocess
    import sys

    from tasks.testing.pipelines import ingest_pipeline
    from tests.cli.test_hardening_signals import ROOT, holding_server

    with holding_server() as (url, arrived):
        config = project_config(ingest_pipeline("refresh", "ICLR.cc/{year}/Conference", url, stages=("ingest", "curate"),
                                                timeout_seconds=2, max_retries=0))
        before = sorted(tmp_path.rglob("*"))
        out = subprocess.run([sys.executable, "-m", "flows.cli.main", "schedule", "--dry-run", "--on", "2025-12-15",
                              "-c", str(config)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")})
        assert out.returncode == 0, out.stderr
        assert not arrived.is_set(), "the dry run sent a request"
    made = [p for p in tmp_path.rglob("*") if p not in before and not p.is_relative_to(tmp_path / "prefect")]
    assert made == [] and not (tmp_path / "data").exists()   # (Prefect makes its own home when imported)
    assert "form of ICLR.cc/2026/Conference: read from ICLR.cc/2026/Conference/-/Official_Review when the run " \
           "fires (not in the raw cache; a dry run sends no request)" in out.stdout
    assert "dry run: nothing registered" in out.stdout


@pytest.mark.parametrize("write", ["parquet", "csv"])
def test_a_full_disk_under_polars_is_the_one_line_of_a_full_disk(write):
    import polars as pl

    from flows.cli.failures import situation

    frame = pl.DataFrame({"a": list(range(100_000))})
    with pytest.raises(Exception) as raised:   # /dev/full: every write fails with ENOSPC
        getattr(frame, f"write_{write}")("/dev/full")
    line = situation(raised.value)
    assert line is not None and line.startswith("the disk is full (") and "\n" not in line
    assert line.endswith("nothing already written was lost")


@pytest.mark.slow   # a CLI process of its own
def test_a_full_disk_in_a_command_is_one_line_and_exit_1(tmp_path):
    import os
    import subprocess
    import sys

    from tests.cli.test_hardening_signals import ROOT

    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\n[pipelines.t]\n"
                                             "venues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    (tmp_path / "reviews.parquet").symlink_to("/dev/full")
    script = ("import polars as pl, sys; from flows.cli import main as m;"
              "m.app.command(name='fill')(lambda: pl.DataFrame({'a': list(range(100000))}).write_parquet("
              "'reviews.parquet')); m.main()")
    out = subprocess.run([sys.executable, "-c", script, "fill"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("error: the disk is full (") and out.stderr.count("\n") == 1
