"""The Anthropic backend through the real `anthropic` SDK against the local compatible server."""

from __future__ import annotations

import logging

import pytest

from tasks.core.config import LLMConfig
from tasks.core.errors import AuthenticationError
from tasks.lm import Usage, cost_usd
from tasks.lm.anthropic_api import AnthropicLM
from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder
from tests.chat_api_data import ANTHROPIC_KEY as KEY
from tests.chat_api_data import REVIEW, Sleeps, request
from tests.chat_api_data import anthropic_lm as make


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return KEY


def test_success_with_prompt_caching_and_usage():
    with AnthropicServer() as server:
        backend = make(server)
        first, second = backend.generate([request()]), backend.generate([request()])
    assert first[0].error is None
    assert first[0].text == heuristic_responder({"messages": [{"role": "user", "content": REVIEW}]})
    assert first[0].text.splitlines()[1] == "The reviewer criticizes that the proofs are incomplete."
    assert server.counts["messages"] == 2
    system = server.received[0]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    # the fixed instructions are written to the prompt cache once, then read from it
    assert first[0].cache_write_tokens > 0 and first[0].cache_read_tokens == 0
    assert second[0].cache_read_tokens == first[0].cache_write_tokens and second[0].cache_write_tokens == 0
    assert first[0].input_tokens > 0 and first[0].output_tokens > 0 and not first[0].batch


def test_529_overloaded_is_retried_with_backoff():
    sleeps = Sleeps()
    with AnthropicServer() as server:
        server.fail_next(529, times=2)
        result = make(server, sleep=sleeps).generate([request()])[0]
    assert result.error is None
    assert sleeps == [0.01, 0.02]
    assert server.counts["messages"] == 3


def test_500_gives_up_after_max_retries_with_a_retryable_error():
    with AnthropicServer() as server:
        server.fail_next(500, times=10)
        result = make(server, max_retries=2).generate([request()])[0]
    assert server.counts["messages"] == 3
    assert result.text == "" and result.retryable and "HTTP 500" in result.error


def test_prefill_is_sent_as_the_start_of_the_answer():
    with AnthropicServer(lambda params: " appreciates the figures.") as server:
        result = make(server).generate([request(prefill="The reviewer")])[0]
    assert server.received[0]["messages"][-1] == {"role": "assistant", "content": "The reviewer"}
    assert result.text == "The reviewer appreciates the figures."


def test_batch_lifecycle_with_errored_results_resubmitted():
    def fault(batch: int, position: int, custom_id: str):
        if batch == 0:
            return {1: "errored", 2: "expired", 3: "invalid"}.get(position)
        return None

    sleeps = Sleeps()
    reviews = [f"<review>\nReview number {i} praises the clear writing.\n</review>" for i in range(5)]
    with AnthropicServer(polls_before_end=2, batch_fault=fault) as server:
        results = make(server, sleep=sleeps, use_batches=True).generate([request(r) for r in reviews])
    first, second = server.batches["msgbatch_0001"], server.batches["msgbatch_0002"]
    assert first["status"] == second["status"] == "ended"
    assert len(first["requests"]) == 5 and len(second["requests"]) == 2     # errored + expired again
    assert {r["custom_id"] for r in second["requests"]} == {"req-0", "req-1"}  # place in batch
    assert server.counts["batches_create"] == 2 and server.counts["messages"] == 0
    assert sleeps.count(0.01) >= 4       # polled while in progress, then backed off before resubmitting
    for i in (0, 1, 2, 4):
        assert results[i].ok and results[i].batch
        assert f"review number {i} praises" in results[i].text
    assert not results[3].ok and "invalid_request_error" in results[3].error and not results[3].retryable


def test_batch_create_rate_limited_then_accepted():
    with AnthropicServer() as server:
        server.fail_next(429, route="batches_create", retry_after=0)
        results = make(server, use_batches=True).generate([request(), request("<review>The work is fine overall.</review>")])
    assert [r.ok for r in results] == [True, True]
    assert server.counts["batches_create"] == 2


def test_usage_and_cost_accounting():
    cfg = LLMConfig(backend="anthropic", model="claude-test", input_price_per_mtok=3.0,
                    output_price_per_mtok=15.0, cache_read_price_per_mtok=0.3)
    with AnthropicServer() as server:
        backend = make(server)
        results = backend.generate([request()]) + backend.generate([request()])
        batched = make(server, use_batches=True).generate([request(), request()])
    usage = Usage.of(results, cfg)
    assert usage.requests == 2 and usage.errors == 0
    assert usage.input_tokens == sum(r.input_tokens for r in results)
    assert usage.output_tokens == sum(r.output_tokens for r in results)
    assert usage.cache_read_tokens == results[1].cache_read_tokens > 0
    first = results[0]
    expected = (first.input_tokens * 3.0 + first.cache_write_tokens * 3.0 * 1.25 + first.output_tokens * 15.0) / 1e6
    assert cost_usd(first, cfg) == pytest.approx(expected)
    assert usage.cost_usd == pytest.approx(sum(cost_usd(r, cfg) for r in results))
    # the batch API bills half of the same tokens
    plain = batched[0].__class__(**{**batched[0].__dict__, "batch": False})
    assert cost_usd(batched[0], cfg) == pytest.approx(cost_usd(plain, cfg) / 2)
    assert cost_usd(first, LLMConfig()) == 0.0     # the local backend costs nothing


def test_key_never_appears_in_errors_or_logs(caplog):
    caplog.set_level(logging.DEBUG)
    with AnthropicServer(echo_key_in_errors=True, reject_key=KEY) as server:
        errors = []
        for lm, requests in ((make(server), [request()]),
                             (make(server, use_batches=True), [request(), request("<review>x y z</review>")])):
            with pytest.raises(AuthenticationError) as raised:   # fatal: never retried, never a silent empty answer
                lm.generate(requests)
            errors.append(str(raised.value))
    assert server.counts["messages"] == 1    # the key was sent (and refused, as scripted), once
    for error in errors:
        assert "HTTP 401" in error and "\n" not in error
        assert KEY not in error and "[redacted]" in error
    assert KEY not in caplog.text


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(RuntimeError, match="ANTHROPIC_API_KEY"):
        AnthropicLM(LLMConfig(backend="anthropic", model="claude-test"))
    with pytest.raises(ValueError, match="Anthropic model"):
        AnthropicLM(LLMConfig(backend="anthropic"))
