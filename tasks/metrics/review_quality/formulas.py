"""Beyond Rating's formulas as pure functions (section 4 of the paper, equations 1-6).

Conventions (each stated where the paper leaves a gap):

* M(a, h) is a 0/1 matrix, candidate points by human points.
* Precision (eq. 2): the share of candidate points that match at least one point of any human
  reviewer of the paper. No candidate points: NaN `no_candidate_points`; no human points at all:
  NaN `no_reference_points` (a precision against nothing is undefined, not 0).
* Max-Recall (eq. 3): per human reviewer with at least one point, the share of that reviewer's
  points matched by some candidate point; the maximum over those reviewers. A reviewer with no
  points in the field is left out (1/|H_k| is undefined); none left: NaN `no_reference_points`.
  A candidate with no points is NaN `no_candidate_points`, as for precision: a review whose part
  is missing, or whose points could not be read, gives no input to measure, not a recall of 0.
* F1: 2PR / (P + R), 0 when P + R = 0, NaN when either is NaN.
* Focus KL (eq. 4): D_KL(D_H || D_AI) over the eight categories, natural log, both distributions
  smoothed additively (`alpha` added to every category's count before normalising, default 1:
  Laplace), so a category the candidate never uses gives a finite divergence. Either side
  without points: NaN `no_points` (a smoothed empty count would be the uniform distribution, a guess).
* Question score (eq. 5): the mean over question points of (conf OR cons). An Explain question is
  confident when the paper holds the background it asks about; a Supplement question is
  constructive when the paper lacks what it asks for; an Other question meets neither (it counts
  in N with 0, as the equation is written). No question points: NaN `no_question_points`.
* Summary coverage (eq. 1): the sum of the K largest cosine similarities between the summary's
  embedding and the paper chunks' embeddings; with fewer than K chunks the sum runs over all of them.
* Binoculars (appendix E, after Hans et al. 2024): log-perplexity of the text under the observer
  LM divided by the cross-perplexity, the mean over positions of the cross-entropy between the
  performer LM's next-token distribution and the observer's: -sum_v p_perf(v) log p_obs(v).
  Both LMs must share one tokenizer (the same token ids index both logit rows).
* Rating error: |candidate rating - mean of the human ratings| on the common scale.
* Accept agreement: 1 when (rating >= threshold) equals the decision being an accept, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CATEGORIES = ("Novelty", "Soundness", "Experiments", "Clarity", "Significance", "Reproducibility",
              "Related Work", "Other")
QUESTION_KINDS = ("Explain", "Supplement", "Other")

Scored = tuple[float, str | None]   # a value, or NaN with the reason


def precision(matches: np.ndarray) -> Scored:
    """Eq. 2 over M (candidate points x all human points of the paper, reviewers concatenated)."""
    m = np.asarray(matches, dtype=float)
    if m.ndim != 2 or m.shape[0] == 0:
        return math.nan, "no_candidate_points"
    if m.shape[1] == 0:
        return math.nan, "no_reference_points"
    return float(m.max(axis=1).mean()), None


def max_recall(per_reviewer: Sequence[np.ndarray]) -> Scored:
    """Eq. 3: `per_reviewer[k]` is M (candidate points x reviewer k's points)."""
    recalls, no_candidate_points = [], False
    for m in per_reviewer:
        m = np.asarray(m, dtype=float)
        if m.ndim != 2 or m.shape[1] == 0:
            continue
        if m.shape[0] == 0:
            no_candidate_points = True
            continue
        recalls.append(float(m.max(axis=0).mean()))
    if no_candidate_points:
        return math.nan, "no_candidate_points"
    if not recalls:
        return math.nan, "no_reference_points"
    return max(recalls), None


def f1(p: float, r: float) -> float:
    if math.isnan(p) or math.isnan(r):
        return math.nan
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def distribution(counts: Sequence[float], alpha: float) -> np.ndarray:
    c = np.asarray(counts, dtype=float) + alpha
    return c / c.sum()


def focus_kl(human_counts: Sequence[float], ai_counts: Sequence[float], alpha: float = 1.0) -> Scored:
    """Eq. 4: D_KL(D_H || D_AI) of category counts (same order), additively smoothed by `alpha`."""
    if sum(human_counts) == 0 or sum(ai_counts) == 0:
        return math.nan, "no_points"
    h, a = distribution(human_counts, alpha), distribution(ai_counts, alpha)
    keep = h > 0
    return float(np.sum(h[keep] * np.log(h[keep] / a[keep]))), None


def question_value(kind: str, grounded: bool | None, already_there: bool | None) -> int | None:
    """conf OR cons of one question point: Explain -> the paper holds its background (conf);
    Supplement -> the paper lacks what it asks for (cons); Other -> 0. None: the judge did not answer."""
    if kind == "Explain":
        return None if grounded is None else int(grounded)
    if kind == "Supplement":
        return None if already_there is None else int(not already_there)
    return 0


def question_score(values: Sequence[int | None]) -> Scored:
    """Eq. 5 over the question points' (conf OR cons); unanswered points are left out."""
    if not values:
        return math.nan, "no_question_points"
    known = [v for v in values if v is not None]
    if not known:
        return math.nan, "question_unanswered"
    return float(np.mean(known)), None


def coverage(summary: np.ndarray, chunks: np.ndarray, k: int = 5) -> Scored:
    """Eq. 1: sum of the top-k cosines of the summary vector with the chunk vectors (rows)."""
    chunks = np.asarray(chunks, dtype=float)
    if chunks.ndim != 2 or chunks.shape[0] == 0:
        return math.nan, "no_paper_text"
    s = np.asarray(summary, dtype=float)
    cos = chunks @ s / (np.linalg.norm(chunks, axis=1) * np.linalg.norm(s) + 1e-12)
    return float(np.sort(cos)[::-1][:k].sum()), None


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def binoculars(observer_logits: np.ndarray, performer_logits: np.ndarray, targets: np.ndarray) -> float:
    """Eq. 6 over one text: logits (positions x vocabulary) of both LMs predicting `targets` (the
    next token ids at each position)."""
    obs = log_softmax(np.asarray(observer_logits, float))
    # one LM as both (the reference flags on a single evaluation LM): its distribution computed once
    perf = obs if performer_logits is observer_logits else log_softmax(np.asarray(performer_logits, float))
    if obs.shape != perf.shape or obs.shape[0] != len(targets) or len(targets) == 0:
        raise ValueError("binoculars needs logits of the same shape over the same tokens (one shared tokenizer)")
    log_ppl = -obs[np.arange(len(targets)), np.asarray(targets)].mean()
    x_ppl = -(np.exp(perf) * obs).sum(axis=-1).mean()
    return float(log_ppl / x_ppl)


def rating_error(rating: float, human_ratings: Sequence[float]) -> Scored:
    if math.isnan(rating):
        return math.nan, "no_rating"
    humans = [r for r in human_ratings if r is not None and not math.isnan(r)]
    if not humans:
        return math.nan, "no_human_rating"
    return abs(rating - float(np.mean(humans))), None


def accepted(decision: str | None) -> bool | None:
    """True for an accept decision ("Accept (poster)", "accept"), False for a reject, None otherwise."""
    text = (decision or "").lower()
    if "accept" in text and "reject" not in text:
        return True
    if "reject" in text:
        return False
    return None


def accept_agreement(rating: float, decision: str | None, threshold: float) -> Scored:
    if math.isnan(rating):
        return math.nan, "no_rating"
    truth = accepted(decision)
    if truth is None:
        return math.nan, "no_decision"
    return float((rating >= threshold) == truth), None


def pearson(xs: Sequence[float], ys: Sequence[float]) -> Scored:
    """Pearson r over the pairs where both are numbers; NaN below 3 pairs or with a constant side."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 3:
        return math.nan, "too_few_candidates"
    x, y = np.array(pairs).T
    if x.std() == 0 or y.std() == 0:
        return math.nan, "constant"
    return float(np.corrcoef(x, y)[0, 1]), None
