"""The classic family: BLEU, ROUGE-L and the two MiniLM BERTScores (GEM's sentence matching, BERTScore's
token matching) on small generated texts."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tasks.core.schema import REFERENCES, SCORING_CANDIDATES
from tasks.lm import embedder, load_model
from tasks.lm.encoder import WINDOW
from tasks.metrics import REGISTRY, Resources, score_metrics
from tasks.metrics import classic as baselines
from tasks.metrics import resources as lm

ROOT = Path(__file__).resolve().parents[2]

REFERENCE = "The proposed sampler is fast, but the experiments use only one random seed."
CLOSE = "The sampler is fast, although the experiments rely on a single random seed."
UNRELATED = "Bananas ripen faster when stored next to apples in a warm kitchen."


@pytest.fixture(scope="module")
def minilm():
    """(model, tokenizer) of the sentence encoder behind `embedder()`."""
    return load_model(embedder().spec)


def pair_fn(name):
    """The metric's pair function: texts -> scores (the BERTScores on MiniLM)."""
    if name == "bertscore_tokens_minilm":
        return lambda c, r: baselines.bertscore(c, r, lm.token_embeddings)
    if name == "bertscore_minilm":
        return lambda c, r: baselines.bertscore_sentences_prf(c, r, lm.token_embeddings)[:, 2]
    return getattr(baselines, name)


@pytest.mark.parametrize("name", ["bleu", "rouge_l"])
def test_lexical_metrics_rank_identical_close_unrelated(name):
    fn = pair_fn(name)
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


def test_rouge_l_leaves_nltk_out_of_the_run() -> None:
    """ROUGE-L's Porter stemmer imports all of nltk (with scikit-learn and pandas, about 0.1 GB a run would keep):
    the scores come from the worker process, the same as rouge-score gives here."""
    code = ("import sys; from tasks.metrics.classic import rouge_l; "
            f"print(round(float(rouge_l([{CLOSE!r}], [{REFERENCE!r}])[0]), 6), 'nltk' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    from rouge_score import rouge_scorer

    expected = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(REFERENCE, CLOSE)["rougeL"].fmeasure
    assert done.stdout.split() == [str(round(expected, 6)), "False"]


@pytest.mark.parametrize("name", ["bleu", "rouge_l", "bertscore_minilm", "bertscore_tokens_minilm"])
def test_missing_text_gives_nan_and_lengths_must_match(name):
    fn = pair_fn(name)
    scores = fn([None, "  ", CLOSE], [REFERENCE, REFERENCE, ""])
    assert all(math.isnan(s) for s in scores)
    with pytest.raises(ValueError, match="candidates"):
        fn([CLOSE], [REFERENCE, REFERENCE])
    assert REGISTRY[name].higher_is_better and REGISTRY[name].reads == "raw"


@pytest.mark.slow
def test_minilm_loads_offline(minilm):
    import os

    model, _ = minilm
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert model.config.hidden_size == 384 and not model.training
    assert load_model(embedder().spec) is minilm          # cached, loaded once


@pytest.mark.slow
def test_bertscore_identical_close_unrelated(minilm):
    prf = baselines.bertscore_prf([REFERENCE, CLOSE, UNRELATED], [REFERENCE] * 3, lm.token_embeddings)
    assert prf.shape == (3, 3)
    assert prf[0] == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    f1 = prf[:, 2]
    assert f1[0] > f1[1] > f1[2]
    assert baselines.bertscore([UNRELATED, CLOSE], [REFERENCE, REFERENCE], lm.token_embeddings) == pytest.approx(f1[[2, 1]], abs=1e-6)


@pytest.mark.slow
def test_bertscore_precision_and_recall_directions(minilm):
    short = "The sampler is fast."
    prf = baselines.bertscore_prf([short], [REFERENCE], lm.token_embeddings)[0]
    # every candidate token finds a close match, but much of the reference is not covered
    assert prf[0] > prf[1]
    swapped = baselines.bertscore_prf([REFERENCE], [short], lm.token_embeddings)[0]
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
    assert baselines.bertscore([long_text], [long_text], lm.token_embeddings)[0] == pytest.approx(1.0, abs=1e-5)


def test_family_scores_leave_one_out_pairs_with_gaps_and_the_embedder_named():
    references = pl.DataFrame({"paper_id": ["p", "p", "q"], "review_id": ["r1", "r2", "q1"],
                               "review_text": [REFERENCE, CLOSE, "  "], "judgments": [None] * 3}, schema=REFERENCES)
    candidates = references.select("paper_id", pl.col("review_id").alias("candidate"), pl.lit("human").alias("source"),
                                   "review_id", "review_text", "judgments").cast(dict(SCORING_CANDIDATES))
    calls = []

    def embed(texts):                      # a fake embedder: one unit vector per word, by its length
        calls.append(list(texts))
        return [np.array([[1.0, 0.0] if len(w) % 2 else [0.0, 1.0] for w in t.split()]) for t in texts]

    scores = score_metrics(["bleu", "bertscore_tokens_minilm"], candidates, references, pl.DataFrame(),
                           Resources(embed=embed, embed_model="fake"))
    assert scores.filter(pl.col("metric") == "bleu")[["candidate", "reference"]].rows() == [
        ("r1", "r2"), ("r2", "r1"), ("q1", None)]
    bleu = scores.filter(pl.col("metric") == "bleu").row(0, named=True)
    assert bleu["score"] == pytest.approx(baselines.bleu([REFERENCE], [CLOSE])[0]) and bleu["eval_lm"] == "sacrebleu"
    lonely = scores.filter(pl.col("candidate") == "q1")
    assert lonely["reason"].to_list() == ["no_reference"] * 2 and lonely["score"].is_nan().all()
    assert set(scores.filter(pl.col("metric") == "bertscore_tokens_minilm")["eval_lm"]) == {"fake"} and len(calls) == 1
    assert scores["logp_conditional"].is_null().all()


def test_gem_bertscore_matches_sentences_greedily():
    """bertscore_minilm (GEM appendix D.3): sentences are embedded one by one (the mean of their token
    vectors) and matched greedily; with a fake embedder the value is worked out by hand."""
    vectors = {"alpha": [1.0, 0.0], "beta": [0.0, 1.0], "gamma": [0.6, 0.8]}

    def embed(texts):                      # one vector per word; a sentence's vector is their normalised mean
        return [np.array([vectors[w.strip(".").lower()] for w in t.split()]) for t in texts]

    cand, ref = "Alpha. Beta beta.", "Gamma.\n- Alpha alpha."
    assert baselines.sentences(cand) == ["Alpha.", "Beta beta."] and baselines.sentences(ref) == ["Gamma.", "Alpha alpha."]
    p, r, f = baselines.bertscore_sentences_prf([cand], [ref], embed)[0]
    # candidate sentences (1,0), (0,1) vs reference (0.6,0.8), (1,0): precision mean(1, 0.8), recall mean(0.8, 1)
    assert (p, r) == (pytest.approx(0.9), pytest.approx(0.9)) and f == pytest.approx(0.9)
    assert REGISTRY["bertscore_minilm"].needs.name == "embedding" and "sentence" in REGISTRY["bertscore_minilm"].description


@pytest.mark.slow
def test_gem_bertscore_ranks_identical_close_unrelated(minilm):
    scores = baselines.bertscore_sentences_prf([REFERENCE, CLOSE, UNRELATED], [REFERENCE] * 3, lm.token_embeddings)[:, 2]
    assert scores[0] == pytest.approx(1.0, abs=1e-5) and scores[0] > scores[1] > scores[2]
