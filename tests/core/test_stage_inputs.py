"""A stage left out of a run whose outputs are missing, or made with other settings, stops the run
before Prefect starts anything, in one line naming the stage to run first (tasks/core/stage_inputs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.stage_inputs import key_files, missing_inputs, settings_digest, write_receipt

ROOT = Path(__file__).resolve().parents[2]


def test_a_stage_run_before_its_inputs_exist_is_one_line_and_no_traceback(tmp_path) -> None:
    (tmp_path / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text())
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run([sys.executable, "-m", "flows.cli.main", "run", "demo", "--stages", "score"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in said and "Flow run" not in said and "prefect" not in said.lower(), said
    assert said.count("\n") == 1 and said.startswith("error: score reads the ingest stage's outputs"), said
    assert "--stages ingest,curate,preprocess,generate,score" in said
    assert not (tmp_path / "data").exists()   # nothing made on the way


def made(cfg, pipeline: str, *stages: str) -> None:
    for stage in stages:
        for path in key_files(cfg, pipeline, stage):
            path.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame({"x": [1]}).write_parquet(path)
        write_receipt(cfg, pipeline, stage, "run-1")


def demo(tmp_path: Path, extra: str = "") -> object:
    (tmp_path / "pipelines.toml").write_text((ROOT / "pipelines.toml").read_text() + extra)
    return load_config(tmp_path / "pipelines.toml").for_pipeline("demo")


def test_the_stages_a_run_makes_itself_are_not_asked_for(tmp_path) -> None:
    cfg = demo(tmp_path)
    assert missing_inputs(cfg, "demo", ["ingest", "curate", "preprocess"]) is None
    said = missing_inputs(cfg, "demo", ["ingest", "generate"])   # curate and preprocess left out
    assert said.startswith("generate reads the curate stage's outputs") and "--stages curate,preprocess,generate" in said
    made(cfg, "demo", "ingest", "curate", "preprocess")
    assert missing_inputs(cfg, "demo", ["ingest", "generate"]) is None
    assert missing_inputs(cfg, "demo", ["score"]).startswith("score reads the generate stage's outputs")
    made(cfg, "demo", "generate")
    assert missing_inputs(cfg, "demo", ["score", "validate", "materialize"]) is None


def test_outputs_of_other_settings_name_the_first_stage_they_changed(tmp_path) -> None:
    cfg = demo(tmp_path)
    made(cfg, "demo", "ingest", "curate", "preprocess", "generate")
    # the score table is not among the settings of what score reads: changing it asks for nothing
    rescored = cfg.model_copy(update={"score": cfg.score.model_copy(update={"token_budget": 1024})})
    assert missing_inputs(rescored, "demo", ["score"]) is None
    resampled = cfg.model_copy(update={"curate": cfg.curate.model_copy(update={"sample_size": 7})})
    said = missing_inputs(resampled, "demo", ["score"])
    assert said.startswith("the curate stage's outputs in") and "other settings" in said
    assert "--stages curate,preprocess,generate,score" in said
    assert settings_digest(resampled, "demo", "ingest") == settings_digest(cfg, "demo", "ingest")
    assert settings_digest(resampled, "demo", "curate") != settings_digest(cfg, "demo", "curate")


@pytest.mark.parametrize("stage", ["ingest", "curate"])
def test_per_venue_outputs_are_checked_for_every_venue(tmp_path, stage) -> None:
    cfg = demo(tmp_path)
    assert len(key_files(cfg, "demo", stage)) == len(cfg.pipelines["demo"].venues)
