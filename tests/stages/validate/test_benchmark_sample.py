"""Validation works on the benchmark sample, the papers every stage after curation uses (only these
are preprocessed, scored and have synopses), as the score stage does."""

from __future__ import annotations

import polars as pl

from tasks.core.config import load_config
from tasks.core.frames import curated_reviews
from tasks.core.layout import slug
from tasks.stages.validate.stage import read_reviews
from tests.scoring_data import VENUE, write_pipeline


def test_validation_reads_the_benchmark_papers_only(tmp_path) -> None:
    cfg = load_config(write_pipeline(tmp_path, n_papers=3, n_reviews=3)).for_pipeline("t")
    every = read_reviews(cfg, "t")                       # no papers table: every curated paper
    assert every["paper_id"].n_unique() == 3
    papers = sorted(every["paper_id"].unique())
    folder = tmp_path / "data" / "t" / slug(VENUE) / "curate"
    pl.DataFrame({"paper_id": papers, "in_benchmark": [True, False, True]}).write_parquet(folder / "papers.parquet")
    sample = read_reviews(cfg, "t")
    assert sorted(sample["paper_id"].unique()) == [papers[0], papers[2]]
    assert sample.height == every.filter(pl.col("paper_id") != papers[1]).height
    assert set(sample["group"]) == {VENUE} and sample["judgments"].is_not_null().all()
    assert sorted(curated_reviews(cfg, "t")["review_id"]) == sorted(sample["review_id"])
