"""A yearly refresh stops before ingest when a venue of the year has no venue table (rating map)."""

from __future__ import annotations

import pytest

from flows.refresh import refresh_flow
from tasks.core.config import ConfigError, load_config, require_venue_tables

PIPELINES = """
[pipelines.refresh]
source = "openreview"
venues = ["ICLR.cc/{year}/Conference", "NeurIPS.cc/{year}/Conference"]
stages = ["ingest", "curate"]
"""


def test_a_year_without_venue_tables_stops_before_ingest_naming_them(project_config):
    config = project_config(PIPELINES)
    with pytest.raises(ConfigError) as raised:     # .fn: the check runs before any flow or request
        refresh_flow.fn(year=2031, config_path=str(config))
    message = str(raised.value)
    assert '[venues."ICLR.cc/2031/Conference"]' in message and '[venues."NeurIPS.cc/2031/Conference"]' in message
    assert message.startswith("refresh-2031: no venue table") and "\n" not in message


def test_the_hint_names_last_years_table_and_a_year_with_tables_passes(project_config):
    cfg = load_config(project_config(PIPELINES))
    with pytest.raises(ConfigError, match=r'copy \[venues."ICLR.cc/2025/Conference"\]'):
        require_venue_tables(cfg.for_pipeline("refresh-2026"), "refresh-2026")
    require_venue_tables(cfg.for_pipeline("refresh-2025"), "refresh-2025")   # both 2025 tables exist
