"""Run records: what each pipeline run did, stage by stage (the `runs` table).

A record is one row per stage with the run's identity repeated (run id, pipeline, config hash,
code version), the stage's start, end and duration, rows in / out, LLM calls, tokens and cost.
Figures come from the StageSummary each stage flow returns (tasks/core/summary.py).
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import write_parquet
from tasks.core.summary import StageSummary

RUNS = pl.Schema(
    {
        "run_id": pl.String,
        "pipeline": pl.String,
        "config_hash": pl.String,
        "code_version": pl.String,
        "stage": pl.String,
        "position": pl.Int32,
        "status": pl.String,
        "started_at": pl.Datetime("ms", "UTC"),
        "ended_at": pl.Datetime("ms", "UTC"),
        "duration_s": pl.Float64,
        "rows_in": pl.Int64,
        "rows_out": pl.Int64,
        "llm_calls": pl.Int64,
        "input_tokens": pl.Int64,
        "output_tokens": pl.Int64,
        "cost_usd": pl.Float64,
        "error": pl.String,
    }
)


@dataclass
class StageRecord:
    stage: str
    position: int
    started_at: datetime
    ended_at: datetime | None = None
    status: str = "running"
    rows_in: int | None = None
    rows_out: int | None = None
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None

    def finish(self, summary: StageSummary | None, error: BaseException | None = None) -> None:
        self.ended_at = now()
        self.status = "failed" if error else "completed"
        self.error = f"{type(error).__name__}: {error}".splitlines()[0][:500] if error else None
        if summary is not None:
            self.rows_in, self.rows_out = summary.rows_in, summary.rows_out
            self.llm_calls, self.cost_usd = summary.llm_calls, summary.cost_usd
            self.input_tokens, self.output_tokens = summary.input_tokens, summary.output_tokens


def now() -> datetime:
    return datetime.now(UTC)


def config_hash(cfg: Config, pipeline: str) -> str:
    """Hash of the resolved config (overrides such as `venues` included) and the pipeline name:
    equal hashes, equal settings."""
    digest = hashlib.sha256(cfg.model_dump_json().encode())
    digest.update(pipeline.encode())
    return digest.hexdigest()[:16]


def code_version() -> str:
    """`git describe` of the checkout when there is one, else the installed package version."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=root, capture_output=True, text=True, timeout=5, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("grebench")
        except PackageNotFoundError:
            return "unknown"


def write_run(
    cfg: Config, pipeline: str, run_id: str, config_digest: str, code: str, records: list[StageRecord]
) -> Path:
    """Write (or rewrite) the run's record under data/<pipeline>/runs/<run_id>.parquet."""
    rows = [
        {
            "run_id": run_id,
            "pipeline": pipeline,
            "config_hash": config_digest,
            "code_version": code,
            **{k: v for k, v in asdict(r).items()},
            "duration_s": (r.ended_at - r.started_at).total_seconds() if r.ended_at else None,
        }
        for r in records
    ]
    path = cfg.data_dir / pipeline / "runs" / f"{run_id}.parquet"
    return write_parquet(pl.DataFrame(rows, schema=RUNS) if rows else pl.DataFrame(schema=RUNS), path)
