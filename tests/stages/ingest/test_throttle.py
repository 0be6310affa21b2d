"""Request pacing of the OpenReview API: evenly spaced slots shared by threads, PDFs per hour
on top of requests per minute, through the real openreview-py client against the local server."""

from __future__ import annotations

import threading

import pytest

from tasks.core.config import Config, IngestConfig
from tasks.stages.ingest.fetch import download_pdfs
from tasks.stages.ingest.openreview_client import make_client
from tasks.stages.ingest.throttle import RateLimit, Throttle
from tasks.testing.openreview_server import serve_venues
from tasks.testing.synthetic import make_venue

VENUE = "GREBench.cc/2025/Demo"


class Clock:
    """A fake clock that sleeping advances."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)


def test_slots_are_evenly_spaced_and_zero_means_unlimited():
    clock = Clock()
    limit = RateLimit(20, 60.0, clock=clock, sleep=clock.sleep)
    assert [limit.acquire() for _ in range(4)] == [0.0, 3.0, 6.0, 9.0]   # 20 a minute: one every 3 s
    clock.now += 30                                  # an idle spell: the next slot is free again
    assert limit.acquire() == 0.0 and limit.waited == 18.0
    assert RateLimit(0, 60.0, clock=clock, sleep=clock.sleep).acquire() == 0.0


def test_threads_share_one_limit():
    clock = Clock()
    limit = RateLimit(36, 3600.0, clock=clock, sleep=clock.sleep)     # one PDF every 100 s
    threads = [threading.Thread(target=limit.acquire) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(clock.sleeps) == [100.0, 200.0, 300.0, 400.0]


def test_guest_and_logged_in_limits_come_from_config():
    cfg = IngestConfig(requests_per_minute=20, pdfs_per_hour=36, logged_in_requests_per_minute=60,
                       logged_in_pdfs_per_hour=360)
    guest, member = Throttle.from_config(cfg, logged_in=False), Throttle.from_config(cfg, logged_in=True)
    assert (guest.api.rate, guest.pdfs.rate, member.api.rate, member.pdfs.rate) == (20, 36, 60, 360)
    assert guest.pdfs.period == 3600.0 and guest.api.period == 60.0


def test_pdf_downloads_take_a_pdf_slot_and_an_api_slot(tmp_path):
    cfg = Config(root=tmp_path, ingest=IngestConfig(timeout_seconds=5, pdf_workers=3, max_retries=0))
    api, pdfs = Clock(), Clock()
    throttle = Throttle(RateLimit(600, 60.0, "API request", clock=api, sleep=api.sleep),
                        RateLimit(36, 3600.0, "PDF", clock=pdfs, sleep=pdfs.sleep))
    venue = make_venue(VENUE, bad_cases=False)
    ids = [paper.paper_id for paper in venue.papers if paper.pdf is not None][:3]
    with serve_venues([venue]) as server:
        client = make_client(2, server.v2_url, cfg.ingest, throttle)
        on_disk, rejects = download_pdfs(client, ids, tmp_path / "pdfs", cfg.ingest, VENUE)
        again, _ = download_pdfs(client, ids, tmp_path / "pdfs", cfg.ingest, VENUE)   # on disk: no request
    assert sorted(on_disk) == sorted(ids) and not rejects and sorted(again) == sorted(ids)
    assert sorted(pdfs.sleeps) == [100.0, 200.0]          # three PDFs, 100 s apart
    assert sorted(api.sleeps) == pytest.approx([0.1, 0.2])   # and each one an API request


def test_history_requests_take_an_edits_slot_and_revision_pdfs_a_pdf_slot():
    clock = Clock()
    limits = [RateLimit(rate, 60.0, clock=clock, sleep=clock.sleep) for rate in (60, 1, 30)]
    throttle = Throttle(*limits)                        # api: 1 a second, PDFs: 1 a minute, edits: 1 every 2 s
    throttle.before("/v2/notes/edits?note.id=abc")
    throttle.before("/v2/notes/edits?note.id=def")
    throttle.before("/v2/notes/edits/attachment?id=abcE0&name=pdf")
    throttle.before("/v2/notes?invitation=x")
    assert [limit.waited for limit in limits] == [1 + 2 + 3, 0.0, 2.0]
    cfg = IngestConfig(edits_per_minute=18)
    assert Throttle.from_config(cfg, logged_in=True).edits.rate == 18
