"""Config files tests and benches write: the project's shared tables and a pipeline of their own.

    shared_tables()     the project's pipelines.toml up to its first pipeline: every stage table and venue
    pipeline()          TOML text of a pipeline and its sub-tables
    ingest_pipeline()   one that ingests venues from an OpenReview-compatible server at given API URLs
                        (a local test server, a silent socket), with ingest settings
    synthetic_pipeline() one on the synthetic demo venue
    results_config()    a config file holding only the data folder, one results database and given tables
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2] / "pipelines.toml"
DEMO_VENUE = "GREBench.cc/2025/Demo"


def shared_tables(project: Path = PROJECT) -> str:
    """The project's config up to `[pipelines.demo]`: the stage tables and venues every pipeline shares."""
    return project.read_text(encoding="utf-8").split("[pipelines.demo]")[0]


def toml_value(value: object) -> str:
    """A TOML scalar or array of scalars (strings, numbers, booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def pipeline(name: str, source: str, venues: str | Sequence[str], stages: Sequence[str],
             **tables: dict[str, object]) -> str:
    """TOML text of `[pipelines.<name>]` (source, venues, stages) and its sub-tables: `ingest={...}` is
    `[pipelines.<name>.ingest]` with those settings in order."""
    venues = [venues] if isinstance(venues, str) else list(venues)
    lines = ["", f"[pipelines.{name}]", f"source = {toml_value(source)}", f"venues = {toml_value(venues)}",
             f"stages = {toml_value(list(stages))}"]
    for table, settings in tables.items():
        lines += ["", f"[pipelines.{name}.{table}]", *(f"{key} = {toml_value(v)}" for key, v in settings.items())]
    return "\n".join([*lines, ""])


def ingest_pipeline(name: str, venues: str | Sequence[str], v1_url: str, v2_url: str | None = None,
                    stages: Sequence[str] = ("ingest",), **ingest: object) -> str:
    """A pipeline reading `venues` from OpenReview ("ICLR.cc/{year}/Conference" as it is) through the API
    URLs given (`v2_url`: `v1_url` where not given), with `ingest`'s settings."""
    return pipeline(name, "openreview", venues, stages,
                    ingest={"api_v1_url": v1_url, "api_v2_url": v2_url or v1_url, **ingest})


def synthetic_pipeline(name: str, stages: Sequence[str], **tables: dict[str, object]) -> str:
    """A pipeline on the synthetic demo venue (the local OpenReview-compatible server), with its sub-tables."""
    return pipeline(name, "synthetic", DEMO_VENUE, stages, **tables)


def results_config(path: Path, tables: str = "") -> Path:
    """`path` written as a config of the data folder beside it and one results database (data/r.duckdb), then
    `tables` (TOML text such as "[validate]\\nmin_pairs = 2\\n"); the path."""
    path.write_text('[paths]\ndata_dir = "data"\ndatabase = "data/r.duckdb"\n\n' + tables, encoding="utf-8")
    return path
