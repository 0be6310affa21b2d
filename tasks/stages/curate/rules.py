"""Curate one ingested venue: the paper / review filters of Beyond Rating section 3.1 and a sample.

Rules run in a fixed order, each a numbered step of the curation report (rows in, rows out, per
entity). Paper rules first (status), then review rules (the venue's rating mapped onto the common
scale, confidence), then the per-paper rules on the kept reviews (review count, rating variance),
and finally the reviews of papers those dropped. Every dropped row lands in rejects with its rule;
the tables are validated with great-expectations before they replace the previous outputs.

The benchmark sample ranks kept papers by a hash of (seed, paper_id): the same seed and input
give the same sample in any row order, and a venue that grows keeps its earlier picks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from tasks.core.config import Config, ConfigError, VenueConfig
from tasks.core.frames import pick_version
from tasks.core.locks import locked, scratch_path
from tasks.core.schema import (
    CURATED_PAPERS,
    CURATED_REVIEWS,
    CURATION_REPORT,
    HIDDEN_PDF,
    PAPERS,
    REJECTS,
    REVIEW_HIDDEN,
    REVIEWS,
    SOURCE_LIMITS,
    VERSION_COVERAGE,
    conform,
    empty,
)
from tasks.core.summary import StageSummary

VARIANCE_TOLERANCE = 1e-9  # floating-point slack so a variance of exactly the threshold is kept
OUTPUTS = ("papers", "reviews", "rejects", "curation_report", "version_coverage")


@dataclass(frozen=True)
class CurateResult:
    venue_id: str
    papers_in: int
    papers_kept: int
    reviews_in: int
    reviews_kept: int
    sampled: int
    out_dir: str
    source_limits: tuple[str, ...] = ()   # what the source cannot give (venue table, venue facts, the data)
    review_version: str = "first"         # which version of an edited review was kept (curate.review_version)
    reviews_edited: int = 0               # kept reviews edited after the rebuttal
    versions: dict[str, int] = field(default_factory=dict)   # "<entity>: <case>" -> kept rows (version_coverage)

    def summary(self) -> StageSummary:
        """Reviews in, reviews kept; the venue's figures in the details."""
        return StageSummary(self.reviews_in, self.reviews_kept, details={self.venue_id: asdict(self)})


def rating_lookup(cfg: Config, venue_id: str) -> dict[float, float]:
    """The venue's raw rating -> common-scale rating; identity on the scale without a map."""
    scale = [float(value) for value in cfg.curate.common_scale]
    mapping = cfg.venue(venue_id).rating_map
    if mapping is None:
        return {value: value for value in scale}
    lookup = {}
    for key, value in mapping.items():
        where = f"venues.{venue_id!r}.rating_map.{key}"
        try:
            raw = float(key)
        except ValueError:
            raise ConfigError(f"{where}: the key must be a number (got {key!r})") from None
        if float(value) not in scale:
            raise ConfigError(f"{where}: {value} is not on curate.common_scale {scale}")
        lookup[raw] = float(value)
    return lookup


def sample_rank(seed: int, paper_id: str) -> int:
    """A stable pseudo-random rank for the benchmark sample (independent of row order)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}\x1f{paper_id}".encode(), digest_size=8).digest(), "big")


@dataclass
class _Ledger:
    """Applies rules in order and records what each one dropped."""

    venue_id: str
    report: list[dict] = field(default_factory=list)
    rejects: list[pl.DataFrame] = field(default_factory=list)

    def apply(self, frame: pl.DataFrame, entity: str, rule: str, drop: pl.Expr, detail: pl.Expr) -> pl.DataFrame:
        mask = frame.select(drop.fill_null(False).alias("drop"))["drop"]
        dropped, kept = frame.filter(mask), frame.filter(~mask)
        id_column = "paper_id" if entity == "paper" else "review_id"
        self.rejects.append(
            dropped.sort(id_column).select(
                pl.lit("curate").alias("stage"),
                pl.lit(entity).alias("entity"),
                pl.col(id_column).alias("entity_id"),
                pl.col("paper_id"),
                pl.lit(self.venue_id).alias("venue_id"),
                pl.lit(rule).alias("rule"),
                detail.cast(pl.String).alias("detail"),
            )
        )
        self.report.append(
            {"venue_id": self.venue_id, "step": len(self.report) + 1, "rule": rule, "entity": entity,
             "rows_in": frame.height, "rows_out": kept.height}
        )
        return kept

    def dropped_papers(self, since: int = 0) -> pl.DataFrame:
        """paper_id -> rule of the papers dropped by the steps from index `since` on (a dropped
        duplicate row does not count: its paper is still there)."""
        frames = [f for f in self.rejects[since:] if f.height and f["entity"][0] == "paper"]
        schema = {"paper_id": pl.String, "paper_rule": pl.String}
        dropped = pl.concat([pl.DataFrame(schema=schema), *(f.select("paper_id", paper_rule="rule") for f in frames)])
        return dropped.filter(pl.col("paper_rule") != "duplicate_paper").unique("paper_id", keep="first",
                                                                                 maintain_order=True)


def _review_steps(ledger: _Ledger, reviews: pl.DataFrame, paper_ids: pl.Series, cfg: Config,
                  lookup: dict[float, float]) -> pl.DataFrame:
    """The review rules, in order; returns kept reviews with `rating` on the common scale."""
    curate = cfg.curate
    low, high = curate.confidence_range
    papers_dropped = ledger.dropped_papers()
    reviews = reviews.join(papers_dropped, on="paper_id", how="left", maintain_order="left")
    reviews = ledger.apply(reviews, "review", "duplicate_review",
                           ~pl.col("review_id").is_first_distinct(), pl.lit("review id seen earlier"))
    orphan = pl.col("paper_id").is_null() | ~pl.col("paper_id").is_in(paper_ids.implode())
    reviews = ledger.apply(reviews, "review", "orphan_review", orphan,
                           pl.format("paper {} not among ingested papers", pl.col("paper_id")))
    reviews = ledger.apply(reviews, "review", "paper_dropped", pl.col("paper_rule").is_not_null(),
                           pl.format("paper {}", pl.col("paper_rule")))
    rating, confidence = pl.col("rating"), pl.col("confidence")
    reviews = ledger.apply(reviews, "review", "missing_rating", rating.is_null() | rating.is_nan(),
                           pl.format("raw {}", pl.col("rating_raw").fill_null("null")))
    known = pl.Series(list(lookup), dtype=pl.Float64).implode()
    reviews = ledger.apply(reviews, "review", "rating_not_in_scale", ~rating.is_in(known),
                           pl.format("{} (raw {})", rating, pl.col("rating_raw").fill_null("null")))
    reviews = ledger.apply(reviews, "review", "missing_confidence", confidence.is_null() | confidence.is_nan(),
                           pl.format("raw {}", pl.col("confidence_raw").fill_null("null")))
    reviews = ledger.apply(reviews, "review", "confidence_out_of_range", (confidence < low) | (confidence > high),
                           pl.format("{} outside [{}, {}]", confidence, pl.lit(low), pl.lit(high)))
    reviews = ledger.apply(reviews, "review", "low_confidence", confidence < curate.min_confidence,
                           pl.format("{} < {}", confidence, pl.lit(curate.min_confidence)))
    reviews = ledger.apply(reviews, "review", "empty_review",
                           pl.col("review_text").is_null() | (pl.col("review_text").str.strip_chars() == ""),
                           pl.lit("no review text"))
    return reviews.drop("paper_rule").with_columns(
        rating_venue=rating,
        rating=rating.replace_strict(list(lookup), list(lookup.values()), return_dtype=pl.Float64),
    )


def _paper_steps(ledger: _Ledger, papers: pl.DataFrame, reviews: pl.DataFrame, cfg: Config) -> pl.DataFrame:
    """Review count and rating variance over each paper's kept reviews."""
    curate = cfg.curate
    rating, n = pl.col("rating"), pl.len()
    # Two-pass variance: exact for ratings on a small scale (polars' one-pass var gives 1.5000000000000002
    # for 5, 5, 6, 8), so the threshold compares what a person would compute by hand.
    squares = ((rating - rating.mean()) ** 2).sum()
    stats = reviews.group_by("paper_id").agg(
        n_reviews=n.cast(pl.Int32),
        rating_mean=rating.mean(),
        rating_var=pl.when(n > curate.variance_ddof).then(squares / (n - curate.variance_ddof)).otherwise(0.0),
    )
    papers = papers.join(stats, on="paper_id", how="left").with_columns(pl.col("n_reviews").fill_null(0))
    n = pl.col("n_reviews")
    papers = ledger.apply(papers, "paper", "too_few_reviews", n < curate.min_reviews,
                          pl.format("{} kept reviews < {}", n, pl.lit(curate.min_reviews)))
    papers = ledger.apply(papers, "paper", "too_many_reviews", n > curate.max_reviews,
                          pl.format("{} kept reviews > {}", n, pl.lit(curate.max_reviews)))
    var = pl.col("rating_var")
    return ledger.apply(papers, "paper", "rating_variance", var > curate.max_rating_variance + VARIANCE_TOLERANCE,
                        pl.format("variance {} > {}", var.round(4), pl.lit(curate.max_rating_variance)))


def curate_frames(papers: pl.DataFrame, reviews: pl.DataFrame, venue_id: str, cfg: Config
                  ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(papers, reviews, rejects, curation_report) from ingested papers and reviews of one venue."""
    lookup = rating_lookup(cfg, venue_id)
    ledger = _Ledger(venue_id)
    papers = conform(papers, PAPERS)
    ingested_ids = papers["paper_id"]
    status = pl.col("status")
    papers = ledger.apply(papers, "paper", "duplicate_paper", ~pl.col("paper_id").is_first_distinct(),
                          pl.lit("paper id seen earlier"))
    papers = ledger.apply(papers, "paper", "withdrawn", status == "withdrawn", pl.lit("status withdrawn"))
    papers = ledger.apply(papers, "paper", "desk_rejected", status == "desk_rejected", pl.lit("status desk_rejected"))
    papers = ledger.apply(papers, "paper", "unknown_status", status.is_null() | (status != "active"),
                          pl.format("status {}", status.fill_null("null")))
    paper_steps = len(ledger.rejects)

    reviews = pick_version(conform(reviews, REVIEWS), cfg.curate.review_version)   # first | final (versions.py)
    kept_reviews = _review_steps(ledger, reviews, ingested_ids, cfg, lookup)
    papers = _paper_steps(ledger, papers, kept_reviews, cfg)
    late = ledger.dropped_papers(since=paper_steps)
    kept_reviews = ledger.apply(kept_reviews.join(late, on="paper_id", how="left", maintain_order="left"),
                                "review", "paper_dropped",
                                pl.col("paper_rule").is_not_null(), pl.format("paper {}", pl.col("paper_rule")))

    ids = papers["paper_id"].to_list()
    chosen = sorted(ids, key=lambda pid: (sample_rank(cfg.curate.seed, pid), pid))[: cfg.curate.sample_size]
    papers = papers.with_columns(in_benchmark=pl.col("paper_id").is_in(pl.Series(chosen, dtype=pl.String).implode()))

    out_papers = conform(papers.sort("paper_id"), CURATED_PAPERS)
    out_reviews = conform(kept_reviews.drop("paper_rule").sort("paper_id", "review_id"), CURATED_REVIEWS)
    rejects = pl.concat([empty(REJECTS), *ledger.rejects], how="vertical_relaxed")
    report = conform(pl.DataFrame(ledger.report, schema=CURATION_REPORT), CURATION_REPORT)
    return out_papers, out_reviews, conform(rejects, REJECTS), report


def _write_checked(frames: dict[str, pl.DataFrame], out_dir: Path, check: Callable[[Path], None]) -> None:
    """Write into a staging folder, run `check` on it, then move the files into place."""
    with locked(out_dir):    # a concurrent curate of the venue waits; a killed one's staging folder goes
        for leftover in out_dir.glob(".staging*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = scratch_path(out_dir / "staging")
        staging.mkdir(parents=True)
        try:
            for name, frame in frames.items():
                frame.write_parquet(staging / f"{name}.parquet")
            check(staging)
            for name in frames:
                os.replace(staging / f"{name}.parquet", out_dir / f"{name}.parquet")
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def curate_venue(ingest_dir: Path, venue_id: str, cfg: Config, out_dir: Path) -> CurateResult:
    """Curate `ingest_dir`'s papers and reviews into `out_dir`; raises CurationValidationError."""
    from tasks.stages.curate import expectations

    ingest_dir, out_dir = Path(ingest_dir), Path(out_dir)
    papers_in = pl.read_parquet(ingest_dir / "papers.parquet")
    reviews_in = pl.read_parquet(ingest_dir / "reviews.parquet")
    papers, reviews, rejects, report = curate_frames(papers_in, reviews_in, venue_id, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    frames = {"papers": papers, "reviews": reviews, "rejects": rejects, "curation_report": report}
    coverage = version_coverage(papers_in, reviews_in, papers, reviews, venue_id)
    frames["version_coverage"] = coverage
    limits = source_limits(cfg, venue_id, papers_in, reviews_in)
    if limits:   # what the source cannot give, beside the report (table source_limits)
        frames["source_limits"] = pl.DataFrame({"venue_id": [venue_id] * len(limits), "limit": list(limits)},
                                               schema=SOURCE_LIMITS)
    else:
        (out_dir / "source_limits.parquet").unlink(missing_ok=True)
    _write_checked(frames, out_dir, lambda folder: expectations.validate_curated_apart(folder, ingest_dir, cfg))
    return CurateResult(
        venue_id=venue_id,
        papers_in=papers_in.height,
        papers_kept=papers.height,
        reviews_in=reviews_in.height,
        reviews_kept=reviews.height,
        sampled=int(papers["in_benchmark"].sum()),
        out_dir=str(out_dir),
        source_limits=tuple(limits),
        review_version=cfg.curate.review_version,
        reviews_edited=int(reviews["edited_after_rebuttal"].fill_null(False).sum()),
        versions={f"{e}: {c}": k for e, c, k in coverage.select("entity", "case", "kept").iter_rows()},
    )


def _pdf_case() -> pl.Expr:
    version = pl.col("pdf_version")
    return (pl.when(version == HIDDEN_PDF).then(pl.lit(HIDDEN_PDF))
            .when(version.is_null()).then(pl.lit("no history read"))
            .when(pl.col("pdf_versions") > 1).then(pl.lit("the version the reviewers saw"))
            .otherwise(pl.lit("one version")))


def version_coverage(papers_in: pl.DataFrame, reviews_in: pl.DataFrame, papers: pl.DataFrame,
                     reviews: pl.DataFrame, venue_id: str) -> pl.DataFrame:
    """How many papers (by the PDF version kept) and reviews (by the versions the source gave) fall
    in each case, ingested and kept: the curation report's account of what the history allowed."""
    def count(frame: pl.DataFrame, case: pl.Expr, name: str) -> pl.DataFrame:
        return frame.select(case.alias("case")).group_by("case").len(name=name)

    parts = []
    for entity, before, after, case in (
            ("paper", papers_in, papers, _pdf_case()),
            ("review", reviews_in, reviews, pl.col("review_history").fill_null("no history read"))):
        both = count(before, case, "ingested").join(count(after, case, "kept"), on="case", how="left")
        parts.append(both.with_columns(entity=pl.lit(entity), kept=pl.col("kept").fill_null(0)))
    out = pl.concat(parts).with_columns(venue_id=pl.lit(venue_id))
    return conform(out.select("venue_id", "entity", "case", "ingested", "kept").sort("entity", "case"),
                   VERSION_COVERAGE)


def source_limits(cfg: Config, venue_id: str, papers: pl.DataFrame, reviews: pl.DataFrame) -> tuple[str, ...]:
    """What the source cannot give: the venue table's statements, the venue facts' (tasks/core/venue_facts.py)
    and what the ingested data shows (a hidden edit history), each once."""
    from tasks.core.venue_facts import facts_limits

    found = []
    hidden_papers = papers.filter(pl.col("pdf_version") == HIDDEN_PDF).height
    hidden_reviews = reviews.filter(pl.col("review_history") == REVIEW_HIDDEN).height
    if hidden_papers or hidden_reviews:
        found.append(f"edit history not public for {hidden_papers} of {papers.height} papers and {hidden_reviews} "
                     f"of {reviews.height} reviews: their latest PDF and final review are kept, not the versions "
                     "the reviewers saw")
    return tuple(dict.fromkeys((*cfg.venue(venue_id).source_limits, *facts_limits(venue_id), *found)))




def papers_to_read(papers: pl.DataFrame, reviews: pl.DataFrame, venue: VenueConfig, venue_id: str, cfg: Config
                   ) -> list[str]:
    """The papers whose PDFs later stages read, by `[ingest] pdf_scope`: the benchmark sample these
    rules draw ("sample") or every paper they keep ("curated"). Ingest calls it on the notes and
    reviews before any PDF is fetched, with the venue's table or derived form as `venue`."""
    cfg = cfg.model_copy(update={"venues": {**cfg.venues, venue_id: venue}})
    kept = curate_frames(papers, reviews, venue_id, cfg)[0]
    if cfg.ingest.pdf_scope == "sample":
        kept = kept.filter(pl.col("in_benchmark"))
    return kept["paper_id"].to_list()
