"""Tools to run the refresh rehearsal (`[pipelines.rehearsal]` in pipelines.toml) from a bench or a test.

A rehearsal project is a folder with a copy of pipelines.toml and one more pipeline extending
`rehearsal` at a chosen size (`rehearsal_project`); its data lands in that folder's `data/`. Runs are
`grebench run` subprocesses in a session of their own (`start_run`), so a SIGKILL to the group stops
the CLI and the Prefect server it started (`kill_group`). The run record (data/<pipeline>/runs/)
names the stage that is running (`running_stage`); the local server logs every request it answered
(`logged_requests`); `table_rows` reads every table of the results database, for comparing runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
FULL_SIZE = 19_525    # ICLR 2026's submissions
VOLATILE_TABLES = frozenset({"runs", "_build", "llm_usage"})   # a record per run, a build stamp, usage per run
VOLATILE_COLUMNS = frozenset({"run_id", "started_at", "ended_at", "duration_s", "created_at", "built_at",
                              "updated_at", "added_at", "release_id", "finished"})


def pipeline_name(scale: int) -> str:
    """The rehearsal pipeline at 1/`scale` of ICLR 2026's size ("rehearsal" at full size)."""
    return "rehearsal" if scale == 1 else f"rehearsal-x{scale}"


def rehearsal_project(folder: Path, scale: int = 1, extra: str = "", papers: int | None = None) -> Path:
    """pipelines.toml in `folder`: the project's own, and `pipeline_name(scale)` serving
    FULL_SIZE / `scale` submissions (or `papers`); `extra` is TOML appended to that pipeline's table."""
    folder.mkdir(parents=True, exist_ok=True)
    name = pipeline_name(scale)
    text = (ROOT / "pipelines.toml").read_text(encoding="utf-8")
    n = papers or round(FULL_SIZE / scale)
    if name != "rehearsal" or papers:
        text += (f'\n[pipelines.{name}]\nextends = "rehearsal"\n{extra}\n'
                 f"[pipelines.{name}.synthetic]\nn_papers = {n}\n")
    path = folder / "pipelines.toml"
    path.write_text(text, encoding="utf-8")
    return path


def start_run(config: Path, pipeline: str, stages: str | None = None) -> subprocess.Popen:
    """`grebench run <pipeline>` on `config`, in a session of its own, output to files beside it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GREBENCH_LOCK_TIMEOUT": "120", "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-m", "flows.cli.main", "run", pipeline, "-c", str(config)]
    if stages:
        args += ["--stages", stages]
    logs = config.parent / "logs"
    logs.mkdir(exist_ok=True)
    stamp = time.strftime("%H%M%S") + f"-{time.monotonic_ns() % 10**6}"
    err_path = logs / f"{stamp}.err"
    with (logs / f"{stamp}.out").open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(args, cwd=config.parent, env=env, stdout=out, stderr=err, start_new_session=True)
    proc.err_path = err_path   # type: ignore[attr-defined]
    return proc


def error_line(proc: subprocess.Popen) -> str:
    """The last line the run wrote to stderr (its one-line error, where it failed)."""
    path: Path = proc.err_path   # type: ignore[attr-defined]
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [""])[-1][:300]


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the run's whole session (the CLI, Prefect's server, any child)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def runs_dir(config: Path, pipeline: str) -> Path:
    return config.parent / "data" / pipeline / "runs"


def latest_record(config: Path, pipeline: str) -> pl.DataFrame:
    """The newest run record of `pipeline` (one row per stage begun), or an empty frame."""
    files = sorted(runs_dir(config, pipeline).glob("*.parquet"), key=lambda p: p.stat().st_mtime)
    for path in reversed(files):
        with contextlib.suppress(OSError, pl.exceptions.ComputeError):
            return pl.read_parquet(path)
    return pl.DataFrame()


def running_stage(config: Path, pipeline: str, since: float) -> str | None:
    """The stage a run started after `since` (epoch seconds) is in now, per its record; None before the
    record exists or when no stage is running."""
    files = [p for p in runs_dir(config, pipeline).glob("*.parquet") if p.stat().st_mtime >= since]
    if not files:
        return None
    try:
        record = pl.read_parquet(max(files, key=lambda p: p.stat().st_mtime))
    except (OSError, pl.exceptions.ComputeError):   # caught mid-write: ask again
        return None
    running = record.filter(pl.col("status") == "running")
    return running["stage"][-1] if running.height else None


def logged_requests(config: Path, pipeline: str) -> list[dict[str, Any]]:
    """Every request the pipeline's local server answered, over all its runs (`request_log = true`)."""
    path = config.parent / "data" / pipeline / "server" / "requests.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):   # a line cut by a kill
            rows.append(json.loads(line))
    return rows


def request_key(row: dict[str, Any]) -> str:
    return f"{row['api']} {row['endpoint']} {json.dumps(row['params'], sort_keys=True)}"


def table_rows(database: Path) -> dict[str, list[tuple]]:
    """Every table of the results database as sorted rows, without the tables and columns that differ
    from run to run by nature (VOLATILE_TABLES, VOLATILE_COLUMNS)."""
    import duckdb

    out = {}
    with duckdb.connect(str(database), read_only=True) as con:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()]
        for name in names:
            if name in VOLATILE_TABLES:
                continue
            columns = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index", [name]
            ).fetchall() if r[0] not in VOLATILE_COLUMNS]
            if not columns:
                continue
            listed = ", ".join(f'"{c}"' for c in columns)
            rows = con.execute(f'SELECT {listed} FROM "{name}"').fetchall()
            out[name] = sorted(rows, key=repr)
    return out
