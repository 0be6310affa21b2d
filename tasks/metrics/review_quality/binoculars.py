"""Binoculars per review (appendix E of Beyond Rating): the mean over the review's summary,
strengths, weaknesses and questions of `formulas.binoculars`, from an observer and a performer
causal LM that share one tokenizer, both loaded through the LM layer (tasks.lm.load_model).

`score_texts` takes the two models and their tokenizer, so a test can give it two small models
it builds itself; `review_scores` loads the configured pair. Two LMs whose tokenizers differ give
NaN with `tokenizers_differ` (their logits would index different tokens). `calibrate` picks the
threshold of a form at a stated false-positive rate from the scores of labelled reviews. The ai_rate metric never
takes one LM twice; `reviews_scores` (the reference flags of the score stage) may, when the config
names a single evaluation LM: then the score is that LM's log-perplexity over its own entropy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.metrics.review_quality.fields import sections
from tasks.metrics.review_quality.formulas import Scored, binoculars

TEXT_FIELDS = ("summary", "strengths", "weaknesses", "questions")
MAX_TOKENS = 512


def score_texts(observer: Any, performer: Any, tokenizer: Any, texts: Sequence[str]) -> list[float]:
    """One Binoculars score per text (NaN for a text of fewer than two tokens)."""
    import torch

    out = []
    for text in texts:
        ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=MAX_TOKENS)["input_ids"]
        if ids.shape[1] < 2:
            out.append(math.nan)
            continue
        with torch.inference_mode():
            lo = observer(ids.to(observer.device)).logits[0, :-1].float().cpu().numpy()
            lp = lo if performer is observer else performer(ids.to(performer.device)).logits[0, :-1].float().cpu().numpy()
        out.append(binoculars(lo, lp, ids[0, 1:].numpy()))
    return out


def review_score(observer: Any, performer: Any, tokenizer: Any, review_text: str | None) -> Scored:
    parts = [t for name, t in sections(review_text).items() if name in TEXT_FIELDS]
    values = [v for v in score_texts(observer, performer, tokenizer, parts) if not math.isnan(v)]
    return (float(np.mean(values)), None) if values else (math.nan, "no_text")


def review_scores(models: tuple[str, str], items: Sequence[tuple[str, str | None]]) -> dict[tuple[str, str], Scored]:
    """(candidate, "binoculars") -> score of each (candidate, review text), from the configured pair."""
    from tasks.lm import ModelSpec

    scores = reviews_scores((ModelSpec(models[0]), ModelSpec(models[1])), [text for _, text in items])
    return {(c, "binoculars"): scored for (c, _), scored in zip(items, scores, strict=True)}


def reviews_scores(specs: tuple[Any, Any], texts: Sequence[str | None]) -> list[Scored]:
    """One Binoculars score per review text from the observer and performer `specs` (tasks.lm.ModelSpec),
    loaded through the LM layer; one spec twice is loaded once. A review without "## Field" blocks
    is scored as one text."""
    from tasks.lm import load_model

    observer, tok_o = load_model(specs[0])
    performer, tok_p = (observer, tok_o) if specs[0] == specs[1] else load_model(specs[1])
    if tok_o.get_vocab() != tok_p.get_vocab():
        return [(math.nan, "tokenizers_differ")] * len(texts)
    out = []
    for text in texts:
        if sections(text) or not isinstance(text, str) or not text.strip():
            out.append(review_score(observer, performer, tok_o, text))
        else:
            value = score_texts(observer, performer, tok_o, [text])[0]
            out.append((value, None) if not math.isnan(value) else (math.nan, "no_text"))
    return out


@dataclass(frozen=True)
class Calibration:
    """A Binoculars threshold picked on labelled reviews: a score below `threshold` is flagged."""

    threshold: float
    fpr: float          # the asked false-positive rate
    human_flagged: float   # the share of human reviews below the threshold (at most `fpr`)
    ai_flagged: float      # the share of AI-written reviews below it (the true-positive rate); NaN without any
    n_human: int
    n_ai: int


MAX_SCORE = 1e6   # a Binoculars score further from 0 than this is no ratio of perplexities


def calibrate(human: Sequence[float], ai: Sequence[float], fpr: float) -> Calibration:
    """The largest threshold that flags at most `fpr` of the human reviews' scores (a review is flagged
    when its score is below the threshold): the (floor(fpr * n) + 1)-th smallest human score, lowered
    past ties so the bound holds. NaN scores are left out; no human score is an error."""
    if not 0 <= fpr < 1:
        raise ValueError(f"the false-positive rate must be in [0, 1), not {fpr}")
    h = np.sort(np.asarray([v for v in human if not math.isnan(v)], dtype=float))
    a = np.asarray([v for v in ai if not math.isnan(v)], dtype=float)
    if h.size == 0:
        raise ValueError("no human review with a Binoculars score: nothing to calibrate on")
    for name, values in (("human", h), ("AI", a)):
        wild = int(np.sum(~(np.abs(values) <= MAX_SCORE)))
        if wild:
            raise ValueError(f"{wild} {name} score(s) are infinite or beyond +-{MAX_SCORE:g}: a Binoculars score is a "
                             "ratio of two log-perplexities near 1; nothing written")
    allowed = int(math.floor(fpr * h.size + 1e-9))
    threshold = float(h[min(allowed, h.size - 1)]) if allowed < h.size else float(np.nextafter(h[-1], np.inf))
    while float(np.mean(h < threshold)) > fpr:   # ties above the allowed rank: step below them
        threshold = float(h[h < threshold].max())
    if a.size and not np.any(a < threshold):
        raise ValueError(f"at FPR {fpr:g} the threshold {threshold:.6g} flags none of the {a.size} AI-written reviews: "
                         "these scores do not tell the two apart; nothing written")
    return Calibration(threshold, fpr, float(np.mean(h < threshold)),
                       float(np.mean(a < threshold)) if a.size else math.nan, int(h.size), int(a.size))
