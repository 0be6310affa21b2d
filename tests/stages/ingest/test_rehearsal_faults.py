"""Ingest of the rehearsal's venue (ICLR 2026's form and access policy, reverted reviews, lazy PDFs)
under the faults a yearly refresh meets, with the service's times scaled down: a token expiring in
the middle of the listing, a 429 whose limit resets an hour away, a server that stops answering for a
minute. Each ends with every note ingested and nothing that was stored fetched twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tasks.core.config import Config, IngestConfig
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.openreview_client import RateLimited
from tasks.testing.openreview_server import Fault, Policy, serve_venues
from tasks.testing.synthetic import make_venue

VENUE = "ICLR.cc/2026/Conference"
USER, PASSWORD = "rehearsal@example.org", "a-local-password"
SCALE = 0.001          # an hour lasts 3.6 s
PAGE = 40

pytestmark = pytest.mark.usefixtures("no_openreview_login")


@pytest.fixture(scope="module")
def venue():
    return make_venue(VENUE, n_papers=400, pdfs="lazy", form="iclr2026", reverted=True)


@pytest.fixture
def login(monkeypatch):
    monkeypatch.setenv("OPENREVIEW_USERNAME", USER)
    monkeypatch.setenv("OPENREVIEW_PASSWORD", PASSWORD)


def config(root: Path, **ingest) -> Config:
    settings = dict(page_size=PAGE, backoff_seconds=0.05, max_backoff_seconds=1.0, timeout_seconds=5, max_retries=6,
                    pdf=False)
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}))


def policy(**changes) -> Policy:
    return Policy.today(accounts={USER: PASSWORD}, **changes).scaled(SCALE)


def listing_pages(server) -> int:
    return sum(1 for r in server.log if r.endpoint == "notes" and r.status == 200)


def test_the_rehearsal_venue_has_the_2026_shape(venue):
    assert 3.8 <= venue.n_reviews / len(venue.papers) <= 4.2
    assert {p.status for p in venue.papers} == {"active", "withdrawn", "desk_rejected"}
    reverted = [r for p in venue.papers for r in p.reviews if len(r.edits) > 1]
    assert reverted and all(r.final_fields == r.fields for r in reverted)
    assert all(p.pdf is None for p in venue.papers if p.render is not None)   # nothing rendered up front
    lazy = next(p for p in venue.papers if p.render is not None)
    assert lazy.current_pdf[:5] == b"%PDF-" and lazy.render is None


def test_a_token_expiring_mid_listing_is_renewed_and_nothing_is_fetched_twice(venue, login, tmp_path):
    with serve_venues([venue], page_limit=PAGE, policy=policy(token_uses=4)) as server:
        result = ingest_venue(VENUE, config(tmp_path), tmp_path / "ingest", server.v2_url)
        assert result.papers == len(venue.papers) and result.reviews_ingested == venue.n_reviews + len(venue.duplicate_reviews)
        assert server.logins >= 2                                # the first token expired, a login renewed it
        assert any(r.status == 401 for r in server.log)
        assert listing_pages(server) >= len(venue.papers) // PAGE
        assert server.fetched_twice() == []


def test_a_rate_limit_resetting_an_hour_away_is_waited_out_at_scale(venue, login, tmp_path):
    hour = 3600 * SCALE
    with serve_venues([venue], page_limit=PAGE, policy=policy()) as server:
        server.inject(Fault("429", endpoint="notes", skip=3, reset_in=hour, retry_after=None))
        began = time.monotonic()
        result = ingest_venue(VENUE, config(tmp_path), tmp_path / "ingest", server.v2_url)
        assert time.monotonic() - began >= hour * 0.9
        assert result.papers == len(venue.papers)
        assert server.fetched_twice() == []


def test_a_rate_limit_later_than_the_wait_allowed_stops_in_one_line_and_the_rerun_resumes(venue, login, tmp_path):
    hour = 3600 * SCALE
    cfg = config(tmp_path, max_rate_wait_seconds=hour / 4)
    with serve_venues([venue], page_limit=PAGE, policy=policy()) as server:
        server.inject(Fault("429", endpoint="notes", skip=3, reset_in=hour, retry_after=None))
        with pytest.raises(RateLimited) as stopped:
            ingest_venue(VENUE, cfg, tmp_path / "ingest", server.v2_url)
        assert len(str(stopped.value).splitlines()) == 1 and "rerun" in str(stopped.value)
        first = listing_pages(server)
        time.sleep(hour)
        result = ingest_venue(VENUE, cfg, tmp_path / "ingest", server.v2_url)
        assert result.papers == len(venue.papers)
        assert first > 0 and server.fetched_twice() == []     # the pages stored before the stop are not asked again


def test_a_server_silent_for_a_scaled_minute_is_outlasted_and_nothing_is_fetched_twice(venue, login, tmp_path):
    minute = 60 * 0.05                                           # 3 s: time scaled by 1/20 against retries
    cfg = config(tmp_path, timeout_seconds=0.5, backoff_seconds=0.25, max_backoff_seconds=2.0, max_retries=8)
    with serve_venues([venue], page_limit=PAGE, policy=policy()) as server:
        def go_silent() -> None:
            while listing_pages(server) < 3:
                time.sleep(0.005)
            server.stop_answering(minute)

        watcher = threading.Thread(target=go_silent, daemon=True)
        watcher.start()
        began = time.monotonic()
        result = ingest_venue(VENUE, cfg, tmp_path / "ingest", server.v2_url)
        watcher.join(1)
        assert time.monotonic() - began >= minute * 0.9
        assert result.papers == len(venue.papers) and result.reviews_ingested == venue.n_reviews + len(venue.duplicate_reviews)
        assert len(server.arrivals) > len(server.log)            # requests held through the outage went unanswered
        assert server.fetched_twice() == []
