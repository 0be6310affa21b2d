"""The results database after kill -9, leftovers of crashed writers, and concurrent writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from tasks.core.locks import LockTimeout, locked, wal_path
from tasks.stages.materialize.build import build_database, update_tables
from tests.stages.materialize.test_materialize import make_config, write_outputs

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _query(cfg, sql: str = "select count(*) from reviews"):
    return CliRunner().invoke(app, ["query", sql, "-f", "csv", "-c", str(cfg.root / "pipelines.toml")])


@pytest.fixture
def built(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    build_database(cfg, "t")
    return cfg


KILLED_MID_WRITE = """
import os, sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("create or replace table runs as select 1 as x")   # committed to the WAL, never checkpointed
os.kill(os.getpid(), 9)
"""


def test_a_wal_left_by_kill_9_does_not_block_queries_or_builds(built):
    proc = _python(KILLED_MID_WRITE, str(built.database))
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and wal_path(built.database).exists()
    build_database(built, "t")            # swaps in a new file; the old file's WAL must not follow it
    assert _query(built).output.splitlines() == ["count_star()", "3"]
    update_tables(built, "t", {"staging.runs", "runs"})
    assert _query(built).exit_code == 0
    assert not wal_path(built.database).exists()


def test_a_wal_that_belongs_to_another_file_is_moved_aside(built, tmp_path):
    other = tmp_path / "other.duckdb"
    proc = _python(KILLED_MID_WRITE, str(other))
    proc.wait(timeout=60)
    os.replace(wal_path(other), wal_path(built.database))
    result = _query(built)
    assert result.exit_code == 0, result.output
    assert list(built.database.parent.glob("grebench.duckdb.wal.stale-*"))
    build_database(built, "t")


def test_scratch_files_of_a_killed_build_do_not_block_the_next(built):
    data = built.database.parent
    for name in ("grebench.duckdb.building", "grebench.duckdb.building.wal",
                 ".grebench.duckdb.99999.deadbeef.tmp", ".grebench.duckdb.99999.deadbeef.tmp.wal"):
        (data / name).write_bytes(b"\x00garbage from a killed build" * 100)
    build_database(built, "t")
    assert sorted(p.name for p in data.iterdir() if p.is_file() and p.suffix != ".lock") == ["grebench.duckdb"]
    assert _query(built).exit_code == 0


BUILD_AND_DIE = """
import sys, time
from pathlib import Path
from tasks.core.config import load_config
from tasks.stages.materialize.build import build_database
cfg = load_config(sys.argv[1])
while True:
    build_database(cfg, 't')
"""


@pytest.mark.slow
def test_kill_9_in_the_middle_of_builds_never_loses_the_database(built):
    for delay in (0.9, 1.2, 1.5, 1.8):
        proc = _python(BUILD_AND_DIE, str(built.root / "pipelines.toml"))
        time.sleep(delay)   # import takes most of a second; then it builds in a loop
        proc.kill()
        proc.wait(timeout=30)
        result = _query(built)
        assert result.output.splitlines() == ["count_star()", "3"], result.output
    build_database(built, "t")
    assert not list(built.database.parent.glob(".grebench.duckdb.*"))


CONCURRENT = """
import sys
from tasks.core.config import load_config
from tasks.stages.materialize.build import build_database
cfg = load_config(sys.argv[1])
for _ in range(int(sys.argv[2])):
    result = build_database(cfg, 't')
    assert result.tables['reviews'] == 3, result.tables
print('ok')
"""


@pytest.mark.slow
def test_concurrent_builds_each_swap_in_a_whole_tested_database(built):
    procs = [_python(CONCURRENT, str(built.root / "pipelines.toml"), "6") for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "ok", err[-2000:]
    with duckdb.connect(str(built.database), read_only=True) as con:
        tables = {r[0] for r in con.execute("select table_name from duckdb_tables()").fetchall()}
    assert {"reviews", "papers", "rejects", "curation_report", "_build"} <= tables


HOLD = """
import sys, time
from pathlib import Path
from tasks.core.locks import locked
with locked(Path(sys.argv[1])):
    print('held', flush=True)
    time.sleep(30)
"""


def test_a_second_writer_waits_then_stops_with_a_clear_message(built, monkeypatch):
    holder = _python(HOLD, str(built.database))
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("GREBENCH_LOCK_TIMEOUT", "0.5")
        with pytest.raises(LockTimeout, match="being written by another grebench process"):
            build_database(built, "t")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with locked(built.database, timeout=5):   # the kernel released the dead holder's lock
        pass
    build_database(built, "t")


def test_a_killed_curate_staging_folder_is_neither_read_nor_kept(built):
    curate = built.data_dir / "t" / "venue" / "curate"
    leftover = curate / ".staging.99999.deadbeef.tmp"
    leftover.mkdir()
    for name in ("rejects", "papers", "reviews"):
        (leftover / f"{name}.parquet").write_bytes((curate / f"{name}.parquet").read_bytes())
    result = build_database(built, "t")       # the copies would double the rejects and break reconciliation
    assert result.tables == {"curation_report": 1, "papers": 1, "rejects": 2, "reviews": 3}
