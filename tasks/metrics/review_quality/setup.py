"""The review-quality work of a run, built from the config and the pipeline's frames.

The facts the metric family reads (curated ratings, decisions and paper texts, the generated and
submitted candidates' rating answers) and its settings; the score and validate stages both build it here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from tasks.core.config import Config
from tasks.core.frames import read_curated
from tasks.core.submitted import submission_folders
from tasks.metrics.review_quality.work import (
    PAPER_FACTS,
    REVIEW_FACTS,
    QualitySettings,
    QualityWork,
    ReviewFacts,
)


def needs_quality(names: Sequence[str]) -> bool:
    from tasks.metrics import REGISTRY

    return any(REGISTRY[n].needs == "review_quality" for n in names if n in REGISTRY)


def settings(cfg: Config) -> QualitySettings:
    rq = cfg.score.review_quality
    pair = (rq.binoculars_observer, rq.binoculars_performer) if rq.binoculars_observer else None
    return QualitySettings(match_top_k=rq.match_top_k, kl_alpha=rq.kl_alpha, chunk_tokens=rq.chunk_tokens,
                           chunk_overlap=rq.chunk_overlap, chunk_top_k=rq.chunk_top_k,
                           accept_threshold=rq.accept_threshold,
                           rating_scale=tuple(float(v) for v in cfg.curate.common_scale), binoculars=pair,
                           points_max_tokens=rq.points_max_tokens)


def load_facts(cfg: Config, pipeline: str) -> ReviewFacts:
    """Human ratings (common scale), candidates' rating answers, decisions and PDF texts of the
    pipeline's benchmark papers."""
    reviews, papers, pdf_texts = read_curated(cfg, pipeline)
    humans = reviews.select("review_id", "paper_id", pl.col("rating").cast(pl.Float64),
                            pl.lit(None, pl.String).alias("rating_answer"))
    generated = [cfg.data_dir / pipeline / "generate" / "candidates.parquet",   # submitted ratings count too
                 *(f / "submitted_candidates.parquet" for f in submission_folders(cfg, pipeline))]
    frames = [humans]
    for path in (p for p in generated if p.is_file()):
        gen = pl.read_parquet(path)
        answer = pl.col("rating_answer") if "rating_answer" in gen.columns else pl.lit(None, pl.String)
        frames.append(gen.select(pl.col("candidate_id").alias("review_id"), "paper_id",
                                 pl.lit(None, pl.Float64).alias("rating"), answer.cast(pl.String).alias("rating_answer")))
    texts = (pdf_texts.select("paper_id", "text").unique("paper_id") if pdf_texts is not None
             else pl.DataFrame(schema={"paper_id": pl.String, "text": pl.String}))
    decision = pl.col("decision") if "decision" in papers.columns else pl.lit(None, pl.String)
    paper_facts = papers.select("paper_id", decision.cast(pl.String).alias("decision")).join(texts, on="paper_id", how="left")
    return ReviewFacts(pl.concat(frames).cast(dict(REVIEW_FACTS)), paper_facts.select(PAPER_FACTS.names()).cast(dict(PAPER_FACTS)))


def quality_work(cfg: Config, pipeline: str, llm_cache: Path | None, names: Sequence[str]) -> QualityWork | None:
    """The run's QualityWork when a metric in `names` needs it (its LLM built on first use)."""
    if not needs_quality(names):
        return None
    from tasks.metrics.resources import LazyLM

    llm_cfg = cfg.score.review_quality.llm or cfg.preprocess
    llm = LazyLM(llm_cfg, llm_cache) if llm_cache is not None else None
    matchers = cfg.score.review_quality.matchers   # the first listed matches (qualify drops failed ones)
    matcher = LazyLM(matchers[0], llm_cache) if matchers and llm_cache is not None else None
    return QualityWork(settings(cfg), load_facts(cfg, pipeline), llm, matcher=matcher)
