"""RevisEval baseline: score a candidate against a reference made by revising the candidate itself.

A reviser LLM reads the paper's synopsis (the abstract, with the authors' claimed strengths and
weaknesses when preprocessing made them) and the candidate review, and rewrites the review into
its best version: the *response-adapted reference*. The candidate is then scored against it:

* `reviseval_bleu`, `reviseval_rouge_l`, `reviseval_bertscore`: the classic metrics of
  tasks/metrics/classic.py, candidate vs its revision;
* `reviseval_judge`: the LLM judge (`Resources.llm`, or the panel `[score] judges`, weighted as
  tasks/metrics/panel.py says) compares the candidate with the revision in an analysis, then rates
  it 0-10; the rating is read from the judge's probabilities after its analysis where its backend
  gives log-likelihoods, else parsed (tasks/metrics/rating.py, as lm_examiner).

The reviser is `Resources.reviser` (`[score.reviser]`, any backend's keys), else the judge's
backend `[score.oracle]`; temperature 0 and cached by the LM layer's CachedLM, so the four metrics
share one revision per candidate and a rerun makes no call. One row per candidate, no human
reference (`reference` null). A revision that failed or came back empty is NaN with the reason
`reviser_unanswered`; an unparsed rating `judge_unanswered`. Calls are recorded in `Resources.log`
(purposes `reviser:reviseval`, `judge:reviseval_judge`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from tasks.core.prompts import load_prompt
from tasks.core.schema import SCORES
from tasks.metrics.classic import bertscore, bleu, rouge_l
from tasks.metrics.judge import synopsis_text
from tasks.metrics.registry import (
    LLM_JUDGE,
    LLM_REVISER,
    FamilyResult,
    Metric,
    MissingResource,
    Resources,
    register,
    usable,
)

REVISE_VERSION = "reviseval-revise-v1"
JUDGE_VERSION = "reviseval-judge-v2"   # the analysis first, then the rating (v1: the rating alone)
ANALYSIS_TOKENS = 384                  # the judge's comparison before its rating
CLASSIC = {"reviseval_bleu": "bleu", "reviseval_rouge_l": "rouge_l", "reviseval_bertscore": "bertscore"}


def revise_user(synopsis: str, candidate: str) -> str:
    """The reviser's user turn: the synopsis, then the review to revise."""
    return f"### Synopsis of the paper\n{synopsis}\n\n### Review to revise\n<review>\n{candidate.strip()}\n</review>"


def judge_user(synopsis: str, reference: str, candidate: str) -> str:
    """The RevisEval judge's user turn: synopsis, the revised reference, the candidate."""
    return (f"### Synopsis of the paper\n{synopsis}\n\n### Reference review (the candidate, revised)\n{reference.strip()}"
            f"\n\n### Candidate review\n<candidate>\n{candidate.strip()}\n</candidate>\n\n"
            "Compare the candidate review with the reference, then rate it (Score: 0-10).")


def content_key(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def revise(resources: Resources, asks: dict[str, str], version: str = REVISE_VERSION,
           purpose: str = "reviser:reviseval") -> dict[str, str | None]:
    """key -> the reviser's revision of each user turn under the system prompt `version` (None: the call
    failed or the answer is blank)."""
    from tasks.lm.ask import raise_if_transient
    from tasks.lm.types import ChatRequest

    reviser = resources.reviser or resources.llm
    if reviser is None:
        raise MissingResource("RevisEval needs a reviser ([score.reviser] or [score.oracle])")
    if not asks:
        return {}
    system = load_prompt(version)
    keys = sorted(asks)
    results = reviser.generate([ChatRequest(system, asks[k], reviser.cfg.max_tokens, custom_id=k) for k in keys])
    texts = {k: (r.text.strip() if r.error is None and usable(r.text) else None) for k, r in zip(keys, results, strict=True)}
    resources.log.record(purpose, reviser.name, reviser.model, reviser.cfg, keys, results,
                         [None if texts[k] is None else float(len(texts[k].split())) for k in keys])
    raise_if_transient(results)
    return texts


def reviseval_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                     negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the RevisEval metrics given: one revision per candidate, shared by all four."""
    names = [m.name for m in metrics]
    if "reviseval_bertscore" in names and resources.embed is None:
        raise MissingResource("reviseval_bertscore needs the embedding model")
    synopsis_rows = {r["paper_id"]: r for r in synopses.iter_rows(named=True)}
    plans: list[tuple[dict, str | None, str | None, str]] = []   # (row, candidate text, revision key, synopsis)
    asks: dict[str, str] = {}
    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        head = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"], "reference": None}
        x = usable(cand["review_text"])
        synopsis = synopsis_text(synopsis_rows.get(cand["paper_id"]))
        key = None
        if x is not None:
            user = revise_user(synopsis, x)
            key = content_key(REVISE_VERSION, user)
            asks.setdefault(key, user)
        plans.append((head, x, key, synopsis))
    revisions = revise(resources, asks)
    rows: list[dict] = []
    reviser = resources.reviser or resources.llm
    reviser_key = f"{reviser.name}/{reviser.model}" if reviser is not None else None
    pairs = [(x, revisions.get(key) if key else None) for _, x, key, _ in plans]
    for name in names:
        if name in CLASSIC:
            values, model = _classic(CLASSIC[name], pairs, resources), reviser_key
        else:
            values, panel = _judged(resources, plans, revisions)
            model = f"{panel} (reviser {reviser_key})"
        for (head, x, _, _), (_, y), value in zip(plans, pairs, values, strict=True):
            reason = ("no_candidate_text" if x is None else "reviser_unanswered" if y is None
                      else "judge_unanswered" if math.isnan(value) else None)
            rows.append({**head, "metric": name, "eval_lm": model, "reason": reason,
                         "score": math.nan if reason else float(value)})
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    return FamilyResult(frame.select(SCORES.names()).sort("metric", "paper_id", "candidate"))


def _classic(name: str, pairs: list[tuple[str | None, str | None]], resources: Resources) -> np.ndarray:
    x, y = [p[0] for p in pairs], [p[1] for p in pairs]
    if not pairs:
        return np.array([])
    if name == "bertscore":
        assert resources.embed is not None
        return bertscore(x, y, resources.embed)
    return {"bleu": bleu, "rouge_l": rouge_l}[name](x, y)


def _judged(resources: Resources, plans: list, revisions: dict[str, str | None]) -> tuple[list[float], str]:
    """(the panel's rating of each candidate against its revision, the panel's name with each member's
    method): the judge writes its comparison first, and the rating after it is read from the judge's
    probabilities where its backend gives them, else parsed (tasks/metrics/rating.py)."""
    from tasks.metrics.rating import rate_panel

    if not resources.panel():
        raise MissingResource("reviseval_judge needs a judge ([score.oracle] or [score] judges)")
    system = load_prompt(JUDGE_VERSION)
    questions: dict[str, tuple[str, str]] = {}
    keys: list[str | None] = []
    for _, x, key, synopsis in plans:
        reference = revisions.get(key) if key else None
        if x is None or reference is None:
            keys.append(None)
            continue
        user = judge_user(synopsis, reference, x)
        q = content_key(JUDGE_VERSION, system, user)
        questions.setdefault(q, (system, user))
        keys.append(q)
    rated = rate_panel(resources, questions, "judge:reviseval_judge", ANALYSIS_TOKENS, analysis=True)
    return [rated.values[q] if q else math.nan for q in keys], rated.name


register(
    # no human reference is read (the revision is the candidate's own, from the abstract): reads_references False
    Metric("reviseval_bleu", "raw", "abstract", LLM_REVISER, True,
           "RevisEval: sentence BLEU of the candidate against its LLM revision (response-adapted reference)",
           reviseval_family, reads_references=False),
    Metric("reviseval_rouge_l", "raw", "abstract", LLM_REVISER, True,
           "RevisEval: ROUGE-L F1 of the candidate against its LLM revision", reviseval_family,
           reads_references=False),
    Metric("reviseval_bertscore", "raw", "abstract", LLM_REVISER, True,
           "RevisEval: BERTScore-style F1 of the candidate against its LLM revision (MiniLM)", reviseval_family,
           reads_references=False),
    Metric("reviseval_judge", "raw", "abstract", LLM_JUDGE, True,
           "RevisEval: the LLM judge rates the candidate 0-10 against its LLM revision", reviseval_family,
           reads_references=False),
)
