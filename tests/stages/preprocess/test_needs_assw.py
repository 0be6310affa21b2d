"""The ASSW synopsis (an LLM call per paper) is left out only where the pipeline scores or validates and
no metric of those stages reads a synopsis; the abstract synopsis is always made."""

from __future__ import annotations

from pathlib import Path

from tasks.core.config import load_config
from tasks.stages.preprocess.steps import needs_assw

ROOT = Path(__file__).resolve().parents[3]


def test_the_demo_skips_the_assw_synopsis_and_full_makes_it() -> None:
    cfg = load_config(ROOT / "pipelines.toml")
    assert not needs_assw(cfg.for_pipeline("demo"), "demo")        # gem and the classic baselines read none
    assert needs_assw(cfg.for_pipeline("full"), "full")            # gem_s_assw, the judges


def test_a_pipeline_that_stops_at_preprocess_keeps_its_synopses(project_config) -> None:
    path = project_config('[pipelines.p]\nsource = "synthetic"\nvenues = ["GREBench.cc/2025/Demo"]\n'
                          'stages = ["ingest", "curate", "preprocess"]\n')
    assert needs_assw(load_config(path).for_pipeline("p"), "p")
