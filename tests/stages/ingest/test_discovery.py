"""Finding a venue's submissions: the v2 group's submission_id or submission_name, and the v1
fallback to `<venue>/-/Submission` for venues without blind copies; through the real clients."""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from tasks.core.config import Config, IngestConfig
from tasks.stages.ingest.fetch import ingest_venue
from tasks.testing.openreview_server import serve_venues
from tasks.testing.synthetic import make_venue

V1, V2 = "ICLR.cc/2022/Conference", "GREBench.cc/2025/Demo"


def config(root) -> Config:
    return Config(root=root, ingest=IngestConfig(page_size=5, backoff_seconds=0.01, max_backoff_seconds=0.05,
                                                 timeout_seconds=5, max_retries=2, pdf=False))


def ingest(venue, root) -> tuple[dict[str, pl.DataFrame], list[str]]:
    with serve_venues([venue], page_limit=5) as server:
        url = server.v1_url if venue.venue_id == V1 else server.v2_url
        ingest_venue(venue.venue_id, config(root), root / "out", url)
        asked = [r.params.get("invitation") for r in server.log if r.params.get("invitation")]
    frames = {name: pl.read_parquet(root / "out" / f"{name}.parquet") for name in ("papers", "reviews", "rejects")}
    return frames, asked


def test_a_v1_venue_with_submission_only_is_found_like_a_blind_one(tmp_path):
    blind = make_venue(V1, seed=3, bad_cases=False)
    plain = replace(blind, v1_submission="Submission")
    expected, asked_blind = ingest(blind, tmp_path / "blind")
    found, asked = ingest(plain, tmp_path / "plain")
    assert f"{V1}/-/Submission" not in asked_blind            # blind copies found: no fallback
    assert f"{V1}/-/Blind_Submission" in asked and f"{V1}/-/Submission" in asked
    assert sorted(found["papers"]["paper_id"]) == sorted(expected["papers"]["paper_id"])
    assert found["reviews"].height == expected["reviews"].height > 0
    assert "duplicate_paper" not in found["rejects"]["rule"].to_list()


def test_a_v2_group_naming_only_submission_name_is_followed(tmp_path):
    venue = make_venue(V2, seed=5, bad_cases=False)
    expected, _ = ingest(venue, tmp_path / "with_id")
    found, asked = ingest(replace(venue, group_submission_id=False), tmp_path / "name_only")
    assert set(asked) >= {f"{V2}/-/Submission"}
    assert found["papers"].equals(expected["papers"]) and found["reviews"].equals(expected["reviews"])
