"""The synthetic venue: deterministic, shaped for curation, bad cases planted, real PDFs."""

from __future__ import annotations

import statistics

import pymupdf
import pytest

from tasks.stages.ingest.forms import parse_score
from tasks.testing.synthetic import LARGE_PDF_PADDING, PDF_SECTIONS, make_venue

DEMO = "GREBench.cc/2025/Demo"
COMMON = {1: 1, 2: 1, 3: 3, 4: 5, 5: 5, 6: 6, 7: 8, 8: 8, 9: 10, 10: 10}   # the demo's rating_map


@pytest.fixture(scope="module")
def venue():
    return make_venue(DEMO)


def _snapshot(v):
    return [(p.paper_id, p.title, p.role, p.decision, [(r.review_id, r.fields) for r in p.reviews]) for p in v.papers]


def test_same_seed_same_venue_other_seed_differs(venue):
    assert _snapshot(make_venue(DEMO, pdfs=False)) == _snapshot(venue)
    assert _snapshot(make_venue(DEMO, seed=1, pdfs=False)) != _snapshot(venue)


def test_review_counts_and_roles():
    v = make_venue(DEMO, n_papers=24, pdfs=False, bad_cases=False)
    assert v.n_reviews == 24 * 4
    roles = [p.role for p in v.papers]
    assert {"keep", "few_confident", "high_variance", "withdrawn", "desk_rejected"} == set(roles)
    assert all(not p.reviews for p in v.papers if p.role == "desk_rejected")


def test_scores_are_shaped_for_curation():
    v = make_venue(DEMO, n_papers=60, pdfs=False, bad_cases=False)
    for paper in v.papers:
        if not paper.reviews:
            continue
        ratings = [COMMON[int(parse_score(r.fields["rating"]))] for r in paper.reviews]
        confident = [r for r in paper.reviews if parse_score(r.fields["confidence"]) >= 4]
        variance = statistics.pvariance(ratings)
        if paper.role == "keep":
            assert len(confident) == len(paper.reviews) and variance <= 1.5 and 3 <= len(ratings) <= 5
        elif paper.role == "high_variance":
            assert variance > 1.5 and len(confident) == len(paper.reviews)
        elif paper.role == "few_confident":
            assert len(confident) < 3


def test_review_text_reads_like_a_review(venue):
    fields = venue.papers[1].reviews[1].fields
    assert {"summary", "strengths", "weaknesses", "questions", "limitations", "rating", "confidence"} <= set(fields)
    assert fields["rating"].split(":")[0].isdigit() and len(fields["summary"]) > 100
    assert fields["weaknesses"].startswith("1. ")


def test_bad_cases_are_planted(venue):
    cases = venue.bad_cases
    assert set(cases) >= {"missing_rating", "garbled_rating", "missing_confidence", "garbled_confidence",
                          "empty_review", "duplicate_review", "html", "latex", "non_utf8", "mojibake",
                          "corrupt_pdf", "large_pdf"}
    assert "rating" not in venue.review(cases["missing_rating"])[1].fields
    assert venue.review(cases["garbled_rating"])[1].fields["rating"] == "excellent!!"
    assert "<b>" in venue.review(cases["html"])[1].fields["strengths"]
    assert "\\mathcal" in venue.review(cases["latex"])[1].fields["weaknesses"]
    raw = venue.review(cases["non_utf8"])[1].fields["summary"].encode("utf-8", "surrogateescape")
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    assert "â€" in venue.review(cases["mojibake"])[1].fields["summary"]
    assert any(review_id == cases["duplicate_review"] for review_id, _ in venue.duplicate_reviews)
    assert not make_venue(DEMO, pdfs=False, bad_cases=False).bad_cases


def test_pdfs_are_real_multi_page_papers(venue):
    paper = next(p for p in venue.papers if p.pdf and p.paper_id not in venue.bad_cases.values())
    doc = pymupdf.open(stream=paper.pdf, filetype="pdf")
    text = "".join(page.get_text() for page in doc)
    assert doc.page_count >= 4 and paper.title in text
    for section in PDF_SECTIONS:
        assert section in text
    corrupt = next(p for p in venue.papers if p.paper_id == venue.bad_cases["corrupt_pdf"])
    with pytest.raises(Exception):   # noqa: B017 - pymupdf raises its own error types
        pymupdf.open(stream=corrupt.pdf, filetype="pdf").load_page(0)
    large = next(p for p in venue.papers if p.paper_id == venue.bad_cases["large_pdf"])
    assert large.pdf_padding == LARGE_PDF_PADDING


def test_large_venue_without_pdfs():
    v = make_venue(DEMO, n_papers=1200, pdfs=False)
    assert len(v.papers) == 1200 and v.n_reviews == 4800
    assert len({p.paper_id for p in v.papers}) == 1200
