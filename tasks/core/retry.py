"""The one retry rule for Prefect tasks that call an LLM or the network.

A task is retried only when it failed for a transient reason: an LLM request still failing after
the backend's own retries (`TransientLLMError`: rate limit, overload, 5xx) or an OpenReview call
that hit a rate limit, a server error, a timeout or a dropped connection. Anything else (a bug, a
bad config, unusable data) fails at once. Answers and pages already received are cached, so a
retry only redoes what is missing.
"""

from __future__ import annotations

import functools
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.lm import TransientLLMError


def failure(state: Any) -> BaseException | None:
    """The exception a failed task state carries (None when it carries none or cannot be read)."""
    data = getattr(state, "data", None)
    if isinstance(data, BaseException):
        return data
    try:
        result = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - the result could not be read back: do not retry blindly
        return None
    return result if isinstance(result, BaseException) else None


def transient(_task: Any, _run: Any, state: Any) -> bool:
    """`retry_condition_fn` of every LLM / network task: retry transient failures only."""
    error = failure(state)
    if error is None or isinstance(error, TransientLLMError):
        return error is not None
    from tasks.stages.ingest.openreview_client import (
        is_transient,  # openreview-py is slow to import; ingest needs it
    )

    return is_transient(error)


# An LLM-calling task: three retries at growing delays, never cached by Prefect (the LLM cache is ours).
llm_task = functools.partial(task, retries=3, retry_delay_seconds=[30, 120, 300], retry_condition_fn=transient,
                             cache_policy=NO_CACHE)
