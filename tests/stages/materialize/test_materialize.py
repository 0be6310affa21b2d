from pathlib import Path

import duckdb
import polars as pl
import pytest

from tasks.core import schema
from tasks.core.config import load_config
from tasks.stages.materialize.build import DataTestError, build_database

VENUE = "Test.cc/2025/Conference"


def make_config(tmp_path: Path):
    (tmp_path / "pipelines.toml").write_text(
        f"[pipelines.t]\nvenues = ['{VENUE}']\nstages = ['ingest', 'curate', 'materialize']\n"
    )
    return load_config(tmp_path / "pipelines.toml")


def write_outputs(cfg, kept_reviews: int = 3, rejected_reviews: int = 1) -> None:
    base = cfg.data_dir / "t" / "venue"
    (base / "ingest").mkdir(parents=True)
    (base / "curate").mkdir(parents=True)
    ids = [f"r{i}" for i in range(kept_reviews + rejected_reviews)]
    papers = pl.DataFrame({"paper_id": ["p1", "p2"], "venue_id": [VENUE] * 2, "title": ["A", "B"]})
    schema.conform(papers, schema.PAPERS).write_parquet(base / "ingest" / "papers.parquet")
    reviews = pl.DataFrame(
        {"review_id": ids, "paper_id": ["p1"] * len(ids), "venue_id": [VENUE] * len(ids), "rating": [6.0] * len(ids)}
    )
    schema.conform(reviews, schema.REVIEWS).write_parquet(base / "ingest" / "reviews.parquet")
    schema.conform(papers.filter(pl.col("paper_id") == "p1"), schema.CURATED_PAPERS).write_parquet(
        base / "curate" / "papers.parquet")
    schema.conform(reviews.head(kept_reviews), schema.CURATED_REVIEWS).write_parquet(base / "curate" / "reviews.parquet")
    rejects = [
        {"stage": "curate", "entity": "review", "entity_id": r, "paper_id": "p1", "venue_id": VENUE, "rule": "low_confidence"}
        for r in ids[kept_reviews:]
    ] + [{"stage": "curate", "entity": "paper", "entity_id": "p2", "paper_id": "p2", "venue_id": VENUE, "rule": "too_few_reviews"}]
    schema.rejects(rejects).write_parquet(base / "curate" / "rejects.parquet")
    report = pl.DataFrame(
        {"venue_id": [VENUE], "step": [1], "rule": ["low_confidence"], "entity": ["review"], "rows_in": [4], "rows_out": [3]}
    )
    schema.conform(report, schema.CURATION_REPORT).write_parquet(base / "curate" / "curation_report.parquet")


def test_builds_tables_and_rebuild_is_idempotent(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    first = build_database(cfg, "t")
    assert first.tables == {"curation_report": 1, "papers": 1, "rejects": 2, "reviews": 3}
    summary = first.summary()     # staging rows read in (2 + 4 ingested, 1 + 3 + 2 + 1 curated), mart rows out
    assert (summary.rows_in, summary.rows_out) == (13, 7) and summary.details["tables"] == first.tables
    assert first.tests_run >= 5
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        before = con.execute("select * from reviews order by review_id").fetchall()
    second = build_database(cfg, "t")
    assert second.tables == first.tables
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select * from reviews order by review_id").fetchall() == before
        assert con.execute("select pipeline from _build").fetchone() == ("t",)
    assert not list(tmp_path.glob("data/*.building"))


def test_stages_not_run_yet_are_skipped(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    result = build_database(cfg, "t")
    assert "staging.pdf_texts" in result.skipped


def test_counts_that_do_not_reconcile_fail_and_keep_the_old_database(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    build_database(cfg, "t")
    # Lose one rejected review: ingested (4) no longer equals kept (3) + rejected (0).
    rejects = cfg.data_dir / "t" / "venue" / "curate" / "rejects.parquet"
    pl.read_parquet(rejects).filter(pl.col("entity") == "paper").write_parquet(rejects)
    with pytest.raises(DataTestError, match=r"curation_reconciles: e.g. \[\('review'"):
        build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        assert con.execute("select count(*) from rejects").fetchone() == (2,)


def test_off_scale_rating_is_caught(tmp_path):
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    path = cfg.data_dir / "t" / "venue" / "curate" / "reviews.parquet"
    pl.read_parquet(path).with_columns(rating=pl.lit(7.0)).write_parquet(path)
    with pytest.raises(DataTestError, match="ratings_on_scale"):
        build_database(cfg, "t")
