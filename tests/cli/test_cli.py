import json

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app, check_read_only

runner = CliRunner()


@pytest.fixture
def config_with_db(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndatabase = 'r.duckdb'\n")
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        con.execute("create table reviews as select range as i from range(7)")
    return tmp_path / "pipelines.toml"


def test_query_prints_a_table(config_with_db):
    result = runner.invoke(app, ["query", "select count(*) as n from reviews", "-c", str(config_with_db)])
    assert result.exit_code == 0, result.output
    assert "7" in result.output


def test_query_json(config_with_db):
    result = runner.invoke(app, ["query", "select max(i) as m from reviews", "-f", "json", "-c", str(config_with_db)])
    assert json.loads(result.output.strip().splitlines()[-1]) == [{"m": 6}]


@pytest.mark.parametrize(
    "sql",
    ["delete from reviews", "drop table reviews", "select 1; insert into reviews values (9)",
     "copy reviews to 'x.csv'", "attach 'other.duckdb'", "create table t(i int)"],
)
def test_write_statements_are_refused(config_with_db, sql):
    result = runner.invoke(app, ["query", sql, "-c", str(config_with_db)])
    assert result.exit_code == 2
    assert "read-only" in result.output
    with duckdb.connect(str(config_with_db.parent / "r.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from reviews").fetchone() == (7,)


def test_read_statements_pass_the_check():
    check_read_only("select 1; explain select 2; pragma version")


def test_query_errors_are_one_line(config_with_db):
    result = runner.invoke(app, ["query", "select * from nope", "-c", str(config_with_db)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1


def test_missing_database_says_what_to_run(tmp_path):
    (tmp_path / "pipelines.toml").write_text("")
    result = runner.invoke(app, ["query", "select 1", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2
    assert "grebench run demo" in result.output


def test_bad_config_is_one_line_not_a_traceback(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[curate]\nmin_confidence = 'high'\n")
    result = runner.invoke(app, ["run", "demo", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2
    assert "curate.min_confidence" in result.output
    assert "Traceback" not in result.output


def test_unknown_stage_is_refused(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[pipelines.p]\nvenues = ['V']\nstages = ['ingest']\n")
    result = runner.invoke(app, ["run", "p", "--stages", "cook", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2
    assert "unknown stage" in result.output


def test_schedule_dry_run_prints_the_yearly_cron_and_registers_nothing(tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    result = runner.invoke(app, ["schedule", "--dry-run", "-c", str(root / "pipelines.toml")])
    assert result.exit_code == 0, result.output
    assert "cron:       0 6 15 12 * (UTC)" in result.output
    assert "yearly-refresh" in result.output
    assert "dry run: nothing registered" in result.output
    runs = [line for line in result.output.splitlines() if line.startswith("next runs:")][0]
    assert runs.count("-12-15T06:00:00") == 3


def test_schedule_rejects_a_bad_cron(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[schedule]\ncron = '61 * * * *'\n")
    result = runner.invoke(app, ["schedule", "--dry-run", "-c", str(tmp_path / "pipelines.toml")])
    assert result.exit_code == 2
    assert "schedule.cron" in result.output
