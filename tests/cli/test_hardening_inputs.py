"""Inputs that used to end in a traceback end in one `error:` line with a non-zero exit: a gap so
small no release could detect it, `extends` naming a list."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tests.stages.validate.test_plan import scores_frame

runner = CliRunner()


@pytest.mark.parametrize("gap", ["1e-300", "1e-8", "1e-12"])
def test_a_gap_too_small_to_plan_for_is_one_line(tmp_path, gap):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/t.duckdb'\n"
                                             "[pipelines.t]\nvenues = ['T.cc/2025/Conference']\nstages = ['materialize']\n")
    (tmp_path / "data").mkdir()
    with duckdb.connect(str(tmp_path / "data" / "t.duckdb")) as con:
        con.register("frame", scores_frame(np.random.default_rng(5)).to_arrow())
        con.execute("create table scores as select * from frame")
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
