"""The f-MI family, token level: the Scoring Rules paper's (F, E) grid on the evaluation LM's log-probs.

The Scoring Rules paper (seed 002, section 4 and appendix B) describes an MI-based metric by an
information measure F (KL or TV), an estimator E (direct, or f-variational with negative
references), a representation R and a predictor Pi. With R = token and Pi = an autoregressive LM,
every cell is a function of the log density ratio the LM gives for a candidate x and a reference y,

    log r(x, y) = log p(y | x, s) - log p(y | s)        (GEM's PMI, in nats; s the synopsis)

and of the same ratio for K negative references y-_1..y-_K (reviews of other papers of the same
venue, tasks/metrics/negatives.py). Per (candidate, reference) pair, the negatives averaged:

    KL, direct         log r(x, y)                                    = GEM (tasks/metrics/gem.py)
    KL, f-variational  T(x, y) - mean_k exp(T(x, y-_k) - 1),  T = 1 + log r      (NWJ; <= 1 + log r)
    TV, direct         max(0, 1 - 1 / r(x, y))                        (joint-sample form, in [0, 1))
    TV, direct (marg.) mean_k max(0, 1 - r(x, y-_k))                  (marginal-sample form, in [0, 1])
    TV, f-variational  T(x, y) - mean_k T(x, y-_k),  T = 1/2 sign(r - 1)          (in [-1, 1])

The direct TV cells, oriented (docs/metrics.md). With P the joint law of (x, y) and Q the product
of its marginals, r = dP/dQ, TV(P, Q) = integral of (p - q)+ = integral of (q - p)+, so

    TV = E_P[(1 - 1/r)+]          (the (p - q)+ form, read on joint samples: the pair (x, y))
       = E_Q[(1 - r)+]            (the (q - p)+ form, read on marginal samples: the pairs (x, y-_k))

Both equal the textbook 1/2 E_P|1 - 1/r| and 1/2 E_Q|r - 1| in expectation, but their pointwise
terms differ: 1/2 |1 - 1/r| grows without bound as r -> 0 (log r = -3 scores 9.5, log r = +3
scores 0.48), so as a per-candidate score it ranked a review that contradicts the reference above
one that agrees with it, and 1/2 |r - 1| overflowed on real reviews. (1 - 1/r)+ rises with r
(0 for r <= 1, towards 1 as r grows): agreement with the reference scores higher. (1 - r)+ falls
with r(x, y-): agreement with another paper's review scores lower. Both are bounded: no overflow.

One family function scores every metric it is given in one pass: the positive requests are GEM's
(same content keys, so a run that also scores GEM asks the LM once for them, see
`resources.memoized`), the negatives add one conditional request per (candidate, negative) and one
marginal per negative, deduplicated. A ratio too large for a float (|log r| > ~709) gives NaN with
the reason `ratio_overflow` rather than an infinite score (only kl_fvar_token's mean r(x, y-) can,
computed as exp(logsumexp - log K) so only a mean beyond the float range does; the leaderboard note
counts the rows lost); a pair without negatives gets `no_negative`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import polars as pl

from tasks.core.schema import (
    LOGLIK_REQUESTS,
    LOGLIK_RESULTS,
    NEGATIVES,
    SCORES,
    TRUNCATED_REASON,
    with_truncated,
)
from tasks.metrics.gem import PAIRS, _synopsis, build_requests, request_key
from tasks.metrics.prompts import system_prompt, user_prompt
from tasks.metrics.registry import LM_LOGPROBS, FamilyResult, Metric, Resources, register, usable

# log r(x, y), [log r(x, y-_k) ...] -> the pair's score (OverflowError when a ratio is not representable)
Estimator = Callable[[float, Sequence[float]], float]


def _mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("an f-variational estimator needs at least one negative reference")
    return math.fsum(values) / len(values)


def _sign(value: float) -> float:
    return float((value > 0) - (value < 0))


def kl_direct(log_r: float, log_r_neg: Sequence[float]) -> float:
    """PMI, log r(x, y): GEM's cell."""
    return log_r


def kl_fvar(log_r: float, log_r_neg: Sequence[float]) -> float:
    """NWJ: T(x, y) - mean exp(T(x, y-) - 1) with T = 1 + log r, i.e. 1 + log r(x, y) - mean r(x, y-).
    The mean of the r(x, y-) is exp(logsumexp(log r(x, y-)) - log K): OverflowError only when the mean
    itself is beyond the float range, not when one term is."""
    if not log_r_neg:
        raise ValueError("an f-variational estimator needs at least one negative reference")
    top = max(log_r_neg)
    log_mean = top + math.log(math.fsum(math.exp(n - top) for n in log_r_neg) / len(log_r_neg))
    return (1.0 + log_r) - math.exp(log_mean)   # exp(T(x, y-) - 1) = r(x, y-)


def tv_direct(log_r: float, log_r_neg: Sequence[float]) -> float:
    """max(0, 1 - 1/r(x, y)) on the joint sample (x, y): TV = E_P[(1 - 1/r)+], rising with r, in [0, 1)."""
    return 0.0 if log_r <= 0.0 else -math.expm1(-log_r)


def tv_direct_marginal(log_r: float, log_r_neg: Sequence[float]) -> float:
    """mean max(0, 1 - r(x, y-)) on the marginal samples (x, y-): TV = E_Q[(1 - r)+], falling with each
    r(x, y-), in [0, 1]."""
    return _mean([0.0 if n >= 0.0 else -math.expm1(n) for n in log_r_neg])


def tv_critic(log_r: float) -> float:
    """The TV population-optimal critic 1/2 sign(r - 1) (table 8), from log r."""
    return 0.5 * _sign(log_r)


def tv_fvar(log_r: float, log_r_neg: Sequence[float]) -> float:
    """T(x, y) - mean T(x, y-) with T = 1/2 sign(r - 1): in [-1, 1]."""
    return tv_critic(log_r) - _mean([tv_critic(n) for n in log_r_neg])


ESTIMATORS: dict[str, Estimator] = {}   # metric name -> estimator of its cell


# One row per (candidate, reference, metric, negative drawn) with the keys of its two requests.
NEGATIVE_PAIRS = pl.Schema({"candidate": pl.String, "reference": pl.String, "metric": pl.String, "draw": pl.Int64,
                            "cond_key": pl.String, "marg_key": pl.String})


def build_negative_requests(pairs: pl.DataFrame, candidates: pl.DataFrame, references: pl.DataFrame,
                            negatives: pl.DataFrame, synopses: pl.DataFrame, metrics: Sequence[Metric],
                            eval_lm: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(NEGATIVE_PAIRS, LOGLIK_REQUESTS) for the scorable pairs of the metrics that read negatives:
    log r(x, y-) = log p(y- | x, s) - log p(y- | s), s the candidate's paper synopsis. A negative
    with an empty text is skipped."""
    by_name = {m.name: m for m in metrics if m.negatives}
    cands = {r["candidate"]: r for r in candidates.iter_rows(named=True)}
    refs = {r["review_id"]: r for r in references.iter_rows(named=True)}
    synopsis_rows = {r["paper_id"]: r for r in synopses.iter_rows(named=True)}
    drawn: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for row in negatives.sort("candidate", "reference", "draw").iter_rows(named=True):
        drawn.setdefault((row["candidate"], row["reference"]), []).append((row["draw"], row["negative"]))
    rows: list[dict] = []
    requests: dict[str, tuple[str, str, str]] = {}
    scorable = pairs.filter(pl.col("reason").is_null() & pl.col("metric").is_in(list(by_name)))
    for pair in scorable.iter_rows(named=True):
        metric = by_name[pair["metric"]]
        field = "review_text" if metric.reads == "raw" else "judgments"
        cand = cands[pair["candidate"]]
        synopsis, _ = _synopsis(metric, synopsis_rows.get(cand["paper_id"]))  # usable: the pair is scorable
        system = system_prompt(metric.reads)
        x = cand[field]
        for draw, negative in drawn.get((pair["candidate"], pair["reference"]), []):
            y = usable(refs[negative][field]) if negative in refs else None
            if y is None:
                continue
            keys = {}
            for name, user in (("cond_key", user_prompt(metric.reads, synopsis, x)),
                               ("marg_key", user_prompt(metric.reads, synopsis, None))):
                keys[name] = request_key(eval_lm, system, user, y)
                requests.setdefault(keys[name], (system, user, y))
            rows.append({"candidate": pair["candidate"], "reference": pair["reference"], "metric": metric.name,
                         "draw": draw, **keys})
    frame = pl.DataFrame(rows, schema=NEGATIVE_PAIRS) if rows else pl.DataFrame(schema=NEGATIVE_PAIRS)
    request_frame = pl.DataFrame(
        [{"key": k, "system": s, "user": u, "continuation": c} for k, (s, u, c) in sorted(requests.items())],
        schema=LOGLIK_REQUESTS)
    return frame, request_frame


def _log_ratio(results: dict[str, tuple[float, int]], cond_key: str, marg_key: str) -> tuple[float, float, int]:
    """(log p(y|x,s), log p(y|s), tokens of y); fails loudly on a missing result or a token mismatch."""
    if cond_key not in results or marg_key not in results:
        raise ValueError(f"a scorable pair has no log-likelihood result ({cond_key}, {marg_key})")
    (cond, n_cond), (marg, n_marg) = results[cond_key], results[marg_key]
    if n_cond != n_marg:
        raise ValueError(f"the two terms of a ratio score different token counts ({n_cond} != {n_marg})")
    return cond, marg, n_marg


def assemble(pairs: pl.DataFrame, negative_pairs: pl.DataFrame, results: pl.DataFrame,
             metrics: Sequence[Metric], eval_lm: str) -> pl.DataFrame:
    """SCORES rows: each pair's estimator on its positive log ratio and its negatives' log ratios."""
    dup = results.filter(pl.col("key").is_duplicated())["key"].unique().to_list()
    if dup:
        raise ValueError(f"results: duplicated key {dup[:5]}")
    lookup = {k: (lp, n) for k, lp, n in results.select("key", "logprob", "n_tokens").iter_rows()}
    cut = set(with_truncated(results).filter(pl.col("truncated"))["key"].to_list())
    negs: dict[tuple[str, str, str], list[float]] = {}
    for row in negative_pairs.iter_rows(named=True):
        cond, marg, _ = _log_ratio(lookup, row["cond_key"], row["marg_key"])
        negs.setdefault((row["candidate"], row["reference"], row["metric"]), []).append(cond - marg)
    by_name = {m.name: m for m in metrics}
    out = []
    for pair in pairs.iter_rows(named=True):
        row = {k: pair[k] for k in ("paper_id", "candidate", "source", "reference", "metric")}
        row |= {"score": math.nan, "logp_conditional": None, "logp_marginal": None, "n_tokens": None,
                "eval_lm": eval_lm, "reason": pair["reason"]}
        if pair["reason"] is None:
            cond, marg, n = _log_ratio(lookup, pair["cond_key"], pair["marg_key"])
            row |= {"logp_conditional": cond, "logp_marginal": marg, "n_tokens": n}
            neg = negs.get((pair["candidate"], pair["reference"], pair["metric"]), [])
            if by_name[pair["metric"]].negatives and not neg:
                row["reason"] = "no_negative"
            else:
                try:
                    row["score"] = ESTIMATORS[pair["metric"]](cond - marg, neg)
                except OverflowError:
                    row["reason"] = "ratio_overflow"
                if row["reason"] is None and {pair["cond_key"], pair["marg_key"]} & cut:
                    row["reason"] = TRUNCATED_REASON   # a finite score on a cut text (tasks/lm/fitting.py)
        out.append(row)
    frame = pl.DataFrame(out, schema=SCORES) if out else pl.DataFrame(schema=SCORES)
    return frame.sort("metric", "paper_id", "candidate", "reference")


def fmi_token_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                     negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the token-level f-MI metrics given: one batch of log-likelihood requests for all."""
    assert resources.eval_lm is not None and resources.loglikelihood is not None  # checked by the registry
    if negatives is None and any(m.negatives for m in metrics):
        raise ValueError(f"metrics {[m.name for m in metrics if m.negatives]} need negative references: "
                         "draw them with tasks.metrics.negatives.draw_negatives and pass `negatives`")
    pairs, requests = build_requests(candidates, references, synopses, metrics, resources.eval_lm)
    negative_pairs, more = build_negative_requests(pairs, candidates, references,
                                                   negatives if negatives is not None else pl.DataFrame(schema=NEGATIVES),
                                                   synopses, metrics, resources.eval_lm)
    every = pl.concat([requests, more]).unique("key", maintain_order=True).sort("key")
    results = resources.loglikelihood(every) if every.height else pl.DataFrame(schema=LOGLIK_RESULTS)
    return FamilyResult(assemble(pairs.cast(dict(PAIRS)), negative_pairs, results, metrics, resources.eval_lm))


def _cell(name: str, reads: str, estimator: Estimator, negatives: bool, description: str) -> Metric:
    ESTIMATORS[name] = estimator
    return Metric(name, reads, "none", LM_LOGPROBS, True, description, fmi_token_family,  # type: ignore[arg-type]
                  negatives=negatives)


_CELLS = [  # (suffix, estimator, reads negatives, what it is)
    ("kl_fvar_token", kl_fvar, True, "KL, f-variational (NWJ), token-level AR: 1 + log r(x,y) - mean r(x,y-)"),
    ("tv_direct_token", tv_direct, False,
     "TV, direct, token-level AR: max(0, 1 - 1/r(x,y)), the joint-sample term of TV = E_P[(1 - 1/r)+] "
     "(= 1/2 E_P|1 - 1/r|), oriented so agreement with the reference (r > 1) scores higher; in [0, 1)"),
    ("tv_direct_marginal_token", tv_direct_marginal, True,
     "TV, direct on marginal samples, token-level AR: mean max(0, 1 - r(x,y-)), the marginal-sample term of "
     "TV = E_Q[(1 - r)+] (= 1/2 E_Q|r - 1|), lower the more the candidate fits other papers' reviews; in [0, 1]"),
    ("tv_fvar_token", tv_fvar, True, "TV, f-variational, token-level AR: 1/2 sign(log r(x,y)) - mean 1/2 sign(log r(x,y-))"),
]

register(*(_cell(name, "judgments", fn, neg, f"{text}, on the preprocessed judgments") for name, fn, neg, text in _CELLS))
register(*(_cell(f"{name}_raw", "raw", fn, neg, f"{text}, on the raw review texts") for name, fn, neg, text in _CELLS))
