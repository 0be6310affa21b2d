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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.core.errors import ConfigError
from tasks.lm.batching import batches, map_batches
from tasks.lm.cache import CachedLM, LLMCache, request_key
from tasks.lm.loading import (
    ModelSpec,
    chat_ids,
    chat_spec,
    cpu_has_bf16,
    cuda_available,
    eval_spec,
    eval_specs,
    fast_dtype,
    load_model,
)
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
    from tasks.core.config import LLMConfig, ScoreConfig
    from tasks.lm.encoder import Encoder
    from tasks.lm.local import LocalLM


# base_url schemes that name a server started in this process, e.g. "served:smollm2" for the offline
# demo; tasks/testing/openai_server.py registers "served" (the layer above lm registers, lm never
# imports it).
_BASE_URL_SCHEMES: dict[str, Callable[[str], str]] = {}


def register_base_url_scheme(scheme: str, resolve: Callable[[str], str]) -> None:
    """`base_url = "<scheme>:<name>"` resolves to `resolve(name)` when a model is built."""
    _BASE_URL_SCHEMES[scheme] = resolve


def resolve_base_url(base_url: str | None) -> str | None:
    """The configured base URL, or the URL a registered scheme resolves it to; http(s) URLs unchanged."""
    scheme, sep, name = (base_url or "").partition(":")
    if not sep or scheme in ("http", "https"):
        return None
    if scheme not in _BASE_URL_SCHEMES:
        raise ConfigError(f"base_url {base_url!r}: unknown scheme {scheme!r} (an http(s) URL, or one of "
                          f"{sorted(_BASE_URL_SCHEMES) or 'none registered'})")
    return _BASE_URL_SCHEMES[scheme](name)


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
    """The OpenAI-compatible backend (`api = "completions"`: with log-likelihoods); a base_url of a
    registered scheme ("served:<model>") is resolved first."""
    if base_url is None:
        base_url = resolve_base_url(cfg.base_url)
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
    "cpu_has_bf16",
    "cuda_available",
    "embedder",
    "eval_lm",
    "eval_model",
    "eval_spec",
    "eval_specs",
    "fast_dtype",
    "load_model",
    "local_lm",
    "make_lm",
    "openai_backend",
    "register_base_url_scheme",
    "resolve_base_url",
    "map_batches",
    "request_key",
]
