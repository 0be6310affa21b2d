"""Revision histories through the real openreview-py clients against the local server: the PDF the
reviewers saw, first vs final reviews, `curate.review_version`, the history cache; and the PDF
download as a queue that survives a killed process."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import Config, CurateConfig, IngestConfig, VenueConfig
from tasks.core.layout import raw_dir
from tasks.stages.curate.rules import curate_frames
from tasks.stages.ingest.fetch import ingest_venue
from tasks.stages.ingest.forms import normalise_review, parse_score
from tasks.stages.ingest.sources import url_source
from tasks.stages.ingest.versions import HIDDEN_PDF, REVIEW_HIDDEN, choose_pdf
from tasks.testing.openreview_server import Fault, serve_venues
from tasks.testing.synthetic import make_venue, revise_pdf
from tests.crash import ingest_killed_when

ROOT = Path(__file__).resolve().parents[3]
V2_VENUE, V1_VENUE = "GREBench.cc/2025/Demo", "ICLR.cc/2023/Conference"
RATING_MAP = {"1": 1, "2": 1, "3": 3, "4": 5, "5": 5, "6": 6, "7": 8, "8": 8, "9": 10, "10": 10}


def config(root: Path, review_version: str = "first", **ingest) -> Config:
    settings = dict(page_size=5, backoff_seconds=0.01, max_backoff_seconds=0.05, timeout_seconds=5, max_retries=2,
                    pdf_max_bytes=2_000_000, pdf_workers=2)
    return Config(root=root, ingest=IngestConfig(**{**settings, **ingest}),
                  curate=CurateConfig(review_version=review_version),
                  venues={v: VenueConfig(rating_map=RATING_MAP) for v in (V2_VENUE, V1_VENUE)})


@pytest.fixture(scope="module")
def venues():
    return {V2_VENUE: make_venue(V2_VENUE), V1_VENUE: make_venue(V1_VENUE, seed=7)}


@pytest.fixture
def server(venues):
    with serve_venues(venues.values(), page_limit=5) as srv:
        yield srv


def url(server, venue_id: str) -> str:
    return server.v2_url if venue_id == V2_VENUE else server.v1_url


@pytest.mark.parametrize("venue_id", [V2_VENUE, V1_VENUE])
def test_edited_reviews_give_first_and_final_and_the_initial_pdf_is_downloaded(venue_id, venues, server, tmp_path):
    venue = venues[venue_id]
    assert venue.revised["reviews"] and venue.revised["pdfs"]
    result = ingest_venue(venue_id, config(tmp_path), tmp_path / "out", url(server, venue_id))
    reviews = {r["review_id"]: r for r in pl.read_parquet(tmp_path / "out" / "reviews.parquet").iter_rows(named=True)}
    for review_id in venue.revised["reviews"]:
        paper, review = venue.review(review_id)
        row = reviews[review_id]
        assert row["rating"] == parse_score(review.fields["rating"])
        assert row["rating_final"] == parse_score(review.final_fields["rating"]) == row["rating"] + 1
        assert row["confidence"] == row["confidence_final"]
        assert "After the rebuttal" in row["review_text_final"] and "After the rebuttal" not in row["review_text"]
        assert row["edited_after_rebuttal"] is True and row["final_at"] > row["created_at"]
    edited = {r for r, row in reviews.items() if row["edited_after_rebuttal"]}
    assert edited == set(venue.revised["reviews"]) and result.reviews_edited == len(edited)
    active = {p.paper_id for p in venue.papers if p.status == "active"}
    unedited = [row for r, row in reviews.items() if r not in edited and row["paper_id"] in active]
    assert unedited and all(row["edited_after_rebuttal"] is False and row["rating"] == row["rating_final"]
                            and row["review_text"] == row["review_text_final"] for row in unedited)

    papers = {p["paper_id"]: p for p in pl.read_parquet(tmp_path / "out" / "papers.parquet").iter_rows(named=True)}
    by_id = {p.paper_id: p for p in venue.papers}
    for paper_id in venue.revised["pdfs"]:
        paper, row = by_id[paper_id], papers[paper_id]
        assert paper.pdf != paper.current_pdf
        assert (tmp_path / "out" / "pdfs" / f"{paper_id}.pdf").read_bytes() == paper.pdf   # not the camera-ready
        assert row["pdf_versions"] == 2 and row["pdf_version"] in row["pdf_url"]
        assert int(row["pdf_date"].timestamp() * 1000) == paper.cdate
    plain = next(p for p in venue.papers if p.paper_id in active and p.paper_id not in venue.revised["pdfs"]
                 and p.paper_id not in venue.bad_cases.values())
    assert papers[plain.paper_id]["pdf_versions"] == 1 and papers[plain.paper_id]["pdf_url"].endswith(
        f"/pdf?id={plain.paper_id}")
    assert (tmp_path / "out" / "pdfs" / f"{plain.paper_id}.pdf").read_bytes() == plain.pdf
    assert result.pdfs_revised == len(venue.revised["pdfs"])
    # the cached histories hold no identity (edits carry signatures and a tauthor e-mail)
    cached = "".join(p.read_text() for p in (raw_dir(config(tmp_path), venue_id, 2 if venue_id == V2_VENUE else 1,
                                             url_source(url(server, venue_id)))
                                             / "history").glob("*.json"))
    assert cached and "someone@example.org" not in cached and "Reviewer_" not in cached and "Anonymous" not in cached


def test_unmodified_reviews_cost_no_request_and_a_rerun_reads_histories_from_the_cache(venues, server, tmp_path):
    venue = venues[V2_VENUE]
    cfg = config(tmp_path)
    first = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    active = [p for p in venue.papers if p.status == "active"]
    assert server.count(2, "edits") == len(active) + len(venue.revised["reviews"])   # papers + edited reviews only
    assert first.histories_fetched == server.count(2, "edits")
    before = pl.read_parquet(tmp_path / "out" / "reviews.parquet")
    server.clear()
    second = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    assert server.count(2, "edits") == 0 and server.count(2, "edit_pdf") == 0 and server.count(2, "pdf") == 0
    assert second.histories_cached == first.histories_fetched
    assert pl.read_parquet(tmp_path / "out" / "reviews.parquet").equals(before)


def test_a_damaged_history_is_quarantined_and_fetched_again(venues, server, tmp_path):
    cfg = config(tmp_path, pdf=False)
    ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    review_id = venues[V2_VENUE].revised["reviews"][0]
    folder = raw_dir(cfg, V2_VENUE, 2, url_source(server.v2_url))
    (folder / "history" / f"{review_id}.json").write_bytes(b'{"note_id": "x", "versi')
    server.clear()
    ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    assert [r.params.get("note.id") for r in server.log if r.endpoint == "edits"] == [review_id]
    assert len(list((folder / "quarantine").iterdir())) == 1
    row = pl.read_parquet(tmp_path / "out" / "reviews.parquet").filter(pl.col("review_id") == review_id).row(0, named=True)
    assert row["edited_after_rebuttal"] is True


@pytest.mark.parametrize("venue_id", [V2_VENUE, V1_VENUE])
def test_review_version_final_switches_what_curation_keeps(venue_id, venues, server, tmp_path):
    cfg = config(tmp_path)
    ingest_venue(venue_id, cfg, tmp_path / "out", url(server, venue_id))
    papers = pl.read_parquet(tmp_path / "out" / "papers.parquet")
    reviews = pl.read_parquet(tmp_path / "out" / "reviews.parquet")
    _, first, _, _ = curate_frames(papers, reviews, venue_id, cfg)
    _, final, _, _ = curate_frames(papers, reviews, venue_id, config(tmp_path, "final"))
    assert set(first["review_version"]) == {"first"} and set(final["review_version"]) == {"final"}
    edited = set(venues[venue_id].revised["reviews"])
    kept = edited & set(first["review_id"]) & set(final["review_id"])
    assert kept
    a = first.filter(pl.col("review_id").is_in(list(kept))).sort("review_id")
    b = final.filter(pl.col("review_id").is_in(list(kept))).sort("review_id")
    assert (b["rating_venue"] == a["rating_venue"] + 1).all()
    assert b["review_text"].str.contains("After the rebuttal").all()
    assert not a["review_text"].str.contains("After the rebuttal").any()
    assert b["summary"].is_null().all() and a["summary"].is_not_null().all()   # first-version sections dropped
    same = first.filter(~pl.col("review_id").is_in(list(edited))).sort("review_id")
    other = final.filter(~pl.col("review_id").is_in(list(edited))).sort("review_id")
    common = set(same["review_id"]) & set(other["review_id"])
    assert common and same.filter(pl.col("review_id").is_in(list(common)))["review_text"].equals(
        other.filter(pl.col("review_id").is_in(list(common)))["review_text"])


def test_versions_off_keeps_the_latest_pdf_and_flags_nothing(venues, server, tmp_path):
    venue = venues[V2_VENUE]
    ingest_venue(V2_VENUE, config(tmp_path, versions=False), tmp_path / "out", server.v2_url)
    assert server.count(2, "edits") == 0
    paper = next(p for p in venue.papers if p.paper_id == venue.revised["pdfs"][0])
    assert (tmp_path / "out" / "pdfs" / f"{paper.paper_id}.pdf").read_bytes() == paper.current_pdf
    reviews = pl.read_parquet(tmp_path / "out" / "reviews.parquet")
    assert reviews["edited_after_rebuttal"].null_count() == reviews.height
    row = reviews.filter(pl.col("review_id") == venue.revised["reviews"][0]).row(0, named=True)
    assert row["rating"] == row["rating_final"] and "After the rebuttal" in row["review_text"]
    # turning versions on replaces the camera-ready on disk by the version the reviewers saw, and
    # only that: a PDF on disk that is the latest version is kept
    server.clear()
    ingest_venue(V2_VENUE, config(tmp_path), tmp_path / "out", server.v2_url)
    assert (tmp_path / "out" / "pdfs" / f"{paper.paper_id}.pdf").read_bytes() == paper.pdf
    assert server.count(2, "pdf") == 0 and server.count(2, "edit_pdf") == len(venue.revised["pdfs"])
    assert (tmp_path / "out" / "pdfs" / f"{paper.paper_id}.version").exists()


def test_choose_pdf_takes_the_last_version_before_the_first_review():
    def edit(ident, date, pdf=None, **content):
        body = {**content, **({"pdf": {"value": pdf}} if pdf else {})}
        return {"id": ident, "tcdate": date, "cdate": date, "content": body or None}

    history = [edit("e0", 10, title={"value": "t"}), edit("e1", 20, "/pdf/a.pdf"), edit("e2", 30),
               edit("e3", 40, "/pdf/b.pdf"), edit("e4", 45, "/pdf/b.pdf"), edit("e5", 90, "/pdf/c.pdf")]
    choice = choose_pdf(history, first_review=60)
    assert (choice.version, choice.date, choice.versions, choice.latest) == ("e3", 40, 3, False)
    assert choose_pdf(history, first_review=None).version == "e1"       # no review: the first PDF
    assert choose_pdf(history, first_review=5).version == "e1"          # all later: the first PDF
    assert choose_pdf(history, first_review=100).latest
    assert choose_pdf(history[:1], first_review=60) is None


def test_revised_pdf_differs_and_stays_readable(venues):
    import pymupdf

    paper = next(p for p in venues[V2_VENUE].papers if p.pdf is not None)
    revised = revise_pdf(paper.pdf)
    assert revised != paper.pdf
    with pymupdf.open(stream=revised, filetype="pdf") as doc:
        assert "Camera-ready revision" in doc[0].get_text()


@pytest.mark.slow
def test_killed_pdf_download_resumes_with_only_the_missing_pdfs(venues, server, tmp_path):
    """The PDF queue survives a kill: what is on disk is done (written whole), the rest is fetched."""
    venue = venues[V2_VENUE]
    wanted = [p.paper_id for p in venue.papers if p.status == "active"]
    special = set(venue.revised["pdfs"]) | set(venue.bad_cases.values())
    stall = next(p for p in wanted[2:] if p not in special)
    server.inject(Fault("slow", endpoint="pdf", delay=60, when=lambda p: p.get("id") == stall))
    ingest_killed_when(lambda: any(e == "pdf" and p.get("id") == stall for _, e, p in list(server.arrivals)),
                       tmp_path, server.v2_url, "pdf_workers=1")
    pdf_dir = tmp_path / "out" / "pdfs"
    done = {p.stem for p in pdf_dir.glob("*.pdf")}
    assert done and stall not in done and len(done) < len(wanted)
    server.clear()
    cfg = Config(root=tmp_path, ingest=IngestConfig(page_size=5, pdf_workers=1))
    result = ingest_venue(V2_VENUE, cfg, tmp_path / "out", server.v2_url)
    fetched = [r.params.get("id") for r in server.log if r.endpoint in ("pdf", "edit_pdf")]
    assert set(fetched).isdisjoint(done) and stall in fetched
    # histories and pages cached: the one listing request is the identity check a local server gets on a rerun
    assert server.count(2, "edits") == 0 and server.count(2, "notes") == 1
    assert result.pdfs == len(wanted) - 1   # the oversized one is rejected
    by_id = {p.paper_id: p for p in venue.papers}
    for paper_id in {p.stem for p in pdf_dir.glob("*.pdf")}:
        assert (pdf_dir / f"{paper_id}.pdf").read_bytes() == by_id[paper_id].pdf
    assert not list(pdf_dir.glob(".*.tmp"))


def test_database_tables_show_first_and_final_and_the_data_test_checks_the_flag(venues, server, tmp_path):
    import duckdb

    from tasks.core.config import load_config
    from tasks.core.layout import stage_dir
    from tasks.stages.curate.rules import curate_venue
    from tasks.stages.materialize.build import DataTestError, build_database

    scale = ", ".join(f'"{k}" = {v}' for k, v in RATING_MAP.items())
    (tmp_path / "pipelines.toml").write_text(
        f"[ingest]\npage_size = 5\npdf = false\n[venues.\"{V2_VENUE}\"]\nrating_map = {{ {scale} }}\n"
        f"[pipelines.t]\nvenues = ['{V2_VENUE}']\nstages = ['ingest', 'curate', 'materialize']\n")
    cfg = load_config(tmp_path / "pipelines.toml")
    ingest_venue(V2_VENUE, cfg, stage_dir(cfg, "t", "ingest", V2_VENUE), server.v2_url)
    curated = stage_dir(cfg, "t", "curate", V2_VENUE)
    curation = curate_venue(stage_dir(cfg, "t", "ingest", V2_VENUE), V2_VENUE, cfg, curated)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        edited = con.execute("select review_id, rating_venue, rating_final from reviews "
                             "where edited_after_rebuttal order by review_id").fetchall()
        flags = con.execute("select count(*) filter (where edited_after_rebuttal is null) from reviews").fetchone()
    assert edited and {r for r, _, _ in edited} <= set(venues[V2_VENUE].revised["reviews"])
    assert all(final == first + 1 for _, first, final in edited) and flags == (0,)
    assert (curation.review_version, curation.reviews_edited) == ("first", len(edited))
    reviews = pl.read_parquet(curated / "reviews.parquet")
    reviews.with_columns(edited_after_rebuttal=~pl.col("edited_after_rebuttal")).write_parquet(curated / "reviews.parquet")
    with pytest.raises(DataTestError, match="review_versions"):
        build_database(cfg, "t")


def test_histories_the_api_refuses_leave_the_note_as_served(venues, server, tmp_path):
    venue = venues[V2_VENUE]
    server.inject(Fault("5xx", status=403, endpoint="edits", times=10_000))
    result = ingest_venue(V2_VENUE, config(tmp_path), tmp_path / "out", server.v2_url)
    assert result.histories_fetched == server.count(2, "edits") > 0 and result.reviews_edited == 0
    reviews = pl.read_parquet(tmp_path / "out" / "reviews.parquet")
    row = reviews.filter(pl.col("review_id") == venue.revised["reviews"][0]).row(0, named=True)
    assert row["edited_after_rebuttal"] is None and row["rating"] == row["rating_final"]
    assert "After the rebuttal" in row["review_text"]                     # the final version, as served
    paper = next(p for p in venue.papers if p.paper_id == venue.revised["pdfs"][0])
    assert (tmp_path / "out" / "pdfs" / f"{paper.paper_id}.pdf").read_bytes() == paper.current_pdf
    papers = pl.read_parquet(tmp_path / "out" / "papers.parquet")
    active = papers.filter((pl.col("status") == "active") & pl.col("pdf_url").is_not_null())
    assert set(active["pdf_version"]) == {HIDDEN_PDF} and row["review_history"] == REVIEW_HIDDEN   # v2: said, not guessed
    assert papers.height - active.height == papers["pdf_version"].null_count() > 0


def test_revisions_leave_the_rest_of_the_synthetic_venue_unchanged():
    plain = make_venue(V2_VENUE, n_papers=24, seed=3, pdfs=False, revisions=False)
    revised = make_venue(V2_VENUE, n_papers=24, seed=3, pdfs=False)
    assert revised.revised["reviews"] and not plain.revised
    for a, b in zip(plain.papers, revised.papers, strict=True):
        assert (a.paper_id, a.title, a.decision) == (b.paper_id, b.title, b.decision)
        assert [(r.review_id, r.fields) for r in a.reviews] == [(r.review_id, r.fields) for r in b.reviews]
    assert make_venue(V2_VENUE, n_papers=24, seed=3, pdfs=False).revised == revised.revised   # deterministic
    for review_id in revised.revised["reviews"]:
        paper, review = revised.review(review_id)
        assert paper.role == "keep" and review_id not in revised.bad_cases.values()
        assert review.final_fields != review.fields and review.edits[0][0] > review.cdate


def test_the_local_server_serves_histories_to_the_real_clients(venues, server):
    import openreview
    from openreview.api import OpenReviewClient

    venue = venues[V2_VENUE]
    client = OpenReviewClient(baseurl=server.v2_url)
    review_id = venue.revised["reviews"][0]
    edits = sorted(client.get_note_edits(note_id=review_id), key=lambda e: e.tcdate)
    with_content = [e for e in edits if e.note.content]
    assert len(edits) == 3 and len(with_content) == 2             # posted, released (readers only), edited
    assert with_content[-1].note.content["rating"]["value"] == venue.review(review_id)[1].final_fields["rating"]
    paper = next(p for p in venue.papers if p.paper_id == venue.revised["pdfs"][0])
    first = next(e for e in sorted(client.get_note_edits(note_id=paper.paper_id), key=lambda e: e.tcdate)
                 if e.note.content and "pdf" in e.note.content)
    response = client.session.get(client.note_edits_url + "/attachment", params={"id": first.id, "name": "pdf"})
    assert response.content == paper.pdf and client.get_pdf(paper.paper_id) == paper.current_pdf

    old = venues[V1_VENUE]
    client1 = openreview.Client(baseurl=server.v1_url)
    paper = next(p for p in old.papers if p.paper_id == old.revised["pdfs"][0])
    references = sorted(client1.get_references(referent=paper.paper_id, original=True), key=lambda r: r.tcdate)
    assert len(references) == 2 and references[0].content["pdf"] != references[1].content["pdf"]
    assert client1.get_pdf(references[0].id, is_reference=True) == paper.pdf


def test_revision_pdfs_take_a_pdf_slot_of_the_throttle():
    from tasks.stages.ingest.throttle import RateLimit, Throttle

    naps: list[float] = []
    clock = [0.0]
    limit = RateLimit(2, 3600.0, "PDF", clock=lambda: clock[0], sleep=naps.append)
    throttle = Throttle(RateLimit(0, 60.0), limit)
    throttle.before("/notes/edits?note.id=abc")                      # a history: an API request only
    assert naps == []
    for path in ("/notes/edits/attachment?id=e1&name=pdf", "/references/pdf?id=r1", "/pdf?id=p1"):
        throttle.before(path)
    assert naps == [1800.0, 3600.0]                                  # 2 an hour: the 2nd and 3rd wait


def test_a_history_with_a_revert_keeps_the_posted_version_first_and_the_reverted_one_final():
    """ICLR 2026 (venue facts, cycle 2026): posted, edited in the discussion, reverted on 28 Nov 2025.
    "first" is the posted version, "final" the note as it stands (reverted); a revert to the posted
    text is no edit, and the discussion's edit in between is neither."""
    from tasks.core.venue_facts import cycle_of, facts_limits
    from tasks.stages.ingest.versions import review_row

    posted = {"summary": {"value": "A study of sparse attention."}, "rating": {"value": 4}, "confidence": {"value": 4}}
    discussed = {**posted, "rating": {"value": 8}, "summary": {"value": "A study of sparse attention, now convincing."}}
    day = 86_400_000
    versions = [{"id": "e1", "tcdate": 1 * day, "content": posted}, {"id": "e2", "tcdate": 10 * day, "content": discussed},
                {"id": "e3", "tcdate": 17 * day, "content": posted}]
    final, problem = normalise_review({"id": "r1", "forum": "p1", "cdate": day, "tmdate": 17 * day,
                                       "content": posted}, "ICLR.cc/2026/Conference")
    assert problem is None
    row = review_row(final, versions, "ICLR.cc/2026/Conference", None)
    assert row["rating"] == 4 and row["rating_final"] == 4 and row["edited_after_rebuttal"] is False
    cycle = cycle_of("ICLR.cc/2026/Conference")
    assert [d.isoformat() for d, _ in cycle.events] == ["2025-11-27", "2025-11-28"]
    assert any("reverted every review" in limit for limit in facts_limits("ICLR.cc/2026/Conference"))
