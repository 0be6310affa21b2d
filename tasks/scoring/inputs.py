"""What the score stage reads: curated human reviews, their judgments and the paper synopses.

Human reviews are the references; as candidates they are scored leave-one-out. Generated
candidates (a later stage) are concatenated to `human_candidates(...)` in the CANDIDATES schema.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tasks.config import Config
from tasks.layout import stage_dir
from tasks.scoring.metrics import (
    CANDIDATES,
    REFERENCES,
    SYNOPSES,
    Metric,
    human_candidates,
    judgments_text,
    synopses_wide,
)


@dataclass(frozen=True)
class ScoringInputs:
    references: pl.DataFrame   # REFERENCES
    candidates: pl.DataFrame   # CANDIDATES
    synopses: pl.DataFrame     # SYNOPSES (wide)


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


def load_inputs(cfg: Config, pipeline: str, metrics: list[Metric]) -> ScoringInputs:
    """References, human candidates and synopses; missing preprocess outputs a metric needs are an error."""
    reviews = curated_reviews(cfg, pipeline)
    folder = stage_dir(cfg, pipeline, "preprocess")
    judgments = pl.DataFrame(schema={"review_id": pl.String, "judgments": pl.String})
    if any(m.text == "judgments" for m in metrics):
        path = folder / "judgments.parquet"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: judgments not found; run the preprocess stage or limit score.metrics to gem_raw")
        judgments = judgments_text(pl.read_parquet(path))
    synopses = pl.DataFrame(schema=SYNOPSES)
    if any(m.synopsis != "none" for m in metrics):
        path = folder / "synopses.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: synopses not found; run the preprocess stage or drop the gem_s metrics")
        synopses = synopses_wide(pl.read_parquet(path, columns=["paper_id", "kind", "text"]))
    references = reviews.join(judgments, on="review_id", how="left").select(REFERENCES.names()).cast(dict(REFERENCES))
    from tasks.generate import scoring_candidates  # generated reviews, once the generate stage ran

    generated = scoring_candidates(cfg, pipeline).join(references.select("paper_id").unique(), on="paper_id", how="semi")
    candidates = pl.concat([human_candidates(references).cast(dict(CANDIDATES)), generated.cast(dict(CANDIDATES))])
    return ScoringInputs(references, candidates, synopses.cast(dict(SYNOPSES)))
