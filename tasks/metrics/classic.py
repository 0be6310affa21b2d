"""Classic reference-based text metrics: BLEU, ROUGE-L and two BERTScore-style F1s on MiniLM.

Each pair function scores many (candidate, reference) texts at once and returns a float64 array in
the input order; higher is better for all. A missing or blank text on either side gives NaN (an
expected gap, not a zero). BLEU and ROUGE-L come from sacrebleu and rouge-score. The BERTScores
greedily match unit vectors by cosine (precision over the candidate's units, recall over the
reference's, F1 their harmonic mean; no idf, no baseline rescaling), on the all-MiniLM-L6-v2 model
shipped offline (`resources.embed`, tasks/metrics/resources.py), and are named for it:

* `bertscore_minilm`: BERTScore as GEM ran it (appendix D.3): each review is split into sentences,
  each sentence embedded on its own (the mean of its MiniLM token vectors, normalised: the model's
  sentence embedding), and the sentences matched (GEM used stella_en_400M_v5; this is MiniLM);
* `bertscore_tokens_minilm`: BERTScore's own token matching (Zhang et al.), on MiniLM token vectors
  in place of roberta-large (the Scoring Rules paper's choice).

The family scores the raw review texts of each candidate against its paper's other reviews.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.core.frames import reference_sets, usable
from tasks.core.schema import SCORES
from tasks.metrics.registry import EMBEDDING, NOTHING, Embed, FamilyResult, Metric, Resources, register_family

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
    """ROUGE-L F1 (rouge-score, longest common subsequence over Porter-stemmed lower-cased words), computed in
    the worker of tasks/core/children.py: rouge-score's stemmer imports all of nltk, which the run's own process
    would keep to its end."""
    from tasks.core.children import call_apart

    _check(candidates, references)
    pairs = [(c, r) if usable(c) and usable(r) else None for c, r in zip(candidates, references, strict=True)]
    if not any(pairs):
        return np.full(len(pairs), np.nan)
    return np.array(call_apart(f"ROUGE-L of {len(pairs)} pairs", rouge_l_here, pairs), dtype=np.float64)


def rouge_l_here(pairs: Sequence[tuple[str, str] | None]) -> list[float]:
    """ROUGE-L F1 of each (candidate, reference) pair in this process; NaN for None."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(pair[1], pair[0])["rougeL"].fmeasure if pair else np.nan for pair in pairs]


def greedy_f1(candidate: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    """(precision, recall, F1) of greedy cosine matching between two sets of unit token vectors."""
    if len(candidate) == 0 or len(reference) == 0:
        return np.nan, np.nan, np.nan
    sim = candidate @ reference.T
    precision = float(sim.max(axis=1).mean())
    recall = float(sim.max(axis=0).mean())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def _greedy_prf(candidates: Texts, references: Texts, vectors: Embed) -> np.ndarray:
    """(n, 3) greedy precision, recall and F1 of each usable pair's vectors (`vectors` maps texts to
    one matrix each); each distinct text goes through `vectors` once; NaN rows for unusable pairs."""
    _check(candidates, references)
    out = np.full((len(candidates), 3), np.nan)
    pairs = [i for i, (c, r) in enumerate(zip(candidates, references, strict=True)) if usable(c) and usable(r)]
    if not pairs:
        return out
    distinct = list(dict.fromkeys(t for i in pairs for t in (candidates[i], references[i])))
    embedded = dict(zip(distinct, vectors(distinct), strict=True))
    for i in pairs:
        out[i] = greedy_f1(embedded[candidates[i]], embedded[references[i]])
    return out


def bertscore_prf(candidates: Texts, references: Texts, embed: Embed) -> np.ndarray:
    """An (n, 3) array of BERTScore-style precision, recall and F1 (no idf, no rescaling).

    Precision averages, over candidate tokens, the best cosine similarity with any reference token;
    recall does the same from the reference side. Each distinct text is embedded once.
    """
    return _greedy_prf(candidates, references, embed)


def bertscore(candidates: Texts, references: Texts, embed: Embed) -> np.ndarray:
    """BERTScore-style F1 of each pair (token matching)."""
    return bertscore_prf(candidates, references, embed)[:, 2]


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)]|#{1,6})\s*")


def sentences(text: str) -> list[str]:
    """The sentences of a review: each line (a list item, a heading's text, a paragraph) split after a
    full stop, question or exclamation mark that a capital or a digit follows; list marks dropped."""
    out = []
    for line in text.splitlines():
        line = _LIST_MARK.sub("", line).strip()
        out += [s.strip() for s in _SENTENCE_END.split(line) if len(re.findall(r"\w+", s)) >= 1]
    return out


def sentence_vectors(texts: Sequence[str], embed: Embed) -> list[np.ndarray]:
    """One (sentences x dim) matrix of unit sentence vectors per text: each sentence's normalised mean token vector."""
    split = [sentences(t) for t in texts]
    flat = list(dict.fromkeys(s for parts in split for s in parts))
    pooled: dict[str, np.ndarray] = {}
    for sentence, tokens in zip(flat, embed(flat) if flat else [], strict=True):
        mean = tokens.mean(axis=0) if len(tokens) else np.zeros(tokens.shape[1])
        norm = float(np.linalg.norm(mean))
        pooled[sentence] = mean / norm if norm > 0 else mean
    return [np.stack([pooled[s] for s in parts]) if parts else np.zeros((0, 1)) for parts in split]


def bertscore_sentences_prf(candidates: Texts, references: Texts, embed: Embed) -> np.ndarray:
    """An (n, 3) array of precision, recall and F1 of greedy cosine matching between the candidate's
    and the reference's sentence vectors (GEM's BERTScore); each distinct text is embedded once."""
    return _greedy_prf(candidates, references, lambda texts: sentence_vectors(texts, embed))


def _values(name: str, x: Texts, y: Texts, resources: Resources) -> tuple[np.ndarray, str | None]:
    """(scores, the model or library that produced them) of one classic metric."""
    if name in ("bertscore_minilm", "bertscore_tokens_minilm"):
        assert resources.embed is not None  # checked by the registry
        prf = bertscore_sentences_prf if name == "bertscore_minilm" else bertscore_prf
        return prf(x, y, resources.embed)[:, 2], resources.embed_model
    return {"bleu": bleu, "rouge_l": rouge_l}[name](x, y), LIBRARIES[name]


def classic_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                   negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the classic metrics given, on raw review texts; the log-probability columns stay null."""
    base = raw_pairs(candidates, references)
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
    return FamilyResult(pl.concat(frames) if frames else pl.DataFrame(schema=SCORES))


register_family(
    classic_family, NOTHING,
    ("bleu", "raw", "none", "sentence BLEU of the raw review texts (sacrebleu)"),
    ("rouge_l", "raw", "none", "ROUGE-L F1 of the raw review texts (rouge-score)"),
)
register_family(
    classic_family, EMBEDDING,
    ("bertscore_minilm", "raw", "none",
     "BERTScore as GEM ran it: F1 of greedy cosine matching between the raw reviews' sentences, each "
     "embedded on its own by all-MiniLM-L6-v2 (GEM used stella_en_400M_v5); no idf"),
    ("bertscore_tokens_minilm", "raw", "none",
     "BERTScore's token matching: F1 of greedy cosine matching between the raw reviews' all-MiniLM-L6-v2 "
     "token vectors (BERTScore used roberta-large); no idf, no rescaling"),
)


def raw_pairs(candidates: pl.DataFrame, references: pl.DataFrame) -> list[dict[str, Any]]:
    """One row per (candidate, reference) of raw review texts: `x` the candidate's, `y` the reference's,
    and the `reason` a pair cannot be scored (no reference, an empty text on either side)."""
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
    return base
