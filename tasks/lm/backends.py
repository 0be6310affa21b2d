"""Backends by name, and base URLs that name a server started in this process.

    BACKENDS              backend name -> "module:Class" (as lm-evaluation-harness's model registry);
                          each class builds itself from an `LLMConfig` with `from_config`
    backend_name(cfg)     the registry name of a config: its `backend`, "completions" for an
                          OpenAI-compatible server with `api = "completions"`
    build_backend(...)    the backend a config names, its module imported only then (torch, SDKs)
    runs_locally(cfg)     whether the config's model runs on this machine's weights (token counts
                          and readouts at hand), so a stage asks this, never the backend's name

A base URL "<scheme>:<model>" whose scheme is not http(s) names a server the layer above starts in
this process for the local `model` (the offline demo's "served:smollm2"): `register_base_url_scheme`
says how to start it, and the LM layer knows no scheme by name. Such a server is keyed by the
scheme and the local model's resolved key, never by its port.

Light on purpose: no backend module is imported here (tasks/lm/loading.py reads `in_process_model`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from tasks.core.errors import ConfigError

if TYPE_CHECKING:
    from tasks.core.config import LLMConfig
    from tasks.lm.cache import LLMCache
    from tasks.lm.types import LanguageModel

BACKENDS: dict[str, str] = {
    "local": "tasks.lm.local:LocalLM",
    "anthropic": "tasks.lm.anthropic_api:AnthropicLM",
    "openai": "tasks.lm.openai_api:OpenAILM",
    "completions": "tasks.lm.completions:CompletionsLM",   # backend "openai", api "completions"
}
# The config's `backend` values (tasks/core/config_base.py BackendName) are the registry's names, the
# completions API being `api` of "openai": tests/lm/test_lm_layer.py holds the two together. Not checked
# here, so the LM layer imports no config (pydantic) on a bare GPU machine.


def backend_name(cfg: LLMConfig) -> str:
    """The registry name of the backend `cfg` asks for."""
    return "completions" if cfg.backend == "openai" and cfg.api == "completions" else cfg.backend


def backend_class(name: str) -> type:
    """The class registered as `name`, its module imported now."""
    if name not in BACKENDS:
        raise ConfigError(f"backend {name!r}: not one of {', '.join(sorted(BACKENDS))}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def build_backend(cfg: LLMConfig, base_url: str | None = None, batch_store: LLMCache | None = None) -> LanguageModel:
    """The backend `cfg` names, built from the config; a base URL of a registered scheme is resolved first."""
    if base_url is None:
        base_url = resolve_base_url(cfg.base_url)
    return backend_class(backend_name(cfg)).from_config(cfg, base_url=base_url, batch_store=batch_store)


def runs_locally(cfg: LLMConfig) -> bool:
    """Whether `cfg`'s model runs on local weights (`chat_spec(cfg)`): its tokenizer counts tokens and
    its next-token probabilities give readouts; an API backend gives neither."""
    return cfg.backend == "local"


# ---- base URLs of a server started in this process ------------------------------------------------
_BASE_URL_SCHEMES: dict[str, Callable[[str], str]] = {}


def register_base_url_scheme(scheme: str, resolve: Callable[[str], str]) -> None:
    """`base_url = "<scheme>:<model>"` resolves to `resolve(model)` (a server's URL) when a model is built."""
    _BASE_URL_SCHEMES[scheme] = resolve


def in_process_model(base_url: str | None) -> str | None:
    """The local model of a base URL "<scheme>:<model>" (a server started in this process), else None."""
    scheme, sep, name = (base_url or "").partition(":")
    if not sep or scheme in ("http", "https"):
        return None
    return name


def served_options(model: str) -> tuple[str, str]:
    """(model name, quantization) of an in-process server's model, "smollm2" or "smollm2?quantization=int8";
    a one-line error for any other option."""
    from typing import get_args
    from urllib.parse import parse_qs

    from tasks.core.config import Quantization

    allowed = get_args(Quantization)
    name, _, query = model.partition("?")
    options = {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}
    quantization = options.pop("quantization", "none")
    if options or quantization not in allowed or not name:
        raise ValueError(f"{model!r}: a served model is a name, optionally with ?quantization={'|'.join(allowed)}")
    return name, quantization


def resolve_base_url(base_url: str | None) -> str | None:
    """The URL a registered scheme resolves `base_url` to; None for an http(s) URL or none (used as is)."""
    if in_process_model(base_url) is None:
        return None
    assert base_url is not None
    scheme, _, name = base_url.partition(":")
    if scheme not in _BASE_URL_SCHEMES:
        raise ConfigError(f"base_url {base_url!r}: unknown scheme {scheme!r} (an http(s) URL, or one of "
                          f"{sorted(_BASE_URL_SCHEMES) or 'none registered'})")
    return _BASE_URL_SCHEMES[scheme](name)
