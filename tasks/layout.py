"""Where each stage reads and writes under `data/`.

    data/raw/<venue>/v1|v2/...            raw OpenReview API pages (download cache)
    data/<pipeline>/<venue>/ingest/        papers, reviews, rejects, pdf_texts .parquet; pdfs/
    data/<pipeline>/<venue>/curate/        papers, reviews, rejects, curation_report .parquet
    data/<pipeline>/preprocess/            judgments, synopses, rejects, usage .parquet
    data/<pipeline>/score/                 requests/ and results/ shards, scores.parquet
    data/cache/llm/                        content-addressed LLM answers
    data/grebench.duckdb                   the results database (paths.database)
"""

from __future__ import annotations

import re
from pathlib import Path

from tasks.config import Config
from tasks.locks import write_parquet_atomic


def slug(venue_id: str) -> str:
    """A file-system-safe name for a venue id: "ICLR.cc/2023/Conference" -> "ICLR.cc_2023_Conference"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", venue_id).strip("_")


def pipeline_dir(cfg: Config, pipeline: str) -> Path:
    return cfg.data_dir / pipeline


def stage_dir(cfg: Config, pipeline: str, stage: str, venue_id: str | None = None) -> Path:
    """Output folder of `stage`; per venue for ingest and curate, per pipeline otherwise."""
    base = pipeline_dir(cfg, pipeline)
    path = base / slug(venue_id) / stage if venue_id else base / stage
    path.mkdir(parents=True, exist_ok=True)
    return path


def raw_dir(cfg: Config, venue_id: str, api_version: int) -> Path:
    path = cfg.data_dir / "raw" / slug(venue_id) / f"v{api_version}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(cfg: Config, kind: str) -> Path:
    path = cfg.data_dir / "cache" / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_stage_frames(cfg: Config, pipeline: str, stage: str, frames: dict) -> dict[str, str]:
    """Write each polars frame to <stage dir>/<name>.parquet, replaced atomically (reruns overwrite)."""
    folder = stage_dir(cfg, pipeline, stage)
    written = {}
    for name, frame in frames.items():
        path = folder / f"{name}.parquet"
        write_parquet_atomic(frame, path)
        written[name] = str(path)
    return written
