"""LLM backends (local transformers, Anthropic) behind one interface and a content-addressed cache."""

from tasks.llm.base import (
    ChatBackend,
    ChatRequest,
    ChatResult,
    TransientLLMError,
    Usage,
    cost_usd,
    make_backend,
)

__all__ = [
    "ChatBackend",
    "ChatRequest",
    "ChatResult",
    "TransientLLMError",
    "Usage",
    "cost_usd",
    "make_backend",
]
