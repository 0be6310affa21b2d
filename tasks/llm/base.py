"""The one narrow interface every LLM backend implements, plus usage and cost accounting.

A backend takes a batch of frozen `ChatRequest`s (a fixed system instruction and a user message)
and returns one `ChatResult` per request, in the same order. A failed request never raises: it
comes back with `error` set (and `retryable` when a later attempt may succeed), so one bad
request cannot sink a batch. `make_backend` picks the backend named in the config and wraps it
in the content-addressed cache.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tasks.config import LLMConfig

if TYPE_CHECKING:  # the cache module imports this one
    from tasks.llm.cache import CachedBackend

# Published price multipliers relative to the base input price / the whole bill.
CACHE_WRITE_FACTOR = 1.25   # writing the prompt cache costs 25% more than plain input
BATCH_FACTOR = 0.5          # the Message Batches API bills half price


class TransientLLMError(RuntimeError):
    """Raised by callers when requests still failed for a transient reason (429 / 529 / 5xx)."""


@dataclass(frozen=True)
class ChatRequest:
    system: str
    user: str
    max_tokens: int
    custom_id: str = ""
    prefill: str = ""   # the answer's forced beginning; the result text starts with it
    # Local backend only: every line of the answer must open with one of these (enforced token by
    # token while decoding, see tasks/llm/line_prefixes.py). The anthropic backend ignores it: the
    # instructions and the prefill keep a large model to the format there.
    line_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChatResult:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cached: bool = False            # served from the content-addressed cache (no LLM call)
    error: str | None = None
    model: str = ""
    cache_write_tokens: int = 0
    retryable: bool = False         # the error was transient (rate limit, overload, 5xx)
    truncated: bool = False         # generation stopped at max_tokens
    batch: bool = False             # answered through the Message Batches API

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.text.strip())


@runtime_checkable
class ChatBackend(Protocol):
    """`complete` answers every request, in input order; errors are results, not exceptions."""

    name: str
    model: str

    def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResult]: ...


@dataclass
class Usage:
    """Token and dollar totals over a set of results; `add` is thread-safe."""

    requests: int = 0
    cached: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, result: ChatResult, cfg: LLMConfig) -> None:
        with self._lock:
            self.requests += 1
            self.cached += result.cached
            self.errors += result.error is not None
            if result.cached:
                return
            self.input_tokens += result.input_tokens
            self.output_tokens += result.output_tokens
            self.cache_read_tokens += result.cache_read_tokens
            self.cache_write_tokens += result.cache_write_tokens
            self.cost_usd += cost_usd(result, cfg)

    def as_dict(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, results: Sequence[ChatResult], cfg: LLMConfig) -> Usage:
        usage = cls()
        for result in results:
            usage.add(result, cfg)
        return usage


def cost_usd(result: ChatResult, cfg: LLMConfig) -> float:
    """What one uncached answer cost at the configured prices (zero for the local backend)."""
    if cfg.backend == "local" or result.cached:
        return 0.0
    per_token_in = cfg.input_price_per_mtok / 1e6
    dollars = (
        result.input_tokens * per_token_in
        + result.cache_write_tokens * per_token_in * CACHE_WRITE_FACTOR
        + result.cache_read_tokens * cfg.cache_read_price_per_mtok / 1e6
        + result.output_tokens * cfg.output_price_per_mtok / 1e6
    )
    return dollars * (BATCH_FACTOR if result.batch else 1.0)


def make_backend(cfg: LLMConfig, cache_dir: Path, base_url: str | None = None) -> CachedBackend:
    """The configured backend behind the content-addressed cache under `cache_dir`."""
    from tasks.llm.cache import CachedBackend, LLMCache

    inner: ChatBackend
    if cfg.backend == "anthropic":
        from tasks.llm.anthropic_backend import AnthropicBackend

        inner = AnthropicBackend(cfg, base_url=base_url)
    else:
        from tasks.llm.local_backend import LocalBackend

        inner = LocalBackend(cfg)
    return CachedBackend(inner, LLMCache(cache_dir / "llm.sqlite"), cfg)
