"""The exam's statistics and pass lines (Auto-PRE), on the verdicts of one model.

* consistency: the share of items whose verdict names the same review in both orders (an answer
  of 1 as drawn must be 2 when swapped); a judge that always answers "1" scores 0, a coin 0.5;
* pertinence: the share of answered pertinence questions where the relevant review was chosen;
* self_confidence: P_s of paper 001 (Eq. 4), 1 when the mean confidence on the easy set beats the
  mean on the hard set, else 0; the difference itself (easy minus hard) stays in `raw_score`.

Each row keeps the statistic as measured in `raw_score` (for consistency and pertinence it is the
score itself), so the fusion weight (the mean of P_c, P_p and P_s) can be traced to its inputs.

Pass lines (`[qualify]`): consistency and pertinence pass at or above their threshold (a number,
or "mean": the mean score of the models examined in the same role) and strictly above chance
(0.5), so a lone model cannot pass by being its own mean; self-confidence passes when the
raw difference exceeds `self_confidence_margin` (0: exactly when P_s is 1). A score that could not be computed (nothing
answered) fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from tasks.core.config import QualifyConfig
from tasks.core.schema import QUALIFICATION
from tasks.stages.qualify.exam import Question
from tasks.stages.qualify.examinee import Verdict

TESTS = ("consistency", "pertinence", "self_confidence")
CHANCE = {"consistency": 0.5, "pertinence": 0.5}


def _by_item(questions: Sequence[Question], verdicts: Sequence[Verdict], kind: str) -> dict[int, dict[int, Verdict]]:
    items: dict[int, dict[int, Verdict]] = {}
    for q, v in zip(questions, verdicts, strict=True):
        if q.set == kind:
            items.setdefault(q.item, {})[q.order] = v
    return items


def consistency(questions: Sequence[Question], verdicts: Sequence[Verdict]) -> tuple[int, float]:
    """(items answered in both orders, share of them with the same review chosen both times)."""
    pairs = [(o[0].choice, o[1].choice) for o in _by_item(questions, verdicts, "consistency").values()
             if 0 in o and 1 in o and o[0].choice is not None and o[1].choice is not None]
    same = sum(first == 3 - swapped for first, swapped in pairs)
    return len(pairs), (same / len(pairs) if pairs else math.nan)


def pertinence(questions: Sequence[Question], verdicts: Sequence[Verdict]) -> tuple[int, float]:
    """(pertinence questions answered, share choosing the relevant review)."""
    answered = [(q.target, v.choice) for q, v in zip(questions, verdicts, strict=True)
                if q.set == "pertinence" and v.choice is not None]
    return len(answered), (sum(t == c for t, c in answered) / len(answered) if answered else math.nan)


def self_confidence(questions: Sequence[Question], verdicts: Sequence[Verdict]) -> tuple[int, float]:
    """(questions with a confidence, mean confidence on the easy set minus on the hard set)."""
    sets: dict[str, list[float]] = {"easy": [], "hard": []}
    for q, v in zip(questions, verdicts, strict=True):
        if q.set in sets and v.choice is not None and not math.isnan(v.confidence):
            sets[q.set].append(v.confidence)
    n = len(sets["easy"]) + len(sets["hard"])
    if not sets["easy"] or not sets["hard"]:
        return n, math.nan
    return n, sum(sets["easy"]) / len(sets["easy"]) - sum(sets["hard"]) / len(sets["hard"])


def confidence_rule(difference: float) -> float:
    """P_s (paper 001, Eq. 4): 1.0 when the easy set's mean confidence beats the hard set's, else 0.0;
    NaN when the difference could not be measured."""
    return math.nan if math.isnan(difference) else float(difference > 0)


def exam_scores(questions: Sequence[Question], verdicts: Sequence[Verdict]) -> dict[str, tuple[int, float]]:
    """test -> (n, score) of one model's verdicts."""
    return {"consistency": consistency(questions, verdicts), "pertinence": pertinence(questions, verdicts),
            "self_confidence": self_confidence(questions, verdicts)}


def grade(scores: pl.DataFrame, cfg: QualifyConfig) -> pl.DataFrame:
    """QUALIFICATION rows from (model, role, test, n, score, confidence) rows, `score` the statistic as
    measured: the paper's score (P_s for self-confidence), the raw statistic beside it, thresholds and verdicts."""
    fixed = {"consistency": cfg.consistency_threshold, "pertinence": cfg.pertinence_threshold,
             "self_confidence": cfg.self_confidence_margin}
    rows = []
    for row in scores.iter_rows(named=True):
        test, score = row["test"], row["score"]
        row = {**row, "raw_score": score}
        if test == "self_confidence":
            threshold = float(fixed[test])
            passed = not math.isnan(score) and score > threshold
            row["score"] = confidence_rule(score)
        else:
            threshold = fixed[test]
            if threshold == "mean":
                peers = [s for r, t, s in scores.select("role", "test", "score").iter_rows()
                         if r == row["role"] and t == test and not math.isnan(s)]
                threshold = sum(peers) / len(peers) if peers else math.nan
            threshold = float(threshold)
            passed = not math.isnan(score) and score >= threshold - 1e-12 and score > CHANCE[test]
        rows.append({**row, "threshold": threshold, "passed": passed})
    frame = pl.DataFrame(rows, schema=QUALIFICATION) if rows else pl.DataFrame(schema=QUALIFICATION)
    return frame.select(QUALIFICATION.names())


def failing(table: pl.DataFrame) -> dict[str, set[str]]:
    """role -> the models that failed at least one test in it."""
    out: dict[str, set[str]] = {}
    for model, role in table.filter(~pl.col("passed")).select("model", "role").iter_rows():
        out.setdefault(role, set()).add(model)
    return out
