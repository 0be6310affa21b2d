"""One retry predicate for transient LLM / network errors, and the task decorator that uses it."""

from __future__ import annotations

import functools
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE


def transient(_task: Any, _run: Any, state: Any) -> bool:
    """Retry only when the task failed with a transient LLM error (429 / 5xx / timeouts)."""
    from tasks.llm.base import TransientLLMError

    return isinstance(getattr(state, "data", None), TransientLLMError)


llm_task = functools.partial(task, retries=3, retry_delay_seconds=[30, 120, 300], retry_condition_fn=transient,
                             cache_policy=NO_CACHE)
