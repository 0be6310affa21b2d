"""Atomic points: an LLM splits the strengths, weaknesses and questions of a review into
self-contained points, each with one of the eight categories (question points also a kind:
Explain, Supplement, Other). A form that merges strengths and weaknesses is split here too: each
of its points is labelled Strength or Weakness by the LLM, and its row records `split_from`.

One request per (review, field), all sent as one batch through a `CachedLM` (`make_lm` on the
configured backend: cached by content, so a rerun makes no call). Answers are checked line by line:

* repaired: bullets, numbering and markdown emphasis around a line are removed; a category or
  kind written in another case or as a near synonym ("Experiment", "Originality", "Presentation")
  is mapped onto its canonical name; each repair is counted;
* dropped: a line with no recognisable category (or kind / stance where one is needed), or with
  fewer than MIN_WORDS words, is dropped and counted;
* retried once and then rejected: an answer with no usable line (or an LLM error) is asked again
  with a reminder of the format; if that fails too, the field lands in `rejects` with its reason
  (`points_unparsed`, `points_llm_error`).
The local backend decodes under a line-prefix constraint (every line opens with an allowed label).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tasks.metrics.review_quality.fields import POINT_FIELDS, sections
from tasks.metrics.review_quality.formulas import CATEGORIES, QUESTION_KINDS

PROMPT_VERSION = "points-v1"
MIN_WORDS = 3
MAX_TOKENS = 768
STANCES = ("Strength", "Weakness")
STANCE_FIELDS = {"Strength": "strengths", "Weakness": "weaknesses"}

# One row per atomic point of one field of one review (human or candidate).
POINTS = pl.Schema({"review_id": pl.String, "paper_id": pl.String, "source": pl.String, "field": pl.String,
                    "position": pl.Int32, "category": pl.String, "kind": pl.String, "text": pl.String,
                    "split_from": pl.String, "model": pl.String, "prompt_version": pl.String})

_SYNONYMS = {"novelty": "Novelty", "originality": "Novelty", "soundness": "Soundness",
             "correctness": "Soundness", "methodology": "Soundness", "theory": "Soundness",
             "experiments": "Experiments", "experiment": "Experiments", "experimental": "Experiments",
             "evaluation": "Experiments", "results": "Experiments", "clarity": "Clarity",
             "presentation": "Clarity", "writing": "Clarity", "significance": "Significance",
             "impact": "Significance", "reproducibility": "Reproducibility", "related work": "Related Work",
             "relatedwork": "Related Work", "related works": "Related Work", "literature": "Related Work",
             "other": "Other", "others": "Other"}
_KINDS = {"explain": "Explain", "explanation": "Explain", "clarification": "Explain",
          "supplement": "Supplement", "supplementary": "Supplement", "other": "Other"}
_STANCES = {"strength": "Strength", "strengths": "Strength", "weakness": "Weakness", "weaknesses": "Weakness"}
_DECOR = re.compile(r"^\s*(?:[-*•+]|\d+[.)]|\(\d+\))?\s*(?:\*\*|__)?\s*")
_LINE = re.compile(r"^([A-Za-z ]+?)\s*(?:/\s*([A-Za-z ]+?)\s*)?(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*(.+)$")

FIELD_TITLES = {"strengths": "Strengths", "weaknesses": "Weaknesses", "questions": "Questions",
                "strengths_and_weaknesses": "Strengths and Weaknesses"}


def line_format(field_name: str) -> tuple[str, tuple[str, ...]]:
    """The line format asked for a field and the labels a line may open with (the local constraint)."""
    cats = CATEGORIES
    if field_name == "questions":
        return "<Kind> / <Category>: <question>", tuple(f"{k} / {c}: " for k in QUESTION_KINDS for c in cats)
    if field_name == "strengths_and_weaknesses":
        return "<Strength or Weakness> / <Category>: <point>", tuple(f"{s} / {c}: " for s in STANCES for c in cats)
    return "<Category>: <point>", tuple(f"{c}: " for c in cats)


def user_turn(field_name: str, text: str, strict: bool = False) -> str:
    fmt, _ = line_format(field_name)
    lines = [f"Part of the review: {FIELD_TITLES[field_name]}", f"Line format: {fmt}",
             f"Categories: {', '.join(CATEGORIES)}"]
    if field_name == "questions":
        lines.append("Kinds: Explain (asks to clarify something the paper contains), Supplement (asks for "
                     "something the paper lacks: an experiment, an analysis, a detail), Other")
    if field_name == "strengths_and_weaknesses":
        lines.append("Label each point Strength (speaks for the paper) or Weakness (speaks against it).")
    body = text.replace("</text>", "</ text>")
    turn = "\n".join(lines) + f"\n\n<text>\n{body.strip()}\n</text>"
    if strict:
        turn += f"\n\nReminder: answer only with lines of the form {fmt}, one point per line."
    return turn


@dataclass
class Parsed:
    points: list[dict[str, str]] = field(default_factory=list)   # {category, kind | stance, text}
    repaired: int = 0
    dropped: int = 0


def _canon(label: str | None, table: dict[str, str]) -> tuple[str | None, bool]:
    """(canonical label, repaired?) or (None, False) when the label is unknown."""
    if label is None:
        return None, False
    raw = label.strip()
    canon = table.get(raw.lower())
    return canon, canon is not None and canon != raw


def parse_points(answer: str, field_name: str) -> Parsed:
    """The usable points of one answer, with counts of repaired and dropped lines."""
    out = Parsed()
    two_labels = field_name in ("questions", "strengths_and_weaknesses")
    first_table = _KINDS if field_name == "questions" else _STANCES
    for raw in (answer or "").splitlines():
        if not raw.strip():
            continue
        line = _DECOR.sub("", raw, count=1)
        repaired = line != raw.strip() and line != raw
        match = _LINE.match(line.strip())
        if match is None:
            out.dropped += 1
            continue
        first, second, text = match.group(1), match.group(2), match.group(3).strip()
        numbered = _DECOR.sub("", text, count=1)     # "Clarity: 1. The ..." -> "The ..."
        repaired |= numbered != text
        text = numbered
        if two_labels:
            label, fix1 = _canon(first, first_table)
            category, fix2 = _canon(second, _SYNONYMS)
            if label is not None and category is None and second is None:   # the first label omitted
                label, category, fix1, fix2 = None, None, False, False
        else:
            label, fix1 = None, False
            category, fix2 = _canon(first, _SYNONYMS) if second is None else (None, False)
        if category is None or (two_labels and label is None) or len(re.findall(r"[^\W\d_]{2,}", text)) < MIN_WORDS:
            out.dropped += 1
            continue
        out.repaired += int(repaired or fix1 or fix2)
        point = {"category": category, "text": text}
        if field_name == "questions":
            point["kind"] = label
        elif two_labels:
            point["stance"] = label
        out.points.append(point)
    return out


@dataclass(frozen=True)
class FieldJob:
    review_id: str
    paper_id: str
    source: str
    field: str
    text: str

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([PROMPT_VERSION, self.review_id, self.field, self.text]).encode()).hexdigest()[:24]


def field_jobs(reviews: pl.DataFrame, fields: Collection[str] | None = None) -> list[FieldJob]:
    """One job per non-empty strengths / weaknesses / questions field (or merged strengths and
    weaknesses, when a review has no separate ones) of each review (review_id, paper_id, source,
    review_text); only the `fields` named, when given (the merged field serves strengths and weaknesses)."""
    jobs = []
    for row in reviews.iter_rows(named=True):
        parts = sections(row["review_text"])
        names = [n for n in POINT_FIELDS if n in parts and (fields is None or n in fields)]
        merged = fields is None or bool({"strengths", "weaknesses"} & set(fields))
        if merged and "strengths_and_weaknesses" in parts and not ({"strengths", "weaknesses"} & set(parts)):
            names.insert(0, "strengths_and_weaknesses")
        jobs += [FieldJob(row["review_id"], row["paper_id"], row["source"], n, parts[n]) for n in names]
    return jobs


@dataclass
class PointsOutput:
    points: pl.DataFrame        # POINTS
    rejects: list[dict[str, Any]]
    stats: Counter


def extract_points(reviews: pl.DataFrame, llm: Any, system: str, max_tokens: int = MAX_TOKENS,
                   fields: Collection[str] | None = None) -> PointsOutput:
    """POINTS of every review (review_id, paper_id, source, review_text) through `llm` (a CachedLM);
    only of the `fields` named, when given (the metrics asked for need no others)."""
    from tasks.lm.ask import ask_with_retry
    from tasks.lm.types import ChatRequest

    jobs = field_jobs(reviews, fields)
    stats: Counter = Counter(fields=len(jobs))
    by_key = {j.key: j for j in jobs}

    def request(key: str, strict: bool) -> ChatRequest:
        job = by_key[key]
        return ChatRequest(system, user_turn(job.field, job.text, strict), max_tokens, custom_id=key,
                           line_prefixes=line_format(job.field)[1])
    asked = ask_with_retry(list(by_key), request, llm, lambda key, r: parse_points(r.text, by_key[key].field),
                           lambda got: bool(got.points))
    stats["retried"] += asked.retried
    answers = {key: asked.last(key)[0] for key in by_key}
    parsed = {key: asked.last(key)[1] or Parsed() for key in by_key}
    rows, rejects = [], []
    for job in jobs:
        got, result = parsed[job.key], answers[job.key]
        stats["repaired"] += got.repaired
        stats["dropped_lines"] += got.dropped
        if not got.points:
            rule = "points_llm_error" if not result.ok else "points_unparsed"
            rejects.append({"stage": "score", "entity": "review_field", "entity_id": f"{job.review_id}#{job.field}",
                            "paper_id": job.paper_id, "rule": rule,
                            "detail": (result.error or result.text or "")[:200]})
            continue
        seen: Counter = Counter()
        for point in got.points:
            stance = point.get("stance")
            name = job.field if stance is None else STANCE_FIELDS[stance]
            seen[name] += 1
            rows.append({"review_id": job.review_id, "paper_id": job.paper_id, "source": job.source,
                         "field": name, "position": seen[name] - 1,
                         "category": point["category"], "kind": point.get("kind"), "text": point["text"],
                         "split_from": None if stance is None else job.field,
                         "model": f"{llm.name}/{llm.model}", "prompt_version": PROMPT_VERSION})
    stats["points"] = len(rows)
    stats["rejected"] = len(rejects)
    frame = pl.DataFrame(rows, schema=POINTS) if rows else pl.DataFrame(schema=POINTS)
    return PointsOutput(frame, rejects, stats)
