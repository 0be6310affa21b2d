"""Meaningless elongation as GEM appendix D.2.2 makes it: fixed introductory sentences plus an LLM's summaries.

Every section of the review form opens with the same introductory paragraph in every review (ICLR 2023's
four fields: summary of the paper; strength and weaknesses; clarity, quality, novelty and reproducibility;
summary of the review; and the fields of later forms: strengths, weaknesses, questions, limitations). The
section that weighs strengths against weaknesses also gets one sentence holding the LLM's one-line summary
of the strengths the review names and its one-line summary of the weaknesses. Both only repeat the review,
so the elongated review says nothing new: a metric must not score it higher.

A section is a form field when its header names one (`FIELDS`); only the first header of a field is
templated, and where the review has ICLR 2023's combined strength-and-weaknesses field, headers named
"strengths" or "weaknesses" are sub-headings inside it and are left alone. A review with no form field at
all is one section: the generic paragraph and the summaries open it.

The summaries come from the validate stage's LLM (tasks/stages/validate/llm_perturb.py sends the two
requests of `summary_requests` per review through the cached backend); an answer `read_summary` cannot use
fails the perturbation with its reason. The rule-based proxy without summaries is
perturb.filler_elongation (strategy meaningless_elongation_proxy).
"""

from __future__ import annotations

import hashlib
import re

from tasks.core.prompts import load_prompt
from tasks.core.review_text import split_sections
from tasks.lm import ChatRequest, ChatResult

PROMPTS = {"strengths": "elongation-strengths-v1", "weaknesses": "elongation-weaknesses-v1"}
ASPECTS = tuple(PROMPTS)
SUMMARY_TOKENS = 64        # one line of two short phrases
MAX_SUMMARY_WORDS = 40     # longer than this is not a one-line summary

# the form's field names (header text, lower case, markup and colon stripped) -> the field
FIELDS = {
    "summary of the paper": "summary", "summary": "summary", "paper summary": "summary",
    "strength and weaknesses": "strengths_and_weaknesses", "strengths and weaknesses": "strengths_and_weaknesses",
    "strength and weakness": "strengths_and_weaknesses", "strengths and weakness": "strengths_and_weaknesses",
    "strengths": "strengths", "strength": "strengths", "weaknesses": "weaknesses", "weakness": "weaknesses",
    "clarity, quality, novelty and reproducibility": "clarity",
    "questions": "questions", "questions for authors": "questions", "questions for the authors": "questions",
    "limitations": "limitations", "summary of the review": "review",
}
# the same introductory paragraph for a field in every review; neutral, about no paper in particular
TEMPLATES = {
    "summary": "This section gives an account of what the paper sets out to do, the approach it takes and the "
               "results it reports, as the basis for the assessment that follows.",
    "strengths_and_weaknesses": "This section weighs what the paper achieves against where it falls short, "
                                "looking at its contribution, the care taken in its method and the points that "
                                "could be improved, so that the authors receive useful feedback.",
    "strengths": "This section sets out the aspects of the paper that work well and add to its value.",
    "weaknesses": "This section sets out the aspects of the paper that could be improved, in the hope that the "
                  "authors find the remarks useful.",
    "clarity": "This section considers in turn how clearly the work is presented, how sound it is, how new it is "
               "and whether it could be reproduced from what the paper gives.",
    "questions": "This section gathers the points on which the authors could clarify or extend their work.",
    "limitations": "This section considers the limits of the work and how fully the paper acknowledges them.",
    "review": "This section draws the assessment together, weighing the contribution, the strengths and the room "
              "for improvement, and closes with an overall recommendation.",
    "other": "The comments that follow are offered to help the authors improve the paper.",
}
SUMMARIES = ("In short, the review finds the paper's main strengths in {strengths}, and its main weaknesses "
             "in {weaknesses}.")
_HOSTS = ("strengths_and_weaknesses", "strengths", "weaknesses")   # where the summaries go, first found
_PARTS = ("strengths", "weaknesses")                               # sub-headings inside the combined field
_LABEL = re.compile(r"^(?:(?:main|key|two)\s+)*(?:strengths?|weakness(?:es)?)\s*:\s*", re.IGNORECASE)


def form_field(header: str | None) -> str | None:
    """The form field a section header names (`FIELDS`), or None."""
    if not header:
        return None
    name = re.sub(r"\s+", " ", header.strip().lstrip("#").strip(" *_").rstrip(":").strip(" *_")).lower()
    return FIELDS.get(name)


def _templated(sections: list[tuple[str | None, str]]) -> dict[int, str]:
    """Section index -> field, for the sections that get a template (see the module docstring). A field's text
    runs to the next field's header, so one whose text sits under sub-headings counts as written."""
    fields = [form_field(header) for header, _ in sections]
    combined = "strengths_and_weaknesses" in fields
    chosen: dict[int, str] = {}
    for i, field in enumerate(fields):
        if field is None or field in chosen.values() or (combined and field in _PARTS):
            continue
        chosen[i] = field
    starts = sorted(chosen)
    ends = dict(zip(starts, [*starts[1:], len(sections)], strict=False))
    return {i: field for i, field in chosen.items() if any(body.strip() for _, body in sections[i:ends[i]])}


def elongate(review: str, strengths: str, weaknesses: str) -> str:
    """`review` with each form section opened by its template and the two summaries in one sentence."""
    summary = SUMMARIES.format(strengths=strengths, weaknesses=weaknesses)
    sections = split_sections(review)
    templated = _templated(sections)
    if not templated:
        lead = review[: len(review) - len(review.lstrip())]
        return f"{lead}{TEMPLATES['other']} {summary}\n\n{review.lstrip()}"
    host = next((i for field in _HOSTS for i, f in templated.items() if f == field), min(templated))
    parts: list[str] = []
    for i, (header, body) in enumerate(sections):
        if i in templated:
            stripped = body.strip()
            lead, tail = body[: len(body) - len(body.lstrip())], body[len(body.rstrip()):]
            opening = TEMPLATES[templated[i]] + (f" {summary}" if i == host else "")
            body = f"{lead}{opening}\n\n{stripped}{tail}" if stripped else f"{lead}{opening}\n\n"
        parts.append((header or "") + body)
    return "".join(parts)


def summary_requests(review: str, slot: int, max_tokens: int | None = None) -> list[ChatRequest]:
    """The two requests for one review, strengths then weaknesses (the review between markers)."""
    user = f"<review>\n{review.strip()}\n</review>"
    out = []
    for aspect in ASPECTS:
        system = load_prompt(PROMPTS[aspect])
        digest = hashlib.sha256(f"{system}\x00{user}".encode()).hexdigest()[:12]
        out.append(ChatRequest(system, user, max_tokens or SUMMARY_TOKENS,
                               custom_id=f"elongation-{aspect[0]}-{slot}-{digest}"[:64]))
    return out


def read_summary(result: ChatResult) -> tuple[str | None, str | None]:
    """(summary, None), or (None, why the answer is unusable).

    The summary is the answer's first non-empty line, without a bullet, a "Strengths:"-style label,
    quotation marks or a closing full stop; its first letter lower-cased (it continues a sentence) unless
    it opens an acronym. A first line the token limit cut off, or one too long for a line, is unusable.
    """
    if result.error is not None:
        return None, f"llm error: {result.error}"
    text = result.text.strip()
    if not text:
        return None, "llm returned no text"
    if result.looped:
        return None, "llm answer loops (stopped where it began repeating itself)"
    if result.truncated and "\n" not in text:
        return None, "llm answer cut off at max_tokens before its line ended"
    line = text.splitlines()[0].strip()
    line = _LABEL.sub("", line.lstrip("-*•> ").strip()).strip().strip("\"'`“”‘’").strip().rstrip(".;").strip()
    if not line:
        return None, "no summary in the llm answer"
    words = len(line.split())
    if words > MAX_SUMMARY_WORDS:
        return None, f"summary of {words} words, longer than one line ({MAX_SUMMARY_WORDS})"
    if not (len(line) > 1 and line[1].isupper()):
        line = line[0].lower() + line[1:]
    return line, None
