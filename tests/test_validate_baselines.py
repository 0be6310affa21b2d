"""BLEU, ROUGE-L and the MiniLM BERTScore-style F1 on small generated texts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.lm import embedder, load_model
from tasks.lm.encoder import WINDOW
from tasks.validate import baselines

REFERENCE = "The proposed sampler is fast, but the experiments use only one random seed."
CLOSE = "The sampler is fast, although the experiments rely on a single random seed."
UNRELATED = "Bananas ripen faster when stored next to apples in a warm kitchen."


@pytest.fixture(scope="module")
def minilm():
    """(model, tokenizer) of the sentence encoder behind `embedder()`."""
    return load_model(embedder().spec)


@pytest.mark.parametrize("name", ["bleu", "rouge_l"])
def test_lexical_metrics_rank_identical_close_unrelated(name):
    fn = baselines.BASELINES[name].fn
    scores = fn([REFERENCE, CLOSE, UNRELATED], [REFERENCE] * 3)
    assert scores.dtype == np.float64 and scores.shape == (3,)
    assert scores[0] == pytest.approx(1.0)
    assert scores[0] > scores[1] > scores[2]
    # order preserved: scoring the pairs reversed gives the reversed array
    assert fn([UNRELATED, CLOSE, REFERENCE], [REFERENCE] * 3) == pytest.approx(scores[::-1])


def test_library_values():
    from rouge_score import rouge_scorer
    from sacrebleu.metrics import BLEU

    expected_bleu = BLEU(effective_order=True).sentence_score(CLOSE, [REFERENCE]).score / 100
    assert baselines.bleu([CLOSE], [REFERENCE])[0] == pytest.approx(expected_bleu)
    expected_rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(REFERENCE, CLOSE)["rougeL"]
    assert baselines.rouge_l([CLOSE], [REFERENCE])[0] == pytest.approx(expected_rouge.fmeasure)


@pytest.mark.parametrize("name", ["bleu", "rouge_l", "bertscore"])
def test_missing_text_gives_nan_and_lengths_must_match(name):
    fn = baselines.BASELINES[name].fn
    scores = fn([None, "  ", CLOSE], [REFERENCE, REFERENCE, ""])
    assert all(math.isnan(s) for s in scores)
    with pytest.raises(ValueError, match="candidates"):
        fn([CLOSE], [REFERENCE, REFERENCE])
    assert baselines.BASELINES[name].higher_is_better


@pytest.mark.slow
def test_minilm_loads_offline(minilm):
    import os

    model, _ = minilm
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert model.config.hidden_size == 384 and not model.training
    assert load_model(embedder().spec) is minilm          # cached, loaded once


@pytest.mark.slow
def test_bertscore_identical_close_unrelated(minilm):
    prf = baselines.bertscore_prf([REFERENCE, CLOSE, UNRELATED], [REFERENCE] * 3)
    assert prf.shape == (3, 3)
    assert prf[0] == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    f1 = prf[:, 2]
    assert f1[0] > f1[1] > f1[2]
    assert baselines.bertscore([UNRELATED, CLOSE], [REFERENCE, REFERENCE]) == pytest.approx(f1[[2, 1]], abs=1e-6)


@pytest.mark.slow
def test_bertscore_precision_and_recall_directions(minilm):
    short = "The sampler is fast."
    prf = baselines.bertscore_prf([short], [REFERENCE])[0]
    # every candidate token finds a close match, but much of the reference is not covered
    assert prf[0] > prf[1]
    swapped = baselines.bertscore_prf([REFERENCE], [short])[0]
    assert swapped[0] == pytest.approx(prf[1], abs=1e-5) and swapped[1] == pytest.approx(prf[0], abs=1e-5)


@pytest.mark.slow
def test_long_text_is_windowed_not_truncated(minilm):
    _, tokenizer = minilm
    long_text = " ".join(f"Point {i}: the ablation on dataset {i} is missing." for i in range(80))
    n_tokens = len(tokenizer(long_text, add_special_tokens=False)["input_ids"])
    assert n_tokens > 2 * WINDOW
    (embedded,) = embedder().embed([long_text])
    assert embedded.shape == (n_tokens, 384)
    assert np.linalg.norm(embedded, axis=1) == pytest.approx(np.ones(n_tokens), abs=1e-5)
    assert baselines.bertscore([long_text], [long_text])[0] == pytest.approx(1.0, abs=1e-5)
