"""The sentence unit's pieces (tasks/judgments/sentences.py): which sentences of a review become candidate
judgments, and how a line is written. Pure functions; the readout itself runs on SmolLM2 in
tests/lm/test_lm_local.py."""

from __future__ import annotations

from tasks.core.config import PreprocessConfig
from tasks.judgments.sentences import Piece, line, pieces, structural_stance

REVIEW = """Summary Of The Paper:
The paper proposes a new sampler for diffusion models and tests it on two benchmarks.

Strength And Weaknesses:
Strengths:
- The method is simple and the writing is clear (see Sec. 3) [4].
Weaknesses:
However, the experiments use only two small datasets; the baselines are outdated.
Page 4, second paragraph.
How is the step size chosen?

Summary Of The Review:
Overall, I think that the idea is interesting but the evaluation is too thin.
"""


def test_the_papers_summary_is_left_out_and_each_clause_is_a_piece():
    got = [(p.section, p.text) for p in pieces(REVIEW)]
    assert not any("proposes a new sampler" in text for _, text in got)     # the paper's summary judges nothing
    assert ("Strengths", "The method is simple and the writing is clear.") in got   # list mark, aside, citation gone
    assert ("Weaknesses", "the experiments use only two small datasets") in got     # opener gone, cut at "; "
    assert ("Weaknesses", "the baselines are outdated.") in got
    assert not any(text.startswith("Page 4") for _, text in got)                   # a locator is no judgment
    assert ("Summary Of The Review", "the idea is interesting") in got             # "Overall, I think that" gone
    assert ("Summary Of The Review", "the evaluation is too thin.") in got          # cut where the clause turns


def test_a_citation_and_an_announcement_are_no_judgment_but_a_sentence_naming_a_work_is():
    review = ("Weaknesses:\n"
              "- Ye, Nanyang, et al. Ood-bench: Benchmarking out-of-distribution generalization. CVPR 2022.\n"
              "- Lauer, Martin, and Martin Riedmiller. In Proceedings of the seventeenth ICML.\n"
              "- I have a few questions about the experiments.\n"
              "- Unlike Smith et al. the authors do not compare with strong baselines on ImageNet.\n")
    assert [p.text for p in pieces(review)] == [
        "Unlike Smith et al. the authors do not compare with strong baselines on ImageNet."]


def test_a_review_written_as_one_summary_block_is_read_whole():
    short = "Summary:\nThe paper is clearly written.\nThe experiments are too small to be convincing."
    assert [p.text for p in pieces(short)] == ["The paper is clearly written.",
                                               "The experiments are too small to be convincing."]


def test_each_paragraph_or_item_gives_its_evaluation_and_its_questions():
    review = ("Strength And Weaknesses:\n"
              "The evaluation is too thin. Only two datasets are used, both small. Why not test on ImageNet?\n"
              "- Novelty.\n"
              "- The idea is close to prior work on score matching. It differs only in the noise schedule.\n"
              "The writing is clear. The proofs read well, but the notation in Section 4 is heavy.\n")
    assert [p.text for p in pieces(review)] == [
        "The evaluation is too thin.", "Why not test on ImageNet?",              # its reasons are no line of their own
        "The idea is close to prior work on score matching.",            # "Novelty." leaves no piece: the next
        "The writing is clear."]                                         # sentence is the item's first
    every = [p.text for p in pieces(review, every=True)]
    assert len(every) == 8 and "It differs only in the noise schedule." in every
    assert "the notation in Section 4 is heavy." in every


def test_the_reviews_structure_decides_where_it_says_it_outright():
    assert structural_stance(Piece("Weaknesses", "How is the step size chosen?", True)) == "questions"
    assert structural_stance(Piece("Strengths", "The method is simple.", False)) == "appreciates"
    assert structural_stance(Piece("Weaknesses", "The method is slow.", False)) == "criticizes"
    assert structural_stance(Piece("Strength And Weaknesses", "The method is slow.", False)) is None
    assert line("criticizes", Piece("Weaknesses", "The baselines are outdated", False)) == \
        "The reviewer criticizes that the baselines are outdated."
    assert line("appreciates", Piece("", "GNNs are handled well.", False)) == \
        "The reviewer appreciates that GNNs are handled well."


def test_the_unit_follows_the_backend_unless_set():
    assert PreprocessConfig().judgment_unit == "sentence" and PreprocessConfig().judgment_prompt == "judgments-v2"
    assert PreprocessConfig(backend="anthropic", model="claude-haiku-4-5").judgment_unit == "review"
    assert PreprocessConfig(unit="review").judgment_prompt == "judgments-v1"
    assert PreprocessConfig().preprocessor == "smollm2 (sentence unit, evaluations, judgments-v2)"
    assert PreprocessConfig(sentences="all").preprocessor == "smollm2 (sentence unit, every sentence, judgments-v2)"
    assert PreprocessConfig(unit="review").preprocessor == "smollm2 (review unit, judgments-v1)"
