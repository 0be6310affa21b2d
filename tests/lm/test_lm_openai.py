"""The OpenAI-compatible backend through the real `openai` client against the local compatible server."""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from tasks.core.config import CandidateConfig, LLMConfig
from tasks.core.errors import AuthenticationError
from tasks.lm import ChatRequest, Unsupported, Usage, cost_usd, make_lm
from tasks.lm.openai_api import OpenAILM
from tasks.testing.anthropic_server import heuristic_responder
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import OPENAI_ENV as ENV
from tests.chat_api_data import OPENAI_KEY as KEY
from tests.chat_api_data import Sleeps, request
from tests.chat_api_data import openai_config as config
from tests.chat_api_data import openai_lm as make


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    return KEY


def test_answers_in_order_with_usage_and_greedy_decoding():
    reviews = [f"<review>\nReview {i} praises the clear writing.\n</review>" for i in range(5)]
    with OpenAIServer() as server:
        results = make(server).generate([request(r) for r in reviews])
    assert [r.error for r in results] == [None] * 5
    for i, result in enumerate(results):
        assert result.text == heuristic_responder({"messages": [{"role": "user", "content": reviews[i]}]})
        assert f"review {i} praises" in result.text
    body = server.received[0]
    assert body["messages"][0] == {"role": "system", "content": "Rewrite the review as judgments."}
    assert body["temperature"] == 0 and body["max_tokens"] == 200 and body["model"] == "gpt-test"
    assert server.counts["chat"] == 5
    # the repeated system prompt is reported as cached prompt tokens, not counted twice
    assert all(r.input_tokens > 0 and r.output_tokens > 0 for r in results)
    assert sum(r.cache_read_tokens > 0 for r in results) >= 4


def test_max_completion_tokens_and_no_temperature():
    with OpenAIServer() as server:
        make(server, max_tokens_field="max_completion_tokens", temperature="default").generate([request()])
    body = server.received[0]
    assert body["max_completion_tokens"] == 200 and "max_tokens" not in body and "temperature" not in body


def test_second_run_through_the_cache_makes_no_calls(tmp_path):
    with OpenAIServer() as server:
        cfg = config(server)
        requests = [request(), request("<review>The method is novel. The baselines are weak.</review>")]
        first = make_lm(cfg, tmp_path).generate(requests)
        calls = server.counts["chat"]
        again = make_lm(cfg, tmp_path)
        second = again.generate(requests)
    assert calls == 2 and server.counts["chat"] == 2
    assert [r.text for r in second] == [r.text for r in first] and all(r.cached for r in second)
    assert again.usage.cached == 2 and again.usage.cost_usd == 0.0
    assert again.name == "openai" and again.identity.startswith("openai|127.0.0.1|gpt-test")


def test_5xx_is_retried_with_backoff_then_gives_up_retryable():
    sleeps = Sleeps()
    with OpenAIServer() as server:
        server.fail_next(503, times=2)
        ok = make(server, sleep=sleeps).generate([request()])[0]
        server.fail_next(500, times=10)
        failed = make(server, max_retries=2).generate([request()])[0]
    assert ok.ok and sleeps == [0.01, 0.02]
    assert server.counts["chat"] == 3 + 3
    assert failed.text == "" and failed.retryable and "HTTP 500" in failed.error


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_is_fatal_one_line_and_never_retried(status, caplog):
    caplog.set_level(logging.DEBUG)
    errors = []
    with OpenAIServer(echo_key_in_errors=True, reject_key=KEY, reject_status=status) as server:
        single = make(server, max_in_flight=1)
        for lm, requests in ((single, [request(f"<review>{i} a b c.</review>") for i in range(4)]),
                             (single, [request()]),      # a later call of the same backend sends nothing
                             (make(server, use_batches=True), [request(), request("<review>x y z</review>")])):
            with pytest.raises(AuthenticationError) as raised:   # fatal: never a silent empty answer
                lm.generate(requests)
            errors.append(str(raised.value))
    assert server.counts["chat"] == 1 and server.counts["files_create"] == 1   # refused once per backend
    for error in errors:
        assert f"HTTP {status}" in error and "\n" not in error and ENV in error
        assert KEY not in error and "[redacted]" in error
    assert KEY not in caplog.text


def test_missing_key_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv(ENV)
    with pytest.raises(RuntimeError, match=ENV):
        OpenAILM(LLMConfig(backend="openai", model="gpt-test", api_key_env=ENV))
    with pytest.raises(ValueError, match="served model"):
        OpenAILM(LLMConfig(backend="openai", api_key_env=ENV))


def test_a_server_without_auth_needs_no_key(monkeypatch):
    monkeypatch.delenv(ENV)
    with OpenAIServer() as server:
        result = make(server, api_key_env="").generate([request()])[0]
    assert result.ok


def test_prefill_is_asked_for_and_the_answer_starts_with_it():
    with OpenAIServer(lambda body: "appreciates the figures.") as server:
        result = make(server).generate([request(prefill="The reviewer ")])[0]
    assert "Begin your answer with exactly: The reviewer" in server.received[0]["messages"][1]["content"]
    assert result.text == "The reviewer appreciates the figures."


def test_batch_lifecycle_with_failed_items_resubmitted(tmp_path):
    def fault(batch: int, position: int, custom_id: str):
        return {0: "missing", 1: "server_error", 2: "expired", 3: "invalid"}.get(position) if batch == 0 else None

    sleeps = Sleeps()
    reviews = [f"<review>\nReview number {i} praises the clear writing.\n</review>" for i in range(5)]
    with OpenAIServer(polls_before_end=2, batch_fault=fault) as server:
        results = make(server, sleep=sleeps, use_batches=True).generate([request(r) for r in reviews])
    first, second = server.batches["batch_0001"], server.batches["batch_0002"]
    assert first["status"] == "expired" and second["status"] == "completed"
    assert len(first["requests"]) == 5 and len(second["requests"]) == 3    # the missing, 500 and expired ones
    assert {r["custom_id"] for r in second["requests"]} == {"req-0", "req-1", "req-2"}
    assert first["requests"][0]["url"] == "/v1/chat/completions" and first["requests"][0]["method"] == "POST"
    assert server.counts["files_create"] == 2 and server.counts["batches_create"] == 2 and server.counts["chat"] == 0
    assert server.counts["files_content"] == 3      # output + error file, then the second output file
    assert sleeps.count(0.01) >= 4                  # polled while in progress, then backed off
    for i in (0, 1, 2, 4):
        assert results[i].ok and results[i].batch
        assert f"review number {i} praises" in results[i].text
    assert not results[3].ok and "invalid" in results[3].error and not results[3].retryable


def test_a_batch_responder_answers_the_items_that_reach_the_model_together():
    # as a served model decodes a batch file: one call for every item that no fault stopped; an item
    # the model fails errors alone
    calls: list[list[str]] = []

    def together(bodies: list[dict]) -> list:
        calls.append([b["messages"][-1]["content"] for b in bodies])
        return [RuntimeError("prompt too long") if "long" in b["messages"][-1]["content"]
                else heuristic_responder(b) for b in bodies]

    def fault(batch: int, position: int, custom_id: str):
        return "server_error" if (batch, position) == (0, 1) else None

    reviews = [f"<review>\nReview {i} praises the clear writing.\n</review>" for i in range(4)]
    reviews[3] = "<review>\nA long review.\n</review>"
    with OpenAIServer(batch_fault=fault, batch_responder=together, polls_before_end=0) as server:
        results = make(server, sleep=Sleeps(), use_batches=True, max_retries=0).generate([request(r) for r in reviews])
    assert calls == [[reviews[0], reviews[2], reviews[3]]]   # one call: the faulted item never reached it
    assert results[0].ok and results[2].ok and "review 2 praises" in results[2].text
    assert not results[1].ok and "scripted server_error" in results[1].error
    assert not results[3].ok and "prompt too long" in results[3].error


def test_batch_create_rate_limited_then_accepted_and_cached(tmp_path):
    with OpenAIServer() as server:
        server.fail_next(429, route="batches_create", retry_after=0)
        cfg = config(server, use_batches=True)
        requests = [request(), request("<review>The work is fine overall.</review>")]
        results = make_lm(cfg, tmp_path).generate(requests)
        again = make_lm(cfg, tmp_path).generate(requests)
    assert [r.ok for r in results] == [True, True]
    assert server.counts["batches_create"] == 2 and server.counts["files_create"] == 1
    assert all(r.cached for r in again) and server.counts["batches_create"] == 2


def test_usage_and_cost_accounting():
    cfg = LLMConfig(backend="openai", model="gpt-test", input_price_per_mtok=2.0, output_price_per_mtok=8.0,
                    cache_read_price_per_mtok=0.5)
    with OpenAIServer() as server:
        results = make(server).generate([request()]) + make(server).generate([request()])
        batched = make(server, use_batches=True).generate([request(), request()])
    usage = Usage.of(results, cfg)
    assert usage.requests == 2 and usage.errors == 0
    first, second = results
    assert second.cache_read_tokens > 0 and second.input_tokens == first.input_tokens - second.cache_read_tokens
    expected = (second.input_tokens * 2.0 + second.cache_read_tokens * 0.5 + second.output_tokens * 8.0) / 1e6
    assert cost_usd(second, cfg) == pytest.approx(expected)
    assert usage.cost_usd == pytest.approx(sum(cost_usd(r, cfg) for r in results))
    plain = batched[0].__class__(**{**batched[0].__dict__, "batch": False})
    assert cost_usd(batched[0], cfg) == pytest.approx(cost_usd(plain, cfg) / 2)   # the Batch API bills half


def test_loglikelihood_and_embed_are_unsupported():
    with OpenAIServer() as server:
        backend = make(server)
        with pytest.raises(Unsupported, match="local model"):
            backend.loglikelihood([])
        with pytest.raises(Unsupported, match="embedder"):
            backend.embed(["x"])


def test_a_candidate_accepts_the_openai_keys():
    candidate = CandidateConfig(name="gpt-x", knowledge_cutoff="2024-06-01", backend="openai", model="gpt-x",
                                base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")
    assert candidate.backend == "openai" and candidate.temperature == 0.0


def commented_candidates() -> list[str]:
    """The commented `[[generate.candidates]]` entries of pipelines.toml, uncommented."""
    blocks: list[list[str]] = []
    open_block = False
    for line in (Path(__file__).parents[2] / "pipelines.toml").read_text().splitlines():
        if line == "# [[generate.candidates]]":
            blocks.append([])
            open_block = True
        elif open_block and re.match(r"# \w+ = ", line):
            blocks[-1].append(line[2:])
        else:
            open_block = False
    return ["\n".join(block) for block in blocks]


def test_the_commented_provider_entries_are_valid_candidates():
    entries = [tomllib.loads(text) for text in commented_candidates()]
    assert [e["name"] for e in entries] == ["gpt-5", "gemini-2.5-pro", "deepseek-chat", "llama-3.1-8b-vllm"]
    for entry in entries:
        assert entry["backend"] == "openai" and "api_key_env" in entry and "base_url" in entry
        if entry["name"] == "deepseek-chat":   # no published cutoff is stated: the user must fill it in
            with pytest.raises(ValidationError, match="knowledge_cutoff"):
                CandidateConfig(**entry)
            continue
        candidate = CandidateConfig(**entry)
        assert candidate.knowledge_cutoff.year >= 2023


def test_continue_final_message_sends_the_prefill_as_the_answer_start():
    with OpenAIServer(lambda body: "appreciates the figures.") as server:
        result = make(server, continue_final_message=True).generate([request(prefill="The reviewer ")])[0]
        batched = make(server, continue_final_message=True, use_batches=True).generate(
            [request(prefill="The reviewer "), request("<review>x y z</review>", prefill="The reviewer ")])
    for body in server.received:
        assert body["messages"][-1] == {"role": "assistant", "content": "The reviewer "}
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert result.text == "The reviewer appreciates the figures."
    assert [r.text for r in batched] == ["The reviewer appreciates the figures."] * 2


def test_a_failing_responder_is_a_retryable_server_error():
    def broken(body):
        raise RuntimeError("model crashed")

    with OpenAIServer(broken) as server:
        single = make(server, max_retries=1).generate([request()])[0]
        batched = make(server, max_retries=0, use_batches=True).generate([request(), request("<review>a b c</review>")])
    assert single.retryable and "HTTP 500" in single.error and server.counts["chat"] == 2
    assert all(r.retryable and "model crashed" in r.error for r in batched)


@pytest.mark.slow
def test_the_embedded_model_served_through_the_openai_path(tmp_path):
    """The demo's wiring: base_url "served:smollm2" starts the local server with SmolLM2 behind it."""
    cfg = LLMConfig(backend="openai", model="smollm2", base_url="served:smollm2", api_key_env="",
                    continue_final_message=True, use_batches=True, poll_seconds=0.05)
    lm = make_lm(cfg, tmp_path)
    results = lm.generate([ChatRequest("Answer in one word.", "What colour is the sky?", 8, prefill="The sky is"),
                           ChatRequest("Answer in one word.", "Name a fruit.", 8)])
    assert all(r.ok and r.batch for r in results), results
    assert all(0 < r.output_tokens <= 8 and r.input_tokens > 10 and r.cache_read_tokens == 0 for r in results)
    assert results[1].truncated == (results[1].output_tokens == 8)
    assert results[0].text.startswith("The sky is")
    assert lm.identity == "openai|served:smollm2|float32|none|smollm2|temperature=0.0|continue_final_message"   # the served model and its dtype
    again = make_lm(cfg, tmp_path).generate([ChatRequest("Answer in one word.", "Name a fruit.", 8)])
    assert again[0].cached and again[0].text == results[1].text


def test_a_batch_that_fails_validation_is_a_final_error_per_item():
    with OpenAIServer(invalid_batches="model gpt-test does not support the Batch API") as server:
        results = make(server, use_batches=True).generate([request(), request("<review>a b c</review>")])
    assert server.counts["batches_create"] == 1      # not resubmitted: it would fail again
    for result in results:
        assert not result.retryable and "batch failed: invalid_request: model gpt-test does not" in result.error


def test_a_crashed_run_reattaches_to_its_batch(tmp_path):
    class Crash(BaseException):
        pass

    def crash(seconds: float) -> None:
        raise Crash

    from tasks.lm import LLMCache

    store = LLMCache(tmp_path / "llm.sqlite")
    requests = [request(), request("<review>The method is novel.</review>")]
    with OpenAIServer(polls_before_end=3) as server:
        with pytest.raises(Crash):     # the process dies while the batch is in progress
            OpenAILM(config(server, use_batches=True), sleep=crash, batch_store=store).generate(requests)
        results = OpenAILM(config(server, use_batches=True), sleep=Sleeps(), batch_store=store).generate(requests)
    assert [r.ok for r in results] == [True, True]
    assert server.counts["batches_create"] == 1 and server.counts["files_create"] == 1
    assert len(server.batches) == 1
