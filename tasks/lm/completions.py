"""Log-likelihoods from an OpenAI-compatible completions server (vLLM, SGLang): `api = "completions"`.

How lm-evaluation-harness scores through such a server, and what this backend does: the prompt and
the continuation go out as ONE prompt to POST /v1/completions with `echo = true`, `logprobs = 1`
and `max_tokens = 0`; the server runs a prefill over it and echoes every prompt token with its
log-probability (the first token has none: `null`). The continuation's log-probabilities are the
last entries of that list.

Tokenizer boundary: the prompt is sent as token ids, not text, built here with the served model's
tokenizer (`tokenizer`, default the model) under the local engine's convention
(tasks/lm/loglikelihood.py `encode_request`): the chat template with the generation prompt, the
continuation tokenized on its own, then the end-of-turn token. Sending text would let the server's
tokenizer merge the last prompt characters with the first continuation characters, so the scored
tokens (and `n_tokens`) would differ from the local engine's; with ids the server scores exactly
the tokens the local engine scores, and both give the same numbers up to floating point.

Batching, retries, caching: `batch_size` requests share one HTTP request (a list of prompts, as the
API allows; choices come back by `index`), `max_in_flight` HTTP requests run at once, transient
failures (408 / 409 / 429 / 5xx, a lost connection) are retried with the Chat Completions policy
(tasks/lm/openai_api.py), and `CachedLM` keeps every answer in the SQLite cache
(`cache_loglikelihood`). A server that does not echo prompt log-probabilities (llama.cpp's server
returns them for generated tokens only; OpenAI's own models refuse `echo` with `logprobs`) is an
error with one line, never a silent zero; so is any answer that cannot be scores: not JSON (an HTML
page), a log-probability that is NaN, infinite or above 0, or a count of values other than one per
token sent (`CompletionsError`, naming the server). Chat generation goes through Chat Completions as before.

Real servers, as of writing: vLLM caps `logprobs` at `--max-logprobs` (20 by default; OpenAI at 5)
and, in its V1 engine, bypasses the prefix cache for requests that ask for prompt log-probabilities,
so every request pays for its whole prompt (docs/engines.md).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import openai

from tasks.core.config import LLMConfig
from tasks.core.errors import FatalError
from tasks.lm.anthropic_api import BatchStore
from tasks.lm.api_common import describe
from tasks.lm.backends import in_process_model
from tasks.lm.loading import Tokens, end_of_turn, load_tokenizer
from tasks.lm.openai_api import OpenAILM, is_transient
from tasks.lm.types import LoglikelihoodRequest, LoglikelihoodResult, TransientLLMError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

LOGPROBS = 1          # top alternatives asked per position: the smallest value every server accepts
LOGPROB_SLACK = 1e-4  # a log-probability above 0 by at most this is float noise; above it, an error


class CompletionsError(FatalError):
    """The server cannot give prompt log-probabilities (or answered something unusable)."""


@functools.lru_cache(maxsize=4)
def _tokenizer(name: str) -> PreTrainedTokenizerBase:
    return load_tokenizer(name)


def tokenizer_name(cfg: LLMConfig) -> str:
    """The served model's tokenizer: `tokenizer`, else the local model a server in this process serves
    ("<scheme>:<model>"), else `model`."""
    return cfg.tokenizer or in_process_model(cfg.base_url) or cfg.model


class CompletionsLM(OpenAILM):
    """An OpenAI-compatible server with a completions endpoint: generate (Chat Completions) and
    loglikelihood (/v1/completions, echo). `tokenizer` is the served model's, loaded here."""

    cache_loglikelihood = True   # CachedLM keeps these answers (they cost a server call each)

    def __init__(self, cfg: LLMConfig, base_url: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 backoff_seconds: float = 1.0, batch_store: BatchStore | None = None) -> None:
        super().__init__(cfg, base_url=base_url, sleep=sleep, backoff_seconds=backoff_seconds,
                         batch_store=batch_store)
        self.tokenizer_name = tokenizer_name(cfg)
        self.loglikelihood_identity = f"{self.identity}|completions|tokenizer={self.tokenizer_name}"
        self.requests_sent = 0      # HTTP requests to /v1/completions (batches), for benches and tests
        # the URL every error names: the client's base URL (".../v1") and the endpoint under it
        self.endpoint = f"{str(self.client.base_url).rstrip('/')}/completions"

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return _tokenizer(self.tokenizer_name)

    def encode(self, request: LoglikelihoodRequest) -> tuple[Tokens, Tokens]:
        """(prompt ids, scored ids) under the local engine's convention (tasks/lm/loglikelihood.py)."""
        from tasks.lm.loglikelihood import encode_request

        return encode_request(self.tokenizer, request, end_of_turn(self.tokenizer))

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """One result per request, in order; identical requests are sent once."""
        items = [self.encode(r) for r in requests]
        unique = list(dict.fromkeys(items))
        chunks = [unique[i : i + self.cfg.batch_size] for i in range(0, len(unique), self.cfg.batch_size)]
        with ThreadPoolExecutor(max_workers=self.cfg.max_in_flight) as pool:
            answers = list(pool.map(self._score_chunk, chunks))
        done = {item: result for chunk, results in zip(chunks, answers, strict=True)
                for item, result in zip(chunk, results, strict=True)}
        return [done[item] for item in items]

    # ---- one HTTP request --------------------------------------------------------------------
    def _score_chunk(self, chunk: list[tuple[Tokens, Tokens]]) -> list[LoglikelihoodResult]:
        prompts = [list(prompt + target) for prompt, target in chunk]
        try:
            answer = self._with_retries(lambda: self.client.completions.create(
                model=self.model, prompt=prompts, echo=True, logprobs=LOGPROBS, max_tokens=0, temperature=0))
            body = answer.model_dump()
        except (openai.APIStatusError, openai.APIConnectionError) as error:
            line = self.scrub(f"{self.model} at {self.endpoint}: {describe(error)}")
            if is_transient(error):
                raise TransientLLMError(line) from None
            raise CompletionsError(line) from None
        except FatalError:
            raise
        except Exception as error:   # 200 with an HTML page, or a body that is not JSON
            raise self._error(f"the answer is not a completions body ({describe(error)[:200]})") from None
        with self._lock:
            self.requests_sent += 1
        choices = body.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise self._error("the answer has no list of choices")
        choices = sorted(choices, key=lambda c: c.get("index") or 0)
        if len(choices) != len(chunk):
            raise self._error(f"{len(choices)} choices for {len(chunk)} prompts")
        return [self._result(choice, prompt, target) for choice, (prompt, target) in zip(choices, chunk, strict=True)]

    def _error(self, what: str) -> CompletionsError:
        """One line naming the model and the server, and what was wrong with its answer."""
        return CompletionsError(self.scrub(f"{self.model} at {self.endpoint}: {what}"))

    def _result(self, choice: dict[str, Any], prompt: Tokens, target: Tokens) -> LoglikelihoodResult:
        """The scored tokens' log-probabilities, checked: exactly one value per token sent (one more
        would shift every continuation by a token), each finite and at most 0 (`LOGPROB_SLACK`), and
        their sum finite."""
        echoed = (choice.get("logprobs") or {}).get("token_logprobs") or []
        end = len(prompt) + len(target)
        values = echoed[len(prompt) : end] if isinstance(echoed, list) else []
        if not isinstance(echoed, list) or len(echoed) < end or any(v is None for v in values):
            raise self._error(
                f"{len(echoed)} log-probabilities for a prompt of {end} tokens; "
                "the server does not echo prompt log-probabilities (echo + logprobs), so it cannot score "
                "(vLLM and SGLang do; llama.cpp's server and OpenAI's own models do not)")
        if len(echoed) != end:
            raise self._error(f"{len(echoed)} log-probabilities for a prompt of {end} tokens "
                              "(one value per token sent expected)")
        for position, value in enumerate(values, start=len(prompt)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not -math.inf < value <= LOGPROB_SLACK:
                raise self._error(f"log-probability {value!r} for token {position} of {end} "
                                  "(a finite value at most 0 expected)")
        floats = tuple(float(v) for v in values)
        total = sum(floats)
        if not math.isfinite(total):   # finite values can still overflow together (-1.7e308 each)
            raise self._error(f"the log-probabilities of the {len(target)} scored tokens sum to {total} "
                              "(a finite sum expected)")
        return LoglikelihoodResult(total, len(target), floats)
