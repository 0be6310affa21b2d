"""The content-addressed LLM cache: keys, storage, concurrency, and zero calls on a rerun."""

from __future__ import annotations

import threading

import pytest

from tasks.core.config import LLMConfig
from tasks.lm import CachedLM, ChatRequest, ChatResult, LLMCache, make_lm, request_key
from tasks.lm.anthropic_api import AnthropicLM
from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer

REQ = ChatRequest("system text v1", "<review>\nThe results are convincing and well presented.\n</review>", 64)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-cache")


def anthropic_cfg(**overrides) -> LLMConfig:
    return LLMConfig(**{"backend": "anthropic", "model": "claude-test", "poll_seconds": 0.01, **overrides})


def test_key_changes_with_everything_that_changes_the_answer():
    base = request_key("anthropic|claude-test", REQ)
    assert base == request_key("anthropic|claude-test", ChatRequest(REQ.system, REQ.user, REQ.max_tokens, "other-id"))
    variants = [
        request_key("anthropic|claude-other", REQ),
        request_key("local|smollm2|float32|none", REQ),
        request_key("anthropic|claude-test", ChatRequest("system text v2", REQ.user, 64)),
        request_key("anthropic|claude-test", ChatRequest(REQ.system, REQ.user + " ", 64)),
        request_key("anthropic|claude-test", ChatRequest(REQ.system, REQ.user, 65)),
    ]
    assert len({base, *variants}) == 6


def test_roundtrip_and_concurrent_writers(tmp_path):
    cache = LLMCache(tmp_path / "llm.sqlite")

    def write(worker: int) -> None:
        for i in range(40):
            cache.put_many([(f"{worker}-{i}", ChatResult(f"answer {worker} {i}", input_tokens=i, model="m"))])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 240
    found = LLMCache(tmp_path / "llm.sqlite").get_many(["3-7", "missing"])
    assert list(found) == ["3-7"]
    assert found["3-7"] == ChatResult("answer 3 7", input_tokens=7, model="m")


def test_second_run_makes_no_call(tmp_path):
    requests = [ChatRequest("sys", f"<review>\nReview {i} finds the method sound.\n</review>", 64) for i in range(3)]
    with AnthropicServer() as server:
        first = make_lm(anthropic_cfg(use_batches=False), tmp_path, base_url=server.url).generate(requests)
        calls = server.counts["messages"]
        again = make_lm(anthropic_cfg(use_batches=False), tmp_path, base_url=server.url)
        second = again.generate(requests)
    assert calls == 3 and server.counts["messages"] == 3
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert again.usage.requests == 3 and again.usage.cached == 3
    assert again.usage.input_tokens == 0 and again.usage.cost_usd == 0.0


def test_failed_or_refused_answers_are_not_stored(tmp_path):
    with AnthropicServer() as server:
        backend = make_lm(anthropic_cfg(use_batches=False), tmp_path, base_url=server.url)
        server.fail_next(400)
        assert backend.generate([REQ])[0].error
        refused = backend.generate([REQ], accept=lambda result: False)[0]
        stored = backend.generate([REQ])[0]
        cached = backend.generate([REQ])[0]
    assert refused.ok and not refused.cached
    assert stored.ok and not stored.cached
    assert cached.cached and cached.text == stored.text
    assert server.counts["messages"] == 3


def test_identical_requests_in_one_call_are_sent_once(tmp_path):
    with AnthropicServer() as server:
        backend = make_lm(anthropic_cfg(use_batches=False), tmp_path, base_url=server.url)
        results = backend.generate([REQ, REQ, REQ])
    assert server.counts["messages"] == 1
    assert len({r.text for r in results}) == 1 and [r.cached for r in results] == [False, True, True]


class Crash(Exception):
    pass


def test_a_crashed_batch_run_reattaches_to_its_batch(tmp_path):
    requests = [ChatRequest("sys", f"<review>\nReview {i} likes the clear figures.\n</review>", 64) for i in range(4)]

    def crash(seconds: float) -> None:
        raise Crash("the process died while polling")

    with AnthropicServer(polls_before_end=1) as server:
        cache = LLMCache(tmp_path / "llm.sqlite")
        dying = CachedLM(AnthropicLM(anthropic_cfg(), base_url=server.url, sleep=crash, batch_store=cache), cache,
                         anthropic_cfg())
        with pytest.raises(Crash):
            dying.generate(requests)
        resumed = make_lm(anthropic_cfg(), tmp_path, base_url=server.url).generate(requests)
        assert server.counts["batches_create"] == 1      # the second run found the batch in flight
        assert all(r.ok for r in resumed)
        again = make_lm(anthropic_cfg(), tmp_path, base_url=server.url).generate(requests)
    assert server.counts["batches_create"] == 1 and all(r.cached for r in again)


@pytest.mark.parametrize("use_batches", [False, True])
def test_answers_are_stored_as_they_arrive_not_when_the_list_is_done(tmp_path, monkeypatch, use_batches):
    """The OpenAI-compatible backend one request at a time, or in batches of 2: each answer (each batch's)
    is in the cache before the next request reaches the server."""
    monkeypatch.setattr("tasks.lm.openai_api.OpenAILM.max_batch_requests", 2)
    cache = LLMCache(tmp_path / "llm.sqlite")
    seen: list[int] = []            # answers stored when the server was asked each request

    def answer(body: dict) -> str:
        seen.append(len(cache))
        return "The reviewer appreciates the clear figures."

    requests = [ChatRequest("sys", f"<review>\nReview {i} is short.\n</review>", 16) for i in range(4)]
    with OpenAIServer(answer) as server:
        cfg = LLMConfig(backend="openai", model="gpt-test", base_url=server.base_url, api_key_env="",
                        max_in_flight=1, use_batches=use_batches, poll_seconds=0.01)
        results = make_lm(cfg, tmp_path).generate(requests)
    assert all(r.ok for r in results) and len(cache) == 4
    assert seen == ([0, 0, 2, 2] if use_batches else [0, 1, 2, 3])
