"""Meaningless elongation as GEM appendix D.2.2 makes it (form-section templates and an LLM's summaries of the
review's strengths and weaknesses), through the local Anthropic-compatible server, beside its rule-based proxy."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tasks.core.config import LLMConfig, ValidateConfig
from tasks.lm import make_lm
from tasks.lm.anthropic_api import AnthropicLM
from tasks.metrics import Resources
from tasks.stages.validate import elongation as d22
from tasks.stages.validate.llm_perturb import apply_llm_perturbation
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES
from tasks.stages.validate.workflow import run_validation
from tasks.testing.anthropic_server import AnthropicServer, system_text, user_text
from tests.stages.validate.test_validate_workflow import make_reviews

CFG = LLMConfig(backend="anthropic", model="claude-test", use_batches=False, max_retries=0, max_in_flight=1)
REVIEW = ("Summary Of The Paper:\n\nThe paper speeds up sampling.\n\n"
          "Strength And Weaknesses:\n\nStrength:\n- Fast.\n\nWeakness:\n- No ablation.\n\n"
          "Clarity, Quality, Novelty And Reproducibility:\n\nClear.\n\n"
          "Summary Of The Review:\n\nAccept.\n")
STRENGTHS = "the fast sampler and the clear writing"
WEAKNESSES = "the missing ablation and the few seeds"


def responder(params: dict[str, Any]) -> str:
    """Answers each summary prompt in the shape a model might (a label, a full stop); NOSUMMARY gets no text."""
    if "NOSUMMARY" in user_text(params):
        return " "
    if "two strengths" in system_text(params):
        return f"Strengths: {STRENGTHS[0].upper()}{STRENGTHS[1:]}."
    return f"- {WEAKNESSES}\nA second line the summary leaves out."


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with AnthropicServer(responder) as running:
        yield running


def bodies(text: str) -> dict[str, str]:
    """Each ICLR 2023 section's body, by its field."""
    from tasks.core.review_text import split_sections

    return {d22.form_field(h): b.strip() for h, b in split_sections(text) if d22.form_field(h) in
            ("summary", "strengths_and_weaknesses", "clarity", "review")}


def test_each_form_section_opens_with_its_template_and_the_summaries_sit_in_strengths_and_weaknesses():
    out = d22.elongate(REVIEW, STRENGTHS, WEAKNESSES)
    summary = d22.SUMMARIES.format(strengths=STRENGTHS, weaknesses=WEAKNESSES)
    found = bodies(out)
    assert set(found) == {"summary", "strengths_and_weaknesses", "clarity", "review"}
    for field, body in found.items():
        assert body.startswith(d22.TEMPLATES[field])
    assert found["strengths_and_weaknesses"] == f"{d22.TEMPLATES['strengths_and_weaknesses']} {summary}"
    assert out.count(summary) == 1
    # the sub-headings inside the combined field stay as they were: no template of their own
    assert "Strength:\n- Fast.\n\nWeakness:\n- No ablation." in out and d22.TEMPLATES["strengths"] not in out
    assert out.replace(summary, "").count("This section") == 4
    # later forms: separate fields get their own templates; the summaries go to the strengths section
    later = d22.elongate("## Summary\n\nA.\n\n## Strengths\n\nB.\n\n## Weaknesses\n\nC.\n\n## Questions\n\nD?\n",
                         STRENGTHS, WEAKNESSES)
    assert f"## Strengths\n\n{d22.TEMPLATES['strengths']} {summary}\n\nB." in later
    assert f"## Questions\n\n{d22.TEMPLATES['questions']}\n\nD?" in later
    assert d22.elongate("No headers here.", STRENGTHS, WEAKNESSES) == f"{d22.TEMPLATES['other']} {summary}\n\nNo headers here."


def test_the_llm_summaries_come_through_the_cached_backend(server, tmp_path):
    cached = make_lm(CFG, tmp_path, base_url=server.url)
    [done, empty, failed] = apply_llm_perturbation("meaningless_elongation", [REVIEW, "", "NOSUMMARY here."], cached)
    assert done.error is None
    found = bodies(done.text)
    assert all(body.startswith(d22.TEMPLATES[field]) for field, body in found.items())
    # the label, the capital and the full stop gone; the second line of the weaknesses answer left out
    assert f"main strengths in {STRENGTHS}, and its main weaknesses in {WEAKNESSES}." in found["strengths_and_weaknesses"]
    assert "second line" not in done.text
    assert empty.error == "empty review"
    assert failed.text is None and failed.error == ("strengths summary: llm returned no text; "
                                                    "weaknesses summary: llm returned no text")
    sent = server.counts["messages"]
    assert sent == 4 and all(b["messages"][0]["content"].startswith("<review>") for b in server.received)
    again = apply_llm_perturbation("meaningless_elongation", [REVIEW, "NOSUMMARY here."], cached)
    assert again[0].cached and again[0].text == done.text
    assert server.counts["messages"] == sent + 2        # only the unusable answers are asked again
    server.fail_next(400)
    [broken] = apply_llm_perturbation("meaningless_elongation", ["Summary:\nAnother review."], cached)
    assert broken.text is None and broken.error.startswith("strengths summary: llm error") and "400" in broken.error


def test_read_summary_names_what_makes_an_answer_unusable():
    from tasks.lm import ChatResult

    assert d22.read_summary(ChatResult("BERT baselines and the proofs")) == ("BERT baselines and the proofs", None)
    assert d22.read_summary(ChatResult("the speed and", truncated=True))[1] == \
        "llm answer cut off at max_tokens before its line ended"
    assert "longer than one line" in d22.read_summary(ChatResult(" ".join(["word"] * 41)))[1]
    assert d22.read_summary(ChatResult("Weaknesses: ."))[1] == "no summary in the llm answer"


def test_the_rows_name_the_procedure_and_the_llm_or_the_proxy(server):
    assert STRATEGIES["meaningless_elongation"].needs_llm and "meaningless_elongation" not in DETERMINISTIC
    assert "meaningless_elongation_proxy" in DETERMINISTIC
    backend = AnthropicLM(CFG, base_url=server.url, sleep=lambda _: None)
    settings = ValidateConfig(strategies=["meaningless_elongation", "meaningless_elongation_proxy"], metrics=["bleu"],
                              bootstrap_resamples=0, min_pairs=2)
    result = run_validation(make_reviews(n_papers=3), settings, resources=Resources(), backend=backend,
                            perturbers={"meaningless_elongation": "anthropic:claude-test"})
    by = {r["strategy"]: r for r in result.validation.iter_rows(named=True)}
    assert by["meaningless_elongation"]["perturber"] == \
        "anthropic:claude-test (GEM D.2.2: form-section templates, strength and weakness summaries by this LLM)"
    assert by["meaningless_elongation_proxy"]["perturber"] == "rules (proxy of GEM D.2.2: fixed filler, no LLM summaries)"
    assert by["meaningless_elongation"]["n"] == 3 and by["meaningless_elongation"]["level"] == "raw"
    texts = result.perturbations.filter(pl.col("strategy") == "meaningless_elongation")["review_text"].to_list()
    assert all(t.startswith(f"Summary Of The Paper:\n{d22.TEMPLATES['summary']}") and STRENGTHS in t and WEAKNESSES in t
               for t in texts)
