"""Beyond Rating's formulas on hand-worked points and matches (tasks/metrics/review_quality/formulas.py),
and the fields of a rendered review (tasks/metrics/review_quality/fields.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.metrics.review_quality import formulas as f
from tasks.metrics.review_quality.fields import parse_rating, score_parts, sections

SCALE = (1, 3, 5, 6, 8, 10)


def test_precision_and_max_recall_by_hand() -> None:
    # 3 candidate points; reviewer A has 2 points, reviewer B 3, reviewer C none
    a = np.array([[1, 0], [0, 0], [0, 0]])
    b = np.array([[0, 1, 0], [0, 1, 0], [0, 0, 0]])
    c = np.zeros((3, 0))
    assert f.precision(np.hstack([a, b, c])) == (pytest.approx(2 / 3), None)   # points 1 and 2 match
    # A: 1 of 2 recalled; B: 1 of 3; C has no points and is left out
    assert f.max_recall([a, b, c]) == (0.5, None)
    assert f.f1(2 / 3, 0.5) == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    # ties: two reviewers fully recalled give 1 once
    assert f.max_recall([np.ones((1, 2)), np.ones((1, 1))]) == (1.0, None)


def test_empty_fields_are_gaps_or_zero_as_defined() -> None:
    assert f.precision(np.zeros((0, 4)))[1] == "no_candidate_points"
    assert f.precision(np.zeros((2, 0)))[1] == "no_reference_points"
    assert f.max_recall([np.zeros((0, 3))])[1] == "no_candidate_points"   # no points: no measurement, never 0
    assert math.isnan(f.max_recall([np.zeros((0, 3))])[0])
    assert f.max_recall([np.zeros((2, 0))])[1] == "no_reference_points"
    assert f.max_recall([])[1] == "no_reference_points"
    assert f.f1(0.0, 0.0) == 0.0 and math.isnan(f.f1(math.nan, 1.0))


def test_focus_kl_with_laplace_smoothing_by_hand() -> None:
    human = [2, 0, 0, 0, 0, 0, 0, 0]
    ai = [0, 2, 0, 0, 0, 0, 0, 0]
    # smoothed: human (3/10, 1/10 x 7), ai (1/10, 3/10, 1/10 x 6)
    expected = 0.3 * math.log(0.3 / 0.1) + 0.1 * math.log(0.1 / 0.3)
    assert f.focus_kl(human, ai, alpha=1.0) == (pytest.approx(expected), None)
    assert f.focus_kl(human, human) == (pytest.approx(0.0), None)
    assert f.focus_kl([0] * 8, ai)[1] == "no_points"
    # without smoothing a category the candidate never uses would be infinite; alpha keeps it finite
    assert math.isfinite(f.focus_kl(human, ai, alpha=0.01)[0])


def test_question_score_by_hand() -> None:
    values = [f.question_value("Explain", True, None), f.question_value("Explain", False, None),
              f.question_value("Supplement", None, False), f.question_value("Supplement", None, True),
              f.question_value("Other", None, None)]
    assert values == [1, 0, 1, 0, 0]
    assert f.question_score(values) == (pytest.approx(2 / 5), None)
    assert f.question_score([])[1] == "no_question_points"
    assert f.question_score([f.question_value("Explain", None, None)])[1] == "question_unanswered"


def test_coverage_sums_the_top_k_cosines() -> None:
    chunks = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    s = np.array([2.0, 0.0])
    assert f.coverage(s, chunks, k=2) == (pytest.approx(1.0 + math.sqrt(0.5)), None)
    assert f.coverage(s, chunks[:1], k=5) == (pytest.approx(1.0), None)
    assert f.coverage(s, np.zeros((0, 2)))[1] == "no_paper_text"


def test_rating_error_and_accept_agreement() -> None:
    assert f.rating_error(6.0, [5.0, 8.0, 8.0]) == (pytest.approx(1.0), None)
    assert f.rating_error(math.nan, [5.0])[1] == "no_rating"
    assert f.rating_error(5.0, [])[1] == "no_human_rating"
    assert f.accept_agreement(6.0, "Accept (poster)", 6.0) == (1.0, None)
    assert f.accept_agreement(5.0, "Accept: notable-top-25%", 6.0) == (0.0, None)
    assert f.accept_agreement(3.0, "Reject", 6.0) == (1.0, None)
    assert f.accept_agreement(3.0, None, 6.0)[1] == "no_decision"
    assert f.accepted("Invite to Workshop Track") is None


def test_pearson() -> None:
    assert f.pearson([1, 2, 3], [2, 4, 6]) == (pytest.approx(1.0), None)
    assert f.pearson([1, 2, 3], [3, 2, 1]) == (pytest.approx(-1.0), None)
    assert f.pearson([1, 2], [1, 2])[1] == "too_few_candidates"
    assert f.pearson([1, 1, 1], [1, 2, 3])[1] == "constant"


def test_review_fields_and_candidate_rating() -> None:
    answer = ("<summary>It studies X.</summary>\n<strengths>1. Clear.</strengths>\n<rating>6: marginally above"
              "</rating>\n<confidence>4\nvery sure</confidence>")
    assert score_parts(answer) == {"rating": "6: marginally above", "confidence": "4"}
    assert score_parts("<summary>no scores here</summary>") == {}
    assert score_parts("<rating>8") == {"rating": "8"}              # an unclosed last tag still counts
    review = "## Summary\n\nIt studies X.\n\n## Strengths and Weaknesses\n\nGood; weak baselines.\n\n## Other\n\nx"
    assert sections(review) == {"summary": "It studies X.", "strengths_and_weaknesses": "Good; weak baselines."}
    assert parse_rating("6: marginally above", SCALE) == (6.0, None)
    assert parse_rating(None, SCALE)[1] == "no_rating"
    assert parse_rating("strong accept", SCALE)[1] == "unparsed_rating"
    assert parse_rating("7", SCALE)[1] == "rating_off_scale"


@pytest.mark.slow
def test_binoculars_against_an_explicit_computation_with_two_small_lms() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    observer, performer = transformers.GPT2LMHeadModel(config).eval(), transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        lo, lp = observer(ids).logits[0, :-1], performer(ids).logits[0, :-1]
    targets = ids[0, 1:]
    # explicit: observer's mean NLL over the cross-entropy of performer's distribution under observer
    nll = torch.nn.functional.cross_entropy(lo, targets)
    x = -(torch.softmax(lp, -1) * torch.log_softmax(lo, -1)).sum(-1).mean()
    got = f.binoculars(lo.numpy(), lp.numpy(), targets.numpy())
    assert got == pytest.approx(float(nll / x), rel=1e-5)
    assert f.binoculars(lo.numpy(), lo.numpy(), targets.numpy()) != pytest.approx(got)   # the performer matters
    with pytest.raises(ValueError, match="shared tokenizer"):
        f.binoculars(lo.numpy(), lp.numpy()[:, :10], targets.numpy())


@pytest.mark.slow
def test_binoculars_of_a_review_is_the_mean_over_its_text_fields() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tasks.metrics.review_quality.binoculars import review_score, score_texts

    words = ["[UNK]", "the", "method", "is", "new", "and", "clear", "but", "results", "are", "weak", "how", "does",
             "it", "scale"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    config = transformers.GPT2Config(vocab_size=len(words), n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(1)
    observer, performer = transformers.GPT2LMHeadModel(config).eval(), transformers.GPT2LMHeadModel(config).eval()
    fields = ["the method is new", "the method is clear", "but results are weak", "how does it scale"]
    each = score_texts(observer, performer, tokenizer, fields)
    with torch.no_grad():
        ids = tokenizer(fields[0], return_tensors="pt")["input_ids"]
        lo, lp = observer(ids).logits[0, :-1], performer(ids).logits[0, :-1]
        explicit = torch.nn.functional.cross_entropy(lo, ids[0, 1:]) / -(
            torch.softmax(lp, -1) * torch.log_softmax(lo, -1)).sum(-1).mean()
    assert each[0] == pytest.approx(float(explicit), rel=1e-5)
    text = "\n\n".join(f"## {t}\n\n{b}" for t, b in zip(("Summary", "Strengths", "Weaknesses", "Questions"), fields,
                                                           strict=True))
    assert review_score(observer, performer, tokenizer, text) == (pytest.approx(sum(each) / 4), None)
    assert math.isnan(score_texts(observer, performer, tokenizer, ["the"])[0])      # one token: nothing to predict
    assert review_score(observer, performer, tokenizer, "no sections")[1] == "no_text"
