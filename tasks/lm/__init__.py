"""The one language-model layer: every stage talks to a model through `LanguageModel`.

    make_lm(cfg, cache_dir)   the backend the config names (tasks/lm/backends.py) behind the answer cache
    runs_locally(cfg)         whether a config's model is local weights (token counts, readouts: `local_spec`)
    eval_lm(score_cfg)        the evaluation LM, for log-likelihoods (one per process)
    eval_model(spec)          the model behind an evaluation-LM spec: local weights or a completions server
    embedder()                the MiniLM sentence encoder, for embeddings (one per process)

Modules: types (requests, results, the protocol, usage and cost), loading (ModelSpec, its one
device / dtype / quantization policy, the loader, the chat-template encoder), batching (the one
batching helper), cpu (the CPU's flags: bfloat16 units or not), wide_bf16 (bfloat16 linear layers on float32 matmuls where there are none), local (transformers: generate + loglikelihood), loglikelihood (the prefix-sharing
engine), line_prefixes (constrained decoding), encoder (MiniLM: embed), anthropic_api and openai_api (generate), completions (log-likelihoods from a completions server),
cache (SQLite answer cache and `CachedLM`, which wraps any backend), backends (the registry of backends
by name, and base URLs of a server started in this process). Backends and torch are
imported only when a model is asked for.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.core.errors import ConfigError
from tasks.lm.backends import (
    BACKENDS,
    backend_name,
    build_backend,
    register_base_url_scheme,
    resolve_base_url,
    runs_locally,
)
from tasks.lm.batching import batches, map_batches
from tasks.lm.cache import CachedLM, LLMCache, request_key
from tasks.lm.cpu import cpu_has_bf16
from tasks.lm.loading import (
    ModelSpec,
    chat_ids,
    chat_spec,
    cuda_available,
    eval_spec,
    eval_specs,
    fast_dtype,
    load_model,
    release_models,
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


def make_lm(cfg: LLMConfig, cache_dir: Path, base_url: str | None = None) -> CachedLM:
    """The backend `cfg` names (tasks/lm/backends.py) behind the content-addressed answer cache under `cache_dir`."""
    cache = LLMCache(Path(cache_dir) / "llm.sqlite")
    return CachedLM(build_backend(cfg, base_url, batch_store=cache), cache, cfg)


def openai_backend(cfg: LLMConfig, base_url: str | None = None, batch_store: LLMCache | None = None) -> LanguageModel:
    """The OpenAI-compatible backend (`api = "completions"`: with log-likelihoods), uncached; a base_url
    of a registered scheme ("<scheme>:<model>") is resolved first."""
    if cfg.backend != "openai":
        raise ConfigError(f"backend {cfg.backend!r}: an OpenAI-compatible server needs backend = \"openai\"")
    return build_backend(cfg, base_url, batch_store=batch_store)


def local_spec(cfg: LLMConfig) -> ModelSpec | None:
    """The local weights behind `cfg` (`chat_spec`) when it runs locally (`runs_locally`), else None:
    what a stage loads a tokenizer or a readout engine from."""
    return chat_spec(cfg) if runs_locally(cfg) else None


_BUILDING = threading.Lock()


_LOCAL_LMS: dict[tuple[ModelSpec, int], LocalLM] = {}   # oldest use first, at most two


def local_lm(spec: ModelSpec, token_budget: int = 4096) -> LocalLM:
    """The local LM for `spec`, built once per process (with its log-likelihood engine and prefix
    caches), also when several scoring threads of one worker ask for it at the same time."""
    from tasks.lm.local import LocalLM

    with _BUILDING:
        built = _LOCAL_LMS.pop((spec, token_budget), None) or LocalLM(spec, token_budget=token_budget)
        _LOCAL_LMS[spec, token_budget] = built
        while len(_LOCAL_LMS) > 2:
            del _LOCAL_LMS[next(iter(_LOCAL_LMS))]
        return built


def release_engines() -> int:
    """Drop the local LMs `local_lm` built, with every thread's log-likelihood engine and its prefix
    caches (a few KV caches of up to a thousand tokens each, per thread that scored): between two stages
    they are memory the next stage would only fill anew. The weights stay loaded (`load_model`); the
    next `local_lm` builds a fresh one at no cost. How many were dropped."""
    import gc

    with _BUILDING:
        dropped = len(_LOCAL_LMS)
        _LOCAL_LMS.clear()
    gc.collect()
    return dropped


def release_decoding_models() -> list[ModelSpec]:
    """Drop the int8 models this process holds, and the local LMs built on them. An int8 model only
    decodes (its log-likelihoods come from the float weights: tasks/lm/local.py), so once no stage
    left in a run decodes, it is memory no table needs: 0.27 GiB for SmolLM2-135M, about a tenth of
    the demo's peak. A later call to decode loads it again. The specs dropped."""
    import gc

    gone = release_models(lambda spec: spec.quantization == "int8")
    with _BUILDING:
        for key in [key for key in _LOCAL_LMS if key[0].resolved() in gone]:
            del _LOCAL_LMS[key]
    gc.collect()
    return gone


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
    "BACKENDS",
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
    "backend_name",
    "batches",
    "build_backend",
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
    "release_decoding_models",
    "release_engines",
    "local_lm",
    "local_spec",
    "make_lm",
    "openai_backend",
    "register_base_url_scheme",
    "resolve_base_url",
    "runs_locally",
    "map_batches",
    "request_key",
]
