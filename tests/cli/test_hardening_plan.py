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


def simulated_power(n: int, sd: float, gap: float, alpha: float = 0.05, draws: int = 200_000) -> float:
    """The paired t-test's power by simulation (the reference the computed power must meet)."""
    from scipy import stats

    diffs = np.random.default_rng(11).normal(gap, sd, size=(draws, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / np.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)))


def test_the_power_is_a_number_where_scipys_noncentral_t_gives_nan_and_matches_a_simulation() -> None:
    from tasks.stages.validate.planning import paired_power, papers_needed

    for n in (2, 3, 5):
        computed = paired_power(n, 0.06, 0.5, 0.05)
        assert abs(computed - simulated_power(n, 0.06, 0.5)) < 0.01, (n, computed)
    assert abs(paired_power(2, 0.06, 0.5, 0.05) - 0.644) < 0.01
    assert papers_needed(0.06, 0.5) == 3          # 2 papers reach power 0.644 only


def test_more_papers_for_a_higher_power_never_fewer_for_a_wider_spread() -> None:
    from tasks.stages.validate.planning import papers_needed

    powers = [1e-300, 0.01, 0.3, 0.5, 0.8, 0.9, 0.99]
    for sd in (0.01, 0.06, 0.3, 1.0):
        needed = [papers_needed(sd, 0.5, power=p) for p in powers]
        assert needed == sorted(needed), (sd, needed)
    spreads = [0.001, 0.01, 0.05, 0.06, 0.08, 0.1, 0.2, 0.5, 1.0, 2.0]
    needed = [papers_needed(sd, 0.5) for sd in spreads]
    assert needed == sorted(needed), needed


def test_plan_on_a_release_asks_more_papers_for_more_power(config: Path) -> None:
    def plans(power: str) -> list[str]:
        result = CliRunner().invoke(app, ["plan", "--gap", "0.05", "--power", power, "-c", str(config), "-p", "t"])
        assert result.exit_code == 0, result.output
        return [line for line in result.output.splitlines() if line.startswith("- ")]

    import re

    low, high = plans("1e-300"), plans("0.8")
    for a, b in zip(low, high, strict=True):
        median_a, widest_a = map(int, re.findall(r"(\d+) (?:papers for|for the most)", a))
        median_b, widest_b = map(int, re.findall(r"(\d+) (?:papers for|for the most)", b))
        assert median_a <= median_b and widest_a <= widest_b and median_b <= widest_b, (a, b)
