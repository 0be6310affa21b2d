"""What the score stage reads: curated human reviews, their judgments and the paper synopses.

Human reviews are the references; as candidates they are scored leave-one-out. Generated
candidates (the generate stage) and submitted ones (`grebench submit`) are concatenated to
`human_candidates(...)` in the SCORING_CANDIDATES schema. Frames: tasks/schema.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from tasks.core.config import Config
from tasks.core.layout import stage_dir
from tasks.core.schema import REFERENCES, SCORING_CANDIDATES, SYNOPSES_WIDE
from tasks.metrics import Metric


@dataclass(frozen=True)
class ScoringInputs:
    references: pl.DataFrame   # REFERENCES
    candidates: pl.DataFrame   # SCORING_CANDIDATES
    synopses: pl.DataFrame     # SYNOPSES_WIDE
    negatives: pl.DataFrame | None = None   # NEGATIVES when a metric reads negative references


def judgments_text(judgments: pl.DataFrame) -> pl.DataFrame:
    """review_id, judgments: each review's judgment lines in position order, one per line."""
    return (
        judgments.sort("review_id", "position")
        .group_by("review_id", maintain_order=True)
        .agg(pl.col("text").str.strip_chars().str.join("\n").alias("judgments"))
    )


def synopses_wide(synopses: pl.DataFrame) -> pl.DataFrame:
    """SYNOPSES_WIDE (paper_id, abstract, assw) from the long synopses frame (kind in {abstract, assw})."""
    if synopses.is_empty():
        return pl.DataFrame(schema=SYNOPSES_WIDE)
    duplicated = synopses.filter(pl.struct("paper_id", "kind").is_duplicated())
    if not duplicated.is_empty():
        raise ValueError(f"several synopses of one kind for papers {duplicated['paper_id'].unique().to_list()[:5]}")
    wide = synopses.pivot("kind", index="paper_id", values="text")
    return wide.select(
        "paper_id", *(pl.col(k) if k in wide.columns else pl.lit(None, pl.String).alias(k) for k in ("abstract", "assw"))
    )


def human_candidates(references: pl.DataFrame) -> pl.DataFrame:
    """Each human review as a candidate, scored against the paper's other reviews (leave-one-out)."""
    return references.select(
        "paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
        "review_id", "review_text", "judgments",
    )


def curated_reviews(cfg: Config, pipeline: str) -> pl.DataFrame:
    """paper_id, review_id, review_text of the benchmark papers (the seeded sample curation drew)."""
    frames = []
    for venue in cfg.pipelines[pipeline].venues:
        folder = stage_dir(cfg, pipeline, "curate", venue)
        path = folder / "reviews.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: curated reviews not found; run the curate stage first")
        reviews = pl.read_parquet(path, columns=["paper_id", "review_id", "review_text"])
        papers = folder / "papers.parquet"
        if papers.is_file():
            sample = pl.read_parquet(papers, columns=["paper_id", "in_benchmark"]).filter("in_benchmark")
            reviews = reviews.join(sample.select("paper_id"), on="paper_id", how="semi")
        frames.append(reviews)
    return pl.concat(frames)


def paper_groups(cfg: Config, pipeline: str) -> dict[str, str]:
    """paper_id -> venue of the pipeline's curated papers: the group negative references are drawn from."""
    groups: dict[str, str] = {}
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "reviews.parquet"
        for paper in pl.read_parquet(path, columns=["paper_id"])["paper_id"].unique().to_list():
            groups.setdefault(paper, venue)
    return groups


def read_judgments(cfg: Config, pipeline: str, metrics: Sequence[Metric]) -> pl.DataFrame | None:
    """review_id, judgments when a metric reads judgments (None otherwise); missing ones are an error."""
    if not any(m.reads == "judgments" for m in metrics):
        return None
    path = stage_dir(cfg, pipeline, "preprocess") / "judgments.parquet"
    if not path.is_file():
        names = sorted(m.name for m in metrics if m.reads == "judgments")
        raise FileNotFoundError(f"{path}: judgments not found; run the preprocess stage or drop metric(s) {names}")
    return judgments_text(pl.read_parquet(path))


def read_synopses(cfg: Config, pipeline: str, metrics: Sequence[Metric]) -> pl.DataFrame | None:
    """SYNOPSES_WIDE when a metric is conditioned on a synopsis (None otherwise); missing ones are an error."""
    if all(m.conditioned_on == "none" for m in metrics):
        return None
    path = stage_dir(cfg, pipeline, "preprocess") / "synopses.parquet"
    if not path.is_file():
        names = sorted(m.name for m in metrics if m.conditioned_on != "none")
        raise FileNotFoundError(f"{path}: synopses not found; run the preprocess stage or drop metric(s) {names}")
    return synopses_wide(pl.read_parquet(path, columns=["paper_id", "kind", "text"]))


def load_inputs(cfg: Config, pipeline: str, metrics: Sequence[Metric]) -> ScoringInputs:
    """References, human and generated candidates and synopses for the metrics given."""
    reviews = curated_reviews(cfg, pipeline)
    judgments = read_judgments(cfg, pipeline, metrics)
    if judgments is None:
        judgments = pl.DataFrame(schema={"review_id": pl.String, "judgments": pl.String})
    synopses = read_synopses(cfg, pipeline, metrics)
    if synopses is None:
        synopses = pl.DataFrame(schema=SYNOPSES_WIDE)
    references = reviews.join(judgments, on="review_id", how="left").select(REFERENCES.names()).cast(dict(REFERENCES))
    from tasks.core.submitted import submitted_candidates  # reviews from `grebench submit`
    from tasks.stages.generate.reviews import (
        scoring_candidates,  # generated reviews, once the generate stage ran
    )

    generated = pl.concat([scoring_candidates(cfg, pipeline), submitted_candidates(cfg, pipeline)]).join(
        references.select("paper_id").unique(), on="paper_id", how="semi")
    candidates = pl.concat([human_candidates(references).cast(dict(SCORING_CANDIDATES)),
                            generated.cast(dict(SCORING_CANDIDATES))])
    negatives = None
    if any(m.negatives for m in metrics):
        from tasks.metrics.negatives import draw_negatives

        negatives = draw_negatives(candidates, references, cfg.score.negatives, cfg.score.negatives_seed,
                                   paper_groups(cfg, pipeline))
    return ScoringInputs(references, candidates, synopses.cast(dict(SYNOPSES_WIDE)), negatives)
