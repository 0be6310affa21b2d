"""Soak: kill -9 a synthetic-venue pipeline run (ingest -> curate -> materialize) at random moments.

    .venv/bin/python bench/soak/soak.py [--kills 20] [--papers 40] [--seed 0] [--keep DIR]

A clean run in its own folder gives the reference: the rows of every table in the results
database. Then, in one project folder (so whatever a killed run leaves behind stays there), each
round starts `grebench run soak`, sends SIGKILL to its whole process group (the CLI and Prefect's
ephemeral server) after a random delay between 0 and the previous rerun's duration, checks
that the database (when there is one) still opens, and reruns the pipeline to completion. A
rerun that exits 0 is a recovery; rows lost counts reference rows missing from any table after
it. "opened" uses what `grebench query` does (a stale WAL is replayed or set aside first);
"opened_plain" is a bare read-only DuckDB open. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tasks.core.locks import locked, recover_database, wal_path  # noqa: E402
from tasks.core.sandbox import connect_sandboxed  # noqa: E402

IGNORED = {"runs", "_build", "llm_usage"}   # runs grows by one record per run; _build is a timestamp

CONFIG = """
[paths]
data_dir = "data"
database = "data/grebench.duckdb"

[ingest]
page_size = 10
backoff_seconds = 0.05
max_backoff_seconds = 0.5
timeout_seconds = 20

[pipelines.soak]
description = "soak: a synthetic venue, ingest -> curate -> materialize"
source = "synthetic"
venues = ["GREBench.cc/2025/Demo"]
stages = ["ingest", "curate", "materialize"]

[pipelines.soak.synthetic]
n_papers = {papers}
reviews_per_paper = 4
seed = 0
pdfs = true
bad_cases = true
"""


def make_project(folder: Path, papers: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pipelines.toml"
    path.write_text(CONFIG.format(papers=papers))
    return path


def start(config: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GREBENCH_LOCK_TIMEOUT": "120"}
    return subprocess.Popen([sys.executable, "-m", "flows.cli.main", "run", "soak", "-c", str(config)],
                            cwd=config.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def run_to_end(config: Path, timeout: float = 900) -> tuple[int, str, float]:
    began = time.monotonic()
    proc = start(config)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return -1, "timed out", time.monotonic() - began
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    return proc.returncode, (errors[-1] if errors else err.strip().splitlines()[-1:] or [""])[0][:300], \
        time.monotonic() - began


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def table_rows(database: Path, plain: bool = False) -> dict[str, int] | None:
    """Rows per table, opened as `grebench query` opens it (or bare read-only); None if it fails."""
    try:
        if plain:
            con = duckdb.connect(str(database), read_only=True)
        else:
            if wal_path(database).exists():
                with locked(database, timeout=120):
                    recover_database(database)
            con = connect_sandboxed(database)
        with con:
            names = [r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()]
            return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names if n not in IGNORED}
    except duckdb.Error as error:
        print(f"  database did not open: {str(error).splitlines()[0][:200]}", flush=True)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--papers", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = args.keep or Path(tempfile.mkdtemp(prefix="grebench-soak-"))
    try:
        reference_cfg = make_project(work / "reference", args.papers)
        code, detail, duration = run_to_end(reference_cfg)
        if code != 0:
            raise SystemExit(f"the reference run failed ({code}): {detail}")
        reference = table_rows(reference_cfg.parent / "data" / "grebench.duckdb")
        print(f"reference run: {duration:.1f} s, tables {reference}", flush=True)

        config = make_project(work / "soak", args.papers)
        database = config.parent / "data" / "grebench.duckdb"
        stats = {"runs": 1, "kills": 0, "killed_before_exit": 0, "recoveries": 0, "failed_reruns": 0,
                 "rows_lost": 0, "rows_extra": 0, "database_always_opened": True, "opened_plain_failures": 0}
        failures: list[str] = []
        window = duration
        for round_ in range(1, args.kills + 1):
            delay = rng.uniform(0, window)
            proc = start(config)
            stats["runs"] += 1
            time.sleep(delay)
            alive = proc.poll() is None
            kill_group(proc)
            stats["kills"] += 1
            stats["killed_before_exit"] += alive
            opened = None
            if database.exists():
                if table_rows(database, plain=True) is None:
                    stats["opened_plain_failures"] += 1
                opened = table_rows(database)
                if opened is None:
                    stats["database_always_opened"] = False
            code, detail, took = run_to_end(config)
            stats["runs"] += 1
            window = took    # a warm rerun (cached pages) is shorter than the first run: aim inside it
            after = table_rows(database) if database.exists() else None
            if after is None:
                stats["database_always_opened"] = False
            if code == 0 and after is not None:
                stats["recoveries"] += 1
            else:
                stats["failed_reruns"] += 1
                failures.append(f"round {round_}: rerun exit {code}: {detail}")
            lost = sum(max(0, n - (after or {}).get(t, 0)) for t, n in reference.items())
            extra = sum(max(0, n - reference.get(t, 0)) for t, n in (after or {}).items())
            stats["rows_lost"] += lost
            stats["rows_extra"] += extra
            print(f"round {round_:2d}: killed after {delay:5.1f} s ({'mid-run' if alive else 'already done'}); "
                  f"rerun exit {code} in {took:.1f} s; rows lost {lost}, extra {extra}", flush=True)
        leftovers = sorted(p.name for p in database.parent.iterdir()
                           if p.name.startswith(".") or p.name.endswith((".wal", ".tmp")) or ".stale-" in p.name)
        print(f"runs {stats['runs']}, kills {stats['kills']} ({stats['killed_before_exit']} mid-run), recoveries "
              f"{stats['recoveries']}, rows lost {stats['rows_lost']}, database always opened "
              f"{stats['database_always_opened']}", flush=True)
        for line in failures:
            print(line, flush=True)
        print(json.dumps({**stats, "reference_rows": reference, "reference_seconds": round(duration, 1),
                          "leftovers": leftovers, "papers": args.papers, "seed": args.seed}))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
