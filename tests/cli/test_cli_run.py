"""`grebench run` ends with a summary for a person (a table per stage, the outputs, next commands);
`--json` prints the stage summaries as JSON instead. No Prefect server: the parent flow's body runs
with stand-ins for the stage flows."""

import json
from contextlib import nullcontext

import pytest
from typer.testing import CliRunner

import flows.cli.server
import flows.pipeline
from flows.cli.main import app
from flows.cli.run import _duration, stage_table
from tasks.core.summary import StageSummary

PIPELINES = """
[pipelines.demo]
source = "synthetic"
venues = ["GREBench.cc/2025/Demo"]
stages = ["ingest", "curate", "generate", "materialize"]
"""


@pytest.fixture
def stand_in_stages(monkeypatch):
    def stage_flow(stage: str):
        def run(cfg, pipeline: str) -> StageSummary:
            calls = 3 if stage == "generate" else 0
            return StageSummary(rows_in=1200, rows_out=7, llm_calls=calls, input_tokens=100 * calls,
                                output_tokens=10 * calls, cost_usd=0.0125 * calls, details={"note": stage})
        return run

    monkeypatch.setattr(flows.pipeline, "stage_flow", stage_flow)
    monkeypatch.setattr(flows.pipeline, "pipeline_flow", flows.pipeline.pipeline_flow.fn)
    monkeypatch.setattr(flows.cli.server, "ephemeral_server_starting", nullcontext)


@pytest.mark.slow
def test_run_prints_a_table_per_stage_the_outputs_and_next_commands(project_config, stand_in_stages):
    config = project_config(PIPELINES)
    result = CliRunner().invoke(app, ["run", "demo", "-c", str(config)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("pipeline demo: 4 stage(s) completed (run ")
    header = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    assert lines[header].split() == ["stage", "rows", "in", "rows", "out", "time", "LLM", "calls",
                                     "tokens", "in/out", "cost", "($)"]
    generate = next(line.split() for line in lines if line.startswith("generate "))
    assert generate[:3] == ["generate", "1,200", "7"] and generate[3].endswith("s")
    assert generate[4:] == ["3", "300/30", "0.0375"]
    total = next(line.split() for line in lines if line.startswith("total "))
    assert total[-2:] == ["300/30", "0.0375"]
    assert "outputs:" in lines and "next:" in lines
    assert any("demo/generate/" in line for line in lines)
    assert any("demo/GREBench.cc_2025_Demo/ingest/" in line for line in lines)
    assert any("grebench.duckdb" in line for line in lines)
    assert any("grebench site" in line for line in lines)
    assert "{" not in result.output                                  # no JSON unless asked


def test_run_json_prints_only_the_stage_summaries(project_config, stand_in_stages):
    config = project_config(PIPELINES)
    result = CliRunner().invoke(app, ["run", "demo", "--json", "-c", str(config)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == ["ingest", "curate", "generate", "materialize"]
    assert data["generate"]["llm_calls"] == 3 and data["generate"]["note"] == "generate"


def test_stage_table_without_a_run_record_shows_no_time():
    text = stage_table({"ingest": StageSummary(5, 4)}, __import__("polars").DataFrame())
    assert text.splitlines()[2].split() == ["ingest", "5", "4", "-", "0", "0/0", "0.0000"]


PREPROCESSING = PIPELINES.replace('"curate", "generate"', '"curate", "preprocess", "generate"')


def resolved(project_config, text: str):
    from tasks.checks import load_checked_config

    return load_checked_config(project_config(text)).for_pipeline("demo")


def test_durations_round_before_they_carry_into_minutes():
    assert [_duration(s) for s in (None, 2.54, 59.96, 1679.96, 754.0)] == ["-", "2.5s", "1m00.0s", "28m00.0s",
                                                                         "12m34.0s"]


def test_no_model_is_preloaded_for_a_run_without_preprocess_or_with_an_api_model(project_config):
    from flows.cli.run import preload_first_local_model

    assert preload_first_local_model(resolved(project_config, PIPELINES), ["ingest", "curate", "generate"]) is None
    api = resolved(project_config, PREPROCESSING + "\n[pipelines.demo.preprocess]\nbackend = 'anthropic'\n"
                   "model = 'claude-haiku-4-5'\n")
    assert preload_first_local_model(api, ["ingest", "preprocess"]) is None


@pytest.mark.slow
def test_the_preprocess_model_preloaded_is_the_one_the_stage_gets(project_config):
    from flows.cli.run import preload_first_local_model
    from tasks.lm import loading, local_spec

    cfg = resolved(project_config, PREPROCESSING)
    thread = preload_first_local_model(cfg, ["ingest", "preprocess"])
    assert thread is not None
    thread.join(timeout=300)
    preloaded = loading.loaded_specs()
    assert preloaded[-1] == local_spec(cfg.preprocess).resolved()
    held = loading._LOADED[preloaded[-1]]
    assert loading.load_model(local_spec(cfg.preprocess)) is held   # the stage's call finds the model loaded
    assert loading.loaded_specs() == preloaded


def test_the_server_is_not_started_where_prefect_api_url_names_one(monkeypatch):
    import threading

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli.server import ephemeral_server_starting

    before = set(threading.enumerate())
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}), ephemeral_server_starting():
        started = {t.name for t in set(threading.enumerate()) - before}
    assert "prefect-server-start" not in started
