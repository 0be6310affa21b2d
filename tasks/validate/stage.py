"""The validate stage's ends: read the pipeline's outputs, run the workflow, build the leaderboard, write.

    validate/validation.parquet             per metric x strategy: n, mean change, smd + CI, p, passed
    validate/human_correlation.parquet      per metric: Spearman rho with human quality scores
    validate/leaderboard.parquet            per metric x eval LM x model: mean over papers, 90% CI
    validate/leaderboard_agreement.parquet  per metric: rho between the boards of two evaluation LMs
    validate/perturbations.parquet          every perturbed candidate (text, judgments, error)
    validate/pairs.parquet                  original and perturbed score of every tested candidate
    validate/rejects.parquet                failed perturbations and preprocessing, unusable reviews
    validate/requests/, results/            GEM scoring shards (resumable, as in the score stage)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Config, PreprocessConfig
from tasks.layout import cache_dir, stage_dir, write_parquet
from tasks.lm import LoglikelihoodRequest, ModelSpec, eval_spec, local_lm
from tasks.retry import llm_task
from tasks.scoring.metrics import METRICS, candidate_scores, judgments_text, synopses_wide
from tasks.scoring.shards import (
    RESULTS,
    read_results,
    score_shard,
    write_request_shards,
)
from tasks.validate.leaderboard import agreement, leaderboard
from tasks.validate.perturb import strategy
from tasks.validate.workflow import Preprocessor, Scorer, ValidationResult, run_validation


def engine_scorer(spec: ModelSpec, token_budget: int = 4096) -> Scorer:
    """Score requests in this process with the (cached) scoring engine."""
    def score(requests: pl.DataFrame) -> pl.DataFrame:
        results = local_lm(spec, token_budget).loglikelihood([LoglikelihoodRequest(*r) for r in requests.select("system", "user", "continuation").iter_rows()])
        return pl.DataFrame({"key": requests["key"], "logprob": [r.logprob for r in results],
                             "n_tokens": [r.n_tokens for r in results]}, schema=RESULTS)
    return score


def shard_scorer(folder: Path, spec: ModelSpec, token_budget: int, shard_size: int) -> Scorer:
    """Score requests as Parquet shards under `folder` (requests/, results/); finished shards are reused."""
    def score(requests: pl.DataFrame) -> pl.DataFrame:
        names = write_request_shards(requests, folder / "requests", shard_size)
        for name in names:
            score_shard(folder / "requests", folder / "results", name, spec, token_budget)
        return read_results(folder / "results", names).filter(pl.col("key").is_in(requests["key"].implode()))
    return score


def llm_preprocessor(backend: Any, cfg: PreprocessConfig) -> Preprocessor:
    """Reviews -> (judgment lines, rejects) with the preprocessing stage's prompt and checks."""
    from tasks.preprocess import preprocess_reviews

    def run(reviews: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        out = preprocess_reviews(reviews, backend, cfg)
        return out.judgments, out.rejects
    return run


def needs_llm(cfg: Config) -> bool:
    return any(strategy(s).needs_llm for s in cfg.validate.strategies)


def read_reviews(cfg: Config, pipeline: str) -> pl.DataFrame:
    """REVIEWS_IN rows of the pipeline: curated reviews with their judgments and synopses; group = venue."""
    frames = []
    for venue in cfg.pipelines[pipeline].venues:
        path = stage_dir(cfg, pipeline, "curate", venue) / "reviews.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: curated reviews not found; run the curate stage first")
        frames.append(pl.read_parquet(path, columns=["paper_id", "review_id", "review_text"])
                      .with_columns(group=pl.lit(venue)))
    reviews = pl.concat(frames)
    folder = stage_dir(cfg, pipeline, "preprocess")
    wanted = [METRICS[m] for m in cfg.validate.metrics if m in METRICS]
    if any(m.text == "judgments" for m in wanted):
        path = folder / "judgments.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: judgments not found; run the preprocess stage or limit "
                                    "validate.metrics to gem_raw and the baselines")
        reviews = reviews.join(judgments_text(pl.read_parquet(path)), on="review_id", how="left")
    if any(m.synopsis != "none" for m in wanted):
        path = folder / "synopses.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: synopses not found; run the preprocess stage or drop the gem_s metrics")
        reviews = reviews.join(synopses_wide(pl.read_parquet(path, columns=["paper_id", "kind", "text"])),
                               on="paper_id", how="left")
    return reviews


def validate_reviews(cfg: Config, reviews: pl.DataFrame, scorer: Scorer | None,
                     metrics: tuple[str, ...] | None = None, strategies: tuple[str, ...] | None = None) -> ValidationResult:
    """`run_validation` with the config's settings; the LLM backend is built only when needed."""
    v = cfg.validate
    metrics, strategies = metrics or v.metrics, strategies or v.strategies
    backend = preprocess = None
    lines = "judgments" in reviews.columns and reviews["judgments"].is_not_null().any()
    judgment_metrics = any(m in METRICS and METRICS[m].text == "judgments" for m in metrics)
    if any(strategy(s).needs_llm for s in strategies) or (judgment_metrics and not lines):
        from tasks.lm import make_lm

        backend = make_lm(cfg.preprocess, cache_dir(cfg, "llm"))
        preprocess = llm_preprocessor(backend, cfg.preprocess)
    return run_validation(
        reviews, strategies=strategies, metrics=metrics, scorer=scorer,
        eval_lm=eval_spec(cfg.score).resolved().key, backend=backend, preprocess=preprocess,
        correction=v.correction, alpha=v.alpha, max_papers=v.max_papers, candidates=v.candidates, seed=v.seed,
    )


def read_candidate_scores(cfg: Config, pipeline: str) -> pl.DataFrame | None:
    """The score stage's per-candidate scores (None when the score stage has not run)."""
    folder = stage_dir(cfg, pipeline, "score")
    if (folder / "candidate_scores.parquet").is_file():
        return pl.read_parquet(folder / "candidate_scores.parquet")
    if (folder / "scores.parquet").is_file():
        return candidate_scores(pl.read_parquet(folder / "scores.parquet"))
    return None


def build_leaderboard(cfg: Config, pipeline: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(leaderboard, agreement) from the score stage's outputs and the generate stage's exclusions."""
    scores = read_candidate_scores(cfg, pipeline)
    if scores is None:
        from tasks.validate.leaderboard import AGREEMENT, LEADERBOARD

        return pl.DataFrame(schema=LEADERBOARD), pl.DataFrame(schema=AGREEMENT)
    path = stage_dir(cfg, pipeline, "generate") / "exclusions.parquet"
    exclusions = pl.read_parquet(path) if path.is_file() else None
    board = leaderboard(scores, exclusions, cfg.validate.leaderboard_confidence)
    return board, agreement(board)


def write_outputs(cfg: Config, pipeline: str, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    folder = stage_dir(cfg, pipeline, "validate")
    written = {}
    for name, frame in frames.items():
        write_parquet(frame, folder / f"{name}.parquet")
        written[name] = str(folder / f"{name}.parquet")
    return written


def validate_pipeline(cfg: Config, pipeline: str) -> ValidationResult:
    """The workflow on the pipeline's curated reviews, GEM requests scored as resumable shards."""
    reviews = read_reviews(cfg, pipeline)
    gem = any(m in METRICS for m in cfg.validate.metrics)
    scorer = shard_scorer(stage_dir(cfg, pipeline, "validate"), eval_spec(cfg.score), cfg.score.token_budget,
                          cfg.score.shard_size) if gem else None
    return validate_reviews(cfg, reviews, scorer)


# Retried only when an LLM call failed transiently (the LLM cache makes a retry cheap).
validate_pipeline_task = llm_task(validate_pipeline, name="validate-metrics")
build_leaderboard_task = task(build_leaderboard, name="build-leaderboard", cache_policy=NO_CACHE)
write_outputs_task = task(write_outputs, name="write-validate-outputs", cache_policy=NO_CACHE)
