"""Every LLM client is bounded: a request that gets no answer fails after `timeout_seconds`
through the transient path with one line naming the server, and a backend that goes on retrying with
no request answered stops the stage after `retry_budget_seconds`, and one whose failed requests took
`retry_total_seconds` of the stage in all, answered ones between, stops too (tasks/lm/api_common.py)."""

from __future__ import annotations

import time

import pytest

from tasks.core.config import LLMConfig
from tasks.core.errors import UnreachableError
from tasks.lm.anthropic_api import AnthropicLM
from tasks.lm.completions import CompletionsLM
from tasks.lm.openai_api import OpenAILM
from tasks.lm.types import LoglikelihoodRequest, TransientLLMError
from tasks.testing.local_http import Fault, dropping_server, silent_server
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import ANTHROPIC_KEY, OPENAI_ENV, OPENAI_KEY, Sleeps, openai_lm, request

BUDGET = {"retry_budget_seconds": 600.0}


@pytest.fixture(autouse=True)
def api_keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv(OPENAI_ENV, OPENAI_KEY)


def chat(backend: str, url: str, **overrides):
    settings = {"model": "test-model", "use_batches": False, "max_in_flight": 2, **overrides}
    if backend == "anthropic":
        return AnthropicLM(LLMConfig(backend="anthropic", **settings), base_url=url, sleep=time.sleep,
                           backoff_seconds=0.05)
    return OpenAILM(LLMConfig(backend="openai", base_url=f"{url}/v1", api_key_env=OPENAI_ENV, **settings),
                    sleep=time.sleep, backoff_seconds=0.05)


def completions(url: str, **overrides) -> CompletionsLM:
    cfg = LLMConfig(backend="openai", api="completions", model="served-model", tokenizer="smollm2",
                    base_url=f"{url}/v1", api_key_env="", **overrides)
    return CompletionsLM(cfg, sleep=time.sleep, backoff_seconds=0.05)


@pytest.mark.slow   # waits out a timeout or a retry back-off: seconds of sleeping
@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_chat_server_that_never_answers_fails_within_the_timeout_naming_it(backend):
    with silent_server() as url:
        started = time.monotonic()
        [result] = chat(backend, url, timeout_seconds=1.0, max_retries=1, **BUDGET).generate([request()])
        took = time.monotonic() - started
    assert not result.ok and result.retryable and "timed out" in result.error.lower()
    assert url in result.error and "\n" not in result.error
    assert took < 6          # two attempts of 1 s and a back-off (the SDK's default: 600 s each)


def test_a_completions_server_that_never_answers_fails_within_the_timeout_in_one_line():
    with silent_server() as url:
        lm = completions(url, timeout_seconds=1.0, max_retries=0, **BUDGET)
        assert lm.tokenizer is not None        # loaded before the clock starts
        started = time.monotonic()
        with pytest.raises(TransientLLMError) as failed:
            lm.loglikelihood([LoglikelihoodRequest("You read reviews.", "Is it novel?", "Yes")])
        took = time.monotonic() - started
    line = str(failed.value)
    assert took < 4 and "\n" not in line and f"{url}/v1/completions:" in line and "timed out" in line.lower()


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_server_dropping_every_connection_stops_the_stage_after_the_retry_budget(backend):
    with dropping_server() as url:
        lm = chat(backend, url, max_retries=100, retry_max_seconds=0.1, retry_budget_seconds=1.0)
        started = time.monotonic()
        with pytest.raises(UnreachableError) as stopped:
            lm.generate([request(f"<review>{i}</review>") for i in range(4)])
        took = time.monotonic() - started
        with pytest.raises(UnreachableError):      # remembered: no further request is sent
            lm.generate([request()])
    line = str(stopped.value)
    assert took < 5 and "\n" not in line and url in line and "retry_budget_seconds = 1" in line


def test_a_completions_server_timing_out_stops_after_the_retry_budget():
    with silent_server() as url, pytest.raises(UnreachableError, match="answered no request") as stopped:
        completions(url, timeout_seconds=0.5, max_retries=100, retry_budget_seconds=1.0).loglikelihood(
            [LoglikelihoodRequest("You read reviews.", "Is it novel?", "Yes")])
    assert url in str(stopped.value)


class EveryOtherFails(OpenAIServer):
    """A flaky server: every other chat request gets a 503, the rest are answered."""

    def _arrived(self, route, body=None):
        super()._arrived(route, body)
        return Fault(503) if route == "chat" and self.counts[route] % 2 else None


def test_a_server_failing_every_other_request_stops_the_stage_after_its_total_retry_time():
    with EveryOtherFails() as server:
        lenient = openai_lm(server, sleep=Sleeps(), max_in_flight=1, retry_budget_seconds=0.05)
        assert all(r.ok for r in lenient.generate([request() for _ in range(20)]))
        bounded = openai_lm(server, sleep=Sleeps(), max_in_flight=1, retry_budget_seconds=0.05,
                            retry_total_seconds=0.1)      # each failure waits 0.01 s of back-off
        with pytest.raises(UnreachableError, match="retry_total_seconds = 0.1") as stopped:
            bounded.generate([request() for _ in range(40)])
    assert server.base_url in str(stopped.value) and "\n" not in str(stopped.value)


def test_the_total_retry_time_is_counted_per_stage(monkeypatch):
    now = {"stage": ""}
    monkeypatch.setattr("tasks.lm.api_common.stage_run", lambda: now["stage"])
    with EveryOtherFails() as server:
        lm = openai_lm(server, sleep=Sleeps(), max_in_flight=1, retry_total_seconds=5.0)
        for now["stage"] in ("score-run", "validate-run"):   # the backend one process keeps, next stage
            assert all(r.ok for r in lm.generate([request() for _ in range(6)]))
    spent = lm._retry_spent
    assert set(spent) == {"score-run", "validate-run"}
    assert all(0.03 <= s < 5.0 for s in spent.values())    # three 0.01 s waits and three failed requests each
