"""Bounded queries, one database per pipeline, safe names and quoted suggestions, checked --reviews files."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli.main import app, main, sql_arguments
from flows.cli.run import run_summary
from tasks.core.config import ConfigError, load_config
from tasks.core.summary import StageSummary
from tasks.stages.materialize.build import OtherPipelineError, build_database
from tasks.stages.validate.reviews_file import ReviewsFileError, load_reviews_file
from tests.stages.materialize.test_materialize import VENUE, write_outputs

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
PIPELINES = "".join(f"[pipelines.{n}]\nvenues = ['{VENUE}']\nstages = ['ingest', 'curate', 'materialize']\n"
                    for n in ("t", "u"))


def project(tmp_path: Path, database: str = "data/{pipeline}/grebench.duckdb") -> Path:
    path = tmp_path / "pipelines.toml"
    path.write_text(f"[paths]\ndata_dir = 'data'\ndatabase = '{database}'\n[query]\ntimeout_seconds = 60\n" + PIPELINES)
    return path


def two_pipelines(tmp_path: Path, database: str = "data/{pipeline}/grebench.duckdb"):
    path = project(tmp_path, database)
    cfg = load_config(path)
    write_outputs(cfg)
    shutil.copytree(cfg.data_dir / "t", cfg.data_dir / "u")
    return path, cfg


def query(path: Path, sql: str, *args: str):
    return runner.invoke(app, ["query", sql, "-f", "csv", "-c", str(path), *args])


# ---- one database per pipeline --------------------------------------------------------------------

def test_two_pipelines_materialized_one_after_the_other_both_stay_queryable(tmp_path):
    path, cfg = two_pipelines(tmp_path)
    build_database(cfg, "t")
    build_database(cfg, "u")
    for name in ("t", "u"):
        result = query(path, "select pipeline, (select count(*) from reviews) as n from _build", "--pipeline", name)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == ["pipeline,n", f"{name},3"]
    newest = query(path, "select pipeline from _build")      # no --pipeline: the newest, and it says so
    assert newest.stdout.splitlines() == ["pipeline", "u"]
    assert "results of pipeline u" in newest.stderr and "also built: t" in newest.stderr


def test_a_shared_database_refuses_to_replace_another_pipelines_results(tmp_path):
    path, cfg = two_pipelines(tmp_path, database="data/shared.duckdb")
    build_database(cfg, "t")
    with pytest.raises(OtherPipelineError, match=r"holds the results of pipeline 't'.*\{pipeline\}"):
        build_database(cfg, "u")
    assert query(path, "select pipeline from _build").stdout.splitlines() == ["pipeline", "t"]
    wrong = query(path, "select 1", "--pipeline", "u")
    assert wrong.exit_code == 2 and "holds the results of pipeline 't'" in wrong.output


def test_site_and_report_say_whose_results_they_show(tmp_path):
    path, cfg = two_pipelines(tmp_path)
    build_database(cfg, "t")
    site = runner.invoke(app, ["site", "-c", str(path), "--pipeline", "t"])
    assert site.exit_code == 0, site.output
    index = (cfg.data_dir / "t" / "site" / "index.html").read_text()
    assert "pipeline t" in index
    report = runner.invoke(app, ["report", "-c", str(path)])
    assert report.exit_code == 0, report.output
    assert "results of pipeline t" in report.output
    assert "Results of pipeline `t`" in (cfg.data_dir / "t" / "report" / "report.md").read_text()


# ---- names ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["/tmp/x", "../../x", "my pipe; rm -rf ~", "a/b", "..", ".hidden", "$(id)"])
def test_hostile_pipeline_names_are_refused_where_the_config_is_read(tmp_path, name):
    path = tmp_path / "pipelines.toml"
    path.write_text(f"[pipelines.{_toml_key(name)}]\nvenues = ['V']\nstages = ['ingest']\n")
    with pytest.raises(ConfigError, match="is not allowed"):
        load_config(path)
    result = runner.invoke(app, ["run", name, "-c", str(path)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "not allowed" in result.output
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("venue", ["..", "a/../b", "/etc", "x//y", "./x", "V/..", "a\\b", "x y"])
def test_hostile_venue_ids_are_refused(tmp_path, venue):
    path = tmp_path / "pipelines.toml"
    path.write_text(f"[pipelines.p]\nvenues = [{_toml_string(venue)}]\nstages = ['ingest']\n")
    with pytest.raises(ConfigError, match="venue id .* is not allowed"):
        load_config(path)
    with pytest.raises(ConfigError, match="not allowed"):
        load_config(project(tmp_path)).for_pipeline("t", venues=[venue])


def test_a_hostile_pipeline_name_never_reaches_a_path(tmp_path):
    cfg = load_config(project(tmp_path))
    with pytest.raises(ValueError, match="not allowed"):
        cfg.database_for("../../escape")
    result = query(project(tmp_path), "select 1", "--pipeline", "../x")
    assert result.exit_code == 2 and "not allowed" in result.output


def test_suggested_commands_are_quoted_for_the_shell(tmp_path):
    cfg = load_config(project(tmp_path))
    text = run_summary(cfg.for_pipeline("t"), "t", {"ingest": StageSummary(1, 1)})
    commands = [line.split("#")[0].strip() for line in text.splitlines() if line.strip().startswith("grebench")]
    assert commands and all(shlex.split(c)[0] == "grebench" for c in commands)
    assert "grebench run t --stages materialize" in text
    built = run_summary(cfg.for_pipeline("t"), "t", {"materialize": StageSummary(1, 1)})
    line = next(x for x in built.splitlines() if "grebench query" in x)
    assert shlex.split(line) == ["grebench", "query", "--pipeline", "t",
                                 "select metric, model, mean, ci_low, ci_high from leaderboard"]


def _toml_key(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_string(text: str) -> str:
    return "'" + text + "'" if "'" not in text else '"' + text + '"'


# ---- queries: SQL opening with a comment, limits, timeout, Ctrl-C ----------------------------------

@pytest.fixture
def small(tmp_path):
    path = project(tmp_path, database="r.duckdb")
    path.write_text(path.read_text().replace("timeout_seconds = 60", "timeout_seconds = 60\nmemory_limit_mb = 256"))
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        con.execute("create table reviews as select range as i from range(5)")
    return path


def test_sql_opening_with_a_comment_is_sql_not_an_option(small, capsys):
    assert sql_arguments(["query", "-- totals\nselect 1", "-c", "x"]) == ["query", "-c", "x", "--", "-- totals\nselect 1"]
    with pytest.raises(SystemExit) as done:
        main(["query", "-- how many\nselect count(*) as n from reviews", "-f", "csv", "-c", str(small)])
    assert done.value.code in (0, None)
    assert capsys.readouterr().out.splitlines() == ["n", "5"]


def test_limits_are_set_before_the_sql_and_locked(small):
    result = query(small, "select current_setting('memory_limit') as m, current_setting('threads') as t")
    assert result.exit_code == 0, result.output
    memory, threads = result.stdout.splitlines()[1].split(",")
    assert memory == "244.1 MiB" and threads == "2"      # 256 MB, as [query] memory_limit_mb says
    raised = query(small, "set memory_limit = '100GB'; select 1")
    assert raised.exit_code == 2 and raised.output.count("\n") == 1


def test_a_huge_string_fails_fast_as_out_of_memory(small):
    started = time.monotonic()
    result = query(small, "select length(repeat('x', 4000000000)) as n")
    assert result.exit_code == 2 and "Out of Memory" in result.output and result.output.count("\n") == 1
    assert time.monotonic() - started < 30


def _cli(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "flows.cli.main", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


ENDLESS = "with recursive r(i) as (select 1 union all select i + 1 from r) select count(*) from r"


@pytest.mark.slow   # waits out a timeout or a retry back-off: seconds of sleeping
def test_a_query_past_its_timeout_is_interrupted_with_exit_124(small):
    proc = _cli(["query", ENDLESS, "--timeout", "2", "-c", str(small)], small.parent)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 124, err
    assert err.strip().splitlines() == ["error: the query ran longer than 2 s and was interrupted (--timeout, "
                                        "or [query] timeout_seconds in pipelines.toml)"]


def test_ctrl_c_interrupts_a_query_and_exits_130_at_once(small):
    proc = _cli(["query", "select count(*) from range(100000000000) a, range(1000) b", "-c", str(small)],
                small.parent)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _query_thread(proc.pid):
        time.sleep(0.2)        # the query runs in the thread the command names grebench-query
    assert _query_thread(proc.pid), "the query never started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip().endswith("error: interrupted"), err
    assert time.monotonic() - sent < 10
    assert not Path(f"/proc/{proc.pid}").exists()


def _query_thread(pid: int) -> bool:
    try:
        return any(Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() == "grebench-query"
                   for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return False


def test_query_honours_the_lock_timeout_and_moves_a_random_wal_aside(small, monkeypatch):
    database = small.parent / "r.duckdb"
    (small.parent / "r.duckdb.wal").write_bytes(os.urandom(4096))
    result = query(small, "select count(*) as n from reviews")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["n", "5"], result.output
    assert not (small.parent / "r.duckdb.wal").exists() and list(small.parent.glob("r.duckdb.wal.stale-*"))
    # a writer holding the lock: the reader waits GREBENCH_LOCK_TIMEOUT seconds, not a fixed 30
    (small.parent / "r.duckdb.wal").write_bytes(os.urandom(4096))
    from filelock import FileLock

    holder = FileLock(str(database) + ".lock")
    holder.acquire()
    try:
        monkeypatch.setenv("GREBENCH_LOCK_TIMEOUT", "0.5")
        started = time.monotonic()
        blocked = query(small, "select 1")
        assert blocked.exit_code == 2 and "GREBENCH_LOCK_TIMEOUT" in blocked.output
        assert time.monotonic() - started < 10
    finally:
        holder.release()


# ---- --reviews files -------------------------------------------------------------------------------

BASE = {"paper_id": ["p1", "p2"], "reviewer": ["a", "b"], "review": ["clear", "vague"]}


@pytest.mark.parametrize(("column", "values", "needle"), [
    ("review", [["x"], ["y"]], "review is List"),
    ("review", [{"a": 1}, {"a": 2}], "review is Struct"),
    ("review", [b"x", b"y"], "review is Binary"),
    ("quality", [[1.0], [2.0]], "quality is List"),
    ("quality", [1.0, float("nan")], "not a finite number (nan or inf) in row(s) 2"),
    ("quality", [float("inf"), 2.0], "not a finite number (nan or inf) in row(s) 1"),
])
def test_wrong_column_types_and_non_finite_scores_are_refused_with_a_reason(tmp_path, column, values, needle):
    path = tmp_path / "reviews.parquet"
    pl.DataFrame({**BASE, column: values}).write_parquet(path)
    with pytest.raises(ReviewsFileError, match=None) as raised:
        load_reviews_file(path)
    assert needle in str(raised.value) and "\n" not in str(raised.value)
    result = runner.invoke(app, ["validate", "--reviews", str(path), "--metric", "bleu", "-c",
                                 str(project(tmp_path))])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and needle in result.output


def test_nan_in_a_csv_quality_column_is_refused(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("paper_id,reviewer,review,quality\np1,a,clear,4\np2,b,vague,NaN\n")
    with pytest.raises(ReviewsFileError, match=r"row\(s\) 2"):
        load_reviews_file(path)
