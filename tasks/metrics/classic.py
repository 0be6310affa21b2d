"""Classic reference-based text metrics: BLEU, ROUGE-L and a BERTScore-style F1.

Each pair function scores many (candidate, reference) texts at once and returns a float64 array in
the input order; higher is better for all three. A missing or blank text on either side gives NaN
(an expected gap, not a zero). BLEU and ROUGE-L come from sacrebleu and rouge-score; BERTScore
greedily matches token embeddings from `resources.embed` (MiniLM, see tasks/metrics/resources.py).
The family scores the raw review texts of each candidate against its paper's other reviews.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.core.schema import SCORES
from tasks.metrics.registry import Embed, Metric, Resources, reference_sets, register, usable

Texts = Sequence[str | None]
LIBRARIES = {"bleu": "sacrebleu", "rouge_l": "rouge-score"}   # written where a GEM row names its evaluation LM


def _check(candidates: Texts, references: Texts) -> None:
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")


def bleu(candidates: Texts, references: Texts) -> np.ndarray:
    """Sentence-level BLEU (sacrebleu, 13a tokenizer, exponential smoothing, effective order) in [0, 1]."""
    from sacrebleu.metrics import BLEU

    _check(candidates, references)
    scorer = BLEU(effective_order=True)
    return np.array([
        scorer.sentence_score(c, [r]).score / 100 if usable(c) and usable(r) else np.nan
        for c, r in zip(candidates, references, strict=True)
    ], dtype=np.float64)


def rouge_l(candidates: Texts, references: Texts) -> np.ndarray:
    """ROUGE-L F1 (rouge-score, longest common subsequence over Porter-stemmed lower-cased words)."""
    from rouge_score import rouge_scorer

    _check(candidates, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return np.array([
        scorer.score(r, c)["rougeL"].fmeasure if usable(c) and usable(r) else np.nan
        for c, r in zip(candidates, references, strict=True)
    ], dtype=np.float64)


def greedy_f1(candidate: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    """(precision, recall, F1) of greedy cosine matching between two sets of unit token vectors."""
    if len(candidate) == 0 or len(reference) == 0:
        return np.nan, np.nan, np.nan
    sim = candidate @ reference.T
    precision = float(sim.max(axis=1).mean())
    recall = float(sim.max(axis=0).mean())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def bertscore_prf(candidates: Texts, references: Texts, embed: Embed) -> np.ndarray:
    """An (n, 3) array of BERTScore-style precision, recall and F1 (no idf, no rescaling).

    Precision averages, over candidate tokens, the best cosine similarity with any reference token;
    recall does the same from the reference side. Each distinct text is embedded once.
    """
    _check(candidates, references)
    out = np.full((len(candidates), 3), np.nan)
    pairs = [i for i, (c, r) in enumerate(zip(candidates, references, strict=True)) if usable(c) and usable(r)]
    if not pairs:
        return out
    distinct = list(dict.fromkeys(t for i in pairs for t in (candidates[i], references[i])))
    embedded = dict(zip(distinct, embed(distinct), strict=True))
    for i in pairs:
        out[i] = greedy_f1(embedded[candidates[i]], embedded[references[i]])
    return out


def bertscore(candidates: Texts, references: Texts, embed: Embed) -> np.ndarray:
    """BERTScore-style F1 of each pair."""
    return bertscore_prf(candidates, references, embed)[:, 2]


def _values(name: str, x: Texts, y: Texts, resources: Resources) -> tuple[np.ndarray, str | None]:
    """(scores, the model or library that produced them) of one classic metric."""
    if name == "bertscore":
        assert resources.embed is not None  # checked by the registry
        return bertscore(x, y, resources.embed), resources.embed_model
    return {"bleu": bleu, "rouge_l": rouge_l}[name](x, y), LIBRARIES[name]


def classic_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                   negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> pl.DataFrame:
    """SCORES rows of the classic metrics given, on raw review texts; the log-probability columns stay null."""
    base: list[dict[str, Any]] = []
    for cand, refs in reference_sets(candidates, references):
        head = {"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"]}
        if not refs:
            base.append({**head, "reference": None, "x": None, "y": None, "reason": "no_reference"})
        for ref in refs:
            x, y = cand["review_text"], ref["review_text"]
            reason = None if usable(x) else "no_candidate_raw"
            reason = reason or (None if usable(y) else "no_reference_raw")
            base.append({**head, "reference": ref["review_id"], "x": x, "y": y, "reason": reason})
    frames = []
    for metric in metrics:
        values, model = _values(metric.name, [b["x"] for b in base], [b["y"] for b in base], resources) \
            if base else (np.array([]), None)
        frames.append(pl.DataFrame(
            [{k: v for k, v in b.items() if k not in ("x", "y")} | {"metric": metric.name, "score": float(s),
                                                                  "eval_lm": model}
             for b, s in zip(base, values, strict=True)],
            schema={"paper_id": pl.String, "candidate": pl.String, "source": pl.String, "reference": pl.String,
                    "reason": pl.String, "metric": pl.String, "score": pl.Float64, "eval_lm": pl.String}))
    return pl.concat(frames) if frames else pl.DataFrame(schema=SCORES)


register(
    Metric("bleu", "raw", "none", "nothing", True, "sentence BLEU of the raw review texts (sacrebleu)",
           classic_family),
    Metric("rouge_l", "raw", "none", "nothing", True, "ROUGE-L F1 of the raw review texts (rouge-score)",
           classic_family),
    Metric("bertscore", "raw", "none", "embedding", True,
           "BERTScore-style F1 of the raw review texts on MiniLM token embeddings", classic_family),
)
