"""LLM-oracle cells at statement level: the Scoring Rules paper's best metric, `tv_fvar_statement`.

F = TV, E = f-variational, R = statement, Pi = LLM oracle (seed 002, appendix C). The reference y
is decomposed into statements w_1..w_K (here: its preprocessed judgment lines); the candidate x
stays whole. For each (x, w) an oracle is asked whether x supports w; its answer gives a bounded
local critic t(x, w) in [-1/2, 1/2], the report-level critic is the mean over the statements,

    T(x, y) = 1/K sum_k t(x, w_k),     score = T(x, y) - mean over negatives y- of T(x, y-),

so the score lies in [-1, 1] and estimates a lower bound on I_TV(X; Y).

The oracle here is the *logit readout* of the evaluation LM (tasks/lm/readout.py, the `readout`
resource): q = P(Yes) / (P(Yes) + P(No)) from the next-token distribution at the answer position,
and t = q - 1/2, a soft version of the paper's binary +-1/2 that keeps the same bound.
Deterministic and without generation; every distinct (candidate, statement) question is asked once
per call, whichever references and negatives share it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import polars as pl

from tasks.metrics.registry import Metric, Resources, reference_sets, register, usable
from tasks.schema import ORACLE_REQUESTS, ORACLE_RESULTS, SCORES

ORACLE_VERSION = "statement-support-v1"
ANSWERS = ("Yes", "No")

_SYSTEM = (
    "You compare peer reviews of the same scientific paper. You are given the assessment of one "
    "referee and a single statement taken from another referee's assessment. Say whether the "
    "assessment makes, supports or agrees with the point of the statement. Reply with one word: Yes or No."
)
_USER = "### Assessment\n{candidate}\n\n### Statement\n{statement}\n\nDoes the assessment support the statement?"


def question(candidate: str, statement: str) -> tuple[str, str]:
    """(system, user) of one yes/no question to the oracle."""
    return _SYSTEM, _USER.format(candidate=candidate.strip(), statement=statement.strip())


def question_key(eval_lm: str, system: str, user: str) -> str:
    blob = json.dumps([ORACLE_VERSION, eval_lm, system, user, ANSWERS], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def statements(text: str | None) -> list[str]:
    """The statements of a reference: its non-blank judgment lines."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def local_critic(p_yes: float, p_no: float) -> float:
    """t = P(Yes) / (P(Yes) + P(No)) - 1/2, in [-1/2, 1/2]; NaN when the readout put no mass on either."""
    total = p_yes + p_no
    return p_yes / total - 0.5 if total > 0 else math.nan


def report_critic(local: Sequence[float]) -> float:
    """T(x, y): the mean of the local critics over y's statements."""
    return math.fsum(local) / len(local)


def tv_fvar_statement_score(positive: Sequence[float], negatives: Sequence[Sequence[float]]) -> float:
    """T(x, y) - mean_k T(x, y-_k) from the local critics of y's and of each negative's statements."""
    return report_critic(positive) - math.fsum(report_critic(n) for n in negatives) / len(negatives)


def statement_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                     negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> pl.DataFrame:
    """SCORES rows of the statement-level oracle metrics: one readout call for every question."""
    assert resources.readout is not None and resources.eval_lm is not None  # checked by the registry
    if negatives is None:
        raise ValueError(f"metrics {[m.name for m in metrics]} need negative references: "
                         "draw them with tasks.metrics.negatives.draw_negatives and pass `negatives`")
    eval_lm = resources.eval_lm
    refs = {r["review_id"]: r for r in references.iter_rows(named=True)}
    drawn: dict[tuple[str, str], list[str]] = {}
    for row in negatives.sort("candidate", "reference", "draw").iter_rows(named=True):
        drawn.setdefault((row["candidate"], row["reference"]), []).append(row["negative"])
    questions: dict[str, tuple[str, str]] = {}

    def keys(x: str, text: str | None) -> list[str]:
        out = []
        for w in statements(text):
            system, user = question(x, w)
            key = question_key(eval_lm, system, user)
            questions.setdefault(key, (system, user))
            out.append(key)
        return out

    plans: list[tuple[dict, list[str], list[list[str]]]] = []   # (row, positive keys, keys per negative)
    for cand, cand_refs in reference_sets(candidates, references):
        base = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                "eval_lm": eval_lm, "score": math.nan}
        x = usable(cand["judgments"])
        if not cand_refs:
            plans += [({**base, "reference": None, "metric": m.name, "reason": "no_reference"}, [], [])
                      for m in metrics]
        for ref in cand_refs:
            positive = keys(x, ref["judgments"]) if x is not None else []
            negs = [k for k in (keys(x, refs[n]["judgments"]) if x is not None and n in refs else []
                                for n in drawn.get((cand["candidate"], ref["review_id"]), [])) if k]
            reason = ("no_candidate_judgments" if x is None else "no_reference_judgments" if not positive
                      else "no_negative" if not negs else None)
            plans += [({**base, "reference": ref["review_id"], "metric": m.name, "reason": reason}, positive, negs)
                      for m in metrics]
    request_frame = pl.DataFrame([{"key": k, "system": s, "user": u} for k, (s, u) in sorted(questions.items())],
                                 schema=ORACLE_REQUESTS)
    results = resources.readout(request_frame) if request_frame.height else pl.DataFrame(schema=ORACLE_RESULTS)
    critic = {k: local_critic(y, n) for k, y, n in results.select("key", "p_yes", "p_no").iter_rows()}
    missing = set(questions) - set(critic)
    if missing:
        raise ValueError(f"{len(missing)} oracle questions have no readout result")
    rows = []
    for row, positive, negs in plans:
        if row["reason"] is None:
            row["score"] = tv_fvar_statement_score([critic[k] for k in positive], [[critic[k] for k in n] for n in negs])
        rows.append(row)
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    return frame.select(SCORES.names()).sort("metric", "paper_id", "candidate", "reference")


register(Metric("tv_fvar_statement", "judgments", "none", "lm_readout", True,
                "TV, f-variational, statement-level, LLM oracle (logit readout of the evaluation LM): mean "
                "support of the reference's judgment lines minus that of negative references'", statement_family,
                negatives=True))
