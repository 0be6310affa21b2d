"""The deterministic surface manipulations: exact output on fixed inputs, and their registry entries."""

from __future__ import annotations

import pytest

from tasks.stages.validate import manipulations as m
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES, perturb_texts

REVIEW = ("Summary Of The Paper:\nThe paper proposes a method. It is tested on two sets.\n\n"
          "Strengths And Weaknesses:\n- Clear writing\n- Weak baselines, e.g. no ablation.\n")
JUDGMENTS = "The reviewer praises the writing.\nThe reviewer criticizes the baselines."


def test_format_bullets_turns_prose_into_a_list_and_a_list_into_prose():
    assert m.format_bullets(REVIEW) == (
        "Summary Of The Paper:\n1. The paper proposes a method.\n2. It is tested on two sets.\n\n"
        "Strengths And Weaknesses:\nClear writing. Weak baselines, e.g. no ablation.\n")
    assert m.format_bullets(m.format_bullets(REVIEW)) == (
        "Summary Of The Paper:\nThe paper proposes a method. It is tested on two sets.\n\n"
        "Strengths And Weaknesses:\n1. Clear writing.\n2. Weak baselines, e.g. no ablation.\n")
    assert m.judgments_bullets(JUDGMENTS) == (
        "1. The reviewer praises the writing.\n2. The reviewer criticizes the baselines.")


def test_format_headers():
    assert m.format_headers(REVIEW) == (
        "## Summary Of The Paper\nThe paper proposes a method. It is tested on two sets.\n\n"
        "## Strengths And Weaknesses\n- Clear writing\n- Weak baselines, e.g. no ablation.\n")
    assert m.format_headers("Plain review. No headers.") == "## Review\n\nPlain review. No headers."
    assert m.format_headers("## Done\ntext\n") == "## Done\ntext\n"
    assert m.judgments_headers(JUDGMENTS) == "## Judgments\n" + JUDGMENTS


def test_case_and_whitespace():
    assert m.case_upper("Weak baselines, e.g. no ablation.") == "WEAK BASELINES, E.G. NO ABLATION."
    assert m.judgments_upper(JUDGMENTS) == JUDGMENTS.upper()
    assert m.whitespace_padding("First line.\nSecond.\n\nNext paragraph.") == (
        "    First line.  \n    Second.  \n\n\n    Next paragraph.  \n")
    assert m.judgments_whitespace(JUDGMENTS) == (
        "    The reviewer praises the writing.  \n\n\n    The reviewer criticizes the baselines.  \n")


def test_padding_repetition_and_injection():
    assert m.boilerplate_padding("Short review.\n\n") == f"Short review.\n\n{m.BOILERPLATE}\n"
    assert m.judgments_boilerplate("A.\nB.") == "A.\nB.\n" + "\n".join(m.BOILERPLATE_JUDGMENTS)
    assert m.self_repetition("Summary:\nOne. Two.\n\nWeaknesses:\n- a\n- b\n") == (
        "Summary:\nOne. Two.\n\nOne. Two.\n\nWeaknesses:\n- a\n- b\n\n- a\n- b\n")
    assert m.judgments_repetition("A.\n\nB.") == "A.\n\nB.\n\nA.\n\nB."
    assert m.prompt_injection("Review.\n") == f"Review.\n\n{m.INJECTION}\n"
    assert m.prompt_injection_hidden("Review.\n") == f"<!-- {m.INJECTION} -->\nReview.\n"
    assert m.judgments_injection("A.") == f"A.\n{m.INJECTION}"
    assert m.judgments_injection_hidden("A.") == f"<!-- {m.INJECTION} -->\nA."
    assert "highest possible score" in m.INJECTION


@pytest.mark.parametrize("name", sorted(m.DESCRIPTIONS))
def test_registered_as_deterministic_manipulations(name):
    spec = STRATEGIES[name]
    assert spec.kind == "manipulation" and not spec.needs_llm and name in DETERMINISTIC
    texts, errors = perturb_texts(name, [REVIEW, "", None], target="review")
    assert texts[0] == m.REVIEW_FORMS[name](REVIEW) and texts[0] != REVIEW
    assert texts[1:] == [None, None] and errors == [None, "empty text", "empty text"]
    lines, _ = perturb_texts(name, [JUDGMENTS], target="judgments")
    assert lines[0] == m.JUDGMENT_FORMS[name](JUDGMENTS) and lines[0] != JUDGMENTS
