"""GEM metrics: a tiny registry plus the pure functions that turn candidates into scoring requests.

A metric is log p(y | x, s) - log p(y | s) under the evaluation LM, where x is a candidate review,
y a human reference review of the same paper and s the paper's synopsis (empty for GEM). Each
metric declares which texts it compares (raw reviews or preprocessed judgments) and which synopsis
it conditions on. Adding a metric = one registry entry (and one test).

Frames (polars):
  references  paper_id, review_id, review_text, judgments          the human reviews of each paper
  candidates  paper_id, candidate, source, review_id, review_text, judgments
              `candidate` is a unique id of the candidate review; `source` says who wrote it
              ("human" or a model name); `review_id` names the human review the candidate *is*,
              which is left out of its references (null for generated candidates).
  synopses    paper_id, abstract, assw                              one row per paper
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

from tasks.scoring.prompts import PROMPT_VERSION, TextKind, render_synopsis, system_prompt, user_prompt

Synopsis = Literal["none", "abstract", "abstract+assw"]


@dataclass(frozen=True)
class Metric:
    name: str
    text: TextKind          # "raw": the review text; "judgments": the preprocessed judgments
    synopsis: Synopsis      # what both probabilities are conditioned on
    description: str
    higher_is_better: bool = True

    def score(self, logp_conditional: float, logp_marginal: float) -> float:
        """Pointwise mutual information estimate of one (candidate, reference) pair, in nats."""
        return logp_conditional - logp_marginal


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("gem_raw", "raw", "none", "PMI of the raw review texts"),
        Metric("gem", "judgments", "none", "PMI of the preprocessed judgments"),
        Metric("gem_s_abstract", "judgments", "abstract", "PMI of the judgments given the abstract"),
        Metric("gem_s_assw", "judgments", "abstract+assw",
               "PMI of the judgments given the abstract and the author-stated strengths and weaknesses"),
    )
}

REFERENCES = pl.Schema({"paper_id": pl.String, "review_id": pl.String, "review_text": pl.String,
                        "judgments": pl.String})
CANDIDATES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String,
                        "review_id": pl.String, "review_text": pl.String, "judgments": pl.String})
SYNOPSES = pl.Schema({"paper_id": pl.String, "abstract": pl.String, "assw": pl.String})
PAIRS = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String, "reference": pl.String,
                   "metric": pl.String, "cond_key": pl.String, "marg_key": pl.String, "reason": pl.String})
REQUESTS = pl.Schema({"key": pl.String, "system": pl.String, "user": pl.String, "continuation": pl.String})
SCORES = pl.Schema({"paper_id": pl.String, "candidate": pl.String, "source": pl.String, "reference": pl.String,
                    "metric": pl.String, "score": pl.Float64, "logp_conditional": pl.Float64,
                    "logp_marginal": pl.Float64, "n_tokens": pl.Int64, "eval_lm": pl.String,
                    "reason": pl.String})


def get_metrics(names: Sequence[str]) -> list[Metric]:
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    return [METRICS[n] for n in names]


def request_key(eval_lm: str, system: str, user: str, continuation: str) -> str:
    """Content key of one scoring request: everything that changes its log-probability."""
    blob = json.dumps([PROMPT_VERSION, eval_lm, system, user, continuation], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def judgments_text(judgments: pl.DataFrame) -> pl.DataFrame:
    """review_id, judgments: each review's judgment lines in position order, one per line."""
    return (
        judgments.sort("review_id", "position")
        .group_by("review_id", maintain_order=True)
        .agg(pl.col("text").str.strip_chars().str.join("\n").alias("judgments"))
    )


def synopses_wide(synopses: pl.DataFrame) -> pl.DataFrame:
    """paper_id, abstract, assw from the long synopses frame (kind in {abstract, assw})."""
    if synopses.is_empty():
        return pl.DataFrame(schema=SYNOPSES)
    duplicated = synopses.filter(pl.struct("paper_id", "kind").is_duplicated())
    if not duplicated.is_empty():
        raise ValueError(f"several synopses of one kind for papers {duplicated['paper_id'].unique().to_list()[:5]}")
    wide = synopses.pivot("kind", index="paper_id", values="text")
    return wide.select(
        "paper_id", *(pl.col(k) if k in wide.columns else pl.lit(None, pl.String).alias(k) for k in ("abstract", "assw"))
    )


def human_candidates(references: pl.DataFrame) -> pl.DataFrame:
    """Each human review as a candidate, scored against the paper's other reviews (leave-one-out)."""
    return references.select(
        "paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
        "review_id", "review_text", "judgments",
    )


def _text(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


def _synopsis(metric: Metric, row: dict | None) -> tuple[str | None, str | None]:
    """(synopsis text, reason when it is missing)."""
    if metric.synopsis == "none":
        return render_synopsis(), None
    abstract = _text(row.get("abstract")) if row else None
    if abstract is None:
        return None, "no_abstract"
    if metric.synopsis == "abstract":
        return render_synopsis(abstract), None
    assw = _text(row.get("assw")) if row else None
    return (render_synopsis(abstract, assw), None) if assw is not None else (None, "no_assw")


def _unique(frame: pl.DataFrame, column: str, what: str) -> None:
    dup = frame.filter(pl.col(column).is_duplicated())[column].unique().to_list()
    if dup:
        raise ValueError(f"{what}: duplicated {column} {dup[:5]}")


def build_requests(candidates: pl.DataFrame, references: pl.DataFrame, synopses: pl.DataFrame,
                   metrics: Sequence[Metric], eval_lm: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(pairs, requests): one pair row per (candidate, reference, metric), and the unique requests.

    A pair that cannot be scored (no synopsis, an empty text, no other reference) keeps a `reason`
    and no keys. Requests are deduplicated by content key, so a marginal log p(y | s) is computed
    once however many candidates share it."""
    _unique(candidates, "candidate", "candidates")
    _unique(references, "review_id", "references")
    refs_by_paper: dict[str, list[dict]] = {}
    for ref in references.sort("paper_id", "review_id").iter_rows(named=True):
        refs_by_paper.setdefault(ref["paper_id"], []).append(ref)
    synopsis_rows = {row["paper_id"]: row for row in synopses.iter_rows(named=True)}
    pairs: list[dict] = []
    requests: dict[str, tuple[str, str, str]] = {}

    def add(system: str, user: str, continuation: str) -> str:
        key = request_key(eval_lm, system, user, continuation)
        requests.setdefault(key, (system, user, continuation))
        return key

    for cand in candidates.sort("paper_id", "candidate").iter_rows(named=True):
        paper = cand["paper_id"]
        refs = [r for r in refs_by_paper.get(paper, []) if r["review_id"] != cand["review_id"]]
        base = {"paper_id": paper, "candidate": cand["candidate"], "source": cand["source"]}
        for metric in metrics:
            field = "review_text" if metric.text == "raw" else "judgments"
            if not refs:
                pairs.append({**base, "reference": None, "metric": metric.name, "reason": "no_reference"})
                continue
            synopsis, reason = _synopsis(metric, synopsis_rows.get(paper))
            x = _text(cand[field])
            reason = reason or (None if x is not None else f"no_candidate_{metric.text}")
            system = system_prompt(metric.text)
            for ref in refs:
                y = _text(ref[field])
                why = reason or (None if y is not None else f"no_reference_{metric.text}")
                row = {**base, "reference": ref["review_id"], "metric": metric.name, "reason": why}
                if why is None:
                    row["cond_key"] = add(system, user_prompt(metric.text, synopsis, x), y)
                    row["marg_key"] = add(system, user_prompt(metric.text, synopsis, None), y)
                pairs.append(row)
    pair_frame = pl.DataFrame(pairs, schema=PAIRS) if pairs else pl.DataFrame(schema=PAIRS)
    request_frame = pl.DataFrame(
        [{"key": k, "system": s, "user": u, "continuation": c} for k, (s, u, c) in sorted(requests.items())],
        schema=REQUESTS,
    )
    return pair_frame, request_frame


def assemble_scores(pairs: pl.DataFrame, results: pl.DataFrame, eval_lm: str) -> pl.DataFrame:
    """Join pairs with request results (key, logprob, n_tokens) into the SCORES frame.

    Fails loudly when a scorable pair has no result: a silent NaN there would pass for a gap."""
    lookup = results.select("key", "logprob", "n_tokens")
    _unique(lookup, "key", "results")
    scored = (
        pairs.join(lookup.rename({"key": "cond_key", "logprob": "logp_conditional", "n_tokens": "n_cond"}),
                   on="cond_key", how="left")
        .join(lookup.rename({"key": "marg_key", "logprob": "logp_marginal", "n_tokens": "n_tokens"}),
              on="marg_key", how="left")
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
    )
    return out.select(SCORES.names()).cast(dict(SCORES)).sort("metric", "paper_id", "candidate", "reference")


def candidate_scores(scores: pl.DataFrame) -> pl.DataFrame:
    """A candidate's score on its paper: the mean over the paper's references (NaN pairs left out)."""
    valid = pl.col("score").is_not_nan() & pl.col("score").is_not_null()
    return (
        scores.group_by("paper_id", "candidate", "source", "metric", "eval_lm")
        .agg(
            pl.col("score").filter(valid).mean().fill_null(math.nan).alias("score"),
            valid.sum().cast(pl.Int64).alias("n_references"),
            pl.when(valid.any()).then(pl.lit(None, pl.String))
            .otherwise(pl.col("reason").drop_nulls().first()).alias("reason"),
        )
        .sort("metric", "paper_id", "candidate")
    )
