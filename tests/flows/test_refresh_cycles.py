"""The yearly refresh takes each venue family's freshest public cycle: `grebench schedule --dry-run`
as if on 2025-12-15 names ICLR.cc/2026/Conference, and on 2026-06-01 the cycle right for that date."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from flows.refresh import planned_venues
from tasks.core.config import ConfigError, load_config
from tasks.core.venue_facts import FactsError, families, plan

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "pipelines.toml")
runner = CliRunner()


def dry_run(on: str) -> list[str]:
    result = runner.invoke(app, ["schedule", "--dry-run", "--on", on, "-c", CONFIG])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_schedule_dry_run_on_2025_12_15_pulls_iclr_2026():
    lines = dry_run("2025-12-15")
    assert ("a run on 2025-12-15 pulls: ICLR.cc/2026/Conference (reviews public since 2025-11-15), "
            "NeurIPS.cc/2025/Conference (reviews public since 2025-10-01)") in lines
    assert next(line for line in lines if line.startswith("next runs:")).startswith(
        "next runs:  2025-12-15T06:00:00+00:00, 2026-12-15T06:00:00+00:00")
    assert any(line.startswith("the run of 2025-12-15T06:00:00+00:00 pulls: ICLR.cc/2026/Conference") for line in lines)
    assert not any("venue tables to add" in line for line in lines)   # the form is read from the venue
    assert any(line.startswith("form of ICLR.cc/2026/Conference: read from ICLR.cc/2026/Conference/-/Official_Review "
                               "when the run fires") for line in lines)
    assert "form of NeurIPS.cc/2025/Conference: the venue table in pipelines.toml" in lines


def test_schedule_dry_run_on_2026_06_01_pulls_the_cycles_public_then_and_the_next_run_the_next_ones():
    lines = dry_run("2026-06-01")
    assert any(line.startswith("a run on 2026-06-01 pulls: ICLR.cc/2026/Conference (reviews public since "
                               "2025-11-15), NeurIPS.cc/2025/Conference") for line in lines)
    assert any(line.startswith("the run of 2026-12-15T06:00:00+00:00 pulls: ICLR.cc/2027/Conference (reviews public "
                               "since 2026-11-15), NeurIPS.cc/2026/Conference") for line in lines)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is not installed (apt-get install faketime)")
def test_schedule_dry_run_under_faketime_reads_the_clock():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["faketime", "2025-12-15 08:00:00", sys.executable, "-c", "from flows.cli.main import app; app()",
                          "schedule", "--dry-run", "-c", CONFIG], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "a run on 2025-12-15 pulls: ICLR.cc/2026/Conference" in out.stdout
    assert "next runs:  2026-12-15T06:00:00+00:00" in out.stdout       # 06:00 has passed: next year's


def test_a_bad_date_is_one_line():
    result = runner.invoke(app, ["schedule", "--dry-run", "--on", "15/12/2025", "-c", CONFIG])
    assert result.exit_code == 2 and result.output.strip() == "error: --on '15/12/2025': not a date (give YYYY-MM-DD)"


def test_the_freshest_cycle_turns_on_the_day_reviews_go_public():
    iclr = families()["ICLR"]
    assert iclr.freshest_year(date(2025, 11, 14)) == 2025 and iclr.freshest_year(date(2025, 11, 15)) == 2026
    assert iclr.freshest_year(date(2026, 1, 1)) == 2026
    neurips = families()["NeurIPS"]
    assert neurips.freshest_year(date(2025, 9, 30)) == 2024 and neurips.freshest_year(date(2025, 10, 1)) == 2025
    fixed = plan(["GREBench.cc/2025/Demo"], date(2025, 12, 15))[0]
    assert (fixed.venue_id, fixed.public_since) == ("GREBench.cc/2025/Demo", None)
    with pytest.raises(FactsError, match="ICML: no review calendar in venue_families.toml"):
        plan(["ICML.cc/{year}/Conference"], date(2025, 12, 15))      # ICML's review dates are not known
    with pytest.raises(FactsError, match="no review calendar for 'AAAI.org/{year}/Conference'"):
        plan(["AAAI.org/{year}/Conference"], date(2025, 12, 15))
    assert planned_venues(load_config(CONFIG), "refresh", date(2025, 12, 15)) == [
        "ICLR.cc/2026/Conference", "NeurIPS.cc/2025/Conference"]
    with pytest.raises(ConfigError, match="unknown pipeline"):
        planned_venues(load_config(CONFIG), "nope", date(2025, 12, 15))


def test_the_refresh_flow_runs_the_planned_venues_without_a_venue_table(project_config, monkeypatch):
    import flows.refresh

    calls = []
    monkeypatch.setattr(flows.refresh, "pipeline_flow", lambda **kwargs: calls.append(kwargs) or {})
    monkeypatch.setattr(flows.refresh, "write_site", lambda cfg, pipeline: None)
    monkeypatch.setattr(flows.refresh, "require_login", lambda cfg, pipeline: None)   # tests/stages/ingest/test_openreview_login.py
    refresh = (ROOT / "pipelines.toml").read_text().split("[pipelines.refresh]")[1].split("\n[")[0]
    config = project_config("[pipelines.refresh]" + refresh)
    assert "ICLR.cc/2026/Conference" not in load_config(config).venues
    flows.refresh.refresh_flow.fn(config_path=str(config), on="2025-12-15")
    assert calls == [{"pipeline": "refresh-2025", "config_path": str(config),
                      "venues": ["ICLR.cc/2026/Conference", "NeurIPS.cc/2025/Conference"]}]
