"""Render a `SyntheticVenue` as OpenReview notes, in API v1 or API v2 shape.

v1 follows ICLR 2023: submissions under `<venue>/-/Blind_Submission` (withdrawn and desk-rejected
ones moved to `Withdrawn_Submission` / `Desk_Rejected_Submission`), replies under
`<venue>/Paper<N>/-/<Name>`, plain content values and the 2023 review form field names. v2 follows
ICLR 2024/25: one `<venue>/-/Submission` invitation, `content.<field>.value`, replies under
`<venue>/Submission<N>/-/<Name>`, status carried by `content.venueid`.

Revision histories: v2 serves each note's edits (`GET /notes/edits?note.id=`: the submission's
first edit carries its whole content, a Post_Submission edit changes only readers, a Revision
edit only the PDF; a review's edits carry its whole content), v1 each note's references
(`GET /references?referent=`: whole-content snapshots). Earlier PDFs are served by edit id
(`/notes/edits/attachment?name=pdf`, v2) or reference id (`/references/pdf`, v1). Edits carry
signatures and a `tauthor` e-mail like the real ones, so ingest must strip them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tasks.testing.synthetic import SyntheticPaper, SyntheticReview, SyntheticVenue

DAY_MS = 86_400_000
REVIEW_NAME, META_NAME, DECISION_NAME, COMMENT_NAME = "Official_Review", "Meta_Review", "Decision", "Official_Comment"


@dataclass
class RenderedNote:
    """A submission (or reply) as JSON-ready dict, with its replies kept apart for `details`."""

    note: dict[str, Any]
    replies: list[dict[str, Any]] = field(default_factory=list)
    direct: list[bool] = field(default_factory=list)   # per reply: does it answer the forum itself
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # note id -> v2 edits / v1 references
    files: dict[str, Callable[[], bytes]] = field(default_factory=dict)   # edit / reference id -> loads that version's PDF


def short_name(venue_id: str, year: int) -> str:
    return f"{venue_id.split('.')[0].split('/')[0]} {year}"


def v1_review_content(fields: dict[str, str]) -> dict[str, str]:
    """Neutral review fields under the ICLR 2023 (API v1) form names."""
    out: dict[str, str] = {}
    if "summary" in fields:
        out["summary_of_the_paper"] = fields["summary"]
    parts = [fields[k] for k in ("strengths", "weaknesses") if k in fields]
    if parts:
        both = all(p.strip() for p in parts)
        out["strength_and_weaknesses"] = (f"Strengths:\n{parts[0]}\n\nWeaknesses:\n{parts[1]}"
                                          if both and len(parts) == 2 else "".join(parts))
    if "questions" in fields:
        out["clarity,_quality,_novelty_and_reproducibility"] = fields["questions"]
    if "limitations" in fields:
        out["summary_of_the_review"] = fields["limitations"]
    for source, target in (("soundness", "correctness"), ("contribution", "technical_novelty_and_significance")):
        if source in fields:
            out[target] = fields[source]
    for source, target in (("rating", "recommendation"), ("confidence", "confidence")):
        if source in fields:
            out[target] = fields[source]
    return out


def render_venue(venue: SyntheticVenue, api_version: int) -> list[RenderedNote]:
    """Every submission of `venue` with its replies, in submission-number order."""
    rendered = [_render_paper(venue, paper, api_version) for paper in venue.papers]
    by_id = {r.note["id"]: r for r in rendered}
    for review_id, host in venue.duplicate_reviews:   # the same review served twice across pages
        paper, _ = venue.review(review_id)
        source = next(x for x in by_id[paper.paper_id].replies if x["id"] == review_id)
        rendered[host].replies.append(source)
        rendered[host].direct.append(True)
    return rendered


def _stamp(cdate: int) -> dict[str, int]:
    return {"cdate": cdate, "tcdate": cdate, "mdate": cdate, "tmdate": cdate}


def _pdf_path(paper_id: str, version: int) -> str:
    key = paper_id if version == 0 else f"{paper_id}|v{version}"
    return f"/pdf/{hashlib.sha1(key.encode()).hexdigest()}.pdf"


def _render_paper(venue: SyntheticVenue, paper: SyntheticPaper, api: int) -> RenderedNote:
    vid, n = venue.venue_id, paper.number
    name = short_name(vid, venue.year)
    pdfs = paper.pdf_versions()   # loaders: a lazy venue renders a PDF only when it is served
    pdf_path = _pdf_path(paper.paper_id, max(len(pdfs) - 1, 0))   # the note shows its latest PDF
    if paper.status == "withdrawn":
        venue_label, venueid, v1_inv = f"{name} Withdrawn Submission", f"{vid}/Withdrawn_Submission", "Withdrawn_Submission"
    elif paper.status == "desk_rejected":
        venue_label, venueid, v1_inv = f"{name} Desk Rejected Submission", f"{vid}/Desk_Rejected_Submission", "Desk_Rejected_Submission"
    elif paper.decision and paper.decision.startswith("Accept"):
        venue_label, venueid, v1_inv = f"{name} {paper.decision[8:-1].title()}", vid, venue.v1_submission
    else:
        venue_label, venueid, v1_inv = f"Submitted to {name}", f"{vid}/Submission", venue.v1_submission
    content: dict[str, Any] = {
        "title": paper.title, "abstract": paper.abstract, "keywords": paper.keywords,
        "authors": ["Anonymous"], "authorids": [f"{vid}/Paper{n}/Authors"], "pdf": pdf_path,
        "venue": venue_label, "venueid": venueid, "primary_area": paper.primary_area,
    }
    note: dict[str, Any] = {"id": paper.paper_id, "number": n, "forum": paper.paper_id, "replyto": None,
                            "odate": paper.odate, "pdate": paper.pdate, **_stamp(paper.cdate),
                            "readers": ["everyone"], "nonreaders": [], "writers": [vid],
                            "signatures": [f"{vid}/Paper{n}/Authors" if api == 1 else f"{vid}/Submission{n}/Authors"]}
    prefix = f"{vid}/Paper{n}" if api == 1 else f"{vid}/Submission{n}"
    if api == 1:
        note.update(invitation=f"{vid}/-/{v1_inv}", original=None, content=content)
    else:
        note.update(invitations=[f"{vid}/-/Submission", f"{vid}/-/Post_Submission"], domain=vid,
                    content={k: {"value": v} for k, v in content.items()})
        if paper.status != "active":
            note["invitations"].append(f"{vid}/-/{'Withdrawn' if paper.status == 'withdrawn' else 'Desk_Rejected'}_Submission")
    if len(pdfs) > 1:
        note["mdate"] = note["tmdate"] = pdfs[-1][0]
    out = RenderedNote(note)
    _paper_history(out, venue, paper, api, content, pdfs)

    def reply(ident: str, invitation: str, body: dict[str, Any], cdate: int, signature: str,
              replyto: str | None = None) -> None:
        item: dict[str, Any] = {"id": ident, "forum": paper.paper_id, "replyto": replyto or paper.paper_id,
                                "number": len(out.replies) + 1, **_stamp(cdate), "readers": ["everyone"],
                                "nonreaders": [], "writers": [signature], "signatures": [signature]}
        if api == 1:
            item.update(invitation=f"{prefix}/-/{invitation}", content=body)
        else:
            item.update(invitations=[f"{prefix}/-/{invitation}", f"{vid}/-/{invitation}"], domain=vid,
                        content={k: {"value": v} for k, v in body.items()})
        out.replies.append(item)
        out.direct.append(replyto is None)

    for review in paper.reviews:
        versions = [(review.cdate, review.fields), *review.edits]
        shaped = [(date, v1_review_content(f) if api == 1 else dict(f)) for date, f in versions]
        reply(review.review_id, REVIEW_NAME, shaped[-1][1], review.cdate, review.signature)
        if review.edits:
            out.replies[-1]["mdate"] = out.replies[-1]["tmdate"] = shaped[-1][0]
        out.history[review.review_id] = _review_history(review.review_id, paper.paper_id, f"{prefix}/-/{REVIEW_NAME}",
                                                        shaped, review.signature, api)
    if paper.reviews:
        first: SyntheticReview = paper.reviews[0]
        reply(f"{first.review_id}c", COMMENT_NAME,
              {"title": "Response to the review", "comment": "We thank the reviewer and address each point below."},
              first.cdate + 5 * DAY_MS, f"{prefix}/Authors", replyto=first.review_id)
    late = paper.cdate + 110 * DAY_MS
    if paper.meta_review:
        reply(f"{paper.paper_id}m", META_NAME, {"metareview": paper.meta_review, "recommendation": paper.decision},
              late, f"{prefix}/Area_Chair_{paper.paper_id[:4]}")
    if paper.decision:
        reply(f"{paper.paper_id}d", DECISION_NAME, {"title": "Paper Decision", "decision": paper.decision},
              late + DAY_MS, f"{vid}/Program_Chairs")
    if paper.status == "withdrawn":
        reply(f"{paper.paper_id}w", "Withdrawal" if api == 2 else "Withdraw",
              {"withdrawal_confirmation": "I have read and agree with the withdrawal policy."},
              late - 30 * DAY_MS, f"{prefix}/Authors")
    elif paper.status == "desk_rejected":
        reply(f"{paper.paper_id}r", "Desk_Rejection" if api == 2 else "Desk_Reject",
              {"desk_reject_comments": "The submission exceeds the page limit."},
              paper.cdate + 10 * DAY_MS, f"{vid}/Program_Chairs")
    return out


def _wrap(content: dict[str, Any], api: int) -> dict[str, Any]:
    return {k: {"value": v} for k, v in content.items()} if api == 2 else dict(content)


def _identity(signature: str) -> dict[str, Any]:
    return {"signatures": [signature], "writers": [signature], "readers": ["everyone"], "nonreaders": [],
            "tauthor": "someone@example.org"}


def _paper_history(out: RenderedNote, venue: SyntheticVenue, paper: SyntheticPaper, api: int,
                   content: dict[str, Any], pdfs: list[tuple[int, Callable[[], bytes]]]) -> None:
    """The submission's versions: one per PDF (v2 also a readers-only Post_Submission edit)."""
    vid, pid, n = venue.venue_id, paper.paper_id, paper.number
    authors = f"{vid}/Paper{n}/Authors" if api == 1 else f"{vid}/Submission{n}/Authors"
    versions = pdfs or [(paper.cdate, None)]
    history = []
    for k, (date, data) in enumerate(versions):
        ident = f"{pid}{'E' if api == 2 else 'R'}{k}"
        body = {**content, "pdf": _pdf_path(pid, k)} if data is not None else {**content}
        if data is not None:
            out.files[ident] = data
        if api == 1:
            history.append({"id": ident, "referent": pid, "invitation": out.note["invitation"], "tcdate": date,
                            "cdate": date, "content": body, **_identity(authors)})
            continue
        if k == 0:
            edit_note: dict[str, Any] = {"id": pid, "content": _wrap(body, 2)}
            invitation = f"{vid}/-/Submission"
        else:
            edit_note, invitation = {"id": pid, "content": _wrap({"pdf": body["pdf"]}, 2)}, f"{vid}/Submission{n}/-/Revision"
        history.append({"id": ident, "invitation": invitation, "tcdate": date, "cdate": date, "tmdate": date,
                        "domain": vid, "note": edit_note, **_identity(authors)})
    if api == 2:
        date = paper.odate
        history.append({"id": f"{pid}P", "invitation": f"{vid}/-/Post_Submission", "tcdate": date, "cdate": date,
                        "tmdate": date, "domain": vid, "note": {"id": pid, "readers": ["everyone"]},
                        **_identity(vid)})
        history.sort(key=lambda e: e["tcdate"])
    out.history[pid] = history


def _review_history(review_id: str, paper_id: str, invitation: str, versions: list[tuple[int, dict[str, Any]]],
                    signature: str, api: int) -> list[dict[str, Any]]:
    """A review's versions, each with its whole content (v2: a readers-only release edit too when edited)."""
    history: list[dict[str, Any]] = []
    for k, (date, fields) in enumerate(versions):
        ident = f"{review_id}{'E' if api == 2 else 'R'}{k}"
        if api == 1:
            history.append({"id": ident, "referent": review_id, "invitation": invitation, "tcdate": date,
                            "cdate": date, "content": dict(fields), **_identity(signature)})
        else:
            history.append({"id": ident, "invitation": invitation, "tcdate": date, "cdate": date, "tmdate": date,
                            "note": {"id": review_id, "forum": paper_id, "content": _wrap(fields, 2)},
                            **_identity(signature)})
    if api == 2 and len(versions) > 1:
        date = versions[0][0] + 3 * DAY_MS
        history.append({"id": f"{review_id}X", "invitation": f"{invitation}_Release", "tcdate": date, "cdate": date,
                        "tmdate": date, "note": {"id": review_id, "readers": ["everyone"]},
                        **_identity(invitation.split("/Submission")[0])})
        history.sort(key=lambda e: e["tcdate"])
    return history


def venue_group(venue: SyntheticVenue, api_version: int) -> dict[str, Any]:
    """The venue's group, with the v2 settings clients read to find invitations."""
    vid = venue.venue_id
    group: dict[str, Any] = {"id": vid, "readers": ["everyone"], "writers": [vid], "signatures": ["~Super_User1"],
                             "signatories": [vid], "members": [], "web": f"// {vid} home page"}
    if api_version == 2:
        settings = {"submission_id": f"{vid}/-/Submission", "submission_name": "Submission",
                    "withdrawn_venue_id": f"{vid}/Withdrawn_Submission",
                    "desk_rejected_venue_id": f"{vid}/Desk_Rejected_Submission",
                    "review_name": REVIEW_NAME, "meta_review_name": META_NAME, "decision_name": DECISION_NAME,
                    "review_rating": "rating", "review_confidence": "confidence",
                    "title": short_name(vid, venue.year)}
        if not venue.group_submission_id:
            del settings["submission_id"]
        group.update(domain=vid, content={k: {"value": v} for k, v in settings.items()})
    return group


def review_invitation(venue: SyntheticVenue, api_version: int, integer_scores: bool) -> dict[str, Any]:
    """The venue's official-review invitation with its form, shaped as the real API serves it: v1
    `reply.content` with `value-dropdown` / `value-radio` option strings (ICLR 2023's field names),
    v2 a super invitation whose `edit.invitation.edit.note.content` fields carry `param.enum`
    (`{"value", "description"}` items for integer scores, option strings otherwise)."""
    from tasks.testing.synthetic import CONFIDENCES

    vid = venue.venue_id
    ratings = sorted(venue.rating_options.items(), reverse=True)
    confidences = sorted(CONFIDENCES.items(), reverse=True)
    if api_version == 1:
        text = {"order": 1, "value-regex": "[\\S\\s]{1,5000}", "required": True, "markdown": True}
        content = {"summary_of_the_paper": text, "strength_and_weaknesses": {**text, "order": 2},
                   "recommendation": {"order": 5, "value-dropdown": [label for _, label in ratings], "required": True},
                   "confidence": {"order": 6, "value-radio": [label for _, label in confidences], "required": True}}
        return {"id": f"{vid}/-/Official_Review", "readers": ["everyone"], "writers": [vid],
                "signatures": [vid], "invitees": [f"{vid}/Reviewers"], "reply": {"content": content}}

    def choice(options: list[tuple[int, str]], order: int, description: str) -> dict[str, Any]:
        enum: list[Any] = ([{"value": number, "description": label} for number, label in options] if integer_scores
                           else [label for _, label in options])
        return {"order": order, "description": description,
                "value": {"param": {"type": "integer" if integer_scores else "string", "enum": enum, "input": "radio"}}}

    text = {"value": {"param": {"type": "string", "maxLength": 5000, "input": "textarea", "markdown": True}}}
    content = {"summary": {**text, "order": 1}, "strengths": {**text, "order": 2}, "weaknesses": {**text, "order": 3},
               "questions": {**text, "order": 4},
               "rating": choice(ratings, 9, "Your overall recommendation."),
               "confidence": choice(confidences, 10, "How sure you are of your assessment.")}
    child = f"{vid}/Submission${{2/content/noteNumber/value}}/-/{REVIEW_NAME}"
    return {"id": f"{vid}/-/{REVIEW_NAME}", "invitations": [f"{vid}/-/Edit"], "readers": ["everyone"],
            "writers": [vid], "signatures": [vid], "domain": vid,
            "edit": {"content": {"noteNumber": {"value": {"param": {"type": "integer"}}}},
                     "invitation": {"id": child, "edit": {"note": {"content": content}}}}}
