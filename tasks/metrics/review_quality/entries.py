"""Beyond Rating's review-quality metrics and the rating outcomes (issue 13), one family.

Every metric is one row per (candidate, paper) with no reference (like `llm_judge_noref`): the
references enter inside the metric (Max-Recall over the paper's reviewers, the mean human rating),
and a human candidate is compared with the paper's other reviews (leave-one-out), which gives the
human baseline. The work (points, matching, question checks, chunks) is done once per call for
every metric named, by `Resources.quality` (tasks/metrics/review_quality/work.py); its tables go to the
score stage's folder. `eval_lm` names the LLM behind the points (`<backend>/<model>`; the points_*
metrics add `|matcher:<backend>/<model>` when `[score.review_quality] matchers` sets the matcher
apart), or the common scale for the rating outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from tasks.core.schema import SCORES
from tasks.metrics.registry import Metric, Resources, register
from tasks.metrics.review_quality.matching import MATCH_METRICS

RATING_METRICS = ("rating_mae", "accept_accuracy")


def review_quality_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                          negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> pl.DataFrame:
    work = resources.quality
    names = [m.name for m in metrics]
    values = work.evaluate(names, candidates, references, synopses, resources.embed, resources.log)
    llm = f"{work.llm.name}/{work.llm.model}" if work.llm is not None else None
    matcher = getattr(work, "matcher", None)   # a matcher apart from the points LLM is named beside it
    matched = f"{llm}|matcher:{matcher.name}/{matcher.model}" if matcher is not None else llm
    rows = []
    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        for name in names:
            value, reason = values.get((cand["candidate"], name), (math.nan, "not_scored"))
            rows.append({"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                         "reference": None, "metric": name, "score": value, "reason": reason,
                         "eval_lm": "common_scale" if name in RATING_METRICS else
                         "binoculars" if name == "binoculars" else
                         matched if name in MATCH_METRICS else llm})
    frame = pl.DataFrame(rows, schema={**SCORES}) if rows else pl.DataFrame(schema=SCORES)
    return frame.select(SCORES.names()).sort("metric", "paper_id", "candidate")


def _m(name: str, reads: str, higher: bool, description: str) -> Metric:
    return Metric(name, reads, "none", "review_quality", higher, description, review_quality_family)  # type: ignore[arg-type]


register(
    *(m for f in ("strengths", "weaknesses") for m in (
        _m(f"points_precision_{f}", "statements", True,
           f"share of the candidate's atomic {f} points that match a point of some human reviewer of the paper "
           "(Beyond Rating eq. 2; LLM-judged matches after an embedding pre-filter)"),
        _m(f"points_recall_{f}", "statements", True,
           f"Max-Recall of {f}: the largest share of one human reviewer's {f} points matched by the candidate "
           "(Beyond Rating eq. 3)"),
        _m(f"points_f1_{f}", "statements", True, f"harmonic mean of points_precision_{f} and points_recall_{f}"))),
    *(_m(f"focus_kl_{f}", "statements", False,
         f"KL(humans || candidate model) of the eight-category distribution of {f} points over all the model's "
         "papers, Laplace-smoothed (Beyond Rating eq. 4); every candidate of the model carries the model's value")
      for f in ("strengths", "weaknesses", "questions")),
    _m("question_score", "statements", True,
       "share of the candidate's question points that are grounded (Explain: the paper holds what is asked about) "
       "or constructive (Supplement: the paper lacks what is asked for), checked against the paper's top-5 chunks "
       "(Beyond Rating eq. 5)"),
    _m("summary_coverage", "raw", True,
       "sum of the 5 largest cosines between the summary's MiniLM embedding and the paper's 512-word chunks "
       "(Beyond Rating eq. 1)"),
    _m("binoculars", "raw", True,
       "Binoculars score (observer log-perplexity / observer-performer cross-perplexity), mean over the four "
       "text fields; needs two causal LMs sharing a tokenizer ([score.review_quality] binoculars), else NaN"),
    _m("rating_mae", "raw", False,
       "|candidate rating - mean human rating of the paper| on the common scale (the review-fields prompt's rating)"),
    _m("accept_accuracy", "raw", True,
       "1 when the candidate's rating is on the paper's side of the accept threshold (accept vs reject decision)"),
)
