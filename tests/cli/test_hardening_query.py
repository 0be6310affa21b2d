"""`grebench query` against hostile SQL: nothing written, nothing read outside the database; and
every column type exports in every --format."""

from __future__ import annotations

import hashlib
import json

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app

runner = CliRunner()


@pytest.fixture
def project(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "pipelines.toml").write_text("[paths]\ndata_dir = 'data'\ndatabase = 'data/grebench.duckdb'\n")
    with duckdb.connect(str(data / "grebench.duckdb")) as con:
        con.execute("create table reviews as select range as i, [range, 1] as l from range(7)")
    (tmp_path / "secret.txt").write_text("a,b\n1,2\n")
    schema_dir = tmp_path / "dump"
    schema_dir.mkdir()
    (schema_dir / "schema.sql").write_text(
        f"COPY (SELECT 42) TO '{tmp_path}/imported.csv';\n"
        f"ATTACH '{tmp_path}/made.duckdb' AS made (READ_WRITE);\n"
        "CREATE TABLE made.t AS SELECT 1;\n"
    )
    (schema_dir / "load.sql").write_text("")
    return tmp_path


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


HOSTILE = [
    "explain analyze copy (select 1) to '{db}'",
    "explain analyze copy (select 1) to '{root}/outside.csv'",
    "explain analyze copy (select 1) to '../outside.csv'",
    "copy (select 1) to '{root}/outside.csv'",
    "import database '{root}/dump'",
    "export database '{root}/exported'",
    "attach '{root}/other.duckdb' as o",
    "attach '{root}/other.duckdb' as o (read_write); create table o.t as select 1",
    "copy reviews from '{root}/secret.txt'",
    "create secret s (type s3, key_id 'k', secret 'v')",
    "create persistent secret s (type s3, key_id 'k', secret 'v')",
    "select * from read_csv('/etc/passwd')",
    "select * from read_csv('{root}/secret.txt')",
    "select * from read_text('/etc/passwd')",
    "select * from read_blob('/etc/hostname')",
    "select * from glob('/root/*')",
    "select * from glob('{root}/*')",
    "select * from read_parquet('{root}/x.parquet')",
    "select * from read_parquet('http://127.0.0.1:9/x.parquet')",
    "select * from read_csv('https://example.com/x.csv')",
    "select * from '{root}/secret.txt'",
    "install httpfs",
    "load httpfs",
    "force install httpfs from community",
    "set enable_external_access = true; select * from read_csv('/etc/passwd')",
    "reset lock_configuration",
    "pragma enable_profiling = 'json'",
    "set profiling_output = '{root}/profile.json'",
    "set temp_directory = '{root}/tmp'",
    "checkpoint",
    "drop table reviews",
    "delete from reviews",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_sql_is_refused_or_harmless(project, template):
    db = project / "data" / "grebench.duckdb"
    before_files, before_db = _files(project), _digest(db)
    sql = template.format(db=db, root=project)
    result = runner.invoke(app, ["query", sql, "-c", str(project / "pipelines.toml")])
    assert "Traceback" not in result.output
    if result.exit_code == 0:   # only harmless statements may succeed
        assert "root:" not in result.output and "1,2" not in result.output, result.output
    else:
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert _files(project) == before_files
    assert _digest(db) == before_db
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from reviews").fetchone() == (7,)


def test_write_statements_keep_their_one_line_refusal(project):
    result = runner.invoke(app, ["query", "drop table reviews", "-c", str(project / "pipelines.toml")])
    assert result.exit_code == 2
    assert "read-only" in result.output and "DROP" in result.output


@pytest.fixture
def all_types(tmp_path):
    (tmp_path / "pipelines.toml").write_text("[paths]\ndatabase = 'r.duckdb'\n")
    with duckdb.connect(str(tmp_path / "r.duckdb")) as con:
        con.execute("create table everything as select * exclude (bignum) from test_all_types()")
        con.execute("create table papers as select 'p1' as paper_id, ['a', 'b'] as keywords, "
                    "interval 1 month + interval 3 hour as age, 1.50::decimal(5, 2) as price, "
                    "date '2024-01-02' as day, {'x': 1} as s, map([1], ['one']) as m")
    return tmp_path / "pipelines.toml"


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.parametrize("table", ["everything", "papers"])
def test_every_column_type_exports_in_every_format(all_types, fmt, table):
    result = runner.invoke(app, ["query", f"select * from {table}", "-f", fmt, "-c", str(all_types)])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        rows = json.loads(result.output)
        assert len(rows) == (3 if table == "everything" else 1)
    if fmt == "csv" and table == "papers":
        import csv
        import io

        row = next(csv.DictReader(io.StringIO(result.output)))
        assert json.loads(row["keywords"]) == ["a", "b"]
        assert row["price"] == "1.5" and row["day"] == "2024-01-02"
    if fmt == "json" and table == "papers":
        row = json.loads(result.output)[0]
        assert row["keywords"] == ["a", "b"] and row["age"] == "P30DT3H" and row["price"] == 1.5
        assert row["day"] == "2024-01-02" and row["s"] == {"x": 1} and row["m"] == {"1": "one"}
