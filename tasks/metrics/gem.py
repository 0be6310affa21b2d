"""The GEM family: pointwise mutual information under the evaluation LM.

A GEM score is log p(y | x, s) - log p(y | s), where x is a candidate review, y a human reference
review of the same paper and s the paper's synopsis (empty for plain GEM), in nats. Each metric
declares which texts it compares (raw reviews or preprocessed judgments) and what it conditions
on. The family turns every (candidate, reference, metric) into two log-likelihood requests, asks
`resources.loglikelihood` for all of them at once (deduplicated by content key: a marginal
log p(y | s) is computed once however many candidates share it) and assembles the SCORES rows.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import polars as pl

from tasks.core.frames import reference_sets, usable
from tasks.core.schema import LOGLIK_REQUESTS, LOGLIK_RESULTS, SCORES, TRUNCATED_REASON, with_truncated
from tasks.metrics.prompts import PROMPT_VERSION, render_synopsis, system_prompt, user_prompt
from tasks.metrics.registry import LM_LOGPROBS, FamilyResult, Metric, Resources, register_family

# One row per (candidate, reference, metric) with the keys of its two requests (null with a reason).
PAIRS = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String, "reference": pl.String,
                   "metric": pl.String, "cond_key": pl.String, "marg_key": pl.String, "reason": pl.String,
                   "note": pl.String})
ASSW_FROM_ABSTRACT = "assw_from_abstract"   # the note of a pair conditioned on an ASSW written from the abstract


def request_key(eval_lm: str, system: str, user: str, continuation: str) -> str:
    """Content key of one scoring request: everything that changes its log-probability."""
    blob = json.dumps([PROMPT_VERSION, eval_lm, system, user, continuation], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def assw_note(metric: Metric, row: dict | None) -> str | None:
    """`ASSW_FROM_ABSTRACT` when the metric conditions on an ASSW the preprocess LLM wrote from the
    abstract (the paper had no PDF text), else None."""
    from_abstract = row is not None and row.get("assw_source") == "abstract"
    return ASSW_FROM_ABSTRACT if metric.conditioned_on == "abstract+assw" and from_abstract else None


def _synopsis(metric: Metric, row: dict | None) -> tuple[str | None, str | None]:
    """(synopsis text, reason when it is missing)."""
    if metric.conditioned_on == "none":
        return render_synopsis(), None
    abstract = usable(row.get("abstract")) if row else None
    if abstract is None:
        return None, "no_abstract"
    if metric.conditioned_on == "abstract":
        return render_synopsis(abstract), None
    assw = usable(row.get("assw")) if row else None
    return (render_synopsis(abstract, assw), None) if assw is not None else (None, "no_assw")


def build_requests(candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                   metrics: Sequence[Metric], eval_lm: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(PAIRS, LOGLIK_REQUESTS): one pair row per (candidate, reference, metric), and the unique requests.

    A pair that cannot be scored (no synopsis, an empty text, no other reference) keeps a `reason`
    and no keys."""
    synopsis_rows = {row["paper_id"]: row for row in synopses.iter_rows(named=True)}
    pairs: list[dict] = []
    requests: dict[str, tuple[str, str, str]] = {}

    def add(system: str, user: str, continuation: str) -> str:
        key = request_key(eval_lm, system, user, continuation)
        requests.setdefault(key, (system, user, continuation))
        return key

    for cand, refs in reference_sets(candidates, references):
        paper = cand["paper_id"]
        base = {"paper_id": paper, "candidate": cand["candidate"], "source": cand["source"]}
        for metric in metrics:
            field = "review_text" if metric.reads == "raw" else "judgments"
            if not refs:
                pairs.append({**base, "reference": None, "metric": metric.name, "reason": "no_reference"})
                continue
            synopsis, reason = _synopsis(metric, synopsis_rows.get(paper))
            x = usable(cand[field])
            reason = reason or (None if x is not None else f"no_candidate_{metric.reads}")
            system = system_prompt(metric.reads)
            for ref in refs:
                y = usable(ref[field])
                why = reason or (None if y is not None else f"no_reference_{metric.reads}")
                row = {**base, "reference": ref["review_id"], "metric": metric.name, "reason": why,
                       "note": assw_note(metric, synopsis_rows.get(paper)) if why is None else None}
                if why is None:
                    row["cond_key"] = add(system, user_prompt(metric.reads, synopsis, x), y)
                    row["marg_key"] = add(system, user_prompt(metric.reads, synopsis, None), y)
                pairs.append(row)
    pair_frame = pl.DataFrame(pairs, schema=PAIRS) if pairs else pl.DataFrame(schema=PAIRS)
    request_frame = pl.DataFrame(
        [{"key": k, "system": s, "user": u, "continuation": c} for k, (s, u, c) in sorted(requests.items())],
        schema=LOGLIK_REQUESTS,
    )
    return pair_frame, request_frame


def assemble_scores(pairs: pl.DataFrame, results: pl.DataFrame, eval_lm: str) -> pl.DataFrame:
    """Join pairs with request results (key, logprob, n_tokens) into SCORES rows.

    Fails loudly when a scorable pair has no result: a silent NaN there would pass for a gap."""
    lookup = with_truncated(results).select("key", "logprob", "n_tokens", "truncated")
    if "note" not in pairs.columns:   # pairs written before the ASSW note existed
        pairs = pairs.with_columns(pl.lit(None, pl.String).alias("note"))
    dup = lookup.filter(pl.col("key").is_duplicated())["key"].unique().to_list()
    if dup:
        raise ValueError(f"results: duplicated key {dup[:5]}")
    scored = (
        pairs.join(lookup.rename({"key": "cond_key", "logprob": "logp_conditional", "n_tokens": "n_cond",
                                  "truncated": "cut_cond"}), on="cond_key", how="left")
        .join(lookup.rename({"key": "marg_key", "logprob": "logp_marginal", "n_tokens": "n_tokens",
                             "truncated": "cut_marg"}), on="marg_key", how="left")
    )
    missing = scored.filter(pl.col("reason").is_null()
                            & (pl.col("logp_conditional").is_null() | pl.col("logp_marginal").is_null()))
    if not missing.is_empty():
        raise ValueError(f"{missing.height} scorable pairs have no result (e.g. {missing.row(0, named=True)})")
    mismatch = scored.filter(pl.col("n_cond") != pl.col("n_tokens"))
    if not mismatch.is_empty():
        raise ValueError(f"{mismatch.height} pairs score different token counts for y in the two terms")
    out = scored.with_columns(
        pl.when(pl.col("reason").is_null()).then(pl.col("logp_conditional") - pl.col("logp_marginal"))
        .otherwise(pl.lit(math.nan)).alias("score"),
        pl.lit(eval_lm).alias("eval_lm"),
    ).with_columns(   # a finite score on a cut text says so (tasks/lm/fitting.py)
        pl.when(pl.col("reason").is_null() & (pl.col("cut_cond").fill_null(False) | pl.col("cut_marg").fill_null(False)))
        .then(pl.lit(TRUNCATED_REASON)).otherwise(pl.col("reason")).alias("reason"),
    )
    return out.select(SCORES.names()).cast(dict(SCORES)).sort("metric", "paper_id", "candidate", "reference")


def gem_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
               negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the GEM metrics given: one batch of log-likelihood requests for all of them."""
    assert resources.eval_lm is not None and resources.loglikelihood is not None  # checked by the registry
    pairs, requests = build_requests(candidates, references, synopses, metrics, resources.eval_lm)
    results = resources.loglikelihood(requests) if requests.height else pl.DataFrame(schema=LOGLIK_RESULTS)
    return FamilyResult(assemble_scores(pairs, results, resources.eval_lm))


register_family(
    gem_family, LM_LOGPROBS,
    ("gem_raw", "raw", "none", "PMI of the raw review texts"),
    ("gem", "judgments", "none", "PMI of the preprocessed judgments"),
    ("gem_s_abstract", "judgments", "abstract", "PMI of the judgments given the abstract"),
    ("gem_s_assw", "judgments", "abstract+assw",
     "PMI of the judgments given the abstract and the author-stated strengths and weaknesses"),
)
