"""Normalising note content: v1 and v2 shapes, form variants, text cleaning, reject rules."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.core.schema import PAPERS, REVIEWS, conform
from tasks.stages.ingest.forms import (
    clean_text,
    normalise_review,
    normalise_submission,
    paper_status,
    parse_score,
)

VENUE = "ICLR.cc/2023/Conference"
V1_REVIEW = {
    "id": "rev1", "forum": "paper1", "replyto": "paper1", "cdate": 1_667_000_000_000,
    "invitation": "ICLR.cc/2023/Conference/Paper7/-/Official_Review",
    "signatures": ["ICLR.cc/2023/Conference/Paper7/Reviewer_xYz1"], "writers": ["~Jane_Doe1"],
    "content": {
        "summary_of_the_paper": "The paper studies sparse attention.",
        "strength_and_weaknesses": "Strengths: clear.\nWeaknesses: small gains.",
        "clarity,_quality,_novelty_and_reproducibility": "Clear and reproducible.",
        "summary_of_the_review": "A borderline paper.",
        "correctness": "3: Some of the paper's claims have minor issues.",
        "technical_novelty_and_significance": "2: The contributions are only marginally significant.",
        "recommendation": "6: marginally above the acceptance threshold",
        "confidence": "4: You are confident in your assessment, but not absolutely certain.",
        "flag_for_ethics_review": ["NO."],
    },
}


def v2(content: dict) -> dict:
    return {"id": "rev2", "forum": "paper2", "replyto": "paper2", "cdate": 1_700_000_000_000,
            "invitations": ["ICLR.cc/2024/Conference/Submission3/-/Official_Review"],
            "signatures": ["ICLR.cc/2024/Conference/Submission3/Reviewer_Ab12"],
            "content": {k: {"value": v} for k, v in content.items()}}


V2_FIELDS = {"summary": "Summary text.", "strengths": "Strong.", "weaknesses": "Weak.", "questions": "Why?",
             "limitations": "Some.", "soundness": "3 good", "presentation": "2 fair", "contribution": "3 good",
             "rating": "8: accept, good paper", "confidence": "3: fairly confident", "code_of_conduct": "Yes"}


@pytest.mark.parametrize(("raw", "expected"), [
    ("6: marginally above the acceptance threshold", 6.0), ("10: strong accept", 10.0), ("3 good", 3.0),
    (" 2.5: odd", 2.5), (7, 7.0), (4.0, 4.0), ("excellent!!", None), ("", None), (None, None), (True, None),
])
def test_parse_score(raw, expected):
    assert parse_score(raw) == expected


def test_v1_iclr2023_form():
    row, problem = normalise_review(V1_REVIEW, VENUE)
    assert problem is None
    assert row["rating"] == 6 and row["rating_raw"].startswith("6: marginally")
    assert row["confidence"] == 4 and row["soundness"] is None
    assert row["summary"] == "The paper studies sparse attention."
    assert row["strengths_and_weaknesses"].startswith("Strengths: clear.")
    assert row["other_sections"] == ("## Clarity, quality, novelty and reproducibility\n\nClear and reproducible."
                                     "\n\n## Summary of the review\n\nA borderline paper.")
    assert row["review_text"].startswith("## Summary\n\nThe paper studies sparse attention.\n\n## Strengths and")
    assert "correctness" not in row["review_text"].lower() and "marginally significant" not in row["review_text"]


def test_v2_form_and_integer_rating():
    row, problem = normalise_review(v2(V2_FIELDS), "ICLR.cc/2024/Conference")
    assert problem is None
    assert (row["rating"], row["confidence"], row["soundness"], row["presentation"], row["contribution"]) == (8, 3, 3, 2, 3)
    assert [line for line in row["review_text"].split("\n") if line.startswith("## ")] == [
        "## Summary", "## Strengths", "## Weaknesses", "## Questions", "## Limitations"]
    row, _ = normalise_review(v2({**V2_FIELDS, "rating": 6}), "ICLR.cc/2025/Conference")
    assert row["rating"] == 6 and row["rating_raw"] == "6"
    frame = conform(pl.DataFrame([row]).drop("created_at"), REVIEWS)
    assert frame.height == 1 and frame["rating"][0] == 6


def test_no_reviewer_identity_in_rows():
    row, _ = normalise_review(V1_REVIEW, VENUE)
    text = repr(row)
    assert "Reviewer_xYz1" not in text and "Jane_Doe" not in text
    assert set(row) <= set(REVIEWS.names())


@pytest.mark.parametrize(("change", "rule"), [
    ({"rating": None}, "missing_rating"),
    ({"rating": "excellent!!"}, "garbled_rating"),
    ({"confidence": None}, "missing_confidence"),
    ({"confidence": "  "}, "missing_confidence"),
    ({"confidence": "very"}, "garbled_confidence"),
    ({k: "" for k in ("summary", "strengths", "weaknesses", "questions", "limitations")}, "empty_review"),
    ({"summary": "r\ufffdsultats tr\ufffds bons"}, "unreadable_text"),
    ({"weaknesses": "bad\x00bytes"}, "unreadable_text"),
])
def test_reject_rules(change, rule):
    fields = {k: v for k, v in {**V2_FIELDS, **change}.items() if v is not None}
    row, problem = normalise_review(v2(fields), "X")
    assert row is None and problem[0] == rule


def test_text_cleaning():
    text, ok = clean_text("<p>The method is <b>simple</b> &amp; fast.</p><ul><li>One.</li><li>Two.</li></ul>")
    assert ok and "<" not in text and "simple & fast." in text and "- One." in text
    latex = r"The bound $\mathcal{O}(\sqrt{T})$ needs $\eta < 1/L$ and $a<b$ & more."
    assert clean_text(latex) == (latex, True)
    fixed, ok = clean_text("The authors\u2019 caf\u00e9 idea".encode().decode("cp1252"))
    assert ok and fixed == "The authors\u2019 caf\u00e9 idea"
    assert clean_text("r\ufffdsultat")[1] is False


def _submission(content: dict, replies: list, **extra) -> dict:
    note = {"id": "paper2", "number": 3, "cdate": 1_695_000_000_000, "odate": 1_696_000_000_000,
            "content": {k: {"value": v} for k, v in content.items()},
            "invitations": ["ICLR.cc/2024/Conference/-/Submission"], "details": {"directReplies": replies}}
    return {**note, **extra}


def test_submission_with_replies():
    decision = {"id": "d", "invitations": ["ICLR.cc/2024/Conference/Submission3/-/Decision"],
                "content": {"decision": {"value": "Accept (poster)"}}}
    meta = {"id": "m", "invitations": ["ICLR.cc/2024/Conference/Submission3/-/Meta_Review"],
            "content": {"metareview": {"value": "<p>Good paper.</p>"}}}
    comment = {"id": "c", "invitations": ["ICLR.cc/2024/Conference/Submission3/-/Official_Comment"],
               "content": {"comment": {"value": "Thanks"}}}
    seen: set[str] = set()
    note = _submission({"title": "A Title", "abstract": "Abs.", "keywords": "a, b;c", "pdf": "/pdf/x.pdf",
                        "venueid": "ICLR.cc/2024/Conference"},
                       [v2(V2_FIELDS), v2(V2_FIELDS), decision, meta, comment], pdate=1_706_000_000_000)
    out = normalise_submission(note, "ICLR.cc/2024/Conference", 2, "http://host/v2", seen)
    paper = out.paper
    assert (paper["status"], paper["decision"], paper["meta_review"]) == ("active", "Accept (poster)", "Good paper.")
    assert paper["keywords"] == ["a", "b", "c"] and paper["pdf_url"] == "http://host/v2/pdf?id=paper2"
    assert paper["first_public_at"] == 1_696_000_000_000 and paper["created_at"] == 1_695_000_000_000
    assert out.reviews_seen == 2 and len(out.reviews) == 1
    assert [r["rule"] for r in out.rejects] == ["duplicate_review"]
    frame = conform(pl.DataFrame([paper]).drop("created_at", "first_public_at"), PAPERS)
    assert frame["api_version"][0] == 2


def test_paper_status():
    withdrawn = _submission({"venueid": "V/Withdrawn_Submission"}, [])
    assert paper_status(withdrawn, []) == "withdrawn"
    assert paper_status({"invitation": "V/-/Desk_Rejected_Submission", "content": {}}, []) == "desk_rejected"
    reply = {"invitation": "V/Paper1/-/Desk_Reject"}
    assert paper_status({"invitation": "V/-/Blind_Submission", "content": {}}, [reply]) == "desk_rejected"
    assert paper_status({"invitation": "V/-/Blind_Submission", "content": {"venueid": "V"}}, []) == "active"


def test_the_form_vocabulary_is_the_review_columns_of_the_schema():
    from tasks.core.schema import FORM_COLUMNS, REVIEW_SECTION_COLUMNS
    from tasks.stages.ingest.forms import SCORE_ALIASES, SCORE_COLUMNS, SECTION_ALIASES, SECTION_TITLES

    assert set(SCORE_ALIASES.values()) == SCORE_COLUMNS
    assert set(SECTION_ALIASES.values()) <= set(REVIEW_SECTION_COLUMNS) == set(SECTION_TITLES)
    assert SCORE_COLUMNS | set(SECTION_TITLES) | {"ignore"} == FORM_COLUMNS
