"""The score stage's side of the review-quality metrics: the tables the work object
(tasks/metrics/quality.py) leaves, written beside the scores:

    data/<pipeline>/score/points.parquet           POINTS (tasks/metrics/review_quality/points.py)
    data/<pipeline>/score/point_matches.parquet    POINT_MATCHES (matching.py)
    data/<pipeline>/score/question_checks.parquet  QUESTION_CHECKS (questions.py)
    data/<pipeline>/score/review_quality.parquet   REVIEW_QUALITY (work.py)
    data/<pipeline>/score/rejects.parquet          review fields whose points could not be read
"""

from __future__ import annotations

from typing import Any

from tasks.core.config import Config
from tasks.core.layout import stage_dir, write_parquet
from tasks.metrics.review_quality.work import QualityWork, empty_tables

TABLES = ("points", "point_matches", "question_checks", "review_quality")


def write_quality_tables(cfg: Config, pipeline: str, work: QualityWork | None) -> dict[str, Any]:
    """The work's tables under the score folder; figures for the stage summary."""
    if work is None:
        return {}
    folder = stage_dir(cfg, pipeline, "score")
    tables = {**empty_tables(), **work.tables}
    for name in TABLES:
        write_parquet(tables[name], folder / f"{name}.parquet")
    rejects = tables.get("rejects")
    if rejects is not None and rejects.height:
        from tasks.core.schema import REJECTS, conform

        write_parquet(conform(rejects, REJECTS), folder / "rejects.parquet")
    return {"review_quality": {**{k: int(v) for k, v in sorted(work.stats.items())},
                               **{f"{n}_rows": tables[n].height for n in TABLES}}}
