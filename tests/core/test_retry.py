"""The one retry rule: transient LLM and network failures are retried, nothing else."""

import openreview
import requests
from prefect.states import Completed, Failed

from tasks.core.retry import transient
from tasks.lm import TransientLLMError
from tasks.stages.ingest import openreview_client  # noqa: F401  (registers its transient check)


def retried(error: BaseException) -> bool:
    return transient(None, None, Failed(data=error))


def test_transient_llm_and_network_failures_are_retried():
    assert retried(TransientLLMError("3 LLM requests failed transiently; last: 529 overloaded"))
    assert retried(requests.ConnectionError("connection reset"))
    assert retried(openreview.OpenReviewException({"name": "RateLimitError", "status": 429}))


def test_anything_else_fails_at_once():
    assert not retried(ValueError("bad config"))
    assert not retried(openreview.OpenReviewException({"name": "ForbiddenError", "status": 403}))
    assert not transient(None, None, Completed(data=1))
