"""The one narrow language-model interface: frozen requests in, results out in the same order.

Three operations, each on a batch:

* `generate(requests)`: a `ChatRequest` is a system instruction, a user message, a token limit,
  an optional forced answer beginning (`prefill`) and optional `line_prefixes` (every line of the
  answer opens with one of them). A failed request never raises: its `ChatResult` carries `error`
  (and `retryable` when a later attempt may succeed), so one bad request cannot sink a batch.
* `loglikelihood(requests)`: log p(continuation | chat [system, user]). Tokenization convention
  (fixed; every metric depends on it, see tasks/lm/loglikelihood.py): the prompt is the chat
  template with the generation prompt appended; the continuation is tokenized on its own; the
  scored tokens are the continuation's tokens followed by the template's end-of-turn token, so
  `n_tokens` counts that token and prompt tokens are never scored.
* `embed(texts, pooling)`: "tokens" gives one L2-normalised vector per word-piece of each text
  (an (n_tokens, dim) array); "mean" the normalised mean of those vectors (a (dim,) array).
* `top_logprobs(requests)`: the most likely next tokens right after a `ChatRequest`'s prefill, each
  with its log-probability, as a chat API gives them (`logprobs` / `top_logprobs`: at most the top
  `TOP_LOGPROBS`, so the mass of the rest of the vocabulary is unknown). For a backend that has no
  log-likelihoods of a given text but shows its next-token distribution (OpenAI, vLLM).

A backend implements what it can and raises `Unsupported` (with the reason) for the rest: an API
model has no log-likelihoods, a sentence encoder does not chat, Anthropic's API shows no token
probabilities.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Literal, Protocol

import numpy as np

from tasks.core.errors import TransientError

# for annotations pydantic resolves (a flow taking a ModelSpec); a bare GPU box has no pydantic
with contextlib.suppress(ImportError):
    from tasks.core.config import LLMConfig


# Published price multipliers relative to the base input price / the whole bill.
CACHE_WRITE_FACTOR = 1.25   # writing the prompt cache costs 25% more than plain input
BATCH_FACTOR = 0.5          # the Message Batches API bills half price

Pooling = Literal["tokens", "mean"]
TOP_LOGPROBS = 20   # the most alternatives OpenAI's Chat Completions (and vLLM by default) give per position


class TransientLLMError(TransientError):
    """Raised by callers when requests still failed for a transient reason (429 / 529 / 5xx)."""


class Unsupported(RuntimeError):
    """An operation this backend cannot do; the message says why and what to use instead."""


@dataclass(frozen=True)
class ChatRequest:
    system: str
    user: str
    max_tokens: int
    custom_id: str = ""
    prefill: str = ""   # the answer's forced beginning; the result text starts with it
    # Local backend only: every line of the answer must open with one of these (enforced token by
    # token while decoding, see tasks/lm/line_prefixes.py). The anthropic backend ignores it: the
    # instructions and the prefill keep a large model to the format there.
    line_prefixes: tuple[str, ...] = ()
    # Local backend only, with `line_prefixes`: the answer is one line (its first line break is refused; it ends
    # where the line could end). Short single-judgment requests stop there instead of running to max_tokens.
    one_line: bool = False
    # The draw: 0 for a single answer; k > 0 asks the same question again as its own draw, cached under its
    # own key (a sampling backend gives a fresh answer; a local model samples with a seed of the request)
    sample: int = 0


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
    truncated: bool = False         # generation stopped at max_tokens (or where it began to loop: `looped`)
    looped: bool = False            # a local answer stopped where it began repeating itself (tasks/lm/loops.py)
    batch: bool = False             # answered through the Message Batches API

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.text.strip())


@dataclass(frozen=True)
class LoglikelihoodRequest:
    """Score `continuation` as the assistant's answer to the chat [system, user]."""

    system: str
    user: str
    continuation: str


@dataclass(frozen=True)
class LoglikelihoodResult:
    logprob: float                       # sum of the scored tokens' log-probabilities (nats)
    n_tokens: int                        # scored tokens: the continuation's plus the end-of-turn token
    token_logprobs: tuple[float, ...] | None = None
    truncated: bool = False              # the request was cut to fit the model (tasks/lm/fitting.py)


@dataclass(frozen=True)
class TopLogprobs:
    """The next token's most likely alternatives after a request's prefill: (token text, log-probability),
    most likely first, as the API spelled them (" 7" and "7" are different tokens). `error` says why
    there are none (the answer did not reach the position, the request failed)."""

    alternatives: tuple[tuple[str, float], ...] = ()
    error: str | None = None
    cached: bool = False            # served from the content-addressed cache (no call, no tokens)
    input_tokens: int = 0           # what the call cost, as a ChatResult counts it
    output_tokens: int = 0
    cache_read_tokens: int = 0


Accept = Callable[[ChatResult], bool]
# Answers as they arrive, each with its index in the requests: a backend calls it once per group that
# came back together (one request, one local batch, one API batch), so a caching wrapper stores them
# before the rest are done.
OnAnswers = Callable[[Sequence[tuple[int, ChatResult]]], None]


class LanguageModel(Protocol):
    """One model, every operation on it; results come back in request order.

    `identity` names everything that changes an answer (backend, model, dtype / quantization,
    decoding settings); it is the model part of every cache key. `accept` and `on_answers` are hooks
    for a caching wrapper (which fresh answers are usable enough to store; where to hand each answer
    the moment it arrives); a backend without a cache ignores `accept` and calls `on_answers`.
    """

    name: str
    model: str
    identity: str

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None,
                 on_answers: OnAnswers | None = None) -> list[ChatResult]: ...

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]: ...

    def embed(self, texts: Sequence[str], pooling: Pooling = "tokens") -> list[np.ndarray]: ...

    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]: ...


class Backend:
    """A `LanguageModel` base for backends that do only some operations: each one a backend does not
    give raises `Unsupported` with its reason from `cannot` (operation -> message; `{model}` is
    filled in), so a caller learns what to use instead."""

    model: str
    cannot: dict[str, str] = {}

    def generate(self, requests: Sequence[ChatRequest], accept: Accept | None = None,
                 on_answers: OnAnswers | None = None) -> list[ChatResult]:
        raise Unsupported(self._why("generate"))

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        raise Unsupported(self._why("loglikelihood"))

    def embed(self, texts: Sequence[str], pooling: Pooling = "tokens") -> list[np.ndarray]:
        raise Unsupported(self._why("embed"))

    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]:
        raise Unsupported(self._why("top_logprobs"))

    def _why(self, operation: str) -> str:
        return self.cannot.get(operation, "{model} does not " + operation).format(model=self.model)


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
