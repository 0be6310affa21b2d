"""What the validation benches on the ICLR 2023 dev file share: their common options, the file's
reviews in the shape the validation workflow reads, and the raw level's preprocessor. A helper, not
a bench."""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

DEV_FILE = Path("../shared/data/iclr2023_dev.parquet")


def add_options(parser: argparse.ArgumentParser, papers: int = 60) -> None:
    """--papers, --data, --min-pairs, --token-budget, --level, --max-tokens and --cache."""
    parser.add_argument("--papers", type=int, default=papers)
    parser.add_argument("--data", type=Path, default=DEV_FILE)
    parser.add_argument("--min-pairs", type=int, default=10)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--level", choices=("judgments", "raw"), default="judgments")
    parser.add_argument("--max-tokens", type=int, default=160)   # preprocessing answer length (raw level)
    parser.add_argument("--cache", type=Path, default=Path("data/cache/llm"))


def load_reviews(path: Path) -> pl.DataFrame:
    """Every review of the file: its id (paper/reviewer), text and the file's reference judgments."""
    raw = pl.read_parquet(path)
    return raw.select("paper_id", (pl.col("paper_id") + "/" + pl.col("reviewer").cast(pl.String)).alias("review_id"),
                      pl.col("review").alias("review_text"), pl.col("judgments_reference").alias("judgments"),
                      group=pl.lit("iclr2023"))


def raw_level(reviews: pl.DataFrame, max_tokens: int, cache: Path):
    """At the raw level every review (originals and references too) gets the embedded preprocessor's
    judgments (the [preprocess] defaults, answers cached under `cache`): the reviews without theirs, and
    that preprocessor."""
    from tasks.core.config import PreprocessConfig
    from tasks.lm import make_lm
    from tasks.stages.validate.stage import llm_preprocessor

    cache.mkdir(parents=True, exist_ok=True)
    config = PreprocessConfig(max_tokens=max_tokens)
    return reviews.with_columns(judgments=pl.lit(None, pl.String)), llm_preprocessor(make_lm(config, cache), config)
