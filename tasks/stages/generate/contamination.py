"""The contamination guard: a candidate never reviews a paper it may have seen in training.

A paper counts as public from `first_public_at` (the earliest public date OpenReview gives), or
from `created_at` when that is missing. A paper public on or before a candidate's knowledge cutoff
(compared as UTC calendar dates) is left out of that candidate's work: no review is generated and
the paper is listed in the `exclusions` frame, so scoring leaves it out and the leaderboard can
show how many papers each candidate was scored on and how many were excluded. A paper with no
date at all cannot be shown to be newer than the cutoff, so it is excluded too.
"""

from __future__ import annotations

from datetime import date

import polars as pl

from tasks.core.schema import EXCLUSIONS


def public_dates(papers: pl.DataFrame) -> pl.DataFrame:
    """paper_id, venue_id, public_at and date_source for every paper."""
    def col(name: str) -> pl.Expr:
        if name in papers.columns:
            return pl.col(name).cast(pl.Datetime("ms", "UTC"))
        return pl.lit(None, pl.Datetime("ms", "UTC"))

    venue = pl.col("venue_id") if "venue_id" in papers.columns else pl.lit(None, pl.String)
    return papers.select(
        "paper_id",
        venue.alias("venue_id"),
        pl.coalesce(col("first_public_at"), col("created_at")).alias("public_at"),
        pl.when(col("first_public_at").is_not_null()).then(pl.lit("first_public_at"))
        .when(col("created_at").is_not_null()).then(pl.lit("created_at"))
        .otherwise(pl.lit("none")).alias("date_source"),
    )


def guard(papers: pl.DataFrame, model: str, knowledge_cutoff: date) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(papers the candidate may review, EXCLUSIONS rows for the others), in input order."""
    dates = public_dates(papers)
    on_or_before = pl.col("public_at").dt.date() <= pl.lit(knowledge_cutoff, pl.Date)
    excluded = pl.col("public_at").is_null() | on_or_before
    flagged = dates.with_columns(excluded.alias("_excluded"))
    keep_ids = flagged.filter(~pl.col("_excluded"))["paper_id"]
    exclusions = flagged.filter(pl.col("_excluded")).select(
        "paper_id",
        "venue_id",
        pl.lit(model).alias("model"),
        pl.col("public_at").alias("first_public_at"),
        "date_source",
        pl.lit(knowledge_cutoff, pl.Date).alias("knowledge_cutoff"),
        pl.when(pl.col("public_at").is_null()).then(pl.lit("no_public_date"))
        .otherwise(pl.lit("public_on_or_before_cutoff")).alias("reason"),
    )
    return papers.filter(pl.col("paper_id").is_in(keep_ids.implode())), exclusions.cast(dict(EXCLUSIONS))
