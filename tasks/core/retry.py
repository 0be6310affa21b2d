"""The one retry rule for Prefect tasks that call an LLM or the network.

A task is retried only when it failed for a transient reason: an LLM request still failing after
the backend's own retries (`TransientError`: rate limit, overload, 5xx) or an OpenReview call
that hit a rate limit, a server error, a timeout or a dropped connection (a predicate the ingest
stage registers). Anything else (a bug, a
bad config, unusable data) fails at once. Answers and pages already received are cached, so a
retry only redoes what is missing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.errors import TransientError


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


# Predicates that recognise a transient failure of a library we do not own (openreview-py's HTTP
# errors: tasks/stages/ingest/openreview_client.py registers one when it is imported).
_TRANSIENT_CHECKS: list[Callable[[BaseException], bool]] = []


def register_transient(check: Callable[[BaseException], bool]) -> Callable[[BaseException], bool]:
    """Add a predicate that says a third-party error is worth retrying (usable as a decorator)."""
    if check not in _TRANSIENT_CHECKS:
        _TRANSIENT_CHECKS.append(check)
    return check


def is_retryable(error: BaseException | None) -> bool:
    """A `TransientError` (ours: rate limit, overload, 5xx after the backend's own retries) or an error
    a registered predicate recognises; never a bug, a bad config or unusable data."""
    if error is None:
        return False
    return isinstance(error, TransientError) or any(check(error) for check in _TRANSIENT_CHECKS)


def transient(_task: Any, _run: Any, state: Any) -> bool:
    """`retry_condition_fn` of every LLM / network task: retry transient failures only."""
    return is_retryable(failure(state))


# An LLM-calling task: three retries at growing delays, never cached by Prefect (the LLM cache is ours).
llm_task = functools.partial(task, retries=3, retry_delay_seconds=[30, 120, 300], retry_condition_fn=transient,
                             cache_policy=NO_CACHE)
