"""Finite log-probabilities whose sum is not finite (every value -1.7e308) are an error naming the
server, never a score of -inf."""

from __future__ import annotations

import pytest

from tasks.lm.completions import CompletionsError
from tasks.testing.completions import FixedCompletions
from tasks.testing.openai_server import OpenAIServer
from tests.lm.test_lm_completions import REQUESTS, served


def test_finite_log_probabilities_summing_to_minus_infinity_are_refused() -> None:
    with OpenAIServer(completions=FixedCompletions(value=-1.7e308)) as server:
        lm = served(server, max_retries=0)
        with pytest.raises(CompletionsError) as refused:
            lm.loglikelihood(REQUESTS[:1])
    line = str(refused.value)
    assert "sum to -inf (a finite sum expected)" in line and f"at {server.base_url}/completions:" in line
    assert "\n" not in line
