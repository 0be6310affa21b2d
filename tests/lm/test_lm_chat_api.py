"""What both API backends do through their shared loop (tasks/lm/api_common.ChatAPI), each through its
real client library against its local server: bounded requests in flight, malformed answers, a 429's
Retry-After honoured, a 400 never retried."""

from __future__ import annotations

import threading
import time

import pytest

from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer
from tests.chat_api_data import (
    ANTHROPIC_KEY,
    OPENAI_ENV,
    OPENAI_KEY,
    Sleeps,
    anthropic_lm,
    openai_lm,
    request,
)

BACKENDS = {"anthropic": (AnthropicServer, anthropic_lm), "openai": (OpenAIServer, openai_lm)}
ENDPOINT = {"anthropic": "messages", "openai": "chat"}   # the endpoint each server counts a request under


@pytest.fixture(autouse=True)
def api_keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv(OPENAI_ENV, OPENAI_KEY)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_requests_in_flight_are_bounded(backend):
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(body):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        return "The reviewer appreciates the writing."

    server_class, make = BACKENDS[backend]
    with server_class(slow) as server:
        results = make(server, max_in_flight=2).generate([request(f"<review>{i}</review>") for i in range(6)])
    assert all(r.ok for r in results)
    assert state["peak"] == 2


@pytest.mark.parametrize("backend, kind, message", [
    ("anthropic", "no_text", "no text block"), ("anthropic", "bad_json", "malformed response"),
    ("openai", "no_text", "no message content"), ("openai", "bad_json", "malformed response")])
def test_malformed_content_is_an_error_result(backend, kind, message):
    server_class, make = BACKENDS[backend]
    with server_class() as server:
        server.malformed_next(kind)
        bad, good = (make(server).generate([request()])[0] for _ in range(2))
    assert message in bad.error and bad.text == "" and not bad.ok
    assert good.ok


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_429_then_success_honours_retry_after(backend):
    server_class, make = BACKENDS[backend]
    sleeps = Sleeps(real=True)
    with server_class() as server:
        server.fail_next(429, retry_after=1)
        result = make(server, sleep=sleeps).generate([request()])[0]
    assert result.error is None and result.text.startswith("The reviewer")
    assert sleeps == [1.0]
    first, second = server.times[ENDPOINT[backend]]
    assert second - first >= 1.0
    assert server.counts[ENDPOINT[backend]] == 2


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_400_is_not_retried(backend):
    server_class, make = BACKENDS[backend]
    with server_class() as server:
        server.fail_next(400)
        result = make(server).generate([request()])[0]
    assert server.counts[ENDPOINT[backend]] == 1
    assert not result.retryable and "HTTP 400" in result.error
