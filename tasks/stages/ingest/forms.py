"""Normalise OpenReview notes (API v1 plain values or v2 `{"value": ...}`) into PAPERS / REVIEWS rows.

Pure functions over the JSON dicts of a notes page. Review forms differ across venues; the field
names map onto one schema:

    summary                   <- summary, summary_of_the_paper, paper_summary
    strengths / weaknesses    <- strengths / weaknesses
    strengths_and_weaknesses  <- strength_and_weaknesses, strengths_and_weaknesses (older combined forms)
    questions                 <- questions, questions_for_authors
    limitations               <- limitations
    rating                    <- rating, recommendation, overall_assessment
    confidence, soundness, presentation, contribution <- the same names

A venue's own field names are config, not code: its venue table's `form` maps a field onto one
of these columns (or "ignore"), e.g. ICML's `overall_recommendation = "rating"`; a mapped field
wins over a built-in alias. Any other text field (e.g. ICLR 2023's `clarity,_quality,_novelty_and_reproducibility` and
`summary_of_the_review`, ICLR 2022's `main_review`) goes to `other_sections` as "## Name\n\ntext"
blocks. Score-only fields outside the schema (ICLR 2023 `correctness`,
`technical_novelty_and_significance`, `empirical_novelty_and_significance`, NeurIPS 2025
`quality` / `clarity` / `significance` / `originality`) are not text and are ignored, as are
administrative fields (code of conduct, ethics flags). `review_text` renders every text section.

Text cleaning: HTML markup is stripped to text (entities unescaped), LaTeX is kept as written,
mojibake (UTF-8 read as cp1252) is repaired when the repair is exact, and text that cannot be
read (U+FFFD replacement characters left by non-UTF-8 bytes, control characters, unrepairable
mojibake) rejects the review as `unreadable_text`. Reviewer identity (signatures, writers,
readers) is never read.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks.core.schema import REVIEW_SCORE_COLUMNS

SECTION_ALIASES = {
    "summary": "summary", "summary_of_the_paper": "summary", "paper_summary": "summary",
    "strengths": "strengths", "weaknesses": "weaknesses",
    "strength_and_weaknesses": "strengths_and_weaknesses", "strengths_and_weaknesses": "strengths_and_weaknesses",
    "questions": "questions", "questions_for_authors": "questions", "limitations": "limitations",
}
SCORE_ALIASES = {
    "rating": "rating", "recommendation": "rating", "overall_assessment": "rating",
    "confidence": "confidence", "soundness": "soundness", "presentation": "presentation",
    "contribution": "contribution",
}
SCORE_COLUMNS = REVIEW_SCORE_COLUMNS
SECTION_TITLES = {"summary": "Summary", "strengths": "Strengths", "weaknesses": "Weaknesses",
                  "strengths_and_weaknesses": "Strengths and Weaknesses", "questions": "Questions",
                  "limitations": "Limitations"}
ADMIN_FIELDS = {"title", "code_of_conduct", "code_of_ethics", "flag_for_ethics_review", "first_time_reviewer",
                "details_of_ethics_concerns", "ethics_review_area", "reviewer_guideline_acknowledgement",
                "confidential_comment", "license", "agreement", "responsible_reviewing"}
META_FIELDS = ("metareview", "meta_review", "metareview:_summary,_strengths_and_weaknesses", "summary", "comment")
REVIEW_RULES = ("duplicate_review", "unreadable_text", "empty_review", "missing_rating", "garbled_rating",
                "missing_confidence", "garbled_confidence")

_SCORE = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
_SCORE_ONLY = re.compile(r"^\s*\d+(?:\.\d+)?\s*(?::.*|[A-Za-z ]{0,24})$")
_TAG = re.compile(r"</?(?:p|br|b|i|u|s|em|strong|ul|ol|li|a|div|span|h[1-6]|code|pre|blockquote|sup|sub|"
                  r"table|thead|tbody|tr|td|th|hr|img|font|small|big)(?:\s[^<>]*)?/?>", re.IGNORECASE)
_BLOCK = re.compile(r"</?(?:p|div|ul|ol|h[1-6]|pre|blockquote|table|tr|hr)(?:\s[^<>]*)?/?>|<br\s*/?>",
                    re.IGNORECASE)
_LI = re.compile(r"<li(?:\s[^<>]*)?>", re.IGNORECASE)
_MOJIBAKE = re.compile("Ã[\u0080-\u00ff]|â€|Â[\u0080-\u00bf]|Å[\u0080-\u00bf]")
_UNREADABLE = re.compile("[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
_SUSPECT = re.compile("[<ÃâÂÅ\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")   # one scan for the common case


def value(content: dict[str, Any] | None, key: str) -> Any:
    """A content field, unwrapping API v2's {"value": ...}."""
    if not content:
        return None
    item = content.get(key)
    return item.get("value") if isinstance(item, dict) else item


def plain(content: dict[str, Any] | None) -> dict[str, Any]:
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in (content or {}).items()}


def parse_score(raw: Any) -> float | None:
    """The leading number of a form answer ("6: marginally above ..." -> 6.0); None if there is none."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        match = _SCORE.match(raw)
        return float(match.group(1)) if match else None
    return None


def clean_text(text: str) -> tuple[str, bool]:
    """(cleaned text, readable?): HTML stripped, mojibake repaired, unreadable text flagged."""
    if not _SUSPECT.search(text):
        return text.strip(), True
    if _TAG.search(text):
        text = _LI.sub("\n- ", text)
        text = _BLOCK.sub("\n", text)
        text = html.unescape(_TAG.sub("", text))
        text = re.sub(r"[ \t]+\n", "\n", re.sub(r"\n{3,}", "\n\n", text))
    if _MOJIBAKE.search(text):
        text = _repair_mojibake(text)
    return text.strip(), not (_UNREADABLE.search(text) or _MOJIBAKE.search(text))


def _repair_mojibake(text: str) -> str:
    for codec in ("cp1252", "latin-1"):
        try:
            return text.encode(codec).decode("utf-8")
        except UnicodeError:
            continue
    return text


def section_title(key: str) -> str:
    if key in SECTION_TITLES:
        return SECTION_TITLES[key]
    words = re.sub(r"_+", " ", key).replace(" ,", ",").strip()
    return words[:1].upper() + words[1:]


def render_sections(sections: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {title}\n\n{text}" for title, text in sections if text)


def invitations(note: dict[str, Any]) -> list[str]:
    return note.get("invitations") or ([note["invitation"]] if note.get("invitation") else [])


def reply_kind(note: dict[str, Any]) -> str:
    """review | meta_review | decision | withdrawal | desk_rejection | other, from the invitation name."""
    for invitation in invitations(note):
        name = invitation.rsplit("/-/", 1)[-1].lower()
        if name in ("official_review", "review"):
            return "review"
        if name in ("meta_review", "metareview"):
            return "meta_review"
        if name == "decision":
            return "decision"
        if name in ("withdrawal", "withdraw"):
            return "withdrawal"
        if name in ("desk_rejection", "desk_reject"):
            return "desk_rejection"
    return "other"


@dataclass
class Normalised:
    """One submission: its PAPERS row, kept REVIEWS rows, REJECTS rows, and how many reviews it carried."""

    paper: dict[str, Any] | None
    reviews: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    reviews_seen: int = 0


def reject(entity: str, entity_id: str, paper_id: str | None, venue_id: str, rule: str, detail: str) -> dict:
    return {"stage": "ingest", "entity": entity, "entity_id": entity_id, "paper_id": paper_id,
            "venue_id": venue_id, "rule": rule, "detail": detail[:300]}


def normalise_review(note: dict[str, Any], venue_id: str, form: Mapping[str, str] | None = None
                     ) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """(REVIEWS row, None) or (None, (rule, detail)) for an official review note; `form` maps the
    venue's own field names onto columns (see the module docstring)."""
    content = note.get("content") or {}
    row: dict[str, Any] = {"review_id": note.get("id"), "paper_id": note.get("forum"), "venue_id": venue_id,
                           "created_at": note.get("cdate") or note.get("tcdate"),
                           "final_at": note.get("tmdate") or note.get("mdate")}
    sections: list[tuple[str, str]] = []
    others: list[tuple[str, str]] = []
    for key, raw in content.items():
        if raw.__class__ is dict:   # API v2 wraps every value
            raw = raw.get("value")
        target = form.get(key) if form else None
        if target == "ignore":
            continue
        column = SCORE_ALIASES.get(key) if target is None else target if target in SCORE_COLUMNS else None
        if column:
            name = f"{column}_raw" if column in ("rating", "confidence") else column
            if row.get(name) is None or target is not None:   # the venue's own mapping wins
                row[name] = raw
            continue
        if key in ADMIN_FIELDS or not isinstance(raw, str):
            continue
        text, readable = clean_text(raw)
        if not readable:
            return None, ("unreadable_text", f"{key}: {raw[:120]!r}")
        column = SECTION_ALIASES.get(key) if target is None else target
        if column and (row.get(column) is None or target is not None):
            if row.get(column) is not None:   # the mapped field replaces an alias seen earlier
                sections = [s for s in sections if s[0] != section_title(column)]
            row[column] = text or None
            sections.append((section_title(column), text))
        elif not _SCORE_ONLY.match(raw):
            others.append((section_title(key), text))
    order = list(SECTION_TITLES.values())
    sections.sort(key=lambda s: order.index(s[0]))
    row["other_sections"] = render_sections(others) or None
    row["review_text"] = render_sections(sections + others)
    if not row["review_text"].strip():
        return None, ("empty_review", "no text in any section")
    for name in ("rating", "confidence"):
        raw = row.get(f"{name}_raw")
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None, (f"missing_{name}", f"no {name} field")
        number = parse_score(raw)
        if number is None:
            return None, (f"garbled_{name}", f"{name}={raw!r}")
        row[name] = number
        row[f"{name}_raw"] = str(raw)
    for name in ("soundness", "presentation", "contribution"):
        row[name] = parse_score(row.get(name))
    return row, None


def paper_status(note: dict[str, Any], replies: list[dict[str, Any]]) -> str:
    """active | withdrawn | desk_rejected, from content.venueid, the v1 invitation or the replies."""
    venueid = str(value(note.get("content"), "venueid") or "")
    markers = [venueid, *invitations(note)]
    if any(m.endswith("Withdrawn_Submission") for m in markers):
        return "withdrawn"
    if any(m.endswith("Desk_Rejected_Submission") for m in markers):
        return "desk_rejected"
    kinds = {reply_kind(r) for r in replies}
    if "desk_rejection" in kinds:
        return "desk_rejected"
    return "withdrawn" if "withdrawal" in kinds else "active"


def _keywords(raw: Any) -> list[str] | None:
    if isinstance(raw, str):
        raw = re.split(r"[,;]", raw)
    if not isinstance(raw, list):
        return None
    return [clean_text(str(k))[0] for k in raw if str(k).strip()]


def _text(raw: Any) -> str | None:
    return clean_text(raw)[0] if isinstance(raw, str) else None


def normalise_submission(note: dict[str, Any], venue_id: str, api_version: int, pdf_base: str,
                         seen_reviews: set[str], form: Mapping[str, str] | None = None) -> Normalised:
    """The paper row and review rows of one submission note fetched with its replies."""
    paper_id = note.get("id")
    if not paper_id:
        return Normalised(None, rejects=[reject("paper", "", None, venue_id, "missing_id", str(note)[:200])])
    details = note.get("details") or {}
    replies = details.get("replies") or details.get("directReplies") or []
    content = plain(note.get("content"))
    decision = meta = None
    out = Normalised(None)
    for reply in replies:
        kind = reply_kind(reply)
        reply_content = plain(reply.get("content"))
        if kind == "decision":
            decision = _text(reply_content.get("decision")) or decision
        elif kind == "meta_review":
            meta = next((_text(reply_content[k]) for k in META_FIELDS if isinstance(reply_content.get(k), str)), meta)
        elif kind == "review":
            out.reviews_seen += 1
            review_id = str(reply.get("id"))
            forum = reply.get("forum") or paper_id
            if review_id in seen_reviews:
                out.rejects.append(reject("review", review_id, forum, venue_id, "duplicate_review",
                                          f"review served again with submission {paper_id}"))
                continue
            seen_reviews.add(review_id)
            row, problem = normalise_review({**reply, "forum": forum}, venue_id, form)
            if problem:
                out.rejects.append(reject("review", review_id, forum, venue_id, *problem))
            else:
                out.reviews.append(row)
    public = [d for d in (note.get("pdate"), note.get("odate")) if d]
    out.paper = {
        "paper_id": paper_id, "venue_id": venue_id, "api_version": api_version, "number": note.get("number"),
        "title": _text(content.get("title")), "abstract": _text(content.get("abstract")),
        "keywords": _keywords(content.get("keywords")),
        "primary_area": _text(content.get("primary_area") or content.get(
            "Please_choose_the_closest_area_that_your_submission_falls_into")),
        "status": paper_status(note, replies), "decision": decision, "meta_review": meta,
        "created_at": note.get("cdate") or note.get("tcdate"),
        "first_public_at": min(public) if public else (note.get("cdate") or note.get("tcdate")),
        "pdf_url": f"{pdf_base.rstrip('/')}/pdf?id={paper_id}" if content.get("pdf") else None,
    }
    return out
