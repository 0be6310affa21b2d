"""A pairwise judge: which of two candidate reviews of one paper is better, asked in both orders.

RevisEval (seed 004, section 3 and appendix Figure 8) judges a pair against a *response-adapted
reference*: one response of the pair, picked at random, is revised with the other as guidance that
may be wrong; Auto-PRE (seed 001, section 3.2 "Consistency" and the pairwise format of its Table 8)
asks a judge to name the better of two answers and swaps their positions to measure positional bias.
Here, per paper, every pair of generated candidates, or `[score] pairwise_pairs_per_paper` of them (a
different pair on each paper; the human reviews are not compared: their pairs would grow with the square
of the reviewers, and the pointwise board has the human baseline):

1. the reviser (`Resources.reviser`, else the judge's backend) rewrites the primary review of the pair,
   the one whose candidate id hashes lower (a fixed draw), with the other as guidance
   (prompt tasks/prompts/pairwise-revise-v1.md);
2. the judge (`Resources.llm`, or the panel `[score] judges`, averaged) reads the synopsis, the
   revision and the two reviews as A and B, and answers "Better review: A" or "B"
   (tasks/prompts/pairwise-judge-v1.md), once with each review in first place;
3. `pairwise_judge` scores each candidate on its paper by its share of verdicts won (both orders of
   every pair it is in; a panel split evenly counts a half). A candidate alone on its paper is NaN
   with `no_opponent`, one whose verdicts all went unanswered `judge_unanswered`.

The side table `pairwise` keeps one row per pair with both verdicts and whether the verdict flipped
with the order; the marts `pairwise_board` (per model: wins, games, win rate with a Wilson interval)
and `pairwise_bias` (per judge: the share of answered pairs whose verdict flips, and of verdicts that
went to the review shown first) read it (sql/marts/).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from itertools import combinations

import polars as pl

from tasks.core.prompts import load_prompt
from tasks.metrics.judge import synopsis_text
from tasks.metrics.registry import (
    LLM_JUDGE,
    FamilyResult,
    Metric,
    Resources,
    register_family,
    scores_frame,
    usable,
)
from tasks.metrics.reviseval import content_key, revise

JUDGE_VERSION = "pairwise-judge-v1"
REVISE_VERSION = "pairwise-revise-v1"
PREFILL = "Better review:"
ANSWER_TOKENS = 4
_LETTER = re.compile(r"\b([AB])\b")

PAIRWISE = {"paper_id": pl.String, "candidate_a": pl.String, "candidate_b": pl.String, "source_a": pl.String,
            "source_b": pl.String, "revised_candidate": pl.String, "verdict_a_first": pl.String,
            "verdict_b_first": pl.String, "flipped": pl.Boolean, "judge": pl.String, "prompt_version": pl.String}


def parse_choice(text: str) -> float:
    """+1 when the answer names A (the review shown first), -1 for B, NaN without a letter."""
    found = _LETTER.search((text or "").replace(PREFILL, " "))
    return math.nan if found is None else (1.0 if found.group(1) == "A" else -1.0)


def revise_user(synopsis: str, primary: str, guidance: str) -> str:
    return (f"### Synopsis of the paper\n{synopsis}\n\n### Primary review (rewrite this one)\n<review>\n"
            f"{primary.strip()}\n</review>\n\n### Second review (guidance, possibly wrong)\n<guidance>\n"
            f"{guidance.strip()}\n</guidance>")


def judge_user(synopsis: str, reference: str, first: str, second: str) -> str:
    return (f"### Synopsis of the paper\n{synopsis}\n\n### Reference review\n{reference.strip()}\n\n"
            f"### Review A\n<review_a>\n{first.strip()}\n</review_a>\n\n### Review B\n<review_b>\n{second.strip()}"
            "\n</review_b>\n\nWhich review is better, A or B?")


def verdict(value: float | None, a_first: bool) -> str | None:
    """The pair's winner ("a", "b" or "tie": a panel split evenly) from the judge's value for one order
    (+1: the first shown), None when unanswered."""
    if value is None or math.isnan(value):
        return None
    if value == 0:
        return "tie"
    first_won = value > 0
    return "a" if first_won == a_first else "b"


def _points(v: str | None, side: str) -> float | None:
    return None if v is None else 0.5 if v == "tie" else float(v == side)


def pairwise_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                    negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of `pairwise_judge` and the side table `pairwise`."""
    from tasks.metrics.panel import ask_panel, panel_key

    synopsis_rows = {r["paper_id"]: r for r in synopses.iter_rows(named=True)}
    models = candidates.filter(pl.col("source") != "human").sort("paper_id", "candidate")
    pairs: list[tuple[dict, dict, str, str | None]] = []   # (a, b, synopsis, revision key)
    asks: dict[str, str] = {}
    for _, group in models.group_by("paper_id", maintain_order=True):
        for a, b in chosen_pairs(list(combinations(group.iter_rows(named=True), 2)), resources.pairwise_pairs_per_paper):
            synopsis = synopsis_text(synopsis_rows.get(a["paper_id"]))
            xa, xb = usable(a["review_text"]), usable(b["review_text"])
            key = None
            if xa and xb:
                primary, guidance = (xa, xb) if _hash(a["candidate"]) <= _hash(b["candidate"]) else (xb, xa)
                user = revise_user(synopsis, primary, guidance)
                key = content_key(REVISE_VERSION, user)
                asks.setdefault(key, user)
            pairs.append((a, b, synopsis, key))
    revisions = revise(resources, asks, REVISE_VERSION, "reviser:pairwise_judge") if asks else {}
    system = load_prompt(JUDGE_VERSION)
    questions: dict[str, tuple[str, str]] = {}
    plans = []
    for a, b, synopsis, key in pairs:
        reference = revisions.get(key) if key else None
        orders = {}
        if reference is not None:
            for a_first in (True, False):
                first, second = (a, b) if a_first else (b, a)
                user = judge_user(synopsis, reference, first["review_text"], second["review_text"])
                q = content_key(JUDGE_VERSION, system, user)
                questions.setdefault(q, (system, user))
                orders[a_first] = q
        plans.append((a, b, key, orders))
    values = ask_panel(resources, questions, parse_choice, "judge:pairwise_judge", ANSWER_TOKENS, PREFILL) \
        if questions else {}
    judge = panel_key(resources.panel()) if resources.panel() else None
    table, won = [], {}
    for a, b, key, orders in plans:
        first = verdict(values.get(orders[True]), True) if orders else None
        second = verdict(values.get(orders[False]), False) if orders else None
        table.append({"paper_id": a["paper_id"], "candidate_a": a["candidate"], "candidate_b": b["candidate"],
                      "source_a": a["source"], "source_b": b["source"],
                      "revised_candidate": (a if _hash(a["candidate"]) <= _hash(b["candidate"]) else b)["candidate"] if key else None,
                      "verdict_a_first": first, "verdict_b_first": second,
                      "flipped": None if first is None or second is None else first != second,
                      "judge": judge, "prompt_version": JUDGE_VERSION})
        for v in (first, second):
            for cand, side in ((a, "a"), (b, "b")):
                won.setdefault(cand["candidate"], [])
                if v is not None:
                    won[cand["candidate"]].append(_points(v, side))
    reviser = resources.reviser or resources.llm
    eval_lm = f"{judge} (reviser {reviser.name}/{reviser.model})" if judge and reviser is not None else judge
    rows = []
    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        if cand["source"] == "human":
            continue
        games = won.get(cand["candidate"])
        reason = "no_opponent" if games is None else "judge_unanswered" if not games else None
        rows.append({"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                     "reference": None, "metric": "pairwise_judge", "eval_lm": eval_lm, "reason": reason,
                     "score": math.nan if reason else math.fsum(games) / len(games)})
    return FamilyResult(scores_frame(rows), {"pairwise": pl.DataFrame(table, schema=PAIRWISE)},
                        {"pairwise_pairs": len(table)})


def chosen_pairs(pairs: list[tuple[dict, dict]], per_paper: int) -> list[tuple[dict, dict]]:
    """The pairs of one paper to judge: all (per_paper 0), else per_paper of them, starting at a position
    drawn from the paper's id, so that papers with the same models cover different pairs."""
    if not per_paper or per_paper >= len(pairs):
        return pairs
    start = int(_hash(pairs[0][0]["paper_id"]), 16) % len(pairs)
    return (pairs[start:] + pairs[:start])[:per_paper]


def _hash(candidate: str) -> str:
    return hashlib.sha256(candidate.encode()).hexdigest()


register_family(
    pairwise_family, LLM_JUDGE,
    ("pairwise_judge", "raw", "abstract",
     "Pairwise judge (RevisEval's pairwise comparison, Auto-PRE's position swap): each pair of generated "
     "candidates of a paper judged against a revision of one of them, both orders asked; the candidate's share "
     "of verdicts won on the paper"),
    across_models=True, reads_references=False,   # the candidates and a revision of one of them, no human review
)
