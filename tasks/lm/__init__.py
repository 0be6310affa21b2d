"""The one language-model layer: every stage talks to a model through `LanguageModel`.

    make_lm(cfg, cache_dir)   the configured chat backend (local, Anthropic or OpenAI-compatible) behind the answer cache
    eval_lm(score_cfg)        the evaluation LM, for log-likelihoods (one per process)
    eval_model(spec)          the model behind an evaluation-LM spec: local weights or a completions server
    embedder()                the MiniLM sentence encoder, for embeddings (one per process)

Modules: types (requests, results, the protocol, usage and cost), loading (ModelSpec, its one
device / dtype / quantization policy, the loader, the chat-template encoder), batching (the one
batching helper), local (transformers: generate + loglikelihood), loglikelihood (the prefix-sharing
engine), line_prefixes (constrained decoding), encoder (MiniLM: embed), anthropic_api and openai_api (generate), completions (log-likelihoods from a completions server),
cache (SQLite answer cache and `CachedLM`, which wraps any backend). Backends and torch are
imported only when a model is asked for.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.config import LLMConfig, ScoreConfig
from tasks.lm.batching import batches, map_batches
from tasks.lm.cache import CachedLM, LLMCache, request_key
from tasks.lm.loading import ModelSpec, chat_ids, chat_spec, cuda_available, eval_spec, load_model
from tasks.lm.types import (
    ChatRequest,
    ChatResult,
    LanguageModel,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    TransientLLMError,
    Unsupported,
    Usage,
    cost_usd,
)

if TYPE_CHECKING:
    from tasks.lm.encoder import Encoder
    from tasks.lm.local import LocalLM


def make_lm(cfg: LLMConfig, cache_dir: Path, base_url: str | None = None) -> CachedLM:
    """The configured backend behind the content-addressed answer cache under `cache_dir`."""
    cache = LLMCache(Path(cache_dir) / "llm.sqlite")
    inner: LanguageModel
    if cfg.backend == "anthropic":
        from tasks.lm.anthropic_api import AnthropicLM

        inner = AnthropicLM(cfg, base_url=base_url, batch_store=cache)
    elif cfg.backend == "openai":
        inner = openai_backend(cfg, base_url, batch_store=cache)
    else:
        from tasks.lm.local import LocalLM

        inner = LocalLM(chat_spec(cfg), batch_size=cfg.batch_size)
    return CachedLM(inner, cache, cfg)


def openai_backend(cfg: LLMConfig, base_url: str | None = None, batch_store: LLMCache | None = None) -> LanguageModel:
    """The OpenAI-compatible backend (`api = "completions"`: with log-likelihoods); base_url
    "served:<model>" starts the local server on that model (tasks/testing/openai_server.py)."""
    if base_url is None and (cfg.base_url or "").startswith("served:"):   # the offline demo
        from tasks.testing.openai_server import serve_local_model

        base_url = serve_local_model(cfg.base_url.removeprefix("served:"))
    if cfg.api == "completions":
        from tasks.lm.completions import CompletionsLM

        return CompletionsLM(cfg, base_url=base_url, batch_store=batch_store)
    from tasks.lm.openai_api import OpenAILM

    return OpenAILM(cfg, base_url=base_url, batch_store=batch_store)


_BUILDING = threading.Lock()


def local_lm(spec: ModelSpec, token_budget: int = 4096) -> LocalLM:
    """The local LM for `spec`, built once per process (with its log-likelihood engine and prefix
    caches), also when several scoring threads of one worker ask for it at the same time."""
    with _BUILDING:
        return _local_lm(spec, token_budget)


@functools.lru_cache(maxsize=2)
def _local_lm(spec: ModelSpec, token_budget: int) -> LocalLM:
    from tasks.lm.local import LocalLM

    return LocalLM(spec, token_budget=token_budget)


def eval_model(spec: ModelSpec, token_budget: int = 4096, cache_dir: Path | None = None) -> LanguageModel:
    """The model behind an evaluation-LM spec, for log-likelihoods and readouts: the local LM
    (`local_lm`), or the completions server of `spec.server`, built once per process and, with a
    `cache_dir`, behind the answer cache there (tasks/lm/completions.py)."""
    if spec.server is None:
        return local_lm(spec, token_budget)
    with _BUILDING:
        return _served(spec.server, None if cache_dir is None else str(cache_dir))


@functools.lru_cache(maxsize=4)
def _served(cfg: LLMConfig, cache_dir: str | None) -> LanguageModel:
    if cache_dir is None:
        return openai_backend(cfg)
    return make_lm(cfg, Path(cache_dir))


def eval_lm(cfg: ScoreConfig) -> LanguageModel:
    """The evaluation LM the score config names (`eval_spec`), for log-likelihoods."""
    return eval_model(eval_spec(cfg), cfg.token_budget)


@functools.cache
def embedder() -> Encoder:
    """The MiniLM sentence encoder (embed only), one per process."""
    from tasks.lm.encoder import Encoder

    return Encoder()


__all__ = [
    "CachedLM",
    "ChatRequest",
    "ChatResult",
    "LLMCache",
    "LanguageModel",
    "LoglikelihoodRequest",
    "LoglikelihoodResult",
    "ModelSpec",
    "TransientLLMError",
    "Unsupported",
    "Usage",
    "batches",
    "chat_ids",
    "chat_spec",
    "cost_usd",
    "cuda_available",
    "embedder",
    "eval_lm",
    "eval_model",
    "eval_spec",
    "load_model",
    "local_lm",
    "make_lm",
    "openai_backend",
    "map_batches",
    "request_key",
]
