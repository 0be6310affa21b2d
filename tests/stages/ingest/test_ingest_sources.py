"""The raw download cache is keyed by what produced the pages (tasks/stages/ingest/sources.py): no
pipeline reads pages another source wrote (once a synthetic pipeline with other settings, or
the stock pipeline after a run against the local server, read the first one's pages)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import polars as pl
import pytest

from tasks.core.config import Config, ConfigError, IngestConfig, PipelineConfig, SyntheticSource
from tasks.core.layout import slug
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.source_identity import identified_by_address
from tasks.stages.ingest.sources import synthetic_source, url_source, venue_source
from tasks.testing.openreview_server import serve_venues
from tasks.testing.synthetic import make_venue

VENUE = "GREBench.cc/2025/Demo"


def config(root: Path, **pipelines: int) -> Config:
    """Synthetic pipelines named by their number of papers, on one venue id."""
    specs = {name: PipelineConfig(source="synthetic", synthetic=SyntheticSource(n_papers=n, pdfs=False),
                                  venues=(VENUE,), stages=("ingest",)) for name, n in pipelines.items()}
    return Config(root=root, pipelines=specs, ingest=IngestConfig(page_size=5, pdf=False, timeout_seconds=5,
                                                                   backoff_seconds=0.01, max_retries=1))


def papers(out: Path) -> int:
    return pl.read_parquet(out / "papers.parquet").height


def test_synthetic_pipelines_with_other_settings_do_not_read_each_others_pages(tmp_path):
    cfg = config(tmp_path, six=6, eight=8)
    counts = {}
    for name in ("six", "eight", "six"):
        with venue_source(cfg, name) as sources:
            source = sources[VENUE]
            result = ingest_venue(VENUE, cfg, tmp_path / name, source.baseurl, source=source.cache_key)
        counts.setdefault(name, []).append((papers(tmp_path / name), result.pages_fetched > 0))
    assert counts["eight"] == [(8, True)]
    assert counts["six"] == [(6, True), (6, False)]   # its own cache again, nothing fetched
    raw = sorted(p.name for p in (tmp_path / "data" / "raw").iterdir())
    assert len(raw) == 2 and all(name.startswith("synthetic-") for name in raw)


@pytest.mark.slow
def test_a_pipeline_at_one_server_does_not_read_pages_another_server_served(tmp_path):
    cfg = config(tmp_path)
    with serve_venues([make_venue(VENUE, n_papers=6)], page_limit=5) as first:
        assert ingest_venue(VENUE, cfg, tmp_path / "a", first.v2_url).papers == 6
    with serve_venues([make_venue(VENUE, n_papers=8, seed=3)], page_limit=5) as second:
        result = ingest_venue(VENUE, cfg, tmp_path / "b", second.v2_url)
    assert result.papers == papers(tmp_path / "b") == 8 and result.pages_cached == 0


def test_another_server_on_the_same_port_gets_its_own_pages(tmp_path, caplog):
    cfg = config(tmp_path)
    with serve_venues([make_venue(VENUE, n_papers=6)], page_limit=5) as first:
        port = urlsplit(first.v2_url).port
        assert ingest_venue(VENUE, cfg, tmp_path / "a", first.v2_url).papers == 6
    with serve_venues([make_venue(VENUE, n_papers=8, seed=3)], page_limit=5, port=port) as second:
        assert second.v2_url == first.v2_url
        result = ingest_venue(VENUE, cfg, tmp_path / "a", second.v2_url)
        assert result.papers == papers(tmp_path / "a") == 8 and result.pages_cached == 0
        calls = len(second.log)
        again = ingest_venue(VENUE, cfg, tmp_path / "a", second.v2_url)   # its own cache now
        assert again.papers == 8 and again.pages_fetched == 0
        assert [r.params.get("limit") for r in second.log[calls:]] == ["5"]   # the identity request alone
    raw = tmp_path / "data" / "raw" / slug(url_source(first.v2_url))
    folders = sorted(p.name for p in next(raw.iterdir()).iterdir())
    assert folders[0] == "v2" and len(folders) == 2 and folders[1].startswith("v2.replaced-")   # kept, not deleted
    moved = [r.getMessage() for r in caplog.records if "fetched anew" in r.getMessage()]
    assert len(moved) == 1 and "serves other content" in moved[0]


def test_a_server_with_the_same_count_and_first_note_but_other_papers_gets_its_own_pages(tmp_path):
    cfg = config(tmp_path)
    served = make_venue(VENUE, n_papers=8, bad_cases=False, revisions=False)
    other = make_venue(VENUE, n_papers=8, seed=3, bad_cases=False, revisions=False)
    other.papers[0] = served.papers[0]           # 7 of 8 papers differ; the count and the first note do not
    with serve_venues([served], page_limit=5) as first:
        port = urlsplit(first.v2_url).port
        assert ingest_venue(VENUE, cfg, tmp_path / "a", first.v2_url).papers == 8
    with serve_venues([other], page_limit=5, port=port) as second:
        result = ingest_venue(VENUE, cfg, tmp_path / "a", second.v2_url)
    assert result.pages_cached == 0
    titles = set(pl.read_parquet(tmp_path / "a" / "papers.parquet")["title"])
    assert titles == {p.title for p in other.papers}


def test_only_the_official_api_is_identified_by_its_address():
    assert identified_by_address("https://api2.openreview.net") and identified_by_address("https://api.openreview.net")
    assert not identified_by_address("http://api2.openreview.net")        # not over https
    assert not identified_by_address("http://127.0.0.1:8765") and not identified_by_address("https://mirror.example")


def test_cache_keys_name_the_source_readably():
    assert url_source("https://api2.openreview.net") == "https-api2.openreview.net"
    assert url_source("http://127.0.0.1:8765/") == "http-127.0.0.1:8765"
    assert url_source("https://API2.openreview.net:443/v2") == "https-api2.openreview.net:443"
    one = synthetic_source({"n_papers": 6, "seed": 0})
    assert one.startswith("synthetic-") and one != synthetic_source({"n_papers": 8, "seed": 0})
    assert one == synthetic_source({"seed": 0, "n_papers": 6})


def test_a_source_no_layer_registered_is_one_line(tmp_path, monkeypatch):
    """The stages never import the synthetic server: the flows register it (tasks/testing/demo.py)."""
    from tasks.stages.ingest import sources

    monkeypatch.setattr(sources, "_OPENERS", {})
    with pytest.raises(ConfigError) as error, venue_source(config(tmp_path, six=6), "six"):
        pass
    assert str(error.value).startswith("pipelines.six: source 'synthetic' has no server registered")
    assert "\n" not in str(error.value)
