"""What the API-backend tests share (test_lm_anthropic.py, test_lm_openai.py, test_lm_chat_api.py):
the review they send, a recorder of waits, and each backend built on its local server."""

from __future__ import annotations

import time

from tasks.core.config import LLMConfig
from tasks.lm.anthropic_api import AnthropicLM
from tasks.lm.openai_api import OpenAILM
from tasks.lm.types import ChatRequest
from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer

ANTHROPIC_KEY = "fake-test-key-7f3c0d9e1b2a4c5d"
OPENAI_KEY = "sk-fake-test-key-9a8b7c6d5e4f"
OPENAI_ENV = "GREBENCH_TEST_OPENAI_KEY"
REVIEW = "<review>\nThe paper is clear. The proofs are incomplete. Why is the bound tight?\n</review>"


class Sleeps(list):
    """Records every wait; sleeps for real only when asked to."""

    def __init__(self, real: bool = False) -> None:
        super().__init__()
        self.real = real

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        if self.real:
            time.sleep(seconds)


def request(user: str = REVIEW, max_tokens: int = 200, **kw) -> ChatRequest:
    return ChatRequest("Rewrite the review as judgments.", user, max_tokens, **kw)


def anthropic_lm(server: AnthropicServer, sleep=None, **overrides) -> AnthropicLM:
    """Needs ANTHROPIC_API_KEY set (the tests set ANTHROPIC_KEY)."""
    settings = {"backend": "anthropic", "model": "claude-test", "poll_seconds": 0.01, "max_retries": 3,
                "use_batches": False, **overrides}
    return AnthropicLM(LLMConfig(**settings), base_url=server.url, sleep=sleep if sleep is not None else Sleeps(),
                       backoff_seconds=0.01)


def openai_config(server: OpenAIServer, **overrides) -> LLMConfig:
    settings = {"backend": "openai", "model": "gpt-test", "base_url": server.base_url, "api_key_env": OPENAI_ENV,
                "poll_seconds": 0.01, "max_retries": 3, "use_batches": False, **overrides}
    return LLMConfig(**settings)


def openai_lm(server: OpenAIServer, sleep=None, **overrides) -> OpenAILM:
    """Needs OPENAI_ENV set (the tests set OPENAI_KEY)."""
    return OpenAILM(openai_config(server, **overrides), sleep=sleep if sleep is not None else Sleeps(),
                    backoff_seconds=0.01)
