"""LLM-as-a-judge baselines: an LLM rates the candidate review 0-10.

* `llm_judge` (GEM's LM-examiner baseline): the judge reads the paper's synopsis (the abstract,
  with the authors' stated strengths and weaknesses when preprocessing made them), the human
  reference reviews of the paper (the candidate itself left out) and the candidate review;
* `llm_judge_noref`: the same without the reference reviews (reference-free).

The judge is `Resources.llm` (the `[score.oracle]` backend, a CachedLM: temperature 0, batched,
cached), or the panel `[score] judges`, whose ratings are averaged (tasks/metrics/panel.py). One
call per candidate and judge; `llm_judge` writes that score on each of the candidate's
(candidate, reference) rows, so its candidate score is the rating itself, and `llm_judge_noref`
writes one row with no reference. The rating is the number after "Score:" (else the first whole
number 0-10 of the answer); an answer without one is NaN with the reason `judge_unanswered`,
recorded in `Resources.log` with the calls' usage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence

import polars as pl

from tasks.core.prompts import load_prompt
from tasks.core.schema import SCORES
from tasks.metrics.registry import Metric, Resources, reference_sets, register, usable

PROMPT_VERSIONS = {"llm_judge": "judge-reference-v1", "llm_judge_noref": "judge-free-v1"}
MAX_ANSWER_TOKENS = 8   # "Score:" is prefilled: " 7", " 7.5" or " 7.5/10" and the end fit; more only pays for text

# The judge's answer starts here (the prompts ask for "Score: N"): a model of any size then answers
# with its number; a prefill is continued by the local and Anthropic backends and by OpenAI-compatible
# servers with continue_final_message (elsewhere it is asked for in the prompt).
RATING_PREFILL = "Score:"
# "Score: 7" (not the range "Score: 0-10" echoed from the prompt), "7/10" anywhere, or an answer that
# is a number alone; any other number in the text (a heading's "Review 1") is not taken for a rating
_NUM = r"(\d+(?:\.\d+)?)"
_SCORE = re.compile(r"score\s*[:=]?\s*" + _NUM + r"(?!\d|\.\d|\s*[-\u2013]\s*\d)", re.IGNORECASE)
_OUT_OF_TEN = re.compile(r"(?<![\d.])" + _NUM + r"\s*/\s*10\b")
_ALONE = re.compile(r"\s*" + _NUM + r"\s*\.?\s*")


def parse_rating(text: str) -> float:
    """The 0-10 rating of an answer ("Score: 7", "7/10", or a number alone); NaN when there is none in range."""
    text = text or ""
    match = _SCORE.search(text) or _OUT_OF_TEN.search(text) or _ALONE.fullmatch(text)
    if match is None:
        return math.nan
    value = float(match.group(1))
    return value if 0.0 <= value <= 10.0 else math.nan


def synopsis_text(row: dict | None) -> str:
    if row is None or usable(row.get("abstract")) is None:
        return "Not available."
    text = f"Abstract:\n{row['abstract'].strip()}"
    if usable(row.get("assw")):
        text += f"\n\nStrengths and weaknesses the authors claim for their own work:\n{row['assw'].strip()}"
    return text


def judge_user(synopsis: str, candidate: str, references: Sequence[str] | None) -> str:
    """The judge's user turn; `references=None` for the reference-free judge."""
    parts = [f"### Synopsis of the paper\n{synopsis}"]
    if references is not None:
        parts += [f"### Human review {i}\n{text.strip()}" for i, text in enumerate(references, 1)]
    parts.append(f"### Candidate review\n<candidate>\n{candidate.strip()}\n</candidate>")
    return "\n\n".join(parts) + "\n\nRate the candidate review (Score: 0-10)."


def judge_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                 negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> pl.DataFrame:
    """SCORES rows of the judges given: one batch of calls per judge."""
    from tasks.metrics.panel import ask_panel, panel_key

    key_of = panel_key(resources.panel())   # one model, or the panel whose ratings are averaged
    synopsis_rows = {r["paper_id"]: r for r in synopses.iter_rows(named=True)}
    rows: list[dict] = []
    for metric in metrics:
        system = load_prompt(PROMPT_VERSIONS[metric.name])
        asks: dict[str, str] = {}                    # question key -> user turn
        plans: list[tuple[dict, str | None]] = []
        for cand, refs in reference_sets(candidates, references):
            base = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                    "metric": metric.name, "eval_lm": key_of, "score": math.nan, "reason": None}
            x = usable(cand["review_text"])
            texts = [t for t in (usable(r["review_text"]) for r in refs) if t]
            reference_free = metric.name == "llm_judge_noref"
            targets = [None] if reference_free else [r["review_id"] for r in refs] or [None]
            reason = ("no_candidate_text" if x is None else None if reference_free
                      else "no_reference" if not texts else None)
            key = None
            if reason is None:
                user = judge_user(synopsis_text(synopsis_rows.get(cand["paper_id"])), x,
                                  None if reference_free else texts)
                key = hashlib.sha256(json.dumps([PROMPT_VERSIONS[metric.name], system, user]).encode()).hexdigest()[:32]
                asks.setdefault(key, user)
            plans += [({**base, "reference": ref, "reason": reason}, key) for ref in targets]
        ratings = ask_panel(resources, {k: (system, user) for k, user in asks.items()}, parse_rating,
                            f"judge:{metric.name}", MAX_ANSWER_TOKENS, prefill=RATING_PREFILL)
        for row, key in plans:
            if key is not None:
                row["score"] = ratings[key]
                row["reason"] = "judge_unanswered" if math.isnan(ratings[key]) else None
            rows.append(row)
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    return frame.select(SCORES.names()).sort("metric", "paper_id", "candidate", "reference")


register(
    Metric("llm_judge", "raw", "abstract", "llm_judge", True,
           "LLM-as-a-judge with references: rates the candidate 0-10 from the synopsis and the human reviews "
           "(GEM's LM-examiner baseline)", judge_family),
    Metric("llm_judge_noref", "raw", "abstract", "llm_judge", True,
           "LLM-as-a-judge without references: rates the candidate 0-10 from the synopsis alone", judge_family),
)
