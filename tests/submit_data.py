"""A tiny benchmark for the submit tests: four curated papers of one venue with three human reviews
each, and a pipelines.toml whose [preprocess] LLM is the local Anthropic-compatible server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from tasks.core.schema import CURATED_PAPERS, CURATED_REVIEWS, conform

VENUE = "Test.cc/2024/Conference"
# P0 is public before the submissions' declared cutoff (2024-03-01), the others after it
PUBLIC = [datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC), datetime(2024, 4, 2, tzinfo=UTC),
          datetime(2024, 4, 3, tzinfo=UTC)]
TOPICS = ["sparse attention", "graph pooling", "causal probing", "tabular transformers"]
# the paths and the judgment LLM (the local Anthropic-compatible server) of every test pipeline here
JUDGE_CONFIG = """
[paths]
data_dir = "data"
database = "data/test.duckdb"

[preprocess]
backend = "anthropic"
model = "claude-judge"
use_batches = false
max_retries = 0
max_tokens = 400
"""
CONFIG = JUDGE_CONFIG + """
[score]
metrics = {metrics}
baselines = []

[validate]
metrics = {metrics}
strategies = ["sentence_deletion", "meaningless_elongation_proxy"]
min_pairs = 2
level = ["judgments"]
compare_resamples = 500
{candidates}
[pipelines.t]
venues = ["{venue}"]
stages = {stages}
"""
OPENAI_CANDIDATE = """
[[generate.candidates]]
name = "gen-model"
backend = "openai"
base_url = "{base_url}"
api_key_env = "GREBENCH_TEST_OPENAI_KEY"
model = "gen-model"
knowledge_cutoff = 2024-03-01
max_tokens = 600
max_context_tokens = 3000
use_batches = false
"""


def write_config(root: Path, metrics: list[str], candidates: str = "",
                 stages: tuple[str, ...] = ("generate", "score", "validate", "materialize")) -> Path:
    quoted = "[" + ", ".join(f'"{m}"' for m in metrics) + "]"
    path = root / "pipelines.toml"
    path.write_text(CONFIG.format(metrics=quoted, candidates=candidates, venue=VENUE,
                                  stages="[" + ", ".join(f'"{s}"' for s in stages) + "]"))
    return path


def human_review(paper: int, reviewer: int) -> str:
    topic = TOPICS[paper]
    return (f"## Summary\n\nThe paper studies {topic} with a new estimator.\n\n## Strengths\n\n"
            f"The method for {topic} is clearly explained and the proofs are careful. "
            f"Reviewer {reviewer} finds the ablations on {topic} convincing.\n\n## Weaknesses\n\n"
            f"The evaluation of {topic} lacks strong baselines. The data sets are small for claim {reviewer}.\n\n"
            f"## Questions\n\nHow does the {topic} method scale to larger inputs?")


def write_curated(cfg) -> None:
    from tasks.core.layout import stage_dir

    n = len(TOPICS)
    papers = pl.DataFrame({
        "paper_id": [f"P{k}" for k in range(n)], "venue_id": [VENUE] * n,
        "title": [f"On {t}" for t in TOPICS], "abstract": [f"We study {t} and propose an estimator." for t in TOPICS],
        "first_public_at": PUBLIC, "pdf_url": [f"/pdf?id=P{k}" for k in range(n)], "in_benchmark": [True] * n,
    }, schema_overrides={"first_public_at": pl.Datetime("ms", "UTC")})
    conform(papers, CURATED_PAPERS).write_parquet(stage_dir(cfg, "t", "curate", VENUE) / "papers.parquet")
    rows = [{"review_id": f"R{p}{r}", "paper_id": f"P{p}", "venue_id": VENUE, "rating": 6.0, "confidence": 4.0,
             "review_text": human_review(p, r)} for p in range(n) for r in range(3)]
    conform(pl.DataFrame(rows), CURATED_REVIEWS).write_parquet(stage_dir(cfg, "t", "curate", VENUE) / "reviews.parquet")


def good_review(paper: int, quality: int = 1) -> str:
    """A submitted review of a paper; `quality` 1 echoes the human reviews' points, 0 says little."""
    topic = TOPICS[paper]
    if not quality:
        return f"## Summary\n\nA paper about {topic}.\n\n## Weaknesses\n\nIt could be better written overall."
    return (f"## Summary\n\nThe paper studies {topic} with a new estimator.\n\n## Strengths\n\n"
            f"The method for {topic} is clearly explained.\n\n## Weaknesses\n\n"
            f"The evaluation of {topic} lacks strong baselines.\n\n## Questions\n\nHow does it scale?")


def scoring_config(root: Path):
    """The config of pipeline "t" (BLEU; score, validate, materialize) over the tiny benchmark, written."""
    from tasks.core.config import load_config

    config = load_config(write_config(root, ["bleu"], stages=("score", "validate", "materialize"))).for_pipeline("t")
    write_curated(config)
    return config
