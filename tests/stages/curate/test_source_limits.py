"""What a source cannot give (a venue table's `source_limits`) is stated beside the curation report."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tasks.core.config import Config, CurateConfig, VenueConfig, load_config
from tasks.core.schema import PAPERS, REVIEWS, conform
from tasks.stages.curate.rules import curate_venue
from tasks.stages.materialize.build import build_database

VENUE = "Test.cc/2025/Conference"
LIMIT = "most rejected papers are private: the sample leans to accepted papers"


def write_ingest(folder) -> None:
    import polars as pl

    folder.mkdir(parents=True)
    papers = pl.DataFrame({"paper_id": ["p1"], "venue_id": [VENUE], "status": ["active"], "title": ["A"]})
    reviews = pl.DataFrame({"review_id": ["r1", "r2", "r3"], "paper_id": ["p1"] * 3, "venue_id": [VENUE] * 3,
                            "rating": [6.0, 6.0, 8.0], "confidence": [4.0, 5.0, 4.0],
                            "review_text": ["A careful review of the paper."] * 3})
    conform(papers, PAPERS).write_parquet(folder / "papers.parquet")
    conform(reviews, REVIEWS).write_parquet(folder / "reviews.parquet")


@pytest.mark.parametrize("limits", [(LIMIT,), ()])
def test_curate_writes_the_venues_source_limits_and_materialize_shows_them(tmp_path, limits):
    (tmp_path / "pipelines.toml").write_text(
        f"[venues.\"{VENUE}\"]\nsource_limits = {list(limits)!r}\n".replace("'", '"')
        + f"[pipelines.t]\nvenues = ['{VENUE}']\nstages = ['ingest', 'curate', 'materialize']\n")
    cfg = load_config(tmp_path / "pipelines.toml").for_pipeline("t")
    base = cfg.data_dir / "t" / "venue"
    write_ingest(base / "ingest")
    result = curate_venue(base / "ingest", VENUE, cfg, base / "curate")
    assert result.source_limits == limits and result.summary().details[VENUE]["source_limits"] == limits
    assert (base / "curate" / "source_limits.parquet").exists() == bool(limits)
    built = build_database(cfg, "t")
    assert built.tables.get("source_limits", 0) == len(limits)
    with duckdb.connect(str(cfg.database), read_only=True) as con:   # beside it, what the history allowed
        assert con.execute("select entity, \"case\", ingested, kept from version_coverage").fetchall() == [
            ("paper", "no history read", 1, 1), ("review", "no history read", 3, 3)]
    if limits:
        with duckdb.connect(str(cfg.database), read_only=True) as con:
            assert con.execute('select venue_id, "limit" from source_limits').fetchall() == [(VENUE, LIMIT)]


def test_the_neurips_tables_state_that_rejected_papers_are_private():
    cfg = load_config(Path(__file__).resolve().parents[3] / "pipelines.toml")
    assert any("rejected papers private" in limit for limit in cfg.venue("NeurIPS.cc/2025/Conference").source_limits)
    assert Config(venues={VENUE: VenueConfig()}, curate=CurateConfig()).venue(VENUE).source_limits == ()
