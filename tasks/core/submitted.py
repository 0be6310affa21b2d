"""Where submitted candidates (`grebench submit`, tasks/stages/generate/submit.py) lie, and how the
later stages read them: the score stage as candidates, the validate stage for the leaderboard's
kinds and exclusions. Only the files tasks/core/layout.py's submit/ entry names are read.

    data/<pipeline>/submit/<name>/submitted_candidates.parquet  GENERATED, backend "submitted"
    data/<pipeline>/submit/<name>/candidate_judgments.parquet   JUDGMENTS
    data/<pipeline>/submit/<name>/submitted_exclusions.parquet  EXCLUSIONS
    data/<pipeline>/submit/<name>/submission.parquet            one row: the file, the cutoff, the counts
    data/<pipeline>/submit/<name>/submission_flags.parquet      what screening found (name, row, candidate_id, kind, ...)
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tasks.core import damage
from tasks.core.config import Config
from tasks.core.frames import judgments_text
from tasks.core.layout import pipeline_dir
from tasks.core.schema import EXCLUSIONS, SCORING_CANDIDATES


def submit_dir(cfg: Config, pipeline: str, name: str | None = None) -> Path:
    base = pipeline_dir(cfg, pipeline) / "submit"
    return base / name if name else base


def submission_folders(cfg: Config, pipeline: str) -> list[Path]:
    """The folders of complete submissions (a hidden scratch or old folder is never one)."""
    base = submit_dir(cfg, pipeline)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "submission.parquet").is_file())


def submitted_names(cfg: Config, pipeline: str) -> list[str]:
    return [folder.name for folder in submission_folders(cfg, pipeline)]


def submitted_exclusions(cfg: Config, pipeline: str) -> pl.DataFrame:
    """EXCLUSIONS of every submission: its papers public on or before the declared cutoff."""
    frames = [damage.read_parquet(f / "submitted_exclusions.parquet").cast(dict(EXCLUSIONS))
              for f in submission_folders(cfg, pipeline)]
    return pl.concat([pl.DataFrame(schema=EXCLUSIONS), *frames])


def submitted_candidates(cfg: Config, pipeline: str) -> pl.DataFrame:
    """Submitted reviews as score-stage candidates (SCORING_CANDIDATES): candidate = candidate_id,
    source = the submission's name, review_id null, judgments: the review's judgment lines in order."""
    frames = []
    for folder in submission_folders(cfg, pipeline):
        reviews = damage.read_parquet(folder / "submitted_candidates.parquet",
                                  columns=["candidate_id", "paper_id", "model", "review"])
        judgments = judgments_text(damage.read_parquet(folder / "candidate_judgments.parquet"))
        frames.append(reviews.join(judgments, left_on="candidate_id", right_on="review_id", how="left")
                      .select("paper_id", pl.col("candidate_id").alias("candidate"), pl.col("model").alias("source"),
                              pl.lit(None, pl.String).alias("review_id"), pl.col("review").alias("review_text"),
                              "judgments").cast(dict(SCORING_CANDIDATES)))
    return pl.concat([pl.DataFrame(schema=SCORING_CANDIDATES), *frames]).sort("paper_id", "candidate")


def submitted_flags(cfg: Config, pipeline: str) -> dict[str, list[str]]:
    """candidate_id -> the kinds screening flagged in that submitted review (tasks/stages/generate/screening.py),
    sorted; reviews without a flag are absent."""
    frames = [damage.read_parquet(f / "submission_flags.parquet", columns=["candidate_id", "kind"])
              for f in submission_folders(cfg, pipeline) if (f / "submission_flags.parquet").is_file()]
    flags = pl.concat([pl.DataFrame(schema={"candidate_id": pl.String, "kind": pl.String}),
                       *(f.cast(pl.String) for f in frames)]).drop_nulls("candidate_id")
    return {c: sorted(set(kinds)) for c, kinds in flags.group_by("candidate_id").agg("kind").iter_rows()}
