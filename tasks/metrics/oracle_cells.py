"""The LLM-oracle f-MI cells: the (F, E) grid at report and at statement level (seed 002, table 9).

The candidate x is a review's judgment lines, kept whole. The reference y is either kept whole
(report level: one question per pair) or split into its judgment lines w_1..w_K (statement level:
one question per line, aggregated by the mean, as in the paper's appendix C). The oracle
(tasks/metrics/predictors.py: the evaluation LM's readout, or a generation backend) answers

* critic-style, for TV f-variational: a local critic t in [-1/2, 1/2]; T(x, y) is t (report) or
  the mean of the t(x, w_k) (statement);
* likelihood-style, for the other three cells: a support bin read as a log density ratio
  log r in [-log 8, log 8]; L(x, y) is log r (report) or the mean of the log r(x, w_k) (statement).

Per (candidate, reference) pair, with negatives y-_1..y-_K (other papers' reviews, negatives.py):

    KL, direct          L(x, y)                                   report: kl_direct_report; statement: gppm_judgment
    KL, f-variational   1 + L(x, y) - mean_k exp(L(x, y-_k))      (NWJ, T = 1 + L)  kl_fvar_report, kl_fvar_statement
    TV, direct          max(0, 1 - exp(-L(x, y)))                 (joint sample)    tv_direct_report, tv_direct_statement
    TV, f-variational   T(x, y) - mean_k T(x, y-_k)               (in [-1, 1])      tvd_mi, tv_fvar_statement

(the estimators are the token-level ones of tasks/metrics/fmi.py applied to L). Every distinct
question is asked once per call, whichever pairs, negatives and metrics share it. A pair with an
unanswered question (no parsable answer) gets NaN with the reason `oracle_unanswered`. The score
rows' `eval_lm` names the predictor: `readout:<eval LM>` or `generate:<backend>/<model>`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import polars as pl

from tasks.core.frames import reference_sets, usable
from tasks.core.prompts import load_prompt
from tasks.metrics import fmi
from tasks.metrics.oracle import ORACLE_VERSION, question, statements
from tasks.metrics.predictors import Kind, ask, oracle_key
from tasks.metrics.registry import (
    LLM_ORACLE,
    LLM_SAMPLED,
    REGISTRY,
    FamilyResult,
    Metric,
    Resources,
    register_family,
    scores_frame,
)

SAME_PAPER_VERSION = "oracle-same-paper-v1"     # report-level critic
SUPPORT_BINS_VERSION = "oracle-support-bins-v1"  # likelihood-style, both levels

Level = Literal["report", "statement"]



def critic_question(level: Level, x: str, y: str) -> tuple[str, str, str]:
    """(version, system, user) of a yes/no question: x supports statement y, or x and y review the same paper."""
    if level == "statement":
        return (ORACLE_VERSION, *question(x, y))
    user = (f"### Assessment A\n{x.strip()}\n\n### Assessment B\n{y.strip()}\n\n"
            "Are the two assessments about the same paper, with overlapping points?")
    return SAME_PAPER_VERSION, load_prompt(SAME_PAPER_VERSION), user


def bins_question(level: Level, x: str, y: str) -> tuple[str, str, str]:
    """(version, system, user) of a likelihood-style question: how strongly x supports y (1-7)."""
    target = "a single statement" if level == "statement" else "the whole assessment of another referee"
    user = (f"### Assessment\n{x.strip()}\n\n### Target ({target})\n{y.strip()}\n\n"
            "How strongly does the assessment support the target (1-7)?")
    return SUPPORT_BINS_VERSION, load_prompt(SUPPORT_BINS_VERSION), user


def question_key(version: str, system: str, user: str) -> str:
    return hashlib.sha256(json.dumps([version, system, user], ensure_ascii=False).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Cell:
    f: Literal["KL", "TV"]
    e: Literal["direct", "fvar"]
    level: Level

    @property
    def kind(self) -> Kind:
        return "critic" if (self.f, self.e) == ("TV", "fvar") else "bins"

    @property
    def negatives(self) -> bool:
        return self.e == "fvar"


CELLS: dict[str, Cell] = {}


def cell_score(cell: Cell, positive: Sequence[float], negatives: Sequence[Sequence[float]]) -> float:
    """The pair's score from the oracle's values for y's units and for each negative's units (NaN: unanswered)."""
    agg = math.fsum(positive) / len(positive)
    neg = [math.fsum(n) / len(n) for n in negatives]
    if cell.kind == "critic":
        return agg - math.fsum(neg) / len(neg)
    estimator = {("KL", "direct"): fmi.kl_direct, ("KL", "fvar"): fmi.kl_fvar, ("TV", "direct"): fmi.tv_direct}
    return estimator[(cell.f, cell.e)](agg, neg)


def oracle_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                  negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the oracle cells given: one oracle call per kind of question for all of them."""
    cells = {m.name: CELLS[m.name] for m in metrics}
    if negatives is None and any(c.negatives for c in cells.values()):
        raise ValueError(f"metrics {[n for n, c in cells.items() if c.negatives]} need negative references: "
                         "draw them with tasks.metrics.negatives.draw_negatives and pass `negatives`")
    predictor = oracle_key(resources)
    refs = {r["review_id"]: r for r in references.iter_rows(named=True)}
    drawn: dict[tuple[str, str], list[str]] = {}
    for row in (negatives if negatives is not None else pl.DataFrame()).sort("candidate", "reference", "draw") \
            .iter_rows(named=True):
        drawn.setdefault((row["candidate"], row["reference"]), []).append(row["negative"])
    questions: dict[Kind, dict[str, tuple[str, str]]] = {"critic": {}, "bins": {}}

    def keys(cell: Cell, x: str, text: str | None) -> list[str]:
        units = statements(text) if cell.level == "statement" else [t.strip() for t in [usable(text)] if t]
        out = []
        for unit in units:
            version, system, user = (critic_question if cell.kind == "critic" else bins_question)(cell.level, x, unit)
            key = question_key(version, system, user)
            questions[cell.kind].setdefault(key, (system, user))
            out.append(key)
        return out

    plans: list[tuple[dict, Cell, list[str], list[list[str]]]] = []
    for cand, cand_refs in reference_sets(candidates, references):
        base = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                "eval_lm": predictor, "score": math.nan}
        x = usable(cand["judgments"])
        if not cand_refs:
            plans += [({**base, "reference": None, "metric": n, "reason": "no_reference"}, c, [], [])
                      for n, c in cells.items()]
        for ref in cand_refs:
            for name, cell in cells.items():
                positive = keys(cell, x, ref["judgments"]) if x is not None else []
                negs: list[list[str]] = []
                if cell.negatives and x is not None and positive:
                    negs = [k for k in (keys(cell, x, refs[n]["judgments"]) for n in
                                        drawn.get((cand["candidate"], ref["review_id"]), []) if n in refs) if k]
                reason = ("no_candidate_judgments" if x is None else "no_reference_judgments" if not positive
                          else "no_negative" if cell.negatives and not negs else None)
                plans.append(({**base, "reference": ref["review_id"], "metric": name, "reason": reason},
                              cell, positive, negs))
    served = {kind: sorted(n for n, c in cells.items() if c.kind == kind) for kind in ("critic", "bins")}
    values = {**ask(resources, "critic", questions["critic"], f"oracle:{'+'.join(served['critic'])}"),
              **ask(resources, "bins", questions["bins"], f"oracle:{'+'.join(served['bins'])}")}
    rows = []
    for row, cell, positive, negs in plans:
        if row["reason"] is None:
            got = [values[k] for k in positive], [[values[k] for k in n] for n in negs]
            if any(math.isnan(v) for v in got[0]) or any(math.isnan(v) for n in got[1] for v in n):
                row["reason"] = "oracle_unanswered"
            else:
                try:
                    row["score"] = cell_score(cell, *got)
                except OverflowError:
                    row["reason"] = "ratio_overflow"
        rows.append(row)
    return FamilyResult(scores_frame(rows))


_NAMES = {  # (F, E, R) -> name; the paper's named ones: tvd_mi (TVD-MI), gppm_judgment (GPPM-J), tv_fvar_statement
    ("KL", "direct", "report"): "kl_direct_report", ("KL", "fvar", "report"): "kl_fvar_report",
    ("TV", "direct", "report"): "tv_direct_report", ("TV", "fvar", "report"): "tvd_mi",
    ("KL", "direct", "statement"): "gppm_judgment", ("KL", "fvar", "statement"): "kl_fvar_statement",
    ("TV", "direct", "statement"): "tv_direct_statement", ("TV", "fvar", "statement"): "tv_fvar_statement",
}
_WHAT = {("KL", "direct"): "oracle support bins as log r: L(x,y)",
         ("KL", "fvar"): "NWJ on the support bins: 1 + L(x,y) - mean exp L(x,y-)",
         ("TV", "direct"): "max(0, 1 - exp(-L(x,y))) on the support bins (TV = E_P[(1 - 1/r)+], oriented: "
                           "agreement scores higher; tasks/metrics/fmi.py)",
         ("TV", "fvar"): "yes/no critic: T(x,y) - mean T(x,y-)"}
_LEVEL = {"report": "report-level (candidate vs the whole reference)",
          "statement": "statement-level (candidate vs each judgment line of the reference, mean)"}

SAMPLED = "_sampled"   # the suffix of a cell asked to the sampled oracle


def sampled_oracle_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                          negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """The `<cell>_sampled` metrics: the same cells, every question asked `[score] oracle_repeats` times to
    the `[score.oracle]` backend at `[score] oracle_temperature` and the draws averaged (the Scoring Rules
    paper's repeated oracle calls), so the cell sits beside its readout or greedy form on one board."""
    base = [REGISTRY[m.name.removesuffix(SAMPLED)] for m in metrics]
    result = oracle_family(base, candidates, references, negatives, synopses, replace(resources, oracle="sampled"))
    return FamilyResult(result.scores.with_columns(pl.col("metric") + SAMPLED), result.tables, result.counts)


for (_f, _e, _r), _name in _NAMES.items():
    CELLS[_name] = Cell(_f, _e, _r)  # type: ignore[arg-type]
    _about = f"{_f}, {'f-variational' if _e == 'fvar' else 'direct'}, {_LEVEL[_r]}"
    register_family(oracle_family, LLM_ORACLE,
                    (_name, "judgments", "none", f"{_about}, LLM oracle ([score] oracle_predictor): {_WHAT[(_f, _e)]}"),
                    negatives=_e == "fvar")
    register_family(sampled_oracle_family, LLM_SAMPLED,
                    (_name + SAMPLED, "judgments", "none",
                     f"{_about}, sampled LLM oracle ([score.oracle] at oracle_temperature, oracle_repeats draws "
                     f"averaged): {_WHAT[(_f, _e)]}"),
                    negatives=_e == "fvar")
