"""Where each stage reads and writes under `data/`, and the one atomic Parquet writer.

    data/raw/<source>/<venue>/v1|v2/...   raw OpenReview API pages (download cache), per source: the API
                                          host ("https-api2.openreview.net") or the synthetic settings
                                          ("synthetic-<hash>"), tasks/stages/ingest/sources.py
    data/<pipeline>/<venue>/ingest/        papers, reviews, rejects, pdf_texts .parquet; pdfs/
    data/<pipeline>/<venue>/curate/        papers, reviews, rejects, curation_report .parquet
    data/<pipeline>/preprocess/            judgments, synopses, rejects, usage .parquet
    data/<pipeline>/generate/              candidates, exclusions, candidate_judgments, rejects, usage .parquet
    data/<pipeline>/score/                 requests/ and results/ shards, scores.parquet
    data/<pipeline>/validate/              validation, leaderboard, ... .parquet
    data/<pipeline>/submit/<name>/         one folder per `grebench submit` (tasks/core/submitted.py)
    data/<pipeline>/releases/<id>.parquet  one row per release (tasks/stages/validate/releases.py)
    data/<pipeline>/runs/<run_id>.parquet  the run records (tasks/core/runs.py)
    data/cache/llm/                        content-addressed LLM answers
    data/<pipeline>/grebench.duckdb        the results database of each pipeline (paths.database)
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import polars as pl

from tasks.core.config import Config
from tasks.core.errors import FatalError
from tasks.core.locks import write_atomic


def slug(identifier: str) -> str:
    """The one file-system-safe name for an id (a venue, a paper, a candidate): runs of other characters
    become "_", no leading dot: "ICLR.cc/2023/Conference" -> "ICLR.cc_2023_Conference"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", identifier).strip("_").lstrip(".") or "_"


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")   # a file name as it is: no separator, no dot first


class UnsafePath(FatalError):
    """A path built from an id that would leave its folder (a link inside it pointing out)."""


def safe_name(identifier: str) -> str:
    """The file name of an id a server or a file supplied: the id itself when it is a safe name
    (letters, digits, `.`, `_`, `-`, not starting with a dot, at most 120 characters), else its slug
    (`..` dropped) cut to 80 characters and a hash of the id, so `../../x` is never a path and two ids of one slug
    (`a<b`, `a>b`) never share a file."""
    if SAFE_NAME.fullmatch(identifier):
        return identifier
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{slug(re.sub(r'[.]{2,}', '_', identifier))[:80]}-{digest}"


def id_path(folder: Path, identifier: str, suffix: str = "") -> Path:
    """`folder/<safe_name(identifier)><suffix>`: the one way a path is built from an id a server or a
    file supplied. The result is checked to stay under `folder` once resolved (a link planted inside
    it is refused with `UnsafePath`)."""
    path = Path(folder) / f"{safe_name(identifier)}{suffix}"
    if not path.resolve().is_relative_to(Path(folder).resolve()):
        raise UnsafePath(f"{path} leads outside {folder}")
    return path


def pipeline_dir(cfg: Config, pipeline: str) -> Path:
    return cfg.data_dir / pipeline


def stage_dir(cfg: Config, pipeline: str, stage: str, venue_id: str | None = None) -> Path:
    """Output folder of `stage`; per venue for ingest and curate, per pipeline otherwise."""
    base = pipeline_dir(cfg, pipeline)
    path = base / slug(venue_id) / stage if venue_id else base / stage
    path.mkdir(parents=True, exist_ok=True)
    return path


def raw_dir(cfg: Config, venue_id: str, api_version: int, source: str) -> Path:
    """The download cache of `venue_id` as served by `source` (the key of what produced the pages:
    tasks/stages/ingest/sources.py), so no pipeline reads pages another source wrote."""
    path = cfg.data_dir / "raw" / slug(source) / slug(venue_id) / f"v{api_version}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(cfg: Config, kind: str) -> Path:
    path = cfg.data_dir / "cache" / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_parquet(frame: pl.DataFrame, path: Path) -> Path:
    """Write `frame` to `path` atomically: a reader sees the old file or the new one, never half of
    one (tasks/core/locks.py `write_atomic`). The one Parquet writer of the stages."""
    return write_atomic(Path(path), frame.write_parquet)


def write_stage_frames(cfg: Config, pipeline: str, stage: str, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    """Write each frame to <stage dir>/<name>.parquet, replaced atomically (reruns overwrite)."""
    folder = stage_dir(cfg, pipeline, stage)
    return {name: str(write_parquet(frame, folder / f"{name}.parquet")) for name, frame in frames.items()}
