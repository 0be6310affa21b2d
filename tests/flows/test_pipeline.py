"""The pipeline flow: the config resolved once (overrides included) and handed to every stage, the
`runs` record filled from each stage's summary; end to end under Prefect's test harness on the
synthetic venues (local OpenReview-compatible server -> real openreview-py client -> curate -> DuckDB)."""

from pathlib import Path

import duckdb
import pytest

import flows.pipeline
from flows.pipeline import pipeline_flow
from flows.refresh import refresh_flow
from tasks.core.config import Config, ConfigError, select_stages
from tasks.core.summary import StageSummary

DEMO, LEGACY, REFRESH = "GREBench.cc/2025/Demo", "GREBench.cc/2023/Legacy", "GREBench.cc/2024/Refresh"
PIPELINES = f"""
[venues."{REFRESH}"]
rating_map = {{ "1" = 1, "2" = 1, "3" = 3, "4" = 5, "5" = 5, "6" = 6, "7" = 8, "8" = 8, "9" = 10, "10" = 10 }}

[pipelines.demo]
source = "synthetic"
venues = ["{DEMO}", "{LEGACY}"]
stages = ["ingest", "curate", "materialize"]

[pipelines.demo.curate]
sample_size = 3

[pipelines.refresh]
source = "synthetic"
venues = ["GREBench.cc/{{year}}/Demo"]
stages = ["ingest", "curate", "materialize"]
"""


def table(database: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_stage_selection_keeps_pipeline_order():
    assert select_stages(["ingest", "curate", "materialize"], ["materialize", "ingest"]) == ["ingest", "materialize"]
    with pytest.raises(ConfigError, match="unknown stage"):
        select_stages(["ingest"], ["cook"])


def test_every_stage_gets_the_one_resolved_config_and_its_summary_reaches_runs(project_config, monkeypatch):
    """No Prefect server: the parent flow's body with recording stand-ins for the stage flows."""
    import polars as pl

    seen: list[tuple[str, Config]] = []

    def stand_in(stage: str):
        def run(cfg: Config, pipeline: str) -> StageSummary:
            seen.append((stage, cfg))
            return StageSummary(rows_in=10 + len(seen), rows_out=len(seen), llm_calls=2, cost_usd=0.5)
        return run

    monkeypatch.setattr(flows.pipeline, "stage_flow", stand_in)
    config = project_config(PIPELINES)
    summary = pipeline_flow.fn(pipeline="demo", config_path=str(config), venues=[LEGACY])
    assert [stage for stage, _ in seen] == list(summary) == ["ingest", "curate", "materialize"]
    assert len({id(cfg) for _, cfg in seen}) == 1                     # resolved once, the same object
    assert seen[0][1].pipelines["demo"].venues == (LEGACY,)
    assert seen[0][1].curate.sample_size == 3                         # the pipeline's overrides merged in
    runs = pl.concat(pl.read_parquet(p) for p in (config.parent / "data" / "demo" / "runs").glob("*.parquet"))
    assert runs.select("stage", "status", "rows_in", "rows_out", "llm_calls", "cost_usd").rows() == [
        ("ingest", "completed", 11, 1, 2, 0.5), ("curate", "completed", 12, 2, 2, 0.5),
        ("materialize", "completed", 13, 3, 2, 0.5)]


@pytest.mark.slow
def test_demo_pipeline_builds_the_database_records_the_run_and_reruns_identically(prefect_harness, project_config):
    config = project_config(PIPELINES)
    summary = pipeline_flow(pipeline="demo", config_path=str(config))
    assert list(summary) == ["ingest", "curate", "materialize"]
    database = config.parent / "data" / "demo" / "grebench.duckdb"

    # Both API shapes were ingested through the real client: v2 for 2025, v1 for the 2023 venue.
    venues = dict(table(database, "select venue_id, count(*) from reviews group by all"))
    assert set(venues) == {DEMO, LEGACY} and all(n > 0 for n in venues.values())
    # Curation dropped what it must, each with its rule; ratings sit on the common scale.
    rules = {rule for (rule,) in table(database, "select distinct rule from rejects")}
    assert {"low_confidence", "withdrawn", "desk_rejected"} <= rules
    assert table(database, "select count(*) from reviews where rating not in (1, 3, 5, 6, 8, 10)") == [(0,)]
    assert table(database, "select min(confidence) >= 4 from reviews") == [(True,)]
    assert table(
        database, "select count(*) from papers where n_reviews not between 3 and 5 or rating_var > 1.5"
    ) == [(0,)]
    assert table(database, "select count(*) from papers where in_benchmark") == [(6,)]

    # The run's record: every stage's rows in / out, as its summary reported them, and they add up.
    runs = table(database, "select stage, status, rows_in, rows_out from runs order by position")
    assert runs == [(stage, "completed", s.rows_in, s.rows_out) for stage, s in summary.items()]
    (_, _, fetched, ingested), (_, _, curated_in, kept), (_, _, staged, built) = runs
    assert fetched >= ingested == curated_in > kept == sum(venues.values()) > 0
    assert staged > 0 and built == sum(summary["materialize"].details["tables"].values())
    assert summary["materialize"].details["tables"]["reviews"] == kept

    before = table(database, "select * from reviews order by review_id")
    rejects_before = table(database, "select * from rejects order by all")
    pipeline_flow(pipeline="demo", config_path=str(config))
    assert table(database, "select * from reviews order by review_id") == before
    assert table(database, "select * from rejects order by all") == rejects_before
    assert table(database, "select count(distinct run_id) from runs") == [(2,)]


@pytest.mark.slow
def test_a_venues_override_reaches_every_stage(prefect_harness, project_config):
    config = project_config(PIPELINES)
    summary = pipeline_flow(pipeline="demo", config_path=str(config), venues=[LEGACY])
    database = config.parent / "data" / "demo" / "grebench.duckdb"
    assert table(database, "select distinct venue_id from reviews") == [(LEGACY,)]
    assert set(summary["ingest"].details) == set(summary["curate"].details) == {LEGACY}
    assert table(database, "select count(*) from runs where rows_in is null or rows_out is null") == [(0,)]


@pytest.mark.slow
def test_refresh_for_a_given_year_on_given_venues(prefect_harness, project_config):
    config = project_config(PIPELINES)
    summary = refresh_flow(year=2024, venues=[REFRESH], config_path=str(config))
    assert list(summary) == ["ingest", "curate", "materialize"]
    database = config.parent / "data" / "refresh-2024" / "grebench.duckdb"
    assert table(database, "select distinct venue_id from reviews") == [(REFRESH,)]
    assert table(database, "select distinct pipeline from runs") == [("refresh-2024",)]
    assert table(database, "select count(*) from runs where rows_in is null or rows_out is null") == [(0,)]
