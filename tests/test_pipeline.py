"""The demo pipeline end to end under Prefect's test harness: synthetic venue -> local
OpenReview-compatible server -> real openreview-py client -> curate -> DuckDB."""

from pathlib import Path

import duckdb
import pytest

from flows.pipeline import pipeline_flow, select_stages
from tasks.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def demo_config(tmp_path: Path, stages: str = "'ingest', 'curate', 'materialize'") -> Path:
    text = (ROOT / "pipelines.toml").read_text()
    head = text.split("[pipelines.demo]")[0]
    path = tmp_path / "pipelines.toml"
    path.write_text(
        head
        + "[pipelines.demo]\nsource = 'synthetic'\nvenues = ['GREBench.cc/2025/Demo', 'GREBench.cc/2023/Legacy']\n"
        + f"stages = [{stages}]\n[pipelines.demo.curate]\nsample_size = 3\n"
    )
    return path


def table(database: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_demo_pipeline_builds_the_database_and_reruns_identically(prefect_harness, tmp_path):
    config = demo_config(tmp_path)
    summary = pipeline_flow(pipeline="demo", config_path=str(config))
    assert list(summary) == ["ingest", "curate", "materialize"]
    database = tmp_path / "data" / "grebench.duckdb"

    # Both API shapes were ingested through the real client: v2 for 2025, v1 for the 2023 venue.
    venues = dict(table(database, "select venue_id, count(*) from reviews group by all"))
    assert set(venues) == {"GREBench.cc/2025/Demo", "GREBench.cc/2023/Legacy"}
    assert all(n > 0 for n in venues.values())
    # Curation dropped what it must, each with its rule; ratings sit on the common scale.
    rules = {rule for (rule,) in table(database, "select distinct rule from rejects")}
    assert {"low_confidence", "withdrawn", "desk_rejected"} <= rules
    assert table(database, "select count(*) from reviews where rating not in (1, 3, 5, 6, 8, 10)") == [(0,)]
    assert table(database, "select min(confidence) >= 4 from reviews") == [(True,)]
    assert table(
        database, "select count(*) from papers where n_reviews not between 3 and 5 or rating_var > 1.5"
    ) == [(0,)]
    assert table(database, "select count(*) from papers where in_benchmark") == [(6,)]
    # The materialize data tests ran (reconciliation included) and passed.
    assert summary["materialize"]["tables"]["reviews"] == sum(venues.values())

    # The run left its record: one row per stage, with rows in / out.
    runs = table(database, "select stage, status, rows_in, rows_out from runs order by position")
    assert [r[:2] for r in runs] == [("ingest", "completed"), ("curate", "completed"), ("materialize", "completed")]
    assert runs[1][2] == sum(venues.values()) + runs[1][2] - runs[1][3] and runs[1][3] == sum(venues.values())

    before = table(database, "select * from reviews order by review_id")
    rejects_before = table(database, "select * from rejects order by all")
    pipeline_flow(pipeline="demo", config_path=str(config))
    assert table(database, "select * from reviews order by review_id") == before
    assert table(database, "select * from rejects order by all") == rejects_before
    assert table(database, "select count(distinct run_id) from runs") == [(2,)]


def test_stage_selection_keeps_pipeline_order():
    assert select_stages(["ingest", "curate", "materialize"], ["materialize", "ingest"]) == ["ingest", "materialize"]
    with pytest.raises(ConfigError, match="unknown stage"):
        select_stages(["ingest"], ["cook"])
