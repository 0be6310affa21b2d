"""What the soak's scenario files share: the paths, the command line, the checks and the small
projects a scenario starts from (bench/soak/soak_hardening.py runs them all)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
VENUE = "Test.cc/2025/Conference"
PIPES = "".join(f"[pipelines.{n}]\nvenues = ['{VENUE}']\nstages = ['ingest', 'curate', 'materialize']\n"
                for n in ("t", "u"))


class Broken(AssertionError):
    """The attempt did not hold; the message says how."""


def check(condition: bool, why: str) -> None:
    if not condition:
        raise Broken(why)


def cli(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli.main", *args], cwd=cwd, env={**ENV, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess, code: int, needle: str) -> None:
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    check(done.returncode == code, f"exit {done.returncode}, wanted {code}: {done.stderr[-300:]}")
    check(len(errors) == 1 and needle in errors[0], f"error lines {errors}, wanted one with {needle!r}")
    check("Traceback" not in done.stderr, "a traceback")


def small_db(root: Path, database: str = "r.duckdb") -> Path:
    import duckdb

    path = root / "pipelines.toml"
    path.write_text(f"[paths]\ndata_dir = 'data'\ndatabase = '{database}'\n[query]\nmemory_limit_mb = 256\n" + PIPES)
    with duckdb.connect(str(root / "r.duckdb")) as con:
        con.execute("create table reviews as select range as i from range(5)")
    return path


def built_project(root: Path, database: str = "data/{pipeline}/grebench.duckdb") -> Path:
    from tasks.core.config import load_config
    from tests.stages.materialize.test_materialize import write_outputs

    path = root / "pipelines.toml"
    path.write_text(f"[paths]\ndata_dir = 'data'\ndatabase = '{database}'\n" + PIPES)
    cfg = load_config(path)
    write_outputs(cfg)
    shutil.copytree(cfg.data_dir / "t", cfg.data_dir / "u")
    return path


def submit_project(root: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tasks.core.config import load_config
    from tests.submit_data import good_review, write_config, write_curated

    config = write_config(root, ["bleu"], stages=("score", "validate", "materialize"))
    write_curated(load_config(config).for_pipeline("t"))
    for name, papers in (("a", (1, 2, 3)), ("b", (1, 2))):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"paper_id": f"P{k}", "review": good_review(k)}) + "\n"
                                                  for k in papers))
    return config


def login_config(root: Path, server) -> Path:
    """pipelines.toml with two OpenReview pipelines on `server`: `refresh` (the yearly venue `login --check`
    reads) and `leak` (one venue of its own, so that a run logs in)."""
    config = root / "pipelines.toml"
    config.write_text((ROOT / "pipelines.toml").read_text().split("[pipelines.demo]")[0] + "".join(f"""
[pipelines.{name}]
source = "openreview"
venues = ["ICLR.cc/{venue}/Conference"]
stages = ["ingest"]

[pipelines.{name}.ingest]
api_v1_url = "{server.v1_url}"
api_v2_url = "{server.v2_url}"
max_retries = 0
""" for name, venue in (("refresh", "{year}"), ("leak", "2025"))))   # leak: a venue of its own, so a run logs in
    return config


Attempt = Callable[[Path], None]


def scenarios(*attempts: Attempt, slow: tuple[Attempt, ...] = ()) -> dict[str, tuple[Attempt, bool]]:
    """A soak file's registry: each attempt under its function's name, with whether it is slow."""
    return {attempt.__name__: (attempt, attempt in slow) for attempt in attempts}
