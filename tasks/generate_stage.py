"""The generate stage's files and its Prefect tasks.

    data/<pipeline>/generate/candidates.parquet          tasks.generate.CANDIDATES, one row per review
    data/<pipeline>/generate/exclusions.parquet          tasks.contamination.EXCLUSIONS
    data/<pipeline>/generate/rejects.parquet             schema.REJECTS (stage generate, and preprocess
                                                         for candidate reviews that gave no judgment)
    data/<pipeline>/generate/usage.parquet               tasks.preprocess.USAGE, per candidate + judgments
    data/<pipeline>/generate/candidate_judgments.parquet tasks.preprocess.JUDGMENTS, review_id = candidate_id

`scoring_candidates` turns these into the score stage's CANDIDATES frame.
"""

from __future__ import annotations

import functools
from datetime import date
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Config, ConfigError
from tasks.contamination import EXCLUSIONS, guard
from tasks.generate import CANDIDATES, generate_reviews
from tasks.layout import write_stage_frames
from tasks.llm.base import TransientLLMError
from tasks.preprocess import JUDGMENTS, read_inputs

FILES = ("candidates", "exclusions", "rejects", "usage", "candidate_judgments")


def read_generate_inputs(cfg: Config, pipeline: str) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The pipeline's benchmark papers (in_benchmark) and their PDF texts."""
    if not cfg.generate.candidates:
        raise ConfigError("generate.candidates: no candidate models configured (add [[generate.candidates]])")
    _, papers, pdf_texts = read_inputs(cfg, pipeline)
    if "in_benchmark" in papers.columns:
        papers = papers.filter(pl.col("in_benchmark").fill_null(False))
    papers = papers.sort("venue_id", "paper_id")
    if pdf_texts is not None:
        pdf_texts = pdf_texts.filter(pl.col("paper_id").is_in(papers["paper_id"].implode()))
    return papers, pdf_texts


def exclude(papers: pl.DataFrame, name: str, cutoff: date) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The contamination guard for one candidate (see tasks.contamination.guard)."""
    return guard(papers, name, cutoff)


def as_reviews(candidates: pl.DataFrame) -> pl.DataFrame:
    """Generated reviews in the shape preprocessing reads: review_id = candidate_id."""
    return candidates.select(pl.col("candidate_id").alias("review_id"), "paper_id", "venue_id",
                             pl.col("review").alias("review_text"))


def write_generate_outputs(cfg: Config, pipeline: str, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    """Each frame to generate/<name>.parquet, replaced atomically (a rerun overwrites)."""
    return write_stage_frames(cfg, pipeline, "generate", frames)


def scoring_candidates(cfg: Config, pipeline: str) -> pl.DataFrame:
    """Generated reviews as score-stage candidates (tasks.schema.SCORING_CANDIDATES): candidate =
    candidate_id, source = the model's name, review_id null (no human review is left out), and the
    judgments from candidate_judgments. Empty when the generate stage has not run."""
    from tasks.schema import SCORING_CANDIDATES
    from tasks.scoring.inputs import judgments_text

    folder = cfg.data_dir / pipeline / "generate"
    if not (folder / "candidates.parquet").is_file():
        return pl.DataFrame(schema=SCORING_CANDIDATES)
    generated = pl.read_parquet(folder / "candidates.parquet", columns=["candidate_id", "paper_id", "model", "review"])
    path = folder / "candidate_judgments.parquet"
    judgments = judgments_text(pl.read_parquet(path)) if path.is_file() else pl.DataFrame(
        schema={"review_id": pl.String, "judgments": pl.String})
    return (
        generated.join(judgments, left_on="candidate_id", right_on="review_id", how="left")
        .select("paper_id", pl.col("candidate_id").alias("candidate"), pl.col("model").alias("source"),
                pl.lit(None, pl.String).alias("review_id"), pl.col("review").alias("review_text"), "judgments")
        .cast(dict(SCORING_CANDIDATES))
        .sort("paper_id", "candidate")
    )


def empty_frames() -> dict[str, pl.DataFrame]:
    return {"candidates": pl.DataFrame(schema=CANDIDATES), "exclusions": pl.DataFrame(schema=EXCLUSIONS),
            "candidate_judgments": pl.DataFrame(schema=JUDGMENTS)}


# ---- Prefect wrappers: retried only when an LLM call failed transiently -------------------------
def _transient(_task: Any, _run: Any, state: Any) -> bool:
    try:
        return isinstance(state.result(raise_on_failure=False), TransientLLMError)
    except Exception:  # the result could not be read back: do not retry blindly
        return False


_llm_task = functools.partial(task, retries=3, retry_delay_seconds=[30, 120, 300], retry_condition_fn=_transient,
                              cache_policy=NO_CACHE)
generate_reviews_task = _llm_task(generate_reviews, name="generate-reviews", task_run_name="generate-{candidate.name}")
read_generate_inputs_task = task(read_generate_inputs, name="read-generate-inputs", cache_policy=NO_CACHE)
exclude_task = task(exclude, name="contamination-guard", task_run_name="guard-{name}", cache_policy=NO_CACHE)
write_generate_outputs_task = task(write_generate_outputs, name="write-generate-outputs", cache_policy=NO_CACHE)
