"""Deterministic perturbations on fixed inputs, checked exactly; the strategy registry; the prompts."""

from __future__ import annotations

import polars as pl
import pytest

from tasks.core.review_text import is_header, split_sections, split_sentences
from tasks.stages.validate import manipulations, prompts
from tasks.stages.validate.perturb import (
    FILLER,
    FILLER_JUDGMENTS,
    filler_elongation,
    judgment_deletion,
    judgment_elongation,
    random_replacement,
    sentence_deletion,
)
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES, perturb_frame, perturb_texts, strategy

REVIEW = """Summary Of The Paper:

The paper proposes a sampler. It is fast. It is tested on images.

Strength And Weaknesses:

The idea is simple, e.g. one line of code. The bound (Fig. 2) is loose.
1. Experiments are small. They use one seed.
2. The related work of Smith et al. is missing!

Clarity, Quality, Novelty And Reproducibility:

Clear writing.

Summary Of The Review:

Good idea. Weak evidence. Reject? Maybe.
"""

DELETED = """Summary Of The Paper:

The paper proposes a sampler. It is tested on images.

Strength And Weaknesses:

The idea is simple, e.g. one line of code.
1. Experiments are small.
2. The related work of Smith et al. is missing!

Clarity, Quality, Novelty And Reproducibility:

Clear writing.

Summary Of The Review:

Good idea. Reject?
"""

JUDGMENTS = """The reviewer appreciates the fast sampler.

The reviewer criticizes the small experiments.

The reviewer suggests more seeds.

The reviewer questions the bound."""


def test_sentence_deletion_exact():
    assert sentence_deletion(REVIEW) == DELETED


def test_sentence_deletion_with_gap_marker_exact():
    expected = DELETED.replace("sampler. It is tested", "sampler. [GAP] It is tested")
    expected = expected.replace("line of code.\n1. Experiments are small.\n",
                                "line of code. [GAP]\n1. Experiments are small. [GAP]\n")
    expected = expected.replace("Good idea. Reject?", "Good idea. [GAP] Reject? [GAP]")
    assert sentence_deletion(REVIEW, gap="[GAP]") == expected


def test_sentence_deletion_on_markdown_sections_and_plain_text():
    markdown = "## Summary\n\nA one. A two. A three.\n\n## Weaknesses\n\nB one.\nB two.\nB three.\n"
    assert sentence_deletion(markdown) == "## Summary\n\nA one. A three.\n\n## Weaknesses\n\nB one.\nB three.\n"
    assert sentence_deletion("One. Two. Three. Four.") == "One. Three."
    assert sentence_deletion("") == ""


def test_sentence_splitting_keeps_abbreviations_and_list_markers():
    units = split_sentences("See Fig. 3 and Smith et al. (2020), e.g. here. Next one!\n2. Item text.\n")
    assert [s for s, _ in units] == ["See Fig. 3 and Smith et al. (2020), e.g. here.", "Next one!", "2. Item text."]
    # headers and bodies reassemble to the original text
    assert "".join((h or "") + b for h, b in split_sections(REVIEW)) == REVIEW


@pytest.mark.parametrize("line, header", [
    ("Summary Of The Paper:", True),
    ("Clarity, Quality, Novelty And Reproducibility:", True),
    ("## Weaknesses", True),
    ("**Pros:** ", True),
    ("Minor comments:", True),
    ("The authors make the following three claims:", False),
    ("This is a sentence.", False),
    ("**A bold sentence.**", False),
    ("", False),
])
def test_header_detection(line, header):
    assert is_header(line) is header


def test_filler_elongation_exact():
    text = "Summary Of The Paper:\n\nIt is fast.\n\nSummary Of The Review:\n\nReject.\n"
    expected = (
        f"Summary Of The Paper:\n\n{FILLER['summary']}\n\nIt is fast.\n\n"
        f"Summary Of The Review:\n\n{FILLER['review']}\n\nReject.\n"
    )
    assert filler_elongation(text) == expected
    expected_end = (
        f"Summary Of The Paper:\n\nIt is fast.\n\n{FILLER['summary']}\n\n"
        f"Summary Of The Review:\n\nReject.\n\n{FILLER['review']}\n"
    )
    assert filler_elongation(text, position="end") == expected_end
    assert filler_elongation("Just one line.") == f"{FILLER['other']}\n\nJust one line."


def test_filler_elongation_adds_the_same_text_to_every_review():
    first, second = filler_elongation(REVIEW), filler_elongation(DELETED)
    for filler in (FILLER["summary"], FILLER["strengths"], FILLER["clarity"], FILLER["review"]):
        assert first.count(filler) == 1 and second.count(filler) == 1
    assert first.replace("\n", "").count("  ") == REVIEW.replace("\n", "").count("  ")


def test_judgment_variants_exact():
    assert judgment_deletion(JUDGMENTS) == (
        "The reviewer appreciates the fast sampler.\n\nThe reviewer suggests more seeds."
    )
    assert judgment_deletion("The reviewer a.\nThe reviewer b.\nThe reviewer c.") == "The reviewer a.\nThe reviewer c."
    elongated = judgment_elongation(JUDGMENTS)
    assert elongated == JUDGMENTS + "\n\n" + "\n\n".join(FILLER_JUDGMENTS)
    stances = ("appreciates", "criticizes", "suggests", "questions")
    assert all(line.split()[:2] == ["The", "reviewer"] and line.split()[2] in stances for line in FILLER_JUDGMENTS)


def test_random_replacement_is_seeded_and_never_the_same_paper():
    paper_ids = ["p1", "p1", "p2", "p3", "p3", "p4"]
    texts = ["a1", "a2", "b1", "c1", "c2", "d1"]
    first = random_replacement(paper_ids, texts, seed=11)
    assert first == random_replacement(paper_ids, texts, seed=11)
    owner = dict(zip(texts, paper_ids, strict=True))
    for pid, drawn in zip(paper_ids, first, strict=True):
        assert drawn is not None and owner[drawn] != pid
    draws = {tuple(random_replacement(paper_ids, texts, seed=s)) for s in range(20)}
    assert len(draws) > 1


def test_random_replacement_stays_in_the_group():
    paper_ids = ["p1", "p2", "p3", "p4", "p5"]
    groups = ["x", "x", "y", "y", "z"]
    texts = ["t1", "t2", "t3", "t4", "t5"]
    for seed in range(10):
        drawn = random_replacement(paper_ids, texts, seed=seed, groups=groups)
        assert drawn == ["t2", "t1", "t4", "t3", None]   # p5 is alone in its group
    with pytest.raises(ValueError, match="same length"):
        random_replacement(paper_ids, texts[:2], seed=0)


def test_perturb_frame_records_failures():
    frame = pl.DataFrame({
        "paper_id": ["p1", "p2", "p2", "p3"],
        "review": ["One. Two. Three.", "Alpha. Beta.", "", None],
    })
    deleted = perturb_frame(frame, "sentence_deletion")
    assert deleted["perturbed"].to_list() == ["One. Three.", "Alpha.", None, None]
    assert deleted["perturb_error"].to_list() == [None, None, "empty text", "empty text"]
    assert deleted["strategy"].unique().to_list() == ["sentence_deletion"]
    replaced = perturb_frame(frame, "random_replacement", seed=5)
    assert replaced["perturbed"].to_list()[:2] == ["Alpha. Beta.", "One. Two. Three."]
    assert replaced["perturb_error"].to_list() == [None, None, "empty text", "empty text"]
    judged = perturb_frame(frame.with_columns(judgments=pl.lit(JUDGMENTS)), "sentence_deletion",
                           target="judgments")
    assert judged["perturbed"][0] == judgment_deletion(JUDGMENTS)
    with pytest.raises(ValueError, match="lacks columns"):
        perturb_frame(frame.drop("paper_id"), "sentence_deletion")


def test_perturb_texts_refuses_llm_strategies_and_unknown_names():
    with pytest.raises(ValueError, match="needs an LLM"):
        perturb_texts("rephrase", ["x"])
    with pytest.raises(ValueError, match="unknown strategy"):
        perturb_texts("shuffle", ["x"])


def test_registry():
    names = {
        "sentence_deletion", "deletion_completion", "random_replacement", "surface_report", "ultra_concise",
        "opinion_flip", "rephrase", "meaningless_elongation", "meaningless_elongation_proxy", "opinion_shift_positive",
        "opinion_shift_negative", "opinion_shift_hedged", "opinion_shift_extreme",
    }
    surface = set(manipulations.DESCRIPTIONS)   # tests/stages/validate/test_validate_manipulations.py
    assert set(STRATEGIES) == names | surface | set(manipulations.LLM_DESCRIPTIONS) | {"adversary"}   # tests/stages/validate/test_validate_adversary.py
    assert set(DETERMINISTIC) == {"sentence_deletion", "random_replacement", "meaningless_elongation_proxy"} | surface
    assert sum(s.kind == "degradation" for s in STRATEGIES.values()) == 6
    assert strategy("rephrase").kind == "manipulation" and strategy("rephrase").needs_llm
    llm = {n for n, s in STRATEGIES.items() if s.needs_llm}
    assert llm == set(prompts.BUILDERS) | prompts.NEEDS_ABSTRACT | {"meaningless_elongation"}   # its own prompts:
    # tests/stages/validate/test_validate_elongation.py


def test_prompts_build_for_every_llm_strategy():
    for name in prompts.BUILDERS:
        prompt = prompts.build_prompt(name, REVIEW)
        assert prompt.system and prompt.max_tokens > 0
    completion = prompts.build_prompt("deletion_completion", REVIEW)
    assert completion.user == sentence_deletion(REVIEW, gap=prompts.GAP_MARKER)
    assert completion.user.count(prompts.GAP_MARKER) == 5
    assert prompts.build_prompt("rephrase", REVIEW).user == REVIEW
    assert "at most 15 words" in prompts.build_prompt("ultra_concise", REVIEW).system
    surface = prompts.build_prompt("surface_report", "", abstract="We propose a sampler.")
    assert "We propose a sampler." in surface.user
    with pytest.raises(ValueError, match="abstract"):
        prompts.build_prompt("surface_report", REVIEW)
    with pytest.raises(ValueError, match="no LLM prompt"):
        prompts.build_prompt("sentence_deletion", REVIEW)
