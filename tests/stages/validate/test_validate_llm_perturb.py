"""LLM perturbations through the real anthropic client against the local Anthropic-compatible server."""

from __future__ import annotations

from typing import Any

import pytest

from tasks.core.config import LLMConfig
from tasks.lm import make_lm
from tasks.lm.anthropic_api import AnthropicLM
from tasks.stages.validate.llm_perturb import apply_llm_perturbation
from tasks.stages.validate.prompts import GAP_MARKER, build_prompt
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text

REVIEW = "Summary Of The Paper:\n\nIt is fast. It is small. It is new.\n"
CFG = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0, max_in_flight=1)


def responder(params: dict[str, Any]) -> str:
    """Fills gaps with a fixed sentence (unless the review says KEEPGAP); echoes anything else."""
    user = user_text(params)
    if GAP_MARKER in user and "KEEPGAP" not in user:
        return user.replace(GAP_MARKER, "That point is noted.")
    return f"Rewritten ({len(system_text(params))}): {user}"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with AnthropicServer(responder) as running:
        yield running


def _backend(server: AnthropicServer, **changes: Any) -> AnthropicLM:
    return AnthropicLM(CFG.model_copy(update=changes), base_url=server.url, sleep=lambda _: None)


def test_deletion_completion_fills_every_gap(server):
    [result] = apply_llm_perturbation("deletion_completion", [REVIEW], _backend(server))
    assert result.error is None
    assert result.text == "Summary Of The Paper:\n\nIt is fast. That point is noted. It is new."


def test_failures_are_recorded_never_replaced_by_the_original(server):
    backend = _backend(server)
    server.fail_next(400)                      # the first request sent (one in flight at a time)
    results = apply_llm_perturbation("deletion_completion", [REVIEW, "", "KEEPGAP. Two. Three.", REVIEW],
                                     backend)
    assert [r.text is None for r in results] == [True, True, True, False]
    assert "400" in results[0].error and results[0].error.startswith("llm error")
    assert results[1].error == "empty review"
    assert results[2].error == "gaps left unfilled"
    [cut] = apply_llm_perturbation("rephrase", [REVIEW], backend, max_tokens=3)
    assert cut.text is None and cut.error == "llm answer cut off at max_tokens"
    server.malformed_next("no_text")
    [empty] = apply_llm_perturbation("rephrase", [REVIEW], backend)
    assert empty.text is None and "no text block" in empty.error


def test_rewrites_and_surface_report_send_the_right_prompt(server):
    backend = _backend(server)
    [rephrased] = apply_llm_perturbation("rephrase", [REVIEW], backend)
    prompt = build_prompt("rephrase", REVIEW)
    assert rephrased.text == f"Rewritten ({len(prompt.system)}): {REVIEW.strip()}"
    sent = server.received[-1]
    assert system_text(sent) == prompt.system and sent["max_tokens"] == prompt.max_tokens
    results = apply_llm_perturbation("surface_report", [REVIEW, REVIEW], backend,
                                     abstracts=["We study samplers.", None])
    assert "We study samplers." in results[0].text and results[1].error == "no abstract"
    with pytest.raises(ValueError, match="deterministic"):
        apply_llm_perturbation("sentence_deletion", [REVIEW], backend)
    with pytest.raises(ValueError, match="one entry per review"):
        apply_llm_perturbation("surface_report", [REVIEW], backend, abstracts=[])


def test_batches_api_keeps_order(server):
    reviews = [f"Point {i}. Filler. Point {i} again." for i in range(3)]
    results = apply_llm_perturbation("deletion_completion", reviews, _backend(server, use_batches=True))
    assert [r.text for r in results] == [f"Point {i}. That point is noted. Point {i} again." for i in range(3)]
    assert server.counts["batches_create"] == 1


def test_cached_backend_stores_only_usable_answers(server, tmp_path):
    cached = make_lm(CFG, tmp_path, base_url=server.url)
    reviews = [REVIEW, "KEEPGAP. Two. Three."]
    first = apply_llm_perturbation("deletion_completion", reviews, cached)
    assert server.counts["messages"] == 2 and first[1].error == "gaps left unfilled"
    again = apply_llm_perturbation("deletion_completion", reviews, cached)
    assert again[0].cached and again[0].text == first[0].text
    assert server.counts["messages"] == 3          # only the failed one is asked again
    assert again[1].error == "gaps left unfilled"


@pytest.mark.parametrize("name", ["confident_tone", "flattery"])
def test_llm_manipulations_go_through_the_backend(server, name):
    from tasks.stages.validate.strategies import STRATEGIES

    assert STRATEGIES[name].kind == "manipulation" and STRATEGIES[name].needs_llm
    [result] = apply_llm_perturbation(name, [REVIEW], _backend(server))
    prompt = build_prompt(name, REVIEW)
    assert result.error is None and result.text == f"Rewritten ({len(prompt.system)}): {REVIEW.strip()}"
    assert system_text(server.received[-1]) == prompt.system and user_text(server.received[-1]) == REVIEW
