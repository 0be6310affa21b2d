"""M(a, h): whether a candidate point a and a human point h make the same point (binary).

For each candidate review and field, every candidate point is compared by embedding (cosine of
mean-pooled MiniLM vectors, or any `Embed` of the metric layer) with the human points of the same
field in the paper's other reviews, and every pair is put to the LLM judge (temperature 0 / greedy,
answers cached by content), as Beyond Rating defines precision and Max-Recall over all pairs. With a
`top_k` prefilter only the k most similar are asked and the others are 0 without a call (`asked`
false): a match the embedding ranks below k is then missed, so the metrics are lower bounds. An answer that is neither Yes nor No leaves `match` null with `match_unanswered`: the
metrics that need that pair give NaN with that reason rather than guess it.

Table `point_matches`: one row per (candidate point, human point) pair of a field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tasks.lm.ask import raise_if_transient

PROMPT_VERSION = "point-match-v1"
MAX_TOKENS = 3

POINT_MATCHES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "field": pl.String,
                           "a_position": pl.Int32, "reference": pl.String, "h_position": pl.Int32,
                           "similarity": pl.Float64, "asked": pl.Boolean, "match": pl.Int8, "reason": pl.String,
                           "model": pl.String, "prompt_version": pl.String})

_ANSWER = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
# the registry's metrics that need the matcher (the qualify stage examines it when one is scored)
MATCH_METRICS = tuple(f"points_{m}_{f}" for m in ("precision", "recall", "f1") for f in ("strengths", "weaknesses"))


def matcher_llms(cfg: Any) -> tuple[Any, ...]:
    """The point matchers of a Config, in order of preference: `[score.review_quality] matchers`, else
    the review-quality LLM (`[score.review_quality] llm`, else `[preprocess]`) alone."""
    rq = cfg.score.review_quality
    return rq.matchers or (rq.llm or cfg.preprocess,)


def parse_yes_no(text: str | None) -> bool | None:
    match = _ANSWER.match(text or "")
    return None if match is None else match.group(1).lower() == "yes"


def mean_vectors(embed: Callable[[Sequence[str]], list[np.ndarray]], texts: Sequence[str]) -> np.ndarray:
    """(texts x dim) unit vectors: the mean of each text's token vectors, normalised."""
    if not texts:
        return np.zeros((0, 1))
    rows = []
    for tokens in embed(list(texts)):
        v = tokens.mean(axis=0) if len(tokens) else np.zeros(tokens.shape[1])
        n = float(np.linalg.norm(v))
        rows.append(v / n if n > 0 else v)
    return np.vstack(rows)


def match_user(a: str, h: str) -> str:
    return f"<point_a>\n{a.strip()}\n</point_a>\n\n<point_b>\n{h.strip()}\n</point_b>\n\nSame point? Yes or No."


@dataclass
class MatchOutput:
    matches: pl.DataFrame    # POINT_MATCHES
    stats: Counter


def match_points(candidate_points: pl.DataFrame, human_points: pl.DataFrame, pairs: Sequence[tuple[str, str]],
                 embed: Callable[[Sequence[str]], list[np.ndarray]], llm: Any, system: str,
                 top_k: int | None = None) -> MatchOutput:
    """POINT_MATCHES of each (candidate review id, human review id) in `pairs` (same paper), per
    field, from POINTS frames of the candidates and of the human references."""
    from tasks.lm.types import ChatRequest

    texts = sorted(set(candidate_points["text"].to_list()) | set(human_points["text"].to_list()))
    vectors = dict(zip(texts, mean_vectors(embed, texts), strict=True)) if texts else {}
    cand = {k: g.sort("position") for k, g in candidate_points.group_by("review_id", "field")}
    human = {k: g.sort("position") for k, g in human_points.group_by("review_id", "field")}
    by_candidate: dict[str, list[str]] = {}
    for c, r in pairs:
        by_candidate.setdefault(c, []).append(r)
    rows: list[dict[str, Any]] = []
    asks: dict[str, tuple[str, str]] = {}
    for c, refs in sorted(by_candidate.items()):
        for (review_id, field), a_pts in sorted(((k, v) for k, v in cand.items() if k[0] == c), key=lambda kv: kv[0]):
            h_parts = [(r, human[(r, field)]) for r in sorted(refs) if (r, field) in human]
            if not h_parts:
                continue
            h_rows = [(r, p, t) for r, g in h_parts for p, t in g.select("position", "text").iter_rows()]
            h_vec = np.vstack([vectors[t] for _, _, t in h_rows])
            for a_pos, a_text, paper in a_pts.select("position", "text", "paper_id").iter_rows():
                sims = h_vec @ vectors[a_text]
                chosen = set(np.argsort(-sims, kind="stable")[:top_k].tolist()) if top_k else set(range(len(h_rows)))
                for j, (r, h_pos, h_text) in enumerate(h_rows):
                    key = None
                    if j in chosen:
                        key = hashlib.sha256(json.dumps([PROMPT_VERSION, a_text, h_text]).encode()).hexdigest()[:24]
                        asks.setdefault(key, (a_text, h_text))
                    rows.append({"paper_id": paper, "candidate": review_id, "field": field, "a_position": a_pos,
                                 "reference": r, "h_position": h_pos, "similarity": float(sims[j]),
                                 "asked": j in chosen, "match": None if j in chosen else 0, "reason": None,
                                 "_key": key})
    keys = sorted(asks)
    requests = [ChatRequest(system, match_user(*asks[k]), MAX_TOKENS, custom_id=k, line_prefixes=("Yes", "No"))
                for k in keys]
    results = llm.generate(requests) if requests else []
    raise_if_transient(results)   # retried by the stage, never recorded as unanswered
    answers = {k: parse_yes_no(r.text) if r.ok else None for k, r in zip(keys, results, strict=True)}
    for row in rows:
        key = row.pop("_key")
        if key is not None:
            answer = answers[key]
            row["match"] = None if answer is None else int(answer)
            row["reason"] = "match_unanswered" if answer is None else None
        row["model"] = f"{llm.name}/{llm.model}"
        row["prompt_version"] = PROMPT_VERSION
    stats = Counter(pairs=len(rows), asked=len(keys), unanswered=sum(v is None for v in answers.values()),
                    matched=sum(bool(v) for v in answers.values()))
    frame = pl.DataFrame(rows, schema=POINT_MATCHES) if rows else pl.DataFrame(schema=POINT_MATCHES)
    return MatchOutput(frame.sort("candidate", "field", "a_position", "reference", "h_position"), stats)
