"""The OpenAI-compatible backend: Chat Completions one request at a time, or the Batch API.

Any server that speaks the OpenAI API works: OpenAI itself, Google Gemini's and DeepSeek's
compatible endpoints, and open-weight models behind vLLM, SGLang or Ollama. Config keys (on any
`LLMConfig`): `base_url`, `model`, `api_key_env` (the NAME of the environment variable holding the
key; the key itself is never in config, logs or error messages), `temperature` (0: greedy;
"default": not sent, for models that accept only their own), `max_tokens_field` (newer OpenAI models take `max_completion_tokens`).

The SDK's own retries are off (`max_retries=0`) so the policy lives here and is tested, as in the
Anthropic backend; every request has the configured `timeout_seconds` (a server that accepts and never
answers is a timeout, retried like a dropped connection), and a backend that has gone on retrying with
no request answered for `retry_budget_seconds`, or a stage whose failed requests and back-off waits
took `retry_total_seconds` in all, stops the stage with one line naming the server (`UnreachableError`). 408 / 409 / 429 / 5xx, timeouts and connection errors are retried with exponential
back-off, waiting at least what Retry-After (or retry-after-ms) asks; a connection refused or a host
name that does not resolve, still so after the configured retries, is fatal (`UnreachableError`, one
line naming the URL), as nothing listens there. 401 / 403 are fatal, as in
the Anthropic backend: never retried, they raise `tasks.core.errors.AuthenticationError` with one line
(the key scrubbed), which the CLI prints without a traceback; a refusal is remembered, so no other
request of this backend is sent. The missing key variable is an error when the backend is built. With `use_batches`
bulk work goes through the Batch API: a JSON Lines file is uploaded, a batch created and polled,
its output and error files downloaded, and items that failed transiently resubmitted. Usage comes
from the response (`prompt_tokens_details.cached_tokens` as prompt-cache reads); cost uses the
configured prices (the Batch API bills half). Chat Completions give no log-likelihoods of a given
text (`api = "completions"` does: tasks/lm/completions.py) and no embeddings: those raise `Unsupported`.

They do show the next-token distribution: `top_logprobs` asks with `logprobs = true, top_logprobs = 20`
(the API's cap; vLLM's `--max-logprobs` is 20 by default) and reads
`choices[0].logprobs.content[i].top_logprobs[j].{token, logprob}` at the token right after the prefill.
A server that continues an answer (`continue_final_message`, vLLM) generates one token after it; an
API that cannot (OpenAI's) is asked to begin its answer with a short one-line prefill ("Score: ") and
the position is found in the tokens it wrote (an analysis or a review is not asked for twice). A model
that refuses logprobs (OpenAI's reasoning models answer 400 or 403, a vLLM server started with a lower
`--max-logprobs` 400) or answers without them raises `Unsupported`, and the backend remembers it, so
callers fall back to generating and parsing without asking again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openai

from tasks.core.config import LLMConfig
from tasks.core.errors import AuthenticationError, FatalError, UnreachableError
from tasks.lm.anthropic_api import BatchStore
from tasks.lm.api_common import (
    ChatAPI,
    batch_key,
    custom_ids,
    deadline_http_client,
    describe,
    retryable_api_error,
    unreachable,
)
from tasks.lm.backends import in_process_model, served_options
from tasks.lm.types import (
    TOP_LOGPROBS,
    Backend,
    ChatRequest,
    ChatResult,
    OnAnswers,
    TopLogprobs,
    Unsupported,
)

T = TypeVar("T")

RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
AUTH_STATUSES = {401, 403}
RETRYABLE_BATCH_CODES = {"batch_expired", "rate_limit_exceeded", "server_error", "internal_error", "timeout"}
ENDED = {"completed", "failed", "expired", "cancelled"}
ENDPOINT = "/v1/chat/completions"
MAX_BATCH_REQUESTS = 10_000        # well under the API's 50,000
MAX_BATCH_BYTES = 100 * 1024**2    # well under the API's 200 MB
NO_KEY = "none"                    # sent when `api_key_env = ""` (a local server without auth)
ASKED_PREFILL_CHARS = 80           # the longest prefill an API that cannot continue answers is asked to write
POSITION_SLACK = 8                 # tokens it may take beyond the prefill's to reach the position
REFUSAL_STATUSES = {400, 403}      # how OpenAI refuses logprobs for a model that has none


class OpenAILM(ChatAPI, Backend):
    """A chat model behind an OpenAI-compatible API (Chat Completions or the Batch API); generate only."""

    name = "openai"
    cannot = {
        "loglikelihood": ("{model}: Chat Completions return log-probabilities of sampled tokens only, not of a "
                          "given text; serve the model with a completions endpoint (api = \"completions\", "
                          "[score.eval_server]) or score with a local model (score.eval_lm)"),
        "embed": ("{model}: this backend does not embed (pooled API embeddings have no per-token "
                  "vectors); use tasks.lm.embedder()"),
    }
    status_error = openai.APIStatusError
    max_batch_requests = MAX_BATCH_REQUESTS
    max_batch_bytes = MAX_BATCH_BYTES

    def __init__(self, cfg: LLMConfig, base_url: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_seconds: float = 1.0, batch_store: BatchStore | None = None) -> None:
        served = in_process_model(cfg.base_url) is not None   # "<scheme>:<local model>", started in this process
        if cfg.model == "smollm2" and not served:
            raise ValueError("model: name the served model (e.g. gpt-5, deepseek-chat) when backend = 'openai'")
        if served and base_url is None:
            raise ValueError(f"base_url {cfg.base_url!r}: build it with make_lm, which starts the local server")
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else NO_KEY
        if not key:
            raise RuntimeError(f"backend 'openai' needs the {cfg.api_key_env} environment variable "
                               "(api_key_env names it; \"\" for a server without auth)")
        self.base_url = base_url or cfg.base_url
        # where the model is served, without the port (a local server on a new port serves the same model)
        # (a served local model also by its resolved dtype: float32 and bfloat16 answers never mix)
        where = served_key(cfg) if served else urlsplit(self.base_url or "https://api.openai.com").hostname
        self._hold(cfg, f"openai|{where}|{cfg.model}|temperature={cfg.temperature}"
                   + ("|continue_final_message" if cfg.continue_final_message else ""), sleep, backoff_seconds, batch_store)
        self._key = key
        self._refused: FatalError | None = None   # a refused key (401 / 403) or an address nobody answers at
        self._no_logprobs: str | None = None      # why the model gives no top_logprobs, once it said so
        self._lock = threading.Lock()
        self.client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=cfg.timeout_seconds,
                                    http_client=deadline_http_client(cfg.timeout_seconds, openai.DefaultHttpxClient))

    # ---- public -------------------------------------------------------------------------------
    def top_logprobs(self, requests: Sequence[ChatRequest]) -> list[TopLogprobs]:
        """The `TOP_LOGPROBS` most likely tokens right after each request's prefill, in request order
        (greedy, one request at a time, `max_in_flight` in parallel). `Unsupported` where the model gives
        none, or where a server that cannot continue an answer would have to write out more than a short line."""
        if self._no_logprobs is not None:
            raise Unsupported(self._no_logprobs)
        if not requests:
            return []
        if not self.cfg.continue_final_message and any(len(r.prefill) > ASKED_PREFILL_CHARS or "\n" in r.prefill
                                                       for r in requests):
            raise Unsupported(f"{self.model}: the answer position is after more than one short line (at most "
                              f"{ASKED_PREFILL_CHARS} characters), which this server cannot be made to continue "
                              "(continue_final_message) nor asked to write out again")
        with ThreadPoolExecutor(max_workers=self.cfg.max_in_flight) as pool:
            return list(pool.map(self._top_one, requests))

    # ---- shared pieces ------------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        """`text` on one line, with the API key replaced by a placeholder."""
        text = " ".join(text.split())
        return text.replace(self._key, "[redacted]") if len(self._key) >= 4 and self._key != NO_KEY else text

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        """The request body. A prefill is continued where the server can (vLLM / SGLang
        `continue_final_message`); elsewhere Chat Completions have no prefill, so it is asked for."""
        messages = [{"role": "system", "content": request.system}, {"role": "user", "content": request.user}]
        extra: dict[str, Any] = {}
        if request.prefill and self.cfg.continue_final_message:
            messages.append({"role": "assistant", "content": request.prefill})
            extra = {"continue_final_message": True, "add_generation_prompt": False}
        elif request.prefill:
            messages[1]["content"] += f"\n\nBegin your answer with exactly: {request.prefill}"
        params: dict[str, Any] = {"model": self.model, "messages": messages,
                                  self.cfg.max_tokens_field: request.max_tokens, **extra}
        if self.cfg.temperature != "default":
            params["temperature"] = self.cfg.temperature
        return params

    def _create(self, request: ChatRequest) -> dict[str, Any]:
        """One Chat Completions call (the non-standard keys go as extra_body); the body as a dict."""
        params = self._params(request)
        extra = {k: params.pop(k) for k in ("continue_final_message", "add_generation_prompt") if k in params}
        completion = self.client.chat.completions.create(**params, extra_body=extra or None)
        return completion.model_dump()

    def _with_retries(self, call: Callable[[], T]) -> T:
        """`call()` retried on transient failures; the last error is re-raised. A refusal (401 / 403)
        raises `AuthenticationError` and is remembered, so no later request of this backend is sent."""
        return self._tries(call, (openai.APIStatusError, openai.APIConnectionError), self._stopped, self._triage)

    def _stopped(self) -> None:
        if self._refused is not None:
            raise type(self._refused)(str(self._refused))

    def _triage(self, error: Exception, attempt: int, seconds: float) -> None:
        """Raise what retrying cannot fix: a refused key, a server that refuses or does not resolve through
        the last try, an error that is not transient, a retry budget spent."""
        if isinstance(error, openai.APIStatusError) and error.status_code in AUTH_STATUSES:
            self._stop(AuthenticationError(f"openai refused the API key in {self.cfg.api_key_env or '(none)'}: "
                                           f"{self.scrub(describe(error))}"))
        why = unreachable(error) if isinstance(error, openai.APIConnectionError) else None
        if why and attempt == self.cfg.max_retries:
            self._stop(UnreachableError(f"openai: cannot reach {self.client.base_url} ({why}, "
                                        f"{attempt + 1} attempt(s)): is the server running and base_url right?"))
        if not is_transient(error):
            raise error
        over = self._over_budget(error, self.client.base_url, seconds)
        if over:
            self._stop(UnreachableError(over))

    def _stop(self, error: FatalError) -> None:
        """Remember a fatal failure (the first one wins) and raise it: no other request is sent."""
        with self._lock:
            if self._refused is None:
                self._refused = error
        raise type(self._refused)(str(self._refused)) from None

    def _result(self, body: dict[str, Any], batch: bool = False) -> ChatResult:
        """A ChatResult from a chat.completion body (a dict, from either API)."""
        usage = body.get("usage") or {}
        cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
        choice = (body.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content")
        common = {
            "input_tokens": max(0, (usage.get("prompt_tokens") or 0) - cached),
            "output_tokens": usage.get("completion_tokens") or 0,
            "cache_read_tokens": cached,
            "model": body.get("model") or self.model,
            "batch": batch,
            "truncated": choice.get("finish_reason") == "length",
        }
        if not isinstance(text, str):
            reason = choice.get("finish_reason") or "no choice"
            return ChatResult("", error=f"malformed response: no message content (finish_reason {reason})", **common)
        return ChatResult(text, **common)

    def _failed(self, error: Exception, batch: bool = False) -> ChatResult:
        if isinstance(error, FatalError):   # a refused key, an address nobody answers at: every call would fail
            raise error
        if isinstance(error, (openai.APIStatusError, openai.APIConnectionError)):
            where = f"{self.client.base_url}: " if isinstance(error, openai.APIConnectionError) else ""
            return ChatResult("", error=self.scrub(where + describe(error)), model=self.model,
                              retryable=is_transient(error), batch=batch)
        return ChatResult("", error=self.scrub(f"malformed response: {describe(error)}"), model=self.model,
                          batch=batch)

    @staticmethod
    def _with_prefill(result: ChatResult, request: ChatRequest) -> ChatResult:
        if not (result.ok and request.prefill) or result.text.lstrip().startswith(request.prefill.strip()):
            return result
        return replace(result, text=request.prefill + result.text)

    # ---- top_logprobs -------------------------------------------------------------------------
    def _top_one(self, request: ChatRequest) -> TopLogprobs:
        continued = self.cfg.continue_final_message
        tokens = 1 if continued else len(request.prefill) + POSITION_SLACK   # a token has at least one character
        params = self._params(replace(request, max_tokens=tokens)) | {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
        extra = {k: params.pop(k) for k in ("continue_final_message", "add_generation_prompt") if k in params}

        def call() -> dict[str, Any]:
            try:
                return self.client.chat.completions.create(**params, extra_body=extra or None).model_dump()
            except openai.APIStatusError as error:   # a refusal of logprobs is no refused key (also a 403)
                if error.status_code in REFUSAL_STATUSES and "logprobs" in str(error).lower():
                    self._without_logprobs(f"refused logprobs ({self.scrub(describe(error))})")
                raise
        try:
            body = self._with_retries(call)
        except (Unsupported, FatalError):
            raise
        except Exception as error:
            return TopLogprobs(error=self._failed(error).error)
        choice = (body.get("choices") or [{}])[0]
        content = (choice.get("logprobs") or {}).get("content")
        if not content:
            self._without_logprobs("answered without logprobs")
        at = 0 if continued else _position(content, request.prefill)
        spent = self._result(body)
        tokens = {"input_tokens": spent.input_tokens, "output_tokens": spent.output_tokens,
                  "cache_read_tokens": spent.cache_read_tokens}
        if at is None:
            return TopLogprobs(error=f"the answer did not begin with {request.prefill!r}", **tokens)
        top = content[at].get("top_logprobs") or []
        return TopLogprobs(tuple((str(t["token"]), float(t["logprob"])) for t in top), **tokens)

    def _without_logprobs(self, why: str) -> None:
        """Remember that the model gives no logprobs and raise `Unsupported`: no later request asks."""
        self._no_logprobs = f"{self.model}: {why}; its ratings are generated and parsed"
        raise Unsupported(self._no_logprobs)

    # ---- Chat Completions ---------------------------------------------------------------------
    def _complete_one(self, request: ChatRequest) -> ChatResult:
        try:
            body = self._with_retries(lambda: self._create(request))
        except Exception as error:  # an error status, an unparseable body: reported (a refused key raises)
            return self._failed(error)
        return self._with_prefill(self._result(body), request)

    # ---- Batch API ----------------------------------------------------------------------------
    def _submit(self, payload: bytes) -> str:
        """Upload the batch's requests file and start the batch (each call retried); its id."""
        upload = self._with_retries(lambda: self.client.files.create(
            file=("requests.jsonl", payload, "application/jsonl"), purpose="batch"))
        return self._with_retries(lambda: self.client.batches.create(
            input_file_id=upload.id, endpoint=ENDPOINT, completion_window="24h")).id

    def _run_batch(self, indices: list[int], requests: Sequence[ChatRequest],
                   on_answers: OnAnswers) -> dict[int, ChatResult]:
        ids = custom_ids(indices)
        lines = [{"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": self._params(requests[i])}
                 for cid, i in ids.items()]
        payload = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        key = batch_key(self.identity, lines)
        try:
            batch_id = self._batch_id(key, len(ids), lambda: self._submit(payload))
            batch = self._ended(lambda: self.client.batches.retrieve(batch_id), lambda batch: batch.status in ENDED)
            answers = [*self._download(batch.output_file_id), *self._download(batch.error_file_id)]
        except Exception as error:
            failed = self._failed(error, batch=True)
            return {i: failed for i in indices}
        out: dict[int, ChatResult] = {}
        for line in answers:
            index = ids.get(line.get("custom_id", ""))
            if index is not None:
                out[index] = self._with_prefill(self._batch_line(line), requests[index])
        if batch.status == "failed":
            reasons = "; ".join(f"{e.code}: {e.message}" for e in (batch.errors.data or [])) if batch.errors else ""
            missing = ChatResult("", error=self.scrub(f"batch failed: {reasons or 'no reason given'}"),
                                 model=self.model, batch=True)
        else:
            missing = ChatResult("", error=f"batch {batch.status}: result missing", model=self.model,
                                 retryable=True, batch=True)
        for i in indices:
            out.setdefault(i, missing)
        on_answers(sorted(out.items()))        # stored before the batch id is forgotten
        if self.batch_store is not None:
            self.batch_store.remember_batch(key, None)
        return out

    def _download(self, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        text = self._with_retries(lambda: self.client.files.content(file_id).text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _batch_line(self, line: dict[str, Any]) -> ChatResult:
        response = line.get("response") or {}
        status = response.get("status_code")
        if status == 200 and not line.get("error"):
            return self._result(response.get("body") or {}, batch=True)
        error = line.get("error") or (response.get("body") or {}).get("error") or {}
        code = error.get("code") or error.get("type") or f"HTTP {status}"
        retryable = code in RETRYABLE_BATCH_CODES or (status is not None and (status in RETRY_STATUSES or status >= 500))
        detail = self.scrub(f"batch request errored: {code}: {error.get('message', '')}")
        return ChatResult("", error=detail, model=self.model, retryable=retryable, batch=True)


def _position(content: Sequence[dict[str, Any]], prefill: str) -> int | None:
    """The first token after the answer's beginning `prefill` (whitespace aside) that is not blank, or
    None when the answer does not begin so."""
    want = " ".join(prefill.split())
    written = ""
    for i, item in enumerate(content):
        if " ".join(written.split()) == want and str(item.get("token", "")).strip():
            return i
        written += str(item.get("token", ""))
        if not want.startswith(" ".join(written.split())):
            return None
    return None


def served_key(cfg: LLMConfig) -> str:
    """The scheme of a base URL "<scheme>:<local model>" and the resolved key (name, dtype,
    quantization) of the local model served in this process (in dtype "auto"): "served:smollm2|float32|none",
    "served:smollm2|float32|int8" for "served:smollm2?quantization=int8"."""
    from tasks.lm.loading import ModelSpec

    model = in_process_model(cfg.base_url)
    assert cfg.base_url is not None and model is not None, "served_key: not a base URL of an in-process server"
    name, quantization = served_options(model)
    return cfg.base_url.removesuffix(model) + ModelSpec(name, quantization=quantization).resolved().key


def is_transient(error: Exception) -> bool:
    """Whether an OpenAI-compatible server's error is worth retrying (408 / 409 / 429 / 5xx, a lost connection)."""
    return retryable_api_error(error, openai.APIStatusError, openai.APIConnectionError, RETRY_STATUSES)
