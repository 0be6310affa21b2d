"""BARTScore (Yuan et al. 2021), as GEM's Tables 1-2 report it: precision, recall and F1.

A seq2seq model scores a text y given a text x by the mean log-probability of y's tokens (the
end-of-sequence token included) under teacher forcing:

    s(x -> y) = 1/|y| sum_t log p(y_t | y_<t, x)

Per (candidate c, reference r) pair, on the raw review texts:

    bartscore_seq2seq_precision = s(r -> c)    how well the reference explains the candidate
    bartscore_seq2seq_recall    = s(c -> r)    how well the candidate explains the reference
    bartscore_seq2seq_f1        = (precision + recall) / 2   (the arithmetic mean, as BARTScore defines its F score)

The model is `[score] bartscore_model`: any model `AutoModelForSeq2SeqLM` loads (a folder or a model
id; BARTScore used facebook/bart-large-cnn, GEM used its evaluation LM). Without one the metrics
cannot run, and the run says so before scoring (`MissingResource`). Texts longer than the model's
positions are cut to them (as BARTScore does); all three values are <= 0, higher is better.

`bartscore_precision` / `_recall` / `_f1` are the same three on the causal evaluation LM, as GEM
computes them (GEM section 4): the source review is quoted in the prompt and the target review is
the answer, scored by the log-likelihood engine and its shards like GEM; they need no extra model.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.metrics.classic import raw_pairs
from tasks.metrics.registry import (
    LM_LOGPROBS,
    SEQ2SEQ,
    FamilyResult,
    Metric,
    Resources,
    register_family,
    scores_frame,
    usable,
)

BATCH_SIZE = 8


class Seq2SeqScorer:
    """A seq2seq model (loaded on first use) that gives s(x -> y) for many pairs at once."""

    def __init__(self, name: str, device: str | None = None) -> None:
        self.name = name
        self.device = device
        self._loaded: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    def _model(self) -> tuple[Any, Any]:
        with self._lock:
            if self._loaded is None:
                import torch
                from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

                try:
                    tokenizer = AutoTokenizer.from_pretrained(self.name)
                    model = AutoModelForSeq2SeqLM.from_pretrained(self.name).eval()
                except (OSError, ValueError) as error:
                    raise RuntimeError(f"bartscore_model {self.name!r} is not a seq2seq model that can be loaded "
                                       f"here: {str(error).splitlines()[0]}") from error
                from tasks.lm.devices import pinned

                device = pinned(self.device or ("cuda" if torch.cuda.is_available() else "cpu"))   # this worker's GPU
                self._loaded = (model.to(device), tokenizer)
            return self._loaded

    def max_length(self) -> int:
        model, tokenizer = self._model()
        limits = [getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length]
        return min(int(v) for v in limits if isinstance(v, int) and 0 < v < 10**6) if any(
            isinstance(v, int) and 0 < v < 10**6 for v in limits) else 1024

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
        """s(source -> target) of each pair: mean log-probability per target token, in nats."""
        import torch

        model, tokenizer = self._model()
        limit = self.max_length()
        out = np.full(len(sources), np.nan)
        order = sorted(range(len(sources)), key=lambda i: -len(sources[i]) - len(targets[i]))   # longest first
        with torch.inference_mode():
            for start in range(0, len(order), BATCH_SIZE):
                idx = order[start:start + BATCH_SIZE]
                enc = tokenizer([sources[i] for i in idx], max_length=limit, truncation=True, padding=True,
                                return_tensors="pt").to(model.device)
                dec = tokenizer(text_target=[targets[i] for i in idx], max_length=limit, truncation=True,
                                padding=True, return_tensors="pt").to(model.device)
                labels = dec["input_ids"].masked_fill(dec["attention_mask"] == 0, -100)
                logits = model(**enc, labels=labels).logits.float()
                logp = torch.log_softmax(logits, dim=-1)
                mask = labels != -100
                picked = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
                means = picked.sum(-1) / mask.sum(-1).clamp(min=1)
                out[idx] = means.double().cpu().numpy()
        return out


def bartscore_prf(scorer: Seq2SeqScorer, candidates: Sequence[str | None], references: Sequence[str | None]) -> np.ndarray:
    """An (n, 3) array of precision s(r -> c), recall s(c -> r) and F1 (their mean); NaN where a text is missing."""
    out = np.full((len(candidates), 3), np.nan)
    pairs = [i for i, (c, r) in enumerate(zip(candidates, references, strict=True)) if usable(c) and usable(r)]
    if not pairs:
        return out
    cands = [candidates[i] or "" for i in pairs]
    refs = [references[i] or "" for i in pairs]
    both = scorer.score(refs + cands, cands + refs)
    precision, recall = both[: len(pairs)], both[len(pairs):]
    out[pairs, 0], out[pairs, 1], out[pairs, 2] = precision, recall, (precision + recall) / 2
    return out


COLUMN = {"bartscore_seq2seq_precision": 0, "bartscore_seq2seq_recall": 1, "bartscore_seq2seq_f1": 2}


def bartscore_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                     negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the BARTScore metrics given, on the raw review texts: one model pass for all three."""
    scorer: Seq2SeqScorer = resources.seq2seq
    base = raw_pairs(candidates, references)
    values = bartscore_prf(scorer, [b["x"] for b in base], [b["y"] for b in base]) if base else np.zeros((0, 3))
    rows = [{**{k: v for k, v in b.items() if k not in ("x", "y")}, "metric": m.name,
             "score": float(values[i, COLUMN[m.name]]), "eval_lm": scorer.name}
            for m in metrics for i, b in enumerate(base)]
    return FamilyResult(scores_frame(rows))


register_family(
    bartscore_family, SEQ2SEQ,
    ("bartscore_seq2seq_precision", "raw", "none",
     "BARTScore precision: mean log-probability per token of the candidate's raw review given a human "
     "reference, under the seq2seq model [score] bartscore_model"),
    ("bartscore_seq2seq_recall", "raw", "none",
     "BARTScore recall: mean log-probability per token of the reference given the candidate "
     "([score] bartscore_model)"),
    ("bartscore_seq2seq_f1", "raw", "none",
     "BARTScore F1: the mean of bartscore_seq2seq_precision and bartscore_seq2seq_recall ([score] bartscore_model)"),
)


# -- BARTScore on the causal evaluation LM, as GEM computes it (GEM paper, section 4) ------------------
# GEM scores BARTScore with its evaluation LM instead of BART. A causal LM has no encoder, so the
# source text goes into the prompt and the target is the answer: s(x -> y) = log p(y | prompt(x)) / |y|
# through the same log-likelihood engine and shards as GEM (the end-of-turn token counted, as GEM's
# requests count it). The prompt is the project's own.
LM_SYSTEM = "You read peer reviews of research papers."
LM_USER = "Here is one review of a paper:\n\n{source}\n\nWrite another review of the same paper."
LM_COLUMN = {"bartscore_precision": 0, "bartscore_recall": 1, "bartscore_f1": 2}


def lm_request(eval_lm: str, source: str, target: str) -> dict[str, str]:
    """The LOGLIK_REQUESTS row of s(source -> target) on the evaluation LM."""
    from tasks.metrics.gem import request_key

    user = LM_USER.format(source=source)
    return {"key": request_key(eval_lm, LM_SYSTEM, user, target), "system": LM_SYSTEM, "user": user,
            "continuation": target}


def bartscore_lm_family(metrics: Sequence[Metric], candidates: pl.DataFrame, references: pl.DataFrame,
                        negatives: pl.DataFrame | None, synopses: pl.DataFrame, resources: Resources) -> FamilyResult:
    """SCORES rows of the causal BARTScore metrics: per pair s(r -> c) (precision) and s(c -> r)
    (recall) as one batch of log-likelihood requests, F1 their mean."""
    from tasks.core.schema import LOGLIK_REQUESTS, TRUNCATED_REASON, with_truncated

    assert resources.eval_lm is not None and resources.loglikelihood is not None  # checked by the registry
    eval_lm = resources.eval_lm
    base = raw_pairs(candidates, references)
    scorable = [b for b in base if b["reason"] is None]
    requests = {r["key"]: r for b in scorable
                for r in (lm_request(eval_lm, b["y"], b["x"]), lm_request(eval_lm, b["x"], b["y"]))}
    frame = pl.DataFrame(list(requests.values()), schema=LOGLIK_REQUESTS).sort("key")
    results = with_truncated(resources.loglikelihood(frame)) if frame.height else None
    found = {k: (lp, n, cut) for k, lp, n, cut in results.select("key", "logprob", "n_tokens", "truncated").iter_rows()
             } if results is not None else {}
    rows = []
    for b in base:
        values, tokens, cut = [math.nan] * 3, None, False
        if b["reason"] is None:
            (lp_p, n_p, cut_p), (lp_r, n_r, cut_r) = (found[lm_request(eval_lm, b["y"], b["x"])["key"]],
                                                      found[lm_request(eval_lm, b["x"], b["y"])["key"]])
            values = [lp_p / n_p, lp_r / n_r, (lp_p / n_p + lp_r / n_r) / 2]
            tokens, cut = n_p, bool(cut_p or cut_r)
        head = {k: v for k, v in b.items() if k not in ("x", "y", "reason")}
        for m in metrics:
            rows.append({**head, "metric": m.name, "score": values[LM_COLUMN[m.name]], "n_tokens": tokens,
                         "eval_lm": eval_lm, "reason": TRUNCATED_REASON if cut else b["reason"]})
    return FamilyResult(scores_frame(rows))


register_family(
    bartscore_lm_family, LM_LOGPROBS,
    ("bartscore_precision", "raw", "none",
     "BARTScore precision on the evaluation LM (as GEM computes it): mean log-probability per token of "
     "the candidate's raw review as the answer to a prompt quoting a human reference"),
    ("bartscore_recall", "raw", "none",
     "BARTScore recall on the evaluation LM: mean log-probability per token of the reference given the "
     "candidate"),
    ("bartscore_f1", "raw", "none", "BARTScore F1 on the evaluation LM: the mean of bartscore_precision and bartscore_recall"),
)
