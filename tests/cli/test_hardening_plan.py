"""`grebench plan` with arguments no release can answer: an infinite gap, an empty --metric, levels
off their range. One line, exit 2, never a plan."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tests.stages.validate.test_plan import scores_frame


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "pipelines.toml"
    path.write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/t.duckdb'\n"
                    "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    (tmp_path / "data").mkdir()
    with duckdb.connect(str(tmp_path / "data" / "t.duckdb")) as con:
        con.register("frame", scores_frame(np.random.default_rng(5)).to_arrow())
        con.execute("create table scores as select * from frame")
    return path


@pytest.mark.parametrize(("args", "line"), [
    (["--gap", "inf"], "error: --gap inf: give a positive, finite difference"),
    (["--gap", "nan"], "error: --gap nan: give a positive, finite difference"),
    (["--gap", "0"], "error: --gap 0: give a positive, finite difference"),
    (["--gap", "0.5", "--power", "1"], "error: --power and --alpha must lie between 0 and 1"),
    (["--gap", "0.5", "--metric", ""], "error: --metric is empty"),
    (["--gap", "0.5", "--metric", " "], "error: --metric is empty"),
])
def test_an_argument_no_plan_can_answer_is_one_line(config: Path, args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, ["plan", *args, "-c", str(config), "-p", "t"])
    assert result.exit_code == 2
    assert result.output.startswith(line) and result.output.count("\n") == 1
    assert "papers needed" not in result.output


def test_a_huge_finite_gap_still_plans(config: Path) -> None:
    result = CliRunner().invoke(app, ["plan", "--gap", "1e300", "-c", str(config), "-p", "t"])
    assert result.exit_code == 0 and "papers for the median pair" in result.output


@pytest.mark.parametrize(("args", "line"), [
    (["plan", "--gap", "abc"], "error: grebench plan: Invalid value for '--gap'"),
    (["plan"], "error: grebench plan: Missing option '--gap'."),
    (["plan", "--gap", "0.5", "--bogus"], "error: grebench plan: No such option: --bogus"),
    (["nosuchcmd"], "error: grebench: No such command 'nosuchcmd'."),
])
def test_a_usage_error_is_one_line_too(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, args, prog_name="grebench")
    assert result.exit_code == 2 and "╭" not in result.output       # before: click's framed box of 3+ lines
    assert result.output.startswith(line) and result.output.count("\n") == 1
