"""The local backend: a transformers chat model with greedy decoding.

Prompts go through the model's chat template and are generated in batches, longest first so an
out-of-memory error shows up on the first batch, with left padding so every row's answer starts
at the same column; results are put back in input order. A prompt that does not fit the model's
context is an error result, never silently cut. `load_in_4bit` asks for NF4 weights through
bitsandbytes, which needs CUDA; on a CPU-only machine it is refused with a clear error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tasks.config import LLMConfig
from tasks.llm.base import ChatRequest, ChatResult
from tasks.models import ModelSpec, cuda_available, load_causal_lm

log = logging.getLogger(__name__)


def model_spec(cfg: LLMConfig) -> ModelSpec:
    """The ModelSpec the config asks for; 4-bit only where CUDA is present."""
    if cfg.load_in_4bit:
        if not cuda_available():
            raise ValueError("load_in_4bit = true needs CUDA (bitsandbytes NF4); set it to false on CPU")
        return ModelSpec(name=cfg.model, quantization="nf4", device="cuda")
    return ModelSpec(name=cfg.model)


class LocalBackend:
    name = "local"

    def __init__(self, cfg: LLMConfig, spec: ModelSpec | None = None) -> None:
        self.cfg = cfg
        self.spec = spec or model_spec(cfg)
        self.model = self.spec.name
        self.identity = f"local|{self.spec.resolved().key}"
        self.generated_tokens = 0
        self.generate_seconds = 0.0

    def _loaded(self) -> tuple[Any, Any]:
        return load_causal_lm(self.spec)

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """Token ids of the chat-formatted prompt, ending where the assistant's answer begins."""
        _, tokenizer = self._loaded()
        messages = [{"role": "system", "content": request.system}, {"role": "user", "content": request.user}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + request.prefill
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        if not requests:
            return []
        model, _ = self._loaded()
        context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        prompts = [self.prompt_ids(request) for request in requests]
        results: list[ChatResult | None] = [None] * len(requests)
        runnable = []
        for i, (request, ids) in enumerate(zip(requests, prompts, strict=True)):
            if context and len(ids) + request.max_tokens > context:
                results[i] = ChatResult(
                    "", input_tokens=len(ids), model=self.model,
                    error=f"prompt of {len(ids)} tokens + max_tokens {request.max_tokens} exceeds the "
                          f"model context of {context}",
                )
            else:
                runnable.append(i)
        runnable.sort(key=lambda i: len(prompts[i]), reverse=True)
        size = self.cfg.batch_size
        for start in range(0, len(runnable), size):
            chunk = runnable[start : start + size]
            answers = self._generate([prompts[i] for i in chunk], [requests[i].max_tokens for i in chunk])
            for i, result in zip(chunk, answers, strict=True):
                results[i] = replace(result, text=requests[i].prefill + result.text)
        return [result for result in results if result is not None]

    def _generate(self, prompts: list[list[int]], limits: list[int]) -> list[ChatResult]:
        """Greedy answers for one batch. Greedy decoding is deterministic, so generating up to
        the largest limit and cutting each row at its own limit equals generating each alone."""
        import torch

        model, tokenizer = self._loaded()
        width = max(len(ids) for ids in prompts)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
        device = next(model.parameters()).device
        started = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(limits),
                do_sample=False,
                pad_token_id=pad,
            )
        self.generate_seconds += time.perf_counter() - started
        stops = {tokenizer.eos_token_id, pad} | set(_ids(getattr(model.generation_config, "eos_token_id", None)))
        results = []
        for row, ids, limit in zip(output[:, width:].tolist(), prompts, limits, strict=True):
            row = row[:limit]
            end = next((k for k, token in enumerate(row) if token in stops), None)
            answer = row if end is None else row[:end]
            self.generated_tokens += len(answer)
            results.append(
                ChatResult(
                    tokenizer.decode(answer, skip_special_tokens=True),
                    input_tokens=len(ids),
                    output_tokens=len(answer),
                    model=self.model,
                    truncated=end is None,
                )
            )
        return results

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0


def _ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)
