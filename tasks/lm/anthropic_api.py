"""The Anthropic backend: the Messages API one request at a time, or the Message Batches API.

The SDK's own retries are switched off (`max_retries=0`) so the policy lives here and is tested:
429, 529 and 5xx responses, connection errors and timeouts (every request has the configured
`timeout_seconds`) are retried with exponential back-off, waiting at least what Retry-After asks;
past `retry_budget_seconds` of retries with no request answered, or `retry_total_seconds` of
failed requests and waits in the stage in all, the run stops with one line naming the URL
(`UnreachableError`). A connection refused or a host name that does not resolve, still
so after the configured retries, stops the run with one line naming the URL (`UnreachableError`),
and so does a refused key (`AuthenticationError`); either is remembered, so no other request is
sent. The fixed instructions carry `cache_control` so the provider's
prompt cache serves them after the first request. The key is read only from ANTHROPIC_API_KEY
and scrubbed from every error message this module produces. An API model offers neither
log-likelihoods of a given text nor embeddings: those raise `Unsupported`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import anthropic
from anthropic.types import Message
from anthropic.types.messages import MessageBatchResult

from tasks.core.config import LLMConfig
from tasks.core.errors import AuthenticationError, UnreachableError
from tasks.lm.api_common import (
    ChatAPI,
    batch_key,
    custom_ids,
    deadline_http_client,
    describe,
    retryable_api_error,
    unreachable,
)
from tasks.lm.types import (
    Backend,
    ChatRequest,
    ChatResult,
    OnAnswers,
)

T = TypeVar("T")

KEY_ENV = "ANTHROPIC_API_KEY"
RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_BATCH_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
MAX_BATCH_REQUESTS = 10_000        # well under the API's 100,000
MAX_BATCH_BYTES = 100 * 1024**2    # well under the API's 256 MB


class BatchStore(Protocol):
    """Remembers in-flight batch ids, so a crashed run re-attaches to its batch (an `LLMCache`)."""

    def batch_id(self, key: str) -> str | None: ...

    def remember_batch(self, key: str, batch_id: str | None) -> None: ...


def scrub(text: str) -> str:
    """`text` with the API key (if one is set) replaced by a placeholder."""
    key = os.environ.get(KEY_ENV, "")
    return text.replace(key, "[redacted]") if len(key) >= 4 else text


def _text_of(message: Message) -> str | None:
    """The concatenated text blocks of a message, or None when it has none."""
    parts = [block.text for block in (message.content or []) if getattr(block, "type", "") == "text"]
    return "".join(parts) if parts else None


class AnthropicLM(ChatAPI, Backend):
    """Claude through the Messages API (or the Message Batches API for bulk work); generate only."""

    name = "anthropic"
    cannot = {
        "loglikelihood": ("{model}: the Anthropic API returns no log-probabilities of a given text; score with "
                          "a local model (score.eval_lm)"),
        "embed": ("{model}: the Anthropic API has no embedding endpoint; use tasks.lm.embedder()"),
        "top_logprobs": "{model}: the Anthropic API shows no token probabilities (no logprobs parameter)",
    }
    status_error = anthropic.APIStatusError
    max_batch_requests = MAX_BATCH_REQUESTS
    max_batch_bytes = MAX_BATCH_BYTES
    scrub = staticmethod(scrub)

    def __init__(self, cfg: LLMConfig, base_url: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_seconds: float = 1.0, batch_store: BatchStore | None = None) -> None:
        if cfg.model == "smollm2":
            raise ValueError("model: name an Anthropic model (e.g. claude-sonnet-4-5) when backend = 'anthropic'")
        key = os.environ.get(KEY_ENV)
        if not key:
            raise RuntimeError(f"backend 'anthropic' needs the {KEY_ENV} environment variable")
        self._hold(cfg, f"anthropic|{cfg.model}", sleep, backoff_seconds, batch_store)
        self._unreachable: str | None = None
        self.client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0, timeout=cfg.timeout_seconds,
                                          http_client=deadline_http_client(cfg.timeout_seconds,
                                                                           anthropic.DefaultHttpxClient))

    # ---- public -------------------------------------------------------------------------------
    # ---- shared pieces ------------------------------------------------------------------------
    def _params(self, request: ChatRequest) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": [{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": request.user}]
            + ([{"role": "assistant", "content": request.prefill}] if request.prefill else []),
        }

    def _with_retries(self, call: Callable[[], T]) -> T:
        """`call()` retried on transient failures; the last transient error is re-raised. A server found
        unreachable is remembered, so no later request of this backend is sent."""
        return self._tries(call, (anthropic.APIStatusError, anthropic.APIConnectionError), self._stopped, self._triage)

    def _stopped(self) -> None:
        if self._unreachable is not None:
            raise UnreachableError(self._unreachable)

    def _triage(self, error: Exception, attempt: int, seconds: float) -> None:
        """Raise what retrying cannot fix: a server that refuses or does not resolve through the last try,
        an error that is not transient, a retry budget spent."""
        why = unreachable(error) if isinstance(error, anthropic.APIConnectionError) else None
        if why and attempt == self.cfg.max_retries:
            self._unreachable = (f"anthropic: cannot reach {self.client.base_url} ({why}, {attempt + 1} "
                                 "attempt(s)): is the server running and ANTHROPIC_BASE_URL right?")
            raise UnreachableError(self._unreachable) from None
        if not _transient(error):
            raise error
        over = self._over_budget(error, self.client.base_url, seconds)
        if over:
            self._unreachable = over
            raise UnreachableError(over) from None

    def _result(self, message: Message, batch: bool = False) -> ChatResult:
        text = _text_of(message)
        usage = message.usage
        common = {
            "input_tokens": usage.input_tokens or 0,
            "output_tokens": usage.output_tokens or 0,
            "cache_read_tokens": usage.cache_read_input_tokens or 0,
            "cache_write_tokens": usage.cache_creation_input_tokens or 0,
            "model": message.model or self.model,
            "batch": batch,
            "truncated": message.stop_reason == "max_tokens",
        }
        if text is None:
            kinds = sorted({getattr(block, "type", "?") for block in message.content or []})
            return ChatResult("", error=f"malformed response: no text block (content types {kinds})", **common)
        return ChatResult(text, **common)

    # ---- Messages API -------------------------------------------------------------------------
    def _complete_one(self, request: ChatRequest) -> ChatResult:
        try:
            message = self._with_retries(lambda: self.client.messages.create(**self._params(request)))
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as error:
            raise AuthenticationError(f"anthropic refused the API key: {scrub(describe(error))}") from None
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as error:
            where = f"{self.client.base_url}: " if isinstance(error, anthropic.APIConnectionError) else ""
            return ChatResult("", error=scrub(where + describe(error)), model=self.model, retryable=_transient(error))
        except UnreachableError:
            raise
        except Exception as error:  # an unparseable body and the like: report, never raise
            return ChatResult("", error=scrub(f"malformed response: {describe(error)}"), model=self.model)
        return self._with_prefill(self._result(message), request)

    @staticmethod
    def _with_prefill(result: ChatResult, request: ChatRequest) -> ChatResult:
        return replace(result, text=request.prefill + result.text) if result.ok and request.prefill else result

    # ---- Message Batches API ------------------------------------------------------------------
    def _run_batch(self, indices: list[int], requests: Sequence[ChatRequest],
                   on_answers: OnAnswers) -> dict[int, ChatResult]:
        ids = custom_ids(indices)
        body = [{"custom_id": cid, "params": self._params(requests[i])} for cid, i in ids.items()]
        key = batch_key(self.identity, body)
        try:
            batch_id = self._batch_id(key, len(ids), lambda: self._with_retries(
                lambda: self.client.messages.batches.create(requests=body)).id)
            self._ended(lambda: self.client.messages.batches.retrieve(batch_id),
                        lambda batch: batch.processing_status == "ended")
            lines = self._with_retries(lambda: list(self.client.messages.batches.results(batch_id)))
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as error:
            raise AuthenticationError(f"anthropic refused the API key: {scrub(describe(error))}") from None
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as error:
            detail = scrub(describe(error))
            return {i: ChatResult("", error=detail, model=self.model, retryable=_transient(error)) for i in indices}
        out: dict[int, ChatResult] = {}
        for line in lines:
            index = ids.get(line.custom_id)
            if index is not None:
                out[index] = self._with_prefill(self._batch_line(line.result), requests[index])
        for i in indices:
            out.setdefault(i, ChatResult("", error="batch result missing", model=self.model, retryable=True))
        on_answers(sorted(out.items()))        # stored before the batch id is forgotten
        if self.batch_store is not None:
            self.batch_store.remember_batch(key, None)
        return out

    def _batch_line(self, result: MessageBatchResult) -> ChatResult:
        if result.type == "succeeded":
            return self._result(result.message, batch=True)
        if result.type == "errored":
            error = result.error.error
            kind = getattr(error, "type", "error")
            detail = scrub(f"batch request errored: {kind}: {getattr(error, 'message', '')}")
            return ChatResult("", error=detail, model=self.model, retryable=kind in RETRYABLE_BATCH_ERRORS, batch=True)
        return ChatResult("", error=f"batch request {result.type}", model=self.model, retryable=True, batch=True)


def _transient(error: Exception) -> bool:
    return retryable_api_error(error, anthropic.APIStatusError, anthropic.APIConnectionError, RETRY_STATUSES)
