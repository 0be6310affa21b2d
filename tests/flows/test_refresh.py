"""The yearly refresh end to end on a tiny synthetic venue, every stage on the embedded LM, under
Prefect's test harness; a second run repeats no LLM or scoring work."""

from pathlib import Path

import duckdb
import pytest

from flows.refresh import refresh_flow

VENUE = "GREBench.cc/2026/Refresh"

PIPELINE = f"""
[venues."{VENUE}"]
api = "v2"
rating_map = {{ "1" = 1, "2" = 1, "3" = 3, "4" = 5, "5" = 5, "6" = 6, "7" = 8, "8" = 8, "9" = 10, "10" = 10 }}

[pipelines.refresh]
source = "synthetic"
venues = ["GREBench.cc/{{year}}/Refresh"]
stages = ["ingest", "curate", "preprocess", "generate", "score", "validate", "materialize"]

[pipelines.refresh.synthetic]
n_papers = 8
reviews_per_paper = 3   # 3 or 4: enough for curation to keep a paper, few GEM pairs
pdfs = true
bad_cases = false

[pipelines.refresh.curate]
sample_size = 2

[pipelines.refresh.preprocess]
max_tokens = 48
max_paper_chars = 1500

[pipelines.refresh.score]
metrics = ["gem_raw", "gem"]
baselines = ["bleu"]

[pipelines.refresh.score.reference_flags]
enabled = false   # Binoculars over each human reference, rerun included: tests/stages/score/test_reference_flags.py

[pipelines.refresh.validate]
strategies = ["sentence_deletion"]
metrics = ["gem", "bleu"]
"""

# Two local candidates: one whose cutoff predates every paper, one whose cutoff postdates them all.
CANDIDATE = """
[[pipelines.refresh.generate.candidates]]
name = "{}"
backend = "local"
model = "smollm2"
knowledge_cutoff = {}
max_tokens = 48
max_context_tokens = 1024
prompt_version = "review-brief-v1"
"""
CANDIDATES = "".join(CANDIDATE.format(name, cutoff) for name, cutoff in (("tiny-unseen", "2020-01-01"),
                                                                          ("tiny-future", "2099-01-01")))


def rows(database: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_yearly_refresh_runs_every_stage_and_reruns_without_repeating_work(prefect_harness, project_config):
    config = project_config(PIPELINE + CANDIDATES)
    first = refresh_flow(year=2026, config_path=str(config))
    assert list(first) == ["ingest", "curate", "preprocess", "generate", "score", "validate", "materialize"]
    database = config.parent / "data" / "refresh-2026" / "grebench.duckdb"

    assert rows(database, "select count(*) from papers where in_benchmark") == [(2,)]
    assert rows(database, "select count(*) > 0 from judgments") == [(True,)]
    # The guard: the candidate whose cutoff postdates every paper reviewed none of them.
    assert rows(database, "select model, count(*) from candidates group by all") == [("tiny-unseen", 2)]
    assert rows(database, "select model, count(*) from exclusions group by all") == [("tiny-future", 2)]
    metrics = {m for (m,) in rows(database, "select distinct metric from scores")}
    assert metrics == {"gem_raw", "gem", "bleu"}
    assert rows(database, "select count(*) > 0 from scores where source = 'tiny-unseen'") == [(True,)]
    assert rows(database, "select count(*) > 0 from validation") == [(True,)]
    assert rows(database, "select count(*) > 0 from leaderboard") == [(True,)]
    stages = rows(database, "select stage, status, rows_in, rows_out from runs order by position")
    assert [(stage, status) for stage, status, *_ in stages] == [(stage, "completed") for stage in first]
    assert all(r_in is not None and r_out is not None for *_, r_in, r_out in stages)

    second = refresh_flow(year=2026, config_path=str(config))
    assert second["preprocess"].llm_calls == 0
    assert second["generate"].llm_calls == 0
    assert second["score"].details["shards_scored"] == 0
    assert rows(database, "select count(distinct run_id) from runs") == [(2,)]
    assert rows(
        database, "select sum(llm_calls) from runs where run_id = (select max_by(run_id, started_at) from runs)"
    ) == [(0,)]
