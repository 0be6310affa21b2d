"""Run records: what each pipeline run did, stage by stage (the `runs` table).

A record is one row per stage with the run's identity repeated (run id, pipeline, config hash,
code version), the stage's start, end and duration, rows in / out, LLM calls, tokens and cost.
Figures come from the dict each stage flow returns: keys are summed wherever they appear in it
(stages that work per venue nest one dict per venue).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from tasks.config import Config
from tasks.locks import write_parquet_atomic

# Which summary keys count as a stage's rows in and rows out.
ROW_KEYS = {
    "ingest": ("reviews_ingested", "reviews"),
    "curate": ("reviews_in", "reviews_kept"),
    "preprocess": ("reviews", "judgments"),
    "generate": ("papers", "candidates"),
    "score": ("requests", "scores"),
    "validate": ("pairs", "rows"),
    "materialize": ("", "rows"),
}
LLM_CALL_KEYS = ("llm_calls",)
INPUT_TOKEN_KEYS = ("input_tokens",)
OUTPUT_TOKEN_KEYS = ("output_tokens",)
COST_KEYS = ("cost_usd",)

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

    def finish(self, summary: Mapping[str, Any] | None, error: BaseException | None = None) -> None:
        self.ended_at = now()
        self.status = "failed" if error else "completed"
        self.error = f"{type(error).__name__}: {error}".splitlines()[0][:500] if error else None
        if summary is None:
            return
        rows_in, rows_out = ROW_KEYS.get(self.stage, ("", ""))
        self.rows_in = _total(summary, (rows_in,)) if rows_in else None
        self.rows_out = _total(summary, (rows_out,)) if rows_out else None
        self.llm_calls = _total(summary, LLM_CALL_KEYS) or 0
        self.input_tokens = _total(summary, INPUT_TOKEN_KEYS) or 0
        self.output_tokens = _total(summary, OUTPUT_TOKEN_KEYS) or 0
        self.cost_usd = float(_total(summary, COST_KEYS, float) or 0.0)


def now() -> datetime:
    return datetime.now(UTC)


def _numbers(summary: Any, keys: tuple[str, ...]) -> Iterator[float]:
    if isinstance(summary, Mapping):
        for key, value in summary.items():
            if key in keys and isinstance(value, int | float) and not isinstance(value, bool):
                yield value
            elif isinstance(value, Mapping):
                yield from _numbers(value, keys)


def _total(summary: Mapping[str, Any], keys: tuple[str, ...], kind: type = int) -> Any:
    values = list(_numbers(summary, keys))
    return kind(sum(values)) if values else None


def config_hash(config_path: Path | str, pipeline: str) -> str:
    """Hash of the config file's bytes and the pipeline name: equal hashes, equal settings."""
    digest = hashlib.sha256(Path(config_path).read_bytes())
    digest.update(pipeline.encode())
    return digest.hexdigest()[:16]


def code_version() -> str:
    """`git describe` of the checkout when there is one, else the installed package version."""
    root = Path(__file__).resolve().parents[1]
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
    folder = cfg.data_dir / pipeline / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.parquet"
    frame = pl.DataFrame(rows, schema=RUNS) if rows else pl.DataFrame(schema=RUNS)
    return write_parquet_atomic(frame, path)
