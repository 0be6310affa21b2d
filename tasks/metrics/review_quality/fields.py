"""A review's fields, from the markdown sections every review is rendered in.

Human reviews are rendered by the ingest normalisation (tasks/stages/ingest/forms.py) as "## Summary",
"## Strengths", ... blocks; generated reviews by the generate stage in the same shape. A form that
merges strengths and weaknesses has one "## Strengths and Weaknesses" block, kept as the field
`strengths_and_weaknesses` (the point extractor splits it, tasks/metrics/review_quality/points.py).

A candidate written with a fields prompt (tasks/prompts/review-fields-v1.md) also answers
`<rating>` and `<confidence>`; the generate stage keeps them apart from the review text
(`rating_answer`, `confidence_answer` of its candidates, `score_parts`), so text metrics read the
same four parts as before, and `parse_rating` reads the rating: one that is missing, not a
number, or not on the scale it was asked on is NaN with a reason, never a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

FIELDS = ("summary", "strengths", "weaknesses", "questions", "strengths_and_weaknesses")
POINT_FIELDS = ("strengths", "weaknesses", "questions")
_TITLES = {"summary": "summary", "strengths": "strengths", "weaknesses": "weaknesses", "questions": "questions",
           "strengths and weaknesses": "strengths_and_weaknesses", "rating": "rating", "confidence": "confidence"}
_HEADING = re.compile(r"^##[ \t]+([A-Za-z ]+?)[ \t]*$", re.MULTILINE)
_SCORE_TAG = re.compile(r"<\s*(rating|confidence)\s*>(.*?)(?:<\s*/\s*\1\s*>|$)", re.IGNORECASE | re.DOTALL)
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\b")


def sections(text: str | None) -> dict[str, str]:
    """Field -> text of the known "## Title" blocks of a rendered review (other blocks are skipped)."""
    if not isinstance(text, str):
        return {}
    marks = list(_HEADING.finditer(text))
    out: dict[str, str] = {}
    for i, mark in enumerate(marks):
        name = _TITLES.get(mark.group(1).strip().lower())
        stop = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.end():stop].strip()
        if name and body:
            out[name] = f"{out[name]}\n\n{body}" if name in out else body
    return out


def score_parts(answer: str) -> dict[str, str]:
    """The first line of the `<rating>` and `<confidence>` parts of a raw answer ({} when it has
    none: the answers to the older prompt versions)."""
    found: dict[str, str] = {}
    for match in _SCORE_TAG.finditer(answer or ""):
        body = re.sub(r"</?[A-Za-z]+\s*>", "", match.group(2)).strip()
        if body:
            found.setdefault(match.group(1).lower(), body.splitlines()[0].strip())
    return found


def parse_rating(raw: str | None, scale: Sequence[float]) -> tuple[float, str | None]:
    """(rating, None) from a candidate's rating answer, or (NaN, reason): `no_rating` (none given),
    `unparsed_rating` (no leading number), `rating_off_scale` (a number not on `scale`)."""
    if raw is None or not raw.strip():
        return math.nan, "no_rating"
    match = _NUMBER.match(raw)
    if match is None:
        return math.nan, "unparsed_rating"
    value = float(match.group(1))
    if not any(math.isclose(value, float(s)) for s in scale):
        return math.nan, "rating_off_scale"
    return value, None


def answer_scores(answer: str) -> dict[str, str | None]:
    """GENERATED's `rating_answer` and `confidence_answer` of a raw answer (null when not asked)."""
    parts = score_parts(answer)
    return {"rating_answer": parts.get("rating"), "confidence_answer": parts.get("confidence")}
