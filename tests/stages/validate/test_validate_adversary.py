"""The adaptive adversary: its edit operators, the greedy search, and the strategy on toy metrics."""

from __future__ import annotations

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


def test_greedy_search_reaches_the_known_optimum():
    # Each step can add at most one praise sentence, so the best reachable in 4 steps is 4 more.
    calls = []

    def score(batch):
        calls.append(len(batch))
        return [praise_count(text) for _, text in batch]

    found = adv.greedy_search([REVIEW, "Short review."], [0.0, 0.0], score, steps=4, seed=0)
    assert [f.score for f in found] == [4.0, 4.0]
    assert all(e.endswith(":praise") for f in found for e in f.edits) and len(found[0].edits) == 4
    assert [adv.inflation(f) for f in found] == [4.0, 4.0] and calls[0] == 6 + 4  # one sentence: no delete, no reorder
    assert praise_count(found[0].text) == 4 and "No ablation." in found[0].text


def test_greedy_search_minimises_a_lower_is_better_metric_and_stops_when_stuck():
    text = "One two three. Four five. Six seven eight nine. Ten."

    def words(batch):
        return [float(len(t.split())) for _, t in batch]

    [found] = adv.greedy_search([text], [10.0], words, higher_is_better=False, steps=8, patience=2, seed=0)
    assert len(adv.Units.parse(found.text, "review").parts) == 1     # deleted down to one sentence
    assert found.score < 10 and adv.inflation(found, higher_is_better=False) == 10 - found.score
    assert len(found.edits) == 3 and found.stale == 2                # then two steps without a gain
    [flat] = adv.greedy_search([text], [1.0], lambda b: [1.0] * len(b), steps=3)
    assert flat.edits == [] and flat.text == text and adv.inflation(flat) == 0.0
    [unscored] = adv.greedy_search([text], [math.nan], words, steps=3)
    assert unscored.variants == 0 and math.isnan(adv.inflation(unscored))


@pytest.fixture
def toy_metrics():
    """Two metrics registered for this test only: praise sentences counted, and a constant."""

    def family(metrics, candidates, references, negatives, synopses, resources):
        rows = []
        for cand, refs in reference_sets(candidates, references):
            for metric in metrics:
                value = praise_count(cand["review_text"]) if metric.name == "toy_praise" else 0.5
                rows += [{"paper_id": cand["paper_id"], "candidate": cand["candidate"], "source": cand["source"],
                          "reference": ref["review_id"], "metric": metric.name, "score": value} for ref in refs]
        return FamilyResult(pl.DataFrame(rows))

    names = ("toy_praise", "toy_constant")
    register(*(Metric(n, "raw", "none", NOTHING, True, "test only", family) for n in names))
    yield names
    for n in names:
        REGISTRY.pop(n)


def test_adversary_strategy_in_the_workflow(toy_metrics):
    assert STRATEGIES["adversary"].kind == "manipulation" and "adversary" not in DETERMINISTIC
    result = run_validation(make_reviews(n_papers=5), ValidateConfig(strategies=["adversary", "format_headers"], metrics=list(toy_metrics), adversary_steps=3, min_pairs=5, bootstrap_resamples=100), resources=Resources())
    table = {(r["metric"], r["strategy"]): r for r in result.validation.iter_rows(named=True)}
    praise = table[("toy_praise", "adversary")]
    assert praise["n"] == 5 and praise["mean_change"] == 3.0 and praise["verdict"] == "fail"
    assert table[("toy_constant", "adversary")]["verdict"] == "pass"
    assert table[("toy_praise", "format_headers")]["mean_change"] == 0.0
    report = result.adversary
    assert report.height == 10 and set(report["target"]) == {"review"}
    assert result.stats["adversary_largest_inflation"] == {"toy_praise": 3.0, "toy_constant": 0.0}
    best = result.perturbations.filter(pl.col("candidate").str.ends_with("~adversary:toy_praise"))
    assert best.height == 5 and all(praise_count(t) == 3 for t in best["review_text"])
