"""The ASSW synopsis (an LLM call per paper) is made only when a later stage names a metric that reads a
synopsis; the abstract synopsis always."""

from __future__ import annotations

from pathlib import Path

from tasks.core.config import load_config
from tasks.stages.preprocess.steps import needs_assw

ROOT = Path(__file__).resolve().parents[3]


def test_the_demo_skips_the_assw_synopsis_and_full_makes_it() -> None:
    cfg = load_config(ROOT / "pipelines.toml")
    assert not needs_assw(cfg.for_pipeline("demo"), "demo")        # gem and the classic baselines read none
    assert needs_assw(cfg.for_pipeline("full"), "full")            # gem_s_assw, the judges


def test_a_pipeline_without_scoring_stages_needs_no_synopsis(project_config) -> None:
    path = project_config('[pipelines.p]\nsource = "synthetic"\nvenues = ["GREBench.cc/2025/Demo"]\n'
                          'stages = ["ingest", "curate", "preprocess"]\n')
    assert not needs_assw(load_config(path).for_pipeline("p"), "p")
