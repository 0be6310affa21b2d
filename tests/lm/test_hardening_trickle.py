"""A server that answers 200 at once and then sends one byte every 0.3 s: every LLM request ends
within `timeout_seconds` in all (not only between bytes), each retry is logged, and the stage stops
with one line once its retry bounds are spent."""

from __future__ import annotations

import logging
import time

import pytest

from tasks.core.errors import UnreachableError
from tasks.lm.types import LoglikelihoodRequest, TransientLLMError
from tasks.testing.local_http import trickling_server
from tests.chat_api_data import request
from tests.lm.test_lm_timeouts import api_keys, chat, completions  # noqa: F401 - the fixture and helpers


@pytest.mark.slow   # loads the served model's tokenizer
def test_a_trickling_completions_server_fails_within_the_total_timeout_with_its_retries_logged(caplog):
    with trickling_server(0.3) as url:
        lm = completions(url, timeout_seconds=1.0, max_retries=1, retry_budget_seconds=600.0)
        assert lm.tokenizer is not None        # loaded before the clock starts
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(TransientLLMError) as failed:
            lm.loglikelihood([LoglikelihoodRequest("You read reviews.", "Is it novel?", "Yes")])
        took = time.monotonic() - started
    line = str(failed.value)
    assert took < 5 and "\n" not in line and url in line and "timed out" in line.lower()
    assert "retrying in" in caplog.text                                        # the retry is said


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_trickling_chat_server_stops_the_stage_after_the_retry_budget(backend):
    with trickling_server(0.3) as url:
        lm = chat(backend, url, timeout_seconds=0.5, max_retries=100, retry_max_seconds=0.05,
                  retry_budget_seconds=2.0)
        started = time.monotonic()
        with pytest.raises(UnreachableError) as stopped:
            lm.generate([request()])
        took = time.monotonic() - started
    assert took < 8 and url in str(stopped.value) and "\n" not in str(stopped.value)
