"""The declared frames as the stages read them from each other's outputs, and transforms on them.

A stage never calls another stage's functions: it reads the Parquet files another stage wrote
(where tasks/core/layout.py says they are, in the shape tasks/core/schema.py declares) through the
readers here. Missing inputs are one clear error naming the stage to run first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import polars as pl

from tasks.core import damage
from tasks.core.config import Config
from tasks.core.layout import stage_dir
from tasks.core.schema import SCORING_CANDIDATES, SYNOPSES_WIDE, conform

# Reviews carry their first version's values and, in `<column>_final`, the values after the
# rebuttal (tasks/stages/ingest/versions.py); a stage picks one with `pick_version`.
FINAL_COLUMNS = ("rating_raw", "rating", "confidence_raw", "confidence", "review_text")
SECTION_COLUMNS = ("summary", "strengths", "weaknesses", "strengths_and_weaknesses", "questions", "limitations",
                   "other_sections", "soundness", "presentation", "contribution")


class ReadsFrames(Protocol):
    """What a reader needs to know of a metric (tasks/metrics/registry.py Metric): what it reads."""

    name: str
    reads: str
    conditioned_on: str


# ---- curate's outputs ---------------------------------------------------------------------------
def read_curated(cfg: Config, pipeline: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | None]:
    """Curated reviews and papers of the pipeline's benchmark sample, and their PDF texts if ingested."""
    reviews, papers, texts = [], [], []
    for venue in cfg.pipelines[pipeline].venues:
        curated = stage_dir(cfg, pipeline, "curate", venue)
        for name, bucket in (("reviews", reviews), ("papers", papers)):
            path = curated / f"{name}.parquet"
            if not path.is_file():
                raise FileNotFoundError(f"{path} is missing: run the curate stage for {venue} first")
            needs = ("paper_id", "review_id") if name == "reviews" else ("paper_id",)
            bucket.append(damage.read_parquet(path, required=needs))
        pdf = stage_dir(cfg, pipeline, "ingest", venue) / "pdf_texts.parquet"
        if pdf.is_file():
            texts.append(damage.read_parquet(pdf, required=("paper_id",)))
    all_papers = pl.concat(papers, how="diagonal_relaxed")
    if "in_benchmark" in all_papers.columns:  # only the benchmark sample is preprocessed
        all_papers = all_papers.filter(pl.col("in_benchmark").fill_null(False))
    all_reviews = pl.concat(reviews, how="diagonal_relaxed")
    all_reviews = all_reviews.filter(pl.col("paper_id").is_in(all_papers["paper_id"].implode()))
    pdf_texts = pl.concat(texts, how="diagonal_relaxed") if texts else None
    if pdf_texts is not None:
        pdf_texts = pdf_texts.filter(pl.col("paper_id").is_in(all_papers["paper_id"].implode()))
    return all_reviews, all_papers, pdf_texts


# ---- transforms of the preprocess frames ---------------------------------------------------------
def judgments_text(judgments: pl.DataFrame) -> pl.DataFrame:
    """review_id, judgments: each review's judgment lines in position order, one per line."""
    return (
        judgments.sort("review_id", "position")
        .group_by("review_id", maintain_order=True)
        .agg(pl.col("text").str.strip_chars().str.join("\n").alias("judgments"))
    )


def synopses_wide(synopses: pl.DataFrame) -> pl.DataFrame:
    """SYNOPSES_WIDE (paper_id, abstract, assw, assw_source; paper_text null) from the long synopses frame
    (kind in {abstract, assw}; `source`, when present, says what the ASSW was written from)."""
    if synopses.is_empty():
        return pl.DataFrame(schema=SYNOPSES_WIDE)
    duplicated = synopses.filter(pl.struct("paper_id", "kind").is_duplicated())
    if not duplicated.is_empty():
        raise ValueError(f"several synopses of one kind for papers {duplicated['paper_id'].unique().to_list()[:5]}")
    wide = synopses.pivot("kind", index="paper_id", values="text")
    if "source" in synopses.columns:
        sources = synopses.filter(pl.col("kind") == "assw").select("paper_id", pl.col("source").alias("assw_source"))
        wide = wide.join(sources, on="paper_id", how="left")
    return conform(wide.select(
        "paper_id", *(pl.col(k) if k in wide.columns else pl.lit(None, pl.String).alias(k)
                      for k in ("abstract", "assw", "assw_source"))), SYNOPSES_WIDE)


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
        frames.append(benchmark_only(damage.read_parquet(path, columns=["paper_id", "review_id", "review_text"]), folder))
    return pl.concat(frames)


def benchmark_only(reviews: pl.DataFrame, curate_folder: Path) -> pl.DataFrame:
    """The rows of `reviews` on papers of the benchmark sample (`in_benchmark` in the curate
    folder's papers.parquet); all of them when there is no papers table."""
    papers = curate_folder / "papers.parquet"
    if not papers.is_file():
        return reviews
    sample = damage.read_parquet(papers, columns=["paper_id", "in_benchmark"]).filter("in_benchmark")
    return reviews.join(sample.select("paper_id"), on="paper_id", how="semi")


def paper_groups(cfg: Config, pipeline: str) -> dict[str, str]:
    """paper_id -> venue of the pipeline's curated papers: the group negative references are drawn from."""
    groups: dict[str, str] = {}
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "reviews.parquet"
        for paper in damage.read_parquet(path, columns=["paper_id"])["paper_id"].unique().to_list():
            groups.setdefault(paper, venue)
    return groups


# ---- preprocess's outputs, when the metrics read them ----------------------------------------------
def read_judgments(cfg: Config, pipeline: str, metrics: Sequence[ReadsFrames]) -> pl.DataFrame | None:
    """review_id, judgments when a metric reads judgments (None otherwise); missing ones are an error."""
    if not any(m.reads == "judgments" for m in metrics):
        return None
    path = stage_dir(cfg, pipeline, "preprocess") / "judgments.parquet"
    if not path.is_file():
        names = sorted(m.name for m in metrics if m.reads == "judgments")
        raise FileNotFoundError(f"{path}: judgments not found; run the preprocess stage or drop metric(s) {names}")
    return judgments_text(damage.read_parquet(path))


def read_synopses(cfg: Config, pipeline: str, metrics: Sequence[ReadsFrames]) -> pl.DataFrame | None:
    """SYNOPSES_WIDE when a metric is conditioned on a synopsis (None otherwise); missing ones are an error."""
    if all(m.conditioned_on == "none" for m in metrics):
        return None
    path = stage_dir(cfg, pipeline, "preprocess") / "synopses.parquet"
    if not path.is_file():
        names = sorted(m.name for m in metrics if m.conditioned_on != "none")
        raise FileNotFoundError(f"{path}: synopses not found; run the preprocess stage or drop metric(s) {names}")
    long = damage.read_parquet(path)
    wide = synopses_wide(long.select(c for c in ("paper_id", "kind", "text", "source") if c in long.columns))
    if any(m.conditioned_on == "paper" for m in metrics):
        wide = with_paper_texts(cfg, pipeline, wide)
    return wide


def with_paper_texts(cfg: Config, pipeline: str, wide: pl.DataFrame) -> pl.DataFrame:
    """`wide` with each paper's PDF text (the ingest stage's pdf_texts; null for a paper without one),
    for the metrics conditioned on the paper itself (lm_examiner)."""
    frames = [damage.read_parquet(p, columns=["paper_id", "text"]) for venue in cfg.pipelines[pipeline].venues
              if (p := stage_dir(cfg, pipeline, "ingest", venue) / "pdf_texts.parquet").is_file()]
    if not frames:
        return wide
    texts = pl.concat(frames).unique("paper_id", keep="first").rename({"text": "_paper_text"})
    return (wide.join(texts, on="paper_id", how="left")
            .with_columns(pl.coalesce("paper_text", "_paper_text").alias("paper_text")).drop("_paper_text"))


# ---- generate's outputs --------------------------------------------------------------------------
def scoring_candidates(cfg: Config, pipeline: str) -> pl.DataFrame:
    """Generated reviews as score-stage candidates (tasks.core.schema.SCORING_CANDIDATES): candidate =
    candidate_id, source = the model's name, review_id null (no human review is left out), and the
    judgments from candidate_judgments. Empty when the generate stage has not run."""
    folder = cfg.data_dir / pipeline / "generate"
    if not (folder / "candidates.parquet").is_file():
        return pl.DataFrame(schema=SCORING_CANDIDATES)
    generated = damage.read_parquet(folder / "candidates.parquet", columns=["candidate_id", "paper_id", "model", "review"])
    path = folder / "candidate_judgments.parquet"
    judgments = judgments_text(damage.read_parquet(path)) if path.is_file() else pl.DataFrame(
        schema={"review_id": pl.String, "judgments": pl.String})
    return (
        generated.join(judgments, left_on="candidate_id", right_on="review_id", how="left")
        .select("paper_id", pl.col("candidate_id").alias("candidate"), pl.col("model").alias("source"),
                pl.lit(None, pl.String).alias("review_id"), pl.col("review").alias("review_text"), "judgments")
        .cast(dict(SCORING_CANDIDATES))
        .sort("paper_id", "candidate")
    )


def generate_frame(cfg: Config, pipeline: str, name: str, schema: pl.Schema) -> pl.DataFrame:
    """generate/<name>.parquet cast to `schema` (its columns only), empty when the stage has not written it
    (e.g. injected_candidates without an injection track)."""
    path = cfg.data_dir / pipeline / "generate" / f"{name}.parquet"
    if not path.is_file():
        return pl.DataFrame(schema=schema)
    return damage.read_parquet(path, columns=schema.names()).cast(dict(schema))


def candidate_judgments(cfg: Config, pipeline: str) -> pl.DataFrame:
    """The generated reviews' judgments as one text per review (review_id = candidate_id, judgments)."""
    path = cfg.data_dir / pipeline / "generate" / "candidate_judgments.parquet"
    if not path.is_file():
        return pl.DataFrame(schema={"review_id": pl.String, "judgments": pl.String})
    return judgments_text(damage.read_parquet(path))


# ---- review versions ------------------------------------------------------------------------------
def pick_version(reviews: pl.DataFrame, which: str) -> pl.DataFrame:
    """Reviews with rating .. review_text of the `which` ("first" | "final") version, named in
    `review_version`. For "final", an edited review's text sections and sub-scores (first version
    only) become null; a review without a final version read keeps what it has."""
    if which == "first":
        return reviews.with_columns(review_version=pl.lit("first"))
    edited = pl.col("edited_after_rebuttal").fill_null(False)
    return reviews.with_columns(
        *(pl.coalesce(f"{c}_final", c).alias(c) for c in FINAL_COLUMNS),
        *(pl.when(edited).then(None).otherwise(pl.col(c)).alias(c) for c in SECTION_COLUMNS),
        review_version=pl.lit("final"),
    )


# ---- candidates beside their references (every metric family pairs them this way) ----

def _unique(frame: pl.DataFrame, column: str, what: str) -> None:
    dup = frame.filter(pl.col(column).is_duplicated())[column].unique().to_list()
    if dup:
        raise ValueError(f"{what}: duplicated {column} {dup[:5]}")


def reference_sets(candidates: pl.DataFrame, references: pl.DataFrame) -> Iterator[tuple[dict, list[dict]]]:
    """Each candidate (by paper, then id) with its paper's references, itself left out (leave-one-out)."""
    _unique(candidates, "candidate", "candidates")
    _unique(references, "review_id", "references")
    by_paper: dict[str, list[dict]] = {}
    for ref in references.sort("paper_id", "review_id").iter_rows(named=True):
        by_paper.setdefault(ref["paper_id"], []).append(ref)
    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        yield cand, [r for r in by_paper.get(cand["paper_id"], []) if r["review_id"] != cand["review_id"]]


def usable(text: str | None) -> str | None:
    """The text, or None when it is missing or blank (an expected gap, never a zero)."""
    return text if isinstance(text, str) and text.strip() else None
