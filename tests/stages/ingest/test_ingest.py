"""Ingest through the real openreview-py clients against the local server: shapes, faults, resume."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest
import requests
from polars.testing import assert_frame_equal

from tasks.core.config import Config, IngestConfig
from tasks.core.layout import raw_dir
from tasks.core.schema import PAPERS, REJECTS, REVIEWS
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.openreview_client import is_transient
from tasks.stages.ingest.sources import url_source
from tasks.testing.openreview_server import Fault, serve_venues
from tasks.testing.synthetic import make_venue
from tests.crash import ingest_killed_when

ROOT = Path(__file__).resolve().parents[3]
V2_VENUE, V1_VENUE = "GREBench.cc/2025/Demo", "ICLR.cc/2023/Conference"
PAGE = 5
REVIEW_RULES = {"missing_rating": "missing_rating", "garbled_rating": "garbled_rating",
                "missing_confidence": "missing_confidence", "garbled_confidence": "garbled_confidence",
                "empty_review": "empty_review", "non_utf8": "unreadable_text", "duplicate_review": "duplicate_review"}
FILES = ("papers", "reviews", "rejects")


def config(root: Path, **ingest) -> Config:
    settings = dict(page_size=PAGE, backoff_seconds=0.01, max_backoff_seconds=0.05, timeout_seconds=5,
                    max_retries=3, pdf_max_bytes=2_000_000, pdf_workers=2)
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}))


def read(out: Path) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(out / f"{name}.parquet") for name in FILES}


def assert_same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    for name in FILES:
        assert_frame_equal(a[name], b[name])


@pytest.fixture(scope="module")
def venues():
    return make_venue(V2_VENUE), make_venue(V1_VENUE, seed=7)


@pytest.fixture
def server(venues):
    with serve_venues(venues, page_limit=PAGE) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(venues, tmp_path_factory):
    """Clean v2 ingest outputs (PDF step off), to compare faulty and resumed runs with."""
    root = tmp_path_factory.mktemp("reference")
    with serve_venues(venues, page_limit=PAGE) as srv:
        ingest_venue(V2_VENUE, config(root, pdf=False), root / "out", srv.v2_url)
    return read(root / "out")


@pytest.mark.parametrize("venue_id", [V2_VENUE, V1_VENUE])
def test_ingest_every_bad_input_lands_in_rejects(venue_id, venues, server, tmp_path):
    venue = venues[0] if venue_id == V2_VENUE else venues[1]
    url = server.v2_url if venue_id == V2_VENUE else server.v1_url
    result = ingest_venue(venue_id, config(tmp_path), tmp_path / "out", url)
    frames = read(tmp_path / "out")
    papers, reviews, rejects = frames["papers"], frames["reviews"], frames["rejects"]
    assert papers.schema == PAPERS and reviews.schema == REVIEWS and rejects.schema == REJECTS
    assert papers.height == len(venue.papers) == papers["paper_id"].n_unique()
    assert reviews["review_id"].n_unique() == reviews.height
    by_id = {row["entity_id"]: row["rule"] for row in rejects.iter_rows(named=True)}
    for case, rule in REVIEW_RULES.items():
        assert by_id[venue.bad_cases[case]] == rule, case
    assert by_id[venue.bad_cases["large_pdf"]] == "pdf_too_large"
    assert venue.bad_cases["corrupt_pdf"] in by_id
    # ingested = kept + rejected, and every generated review is accounted for exactly once
    review_rejects = rejects.filter(pl.col("entity") == "review")
    assert result.reviews_ingested == reviews.height + review_rejects.height == venue.n_reviews + 1
    assert set(reviews["review_id"]) | set(review_rejects["entity_id"]) == {
        r.review_id for p in venue.papers for r in p.reviews}
    # kept-but-cleaned inputs
    kept = {row["review_id"]: row for row in reviews.iter_rows(named=True)}
    assert "<b>" not in kept[venue.bad_cases["html"]]["review_text"]
    assert "simple" in kept[venue.bad_cases["html"]]["review_text"]
    assert "\\mathcal{O}(\\sqrt{T \\log K})" in kept[venue.bad_cases["latex"]]["review_text"]
    assert "authors\u2019 approach" in kept[venue.bad_cases["mojibake"]]["review_text"]
    # statuses, decisions, no identity
    status = dict(zip(papers["paper_id"], papers["status"], strict=True))
    for paper in venue.papers:
        assert status[paper.paper_id] == paper.status
    assert papers.filter(pl.col("status") == "active")["decision"].null_count() == 0
    dump = str(reviews.to_dicts()) + str(papers.to_dicts())
    assert "Reviewer_" not in dump and "Area_Chair" not in dump
    assert result.pdfs == sum(1 for p in venue.papers if p.status == "active") - 1
    if result.pdf_texts is not None:
        assert pl.read_parquet(tmp_path / "out" / "pdf_texts.parquet").height == result.pdf_texts


def test_rerun_makes_only_the_identity_request_and_writes_identical_files(server, tmp_path):
    cfg = config(tmp_path)
    first = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    before = read(tmp_path / "out")
    calls = len(server.log)
    second = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    # pages, group and PDFs all cached; a server that is not the official API is asked once what it serves
    # (the first page of the listing)
    asked = [(r.endpoint, r.params) for r in server.log[calls:]]
    assert asked == [("notes", {"invitation": f"{V2_VENUE}/-/Submission", "limit": str(PAGE), "sort": "number:asc",
                                "count": "true"})]
    assert second.pages_fetched == 0 and second.pages_cached == first.pages_fetched
    assert_same(before, read(tmp_path / "out"))


@pytest.mark.slow   # waits out a timeout or a retry back-off: seconds of sleeping
def test_429_with_retry_after_and_5xx_are_retried(server, reference, tmp_path):
    server.inject(Fault("429", times=2, retry_after=1, when=lambda p: p.get("offset") == "5"),
                  Fault("5xx", times=2, status=500, when=lambda p: p.get("offset") == "10"))
    ingest_venue(V2_VENUE, config(tmp_path, pdf=False), tmp_path / "out", server.v2_url)
    assert_same(reference, read(tmp_path / "out"))
    limited = [r for r in server.log if r.params.get("offset") == "5"]
    assert [r.status for r in limited] == [429, 429, 200]
    assert limited[1].at - limited[0].at >= 1.0 and limited[2].at - limited[1].at >= 1.0


@pytest.mark.slow   # waits out a timeout or a retry back-off: seconds of sleeping
def test_timeout_then_success(server, reference, tmp_path):
    server.inject(Fault("slow", delay=2.5, when=lambda p: p.get("offset") == "5"))
    ingest_venue(V2_VENUE, config(tmp_path, pdf=False, timeout_seconds=1.0), tmp_path / "out", server.v2_url)
    assert_same(reference, read(tmp_path / "out"))
    deadline = time.monotonic() + 5     # the timed-out request is logged when its slow answer ends
    while len([r for r in server.log if r.params.get("offset") == "5"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len([r for r in server.log if r.params.get("offset") == "5"]) >= 2   # timed out, then retried


def test_malformed_page_is_retried_then_rejected_and_the_run_goes_on(server, reference, tmp_path):
    server.inject(Fault("malformed", times=1, when=lambda p: p.get("offset") == "5"))
    ingest_venue(V2_VENUE, config(tmp_path / "once", pdf=False), tmp_path / "once", server.v2_url)
    assert_same(reference, read(tmp_path / "once"))

    server.inject(Fault("bad_shape", times=99, when=lambda p: p.get("offset") == "5"))
    result = ingest_venue(V2_VENUE, config(tmp_path / "bad", pdf=False), tmp_path / "bad", server.v2_url)
    frames = read(tmp_path / "bad")
    [page] = frames["rejects"].filter(pl.col("entity") == "page").to_dicts()
    assert page["rule"] == "malformed_page" and page["entity_id"].endswith("@offset=5")
    assert result.pages_rejected == 1 and frames["papers"].height == reference["papers"].height - PAGE
    missing = set(reference["papers"]["paper_id"]) - set(frames["papers"]["paper_id"])
    assert len(missing) == PAGE


def test_crash_after_some_pages_resumes_without_duplicates(server, reference, tmp_path):
    cfg = config(tmp_path, pdf=False, max_retries=1)
    server.inject(Fault("5xx", times=99, when=lambda p: p.get("offset") == "10"))
    with pytest.raises(requests.exceptions.RetryError) as error:
        ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    assert is_transient(error.value)
    assert not (tmp_path / "out" / "papers.parquet").exists()
    server.clear()
    result = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    assert (result.pages_cached, result.pages_fetched) == (2, 1)
    assert_same(reference, read(tmp_path / "out"))


def test_killed_process_resumes_without_duplicates_or_gaps(server, reference, tmp_path):
    server.inject(Fault("slow", delay=60, when=lambda p: p.get("offset") == "10"))
    # killed while the slow page is in flight
    ingest_killed_when(lambda: any(p.get("offset") == "10" for _, _, p in list(server.arrivals)),
                       tmp_path, server.v2_url, "pdf=False")
    saved = list(raw_dir(config(tmp_path), V2_VENUE, 2, url_source(server.v2_url)).rglob("offset_*.json"))
    assert len(saved) == 2                                       # pages 0 and 5 made it to disk
    server.clear()
    result = ingest_venue(V2_VENUE, config(tmp_path, pdf=False), tmp_path / "out", server.v2_url)
    assert (result.pages_cached, result.pages_fetched) == (2, 1)
    assert_same(reference, read(tmp_path / "out"))


def test_pdf_without_declared_size_is_capped_while_streaming(server, venues, tmp_path):
    server.send_content_length = False
    ingest_venue(V2_VENUE, config(tmp_path), tmp_path / "out", server.v2_url)
    rejects = read(tmp_path / "out")["rejects"]
    [row] = rejects.filter(pl.col("entity_id") == venues[0].bad_cases["large_pdf"]).to_dicts()
    assert row["rule"] == "pdf_too_large" and "body exceeds" in row["detail"]


def test_is_transient():
    import openreview

    assert is_transient(requests.ConnectionError("down"))
    assert is_transient(openreview.OpenReviewException({"name": "RateLimitError", "status": 429}))
    assert is_transient(openreview.OpenReviewException({"name": "Error", "status": 503}))
    assert not is_transient(openreview.OpenReviewException({"name": "ForbiddenError", "status": 403}))
    assert not is_transient(ValueError("bad"))
