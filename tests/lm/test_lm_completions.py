"""Log-likelihoods and readouts through an OpenAI-compatible completions server (tasks/lm/completions.py),
against the local server's /v1/completions on the embedded model (tasks/testing/completions.py), through
the real `openai` client: equal to the local engine, batched, cached, retried, and refused with one line
by servers that cannot echo prompt log-probabilities."""

from __future__ import annotations

import openai
import pytest

from tasks.core.config import LLMConfig, ScoreConfig
from tasks.lm import LoglikelihoodRequest, ModelSpec, eval_spec, local_lm, make_lm
from tasks.lm.completions import CompletionsError, CompletionsLM
from tasks.lm.readout import answer_probabilities
from tasks.testing.completions import FixedCompletions, LocalCompletions
from tasks.testing.openai_server import OpenAIServer

SYSTEM = "You read peer reviews."
# continuations whose first characters would merge with the prompt's end if sent as one text
REQUESTS = [LoglikelihoodRequest(SYSTEM, f"Summarise review {i}: the method on graph {i} is new.", y)
            for i in range(3) for y in ("The method is novel.", " leading space", "\nnew line first", "Yes")]


def config(server: OpenAIServer, **overrides) -> LLMConfig:
    values = {"backend": "openai", "api": "completions", "model": "smol-served", "tokenizer": "smollm2",
              "base_url": server.base_url, "api_key_env": "", "batch_size": 4, "max_in_flight": 2,
              "max_retries": 2, **overrides}
    return LLMConfig(**values)


def served(server: OpenAIServer, **overrides) -> CompletionsLM:
    return CompletionsLM(config(server, **overrides), sleep=lambda s: None)


def test_a_served_evaluation_lm_is_configured_by_score_eval_server() -> None:
    server = LLMConfig(backend="openai", api="completions", model="llama-8b", base_url="http://gpu7:8000/v1")
    spec = eval_spec(ScoreConfig(eval_server=server))
    assert spec.server == server and spec.resolved() == spec and spec.key == "llama-8b|completions|gpu7"
    with pytest.raises(ValueError, match='api = "completions"'):
        ScoreConfig(eval_server=LLMConfig(backend="openai", model="llama-8b"))
    with pytest.raises(ValueError, match="cannot be combined"):
        ScoreConfig(eval_server=server, eval_lms=["smollm2"])


@pytest.mark.slow
def test_server_log_likelihoods_equal_the_local_engine_batched_and_cached(tmp_path, embedded_lm) -> None:
    local = local_lm(ModelSpec()).loglikelihood(REQUESTS)
    with OpenAIServer(completions=LocalCompletions()) as server:
        lm = make_lm(config(server), tmp_path)
        got = lm.loglikelihood(REQUESTS)
        sent = server.counts["completions"]
        again = make_lm(config(server), tmp_path).loglikelihood(list(reversed(REQUESTS)))
        assert server.counts["completions"] == sent == -(-len(REQUESTS) // 4)   # 4 prompts per request; then cached
        body = server.received[0]
    assert body["echo"] is True and body["max_tokens"] == 0 and body["logprobs"] == 1
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in body["prompt"])   # token ids
    for want, have in zip(local, got, strict=True):
        assert have.n_tokens == want.n_tokens
        assert abs(have.logprob - want.logprob) < 1e-4
        assert max(abs(a - b) for a, b in zip(have.token_logprobs, want.token_logprobs, strict=True)) < 1e-4
    assert [r.logprob for r in reversed(again)] == [r.logprob for r in got]


@pytest.mark.slow
def test_readout_through_the_server_equals_the_local_readout(tmp_path, embedded_lm) -> None:
    prompts = [(SYSTEM, f"Does review {i} praise the method? Answer Yes or No.") for i in range(3)]
    answers = ["Yes", "No", "Maybe"]
    local = answer_probabilities(local_lm(ModelSpec()), prompts, answers)
    with OpenAIServer(completions=LocalCompletions()) as server:
        remote = answer_probabilities(make_lm(config(server), tmp_path), prompts, answers)
    assert remote.shape == (3, 3) and abs(remote - local).max() < 1e-4


@pytest.mark.slow
def test_transient_failures_are_retried_and_refusals_are_one_line_errors(embedded_lm) -> None:
    with OpenAIServer(completions=LocalCompletions()) as server:
        server.fail_next(503, times=2, route="completions")
        assert len(served(server).loglikelihood(REQUESTS[:2])) == 2
        assert server.counts["completions"] == 3
        server.fail_next(429, times=3, route="completions")
        with pytest.raises(Exception, match="HTTP 429") as failed:
            served(server).loglikelihood(REQUESTS[:1])
        assert type(failed.value).__name__ == "TransientLLMError"   # the Prefect task retries it later
    # OpenAI's own completion models refuse echo with logprobs: not retried, one line
    with OpenAIServer(completions=LocalCompletions(echo_logprobs=False)) as server:
        with pytest.raises(CompletionsError, match="echo' and 'logprobs'") as refused:
            served(server).loglikelihood(REQUESTS[:1])
        assert server.counts["completions"] == 1 and "\n" not in str(refused.value)
    # llama.cpp's server answers with log-probabilities of generated tokens only: never a silent zero
    with (OpenAIServer(completions=LocalCompletions(prompt_logprobs=False)) as server,
          pytest.raises(CompletionsError, match="does not echo prompt log-probabilities")):
        served(server).loglikelihood(REQUESTS[:1])


@pytest.mark.slow
def test_the_endpoint_answers_like_vllm_through_the_openai_client(embedded_lm) -> None:
    with OpenAIServer(completions=LocalCompletions()) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        echoed = client.completions.create(model="m", prompt="The paper is", echo=True, logprobs=2, max_tokens=0)
        logprobs = echoed.choices[0].logprobs
        assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
        assert all(v < 0 for v in logprobs.token_logprobs[1:]) and echoed.choices[0].text == "The paper is"
        assert all(2 <= len(top) <= 3 for top in logprobs.top_logprobs[1:])   # top 2 plus the actual token
        more = client.completions.create(model="m", prompt="The paper is", echo=True, logprobs=0, max_tokens=3)
        assert more.usage.completion_tokens == 3 and len(more.choices[0].logprobs.tokens) == len(logprobs.tokens) + 3
        with pytest.raises(openai.BadRequestError, match="logprobs must be between 0 and 20"):
            client.completions.create(model="m", prompt="x y", echo=True, logprobs=21, max_tokens=0)


def test_chat_only_backend_points_to_the_completions_mode() -> None:
    from tasks.lm import Unsupported
    from tasks.lm.openai_api import OpenAILM

    with OpenAIServer() as server:
        lm = OpenAILM(config(server, api="chat"))
        with pytest.raises(Unsupported, match='api = "completions"'):
            lm.loglikelihood(REQUESTS[:1])


@pytest.mark.parametrize(("fault", "says"), [
    ("nan", "log-probability nan for token"), ("neg_inf", "log-probability -inf for token"),
    ("positive", "log-probability 5.0 for token"), ("extra_value", "(one value per token sent expected)"),
    ("html", "the answer is not a completions body"), ("bad_json", "the answer is not a completions body")])
def test_impossible_or_unreadable_answers_are_one_completions_error_naming_the_server(fault, says) -> None:
    with OpenAIServer(completions=FixedCompletions(value=5e-5)) as server:   # float noise above 0 is a score
        lm = served(server, max_retries=0)
        assert [r.n_tokens for r in lm.loglikelihood(REQUESTS[:2])] == [len(lm.encode(r)[1]) for r in REQUESTS[:2]]
        server.malformed_next(fault, route="completions")
        with pytest.raises(CompletionsError) as refused:
            lm.loglikelihood(REQUESTS[2:3])
    line = str(refused.value)
    assert says in line and f"at {server.base_url}/completions:" in line and "\n" not in line


def test_the_completions_url_is_named_once_under_v1() -> None:
    with OpenAIServer(completions=FixedCompletions()) as server:
        lm = served(server)
        server.fail_next(400, route="completions")
        with pytest.raises(CompletionsError) as refused:
            lm.loglikelihood(REQUESTS[:1])
    assert lm.endpoint == f"{server.url}/v1/completions" and "/v1/v1/" not in str(refused.value)
    assert f"{server.url}/v1/completions: HTTP 400" in str(refused.value)
