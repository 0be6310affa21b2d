"""The settings of a language-model backend, shared by every stage that calls an LLM (preprocess,
generate, the score stage's oracle, judges and reviser, validate's rewriters, qualify's rewriter).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.core.config_base import BackendName, Frozen

Quantization = Literal["none", "nf4", "int8"]   # how a local model's weights are held (tasks/lm/loading.py)


class LLMConfig(Frozen):
    """Settings shared by every stage that calls an LLM (preprocess, generate, perturbations)."""

    backend: BackendName = "local"     # a name of the backend registry (tasks/lm/backends.py)
    model: str = "smollm2"                # local: "smollm2" (embedded), a path or a model id
    max_tokens: int = Field(512, ge=1, le=1_000_000)
    use_batches: bool = True              # anthropic: Message Batches API for bulk work
    max_in_flight: int = Field(8, ge=1, le=1024)   # anthropic: concurrent requests
    max_retries: int = Field(5, ge=0, le=100)
    poll_seconds: float = Field(30.0, gt=0, le=86400)
    load_in_4bit: bool = False            # local on CUDA: NF4 via bitsandbytes
    # local: "int8" (CPU only) is torch's dynamic int8 on every linear layer (reviews decode 2.8x float32's speed);
    # "nf4" is load_in_4bit; part of every cache key
    quantization: Quantization = "none"
    # local backend: "auto" is bfloat16 where the hardware computes it natively
    # (CUDA, a CPU with avx512_bf16 / amx_bf16), float32 elsewhere; part of every cache key
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    input_price_per_mtok: float = Field(3.0, ge=0)    # USD per million input tokens
    output_price_per_mtok: float = Field(15.0, ge=0)  # USD per million output tokens
    cache_read_price_per_mtok: float = Field(0.3, ge=0)  # USD per million prompt-cache read tokens
    batch_size: int = Field(8, ge=1, le=4096)      # local: prompts per generate() call
    # local: padded tokens per log-likelihood forward batch (the sentence unit's readouts of each opening);
    # a batch's attention and MLP buffers grow with it, so a CPU with little memory takes a smaller one
    token_budget: int = Field(4096, ge=64, le=10_000_000)
    # local: each prompt decoded alone, with no prefix kept from an earlier call, so an answer depends on
    # its prompt only (batched int8 quantizes a batch's activations with one scale, and a batch's float
    # sums run in another order): a run killed and resumed decodes what an uninterrupted run did. Slower
    # (one row a step); batch_size is then 1
    batch_invariant: bool = False
    # local: an answer whose last tokens repeat one block over and over (4 times, 64 tokens or more) stops
    # there, cut off and marked (tasks/lm/loops.py): a small model's loops ran to max_tokens; part of the key
    stop_loops: bool = True
    retry_max_seconds: float = Field(60.0, ge=0, le=86400)  # anthropic, openai: ceiling of one back-off wait
    # anthropic, openai: seconds one HTTP request may take (connect and answer); past it the request
    # fails as transient (retried), so a server that accepts and never answers cannot hold a stage
    timeout_seconds: float = Field(300.0, gt=0, le=86400)
    # anthropic, openai: the longest a backend goes on retrying while no request is answered; past it
    # the stage fails with one line naming the server (a server that drops every connection)
    retry_budget_seconds: float = Field(120.0, gt=0, le=7 * 86400)
    # anthropic, openai: the most one stage may spend on failed requests and their back-off waits in
    # all (summed over requests, answered ones in between do not reset it); past it the stage fails
    # with one line naming the server (a server failing every other request)
    retry_total_seconds: float = Field(1800.0, gt=0, le=30 * 86400)
    # openai (any OpenAI-compatible server: OpenAI, Gemini, DeepSeek, vLLM, SGLang, Ollama):
    base_url: str | None = None           # e.g. "https://api.openai.com/v1"; "served:smollm2": the
                                          # embedded model behind the local OpenAI-compatible server
    api_key_env: str = "OPENAI_API_KEY"   # the NAME of the variable holding the key; "" sends none
    temperature: float | Literal["default"] = 0.0  # "default": not sent (models that accept only theirs)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    continue_final_message: bool = False  # vLLM / SGLang: the answer's start is sent and continued
    # "completions": log-likelihoods too, through /v1/completions with echoed prompt log-probabilities
    # (vLLM, SGLang; tasks/lm/completions.py); "chat": Chat Completions only
    api: Literal["chat", "completions"] = "chat"
    tokenizer: str | None = None          # completions: the served model's tokenizer (a local path, a model
                                          # id or "smollm2"); None: `model` ("served:<m>": <m>)

    @property
    def in_process(self) -> bool:
        """base_url "<scheme>:<model>": a local model behind a server this process starts."""
        scheme, sep, _ = (self.base_url or "").partition(":")
        return bool(sep) and scheme not in ("http", "https")

    @model_validator(mode="after")
    def _settings_the_backend_reads(self) -> LLMConfig:
        if self.backend == "openai" and self.model == "smollm2" and not self.in_process:
            raise ValueError('backend = "openai" sends `model` to the server: name the served model (e.g. gpt-5, '
                             'deepseek-chat, the id a vLLM server serves), or set base_url = "served:smollm2"')
        if self.batch_invariant and self.backend != "local" and not self.in_process:
            raise ValueError(f"batch_invariant = true shapes local decoding only; backend = {self.backend!r} "
                             "decodes on its server: remove it")
        return self
