"""The adaptive adversary: its edit operators, the recipe search on the selection papers, the test on the
others, and the strategy on toy metrics (one that edits raise, one they cannot move, one of pure noise)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import polars as pl
import pytest

from tasks.core.config import ValidateConfig
from tasks.metrics import REGISTRY, FamilyResult, Metric, Resources, register
from tasks.metrics.registry import NOTHING, reference_sets
from tasks.stages.validate import adversary as adv
from tasks.stages.validate.strategies import DETERMINISTIC, STRATEGIES
from tasks.stages.validate.workflow import run_validation
from tests.stages.validate.test_validate_workflow import make_reviews

REVIEW = "Summary:\nThe paper proposes a method. It is tested on two sets.\n\nWeaknesses:\nNo ablation."


def praise_count(text: str) -> float:
    return float(sum(text.count(s) for s in adv.PRAISE))


def test_operators_keep_headers_and_edit_one_unit():
    rng = np.random.default_rng(0)
    for _ in range(20):
        for op in adv.OPERATORS:
            out = adv.apply_operator(REVIEW, op, rng)
            assert out is not None and "Summary:\n" in out and "Weaknesses:\n" in out
    praised = adv.apply_operator(REVIEW, "praise", np.random.default_rng(1))
    assert praise_count(praised) == 1 and praised.replace(next(s for s in adv.PRAISE if s in praised), "")
    assert adv.apply_operator(REVIEW, "inject", rng).endswith(f"No ablation.\n\n{adv.INJECTION}\n")
    assert adv.apply_operator("Only one.", "delete", rng) is None
    assert adv.apply_operator("Only one.", "reorder", rng) is None
    assert adv.apply_operator("A.\nB.", "reorder", rng, "judgments") == "B.\nA.\n"
    with pytest.raises(ValueError, match="unknown operator"):
        adv.apply_operator(REVIEW, "shout", rng)


def test_the_recipe_search_reaches_the_known_optimum():
    # Each step can add at most one praise sentence to each text, so the best reachable in 4 steps is 4 more.
    calls = []

    def score(batch):
        calls.append(len(batch))
        return [praise_count(text) for _, text in batch]

    found = adv.search_recipe([REVIEW, "Short review."], [0.0, 0.0], score, steps=4, seed=0)
    assert found.scores == [4.0, 4.0] and found.gains == [1.0] * 4
    assert found.operators == ["praise"] * 4 and found.edits[0] == "1:praise"
    assert calls[0] == 6 + 4 and found.variants == sum(calls)   # one sentence: no delete, no reorder
    assert praise_count(found.texts[0]) == 4 and "No ablation." in found.texts[0]
    rng = np.random.default_rng(0)
    assert praise_count(adv.apply_recipe("A review. With two sentences.", found.operators, rng)) == 4


def test_the_recipe_search_minimises_a_lower_is_better_metric_and_stops_when_stuck():
    text = "One two three. Four five. Six seven eight nine. Ten."

    def words(batch):
        return [float(len(t.split())) for _, t in batch]

    found = adv.search_recipe([text], [10.0], words, higher_is_better=False, steps=8, patience=2, seed=0)
    assert len(adv.Units.parse(found.texts[0], "review").parts) == 1     # deleted down to one sentence
    assert found.scores[0] < 10 and found.operators == ["delete"] * 3
    flat = adv.search_recipe([text], [1.0], lambda b: [1.0] * len(b), steps=3)
    assert flat.edits == [] and flat.texts == [text]
    unscored = adv.search_recipe([text], [math.nan], words, steps=3)
    assert unscored.variants == 0 and unscored.edits == []


def test_selection_and_test_papers_never_overlap():
    papers = [f"p{i}" for i in range(9)] * 2
    chosen = adv.split_papers(papers, seed=3)
    assert len(chosen) == 4 or len(chosen) == 5
    assert chosen == adv.split_papers(list(reversed(papers)), seed=3)     # a seeded draw of the set
    assert len(adv.split_papers(["a", "b"], seed=0)) == 1 and adv.split_papers(["a"], seed=0) == {"a"}


def noise(text: str) -> float:
    """A score that depends on the text and on nothing it says: no edit raises it in expectation."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") / 2**32


@pytest.fixture
def toy_metrics():
    """Three metrics registered for this test only: praise sentences counted, a constant, and noise."""

    def family(metrics, candidates, references, negatives, synopses, resources):
        rows = []
        for cand, refs in reference_sets(candidates, references):
            for metric in metrics:
                text = cand["review_text"]
                value = {"toy_praise": praise_count(text), "toy_constant": 0.5, "toy_noise": noise(text)}[metric.name]
                rows += [{"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                          "reference": ref["review_id"], "metric": metric.name, "score": value} for ref in refs]
        return FamilyResult(pl.DataFrame(rows))

    names = ("toy_praise", "toy_constant", "toy_noise")
    register(*(Metric(n, "raw", "none", NOTHING, True, "test only", family) for n in names))
    yield names
    for n in names:
        REGISTRY.pop(n)


def test_adversary_strategy_in_the_workflow(toy_metrics):
    assert STRATEGIES["adversary"].kind == "manipulation" and "adversary" not in DETERMINISTIC
    settings = ValidateConfig(strategies=["adversary", "format_headers"], metrics=list(toy_metrics), adversary_steps=3,
                              min_pairs=10, bootstrap_resamples=100)
    result = run_validation(make_reviews(n_papers=24), settings, resources=Resources())
    table = {(r["metric"], r["strategy"]): r for r in result.validation.iter_rows(named=True)}
    report = result.adversary
    test_papers = set(report.filter(pl.col("split") == "test")["paper_id"])
    assert test_papers.isdisjoint(report.filter(pl.col("split") == "selection")["paper_id"])
    praise = table[("toy_praise", "adversary")]
    # the recipe (three praise sentences) chosen on 12 papers, tested on the other 12
    assert praise["n"] == 12 == len(test_papers) and praise["mean_change"] == 3.0 and praise["verdict"] == "fail"
    assert set(report.filter(pl.col("metric") == "toy_praise")["edits"]) == {"1:praise, 2:praise, 3:praise"}
    assert table[("toy_constant", "adversary")]["verdict"] == "pass"
    # noise: the search finds a "gain" on its own papers by chance, which does not carry over to the test papers
    noisy = report.filter(pl.col("metric") == "toy_noise")
    assert noisy.filter(pl.col("split") == "selection")["inflation"].mean() > 0
    assert table[("toy_noise", "adversary")]["verdict"] == "pass"
    assert table[("toy_noise", "adversary")]["n"] == 12 and not math.isnan(table[("toy_noise", "adversary")]["smd"])
    assert noisy.filter(pl.col("split") == "test")["inflation"].min() < 0     # a test change may fall as well
    assert table[("toy_praise", "format_headers")]["mean_change"] == 0.0
    assert report.height == 3 * 24 and set(report["target"]) == {"review"}
    assert result.stats["adversary_largest_inflation"]["toy_praise"] == 3.0
    assert result.stats["adversary_largest_inflation"]["toy_constant"] == 0.0
    best = result.perturbations.filter(pl.col("candidate").str.ends_with("~adversary:toy_praise"))
    assert best.height == 12 and all(praise_count(t) == 3 for t in best["review_text"])


def test_searched_on_papers_outside_the_sample_the_adversary_is_tested_on_every_candidate(toy_metrics):
    """With adversary_search_papers, the recipe is searched on papers drawn from outside the validation sample,
    and every one of the sample's candidates is tested: as many pairs as the other strategies, none of them a
    paper the search saw."""
    settings = ValidateConfig(strategies=["adversary", "format_headers"], metrics=list(toy_metrics), adversary_steps=3,
                              min_pairs=10, bootstrap_resamples=0, max_papers=12, adversary_search_papers=4)
    result = run_validation(make_reviews(n_papers=20), settings, resources=Resources())
    report = result.adversary
    sample = set(result.scores.filter(pl.col("source") == "human")["paper_id"])
    searched = set(report.filter(pl.col("split") == "selection")["paper_id"])
    assert len(sample) == 12 and len(searched) == 4 and searched.isdisjoint(sample)
    assert set(report.filter(pl.col("split") == "test")["paper_id"]) == sample
    table = {(r["metric"], r["strategy"]): r for r in result.validation.iter_rows(named=True)}
    praise = table[("toy_praise", "adversary")]
    assert praise["n"] == 12 == table[("toy_praise", "format_headers")]["n"]
    assert praise["mean_change"] == 3.0 and praise["verdict"] == "fail"
    assert table[("toy_constant", "adversary")]["verdict"] == "pass"
    assert result.stats["adversary_search_papers"] == 4
    with pytest.raises(ValueError, match="no paper lies outside the validation sample of 12"):
        run_validation(make_reviews(n_papers=12), settings, resources=Resources())
