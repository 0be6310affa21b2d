"""Paired comparisons and rank intervals (tasks/stages/validate/comparisons.py) on synthetic boards: a model
built better on every paper is found better and ranked apart; two identical models are tied."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from tasks.stages.validate.comparisons import (
    CompareSettings,
    compare,
    resample_counts,
    sign_flip_p,
    with_ranks_and_ties,
)
from tasks.stages.validate.leaderboard import leaderboard, per_paper

N_PAPERS = 30


def candidate_scores(models: dict[str, np.ndarray], metric: str = "bleu") -> pl.DataFrame:
    rows = []
    for model, scores in models.items():
        for k, score in enumerate(scores):
            rows.append({"paper_id": f"P{k:02d}", "candidate": f"{model}/P{k:02d}", "source": model, "metric": metric,
                         "eval_lm": "sacrebleu", "score": float(score), "n_references": 3, "reason": None})
    return pl.DataFrame(rows)


def synthetic(seed: int = 0) -> dict[str, np.ndarray]:
    """Papers differ a lot in difficulty; `strong` beats `weak` on every paper by a small margin,
    `twin` is `weak` exactly, `noisy` is `weak` plus noise centred on zero."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 1.0, N_PAPERS)
    weak = 0.3 + 0.1 * difficulty
    return {"strong": weak + 0.02 + rng.uniform(0, 0.01, N_PAPERS), "weak": weak, "twin": weak.copy(),
            "noisy": weak + rng.normal(0, 0.05, N_PAPERS)}


def board_and_pairs(models: dict[str, np.ndarray], metric: str = "bleu", settings: CompareSettings | None = None):
    scores = candidate_scores(models, metric)
    board = leaderboard(scores)
    pairs, ranks = compare(per_paper(scores), settings or CompareSettings(resamples=2000),
                           board.select("metric", "eval_lm", "model", "rank"))
    return with_ranks_and_ties(board, pairs, ranks), pairs


def pair(pairs: pl.DataFrame, a: str, b: str) -> dict:
    found = pairs.filter(((pl.col("model_a") == a) & (pl.col("model_b") == b)) |
                         ((pl.col("model_a") == b) & (pl.col("model_b") == a)))
    assert found.height == 1
    return found.row(0, named=True)


def test_a_model_better_on_every_paper_is_found_better_and_ranked_apart():
    board, pairs = board_and_pairs({m: s for m, s in synthetic().items() if m != "noisy"})
    strong_weak = pair(pairs, "strong", "weak")
    assert strong_weak["model_a"] == "strong"                      # pairs follow the board's order
    assert strong_weak["significant"] and strong_weak["better"] == "strong"
    assert strong_weak["p_adjusted"] < 1e-6 and 0.02 < strong_weak["mean_diff"] < 0.03
    assert 0 < strong_weak["ci_low"] <= strong_weak["mean_diff"] <= strong_weak["ci_high"]
    ranks = {r["model"]: (r["rank_low"], r["rank_high"]) for r in board.iter_rows(named=True)}
    assert ranks["strong"] == (1, 1)                               # always first, whatever papers are drawn
    assert ranks["weak"] == ranks["twin"] == (2, 2)
    assert "strong" not in {m for ties in board["tied_with"].to_list() for m in ties}


def test_identical_models_overlap_and_are_tied():
    board, pairs = board_and_pairs(synthetic())
    twins = pair(pairs, "weak", "twin")
    assert twins["mean_diff"] == 0 and twins["p_value"] == 1.0 and twins["significant"] is False
    assert twins["better"] is None and twins["reason"] == "identical scores on every shared paper"
    rows = {r["model"]: r for r in board.iter_rows(named=True)}
    assert rows["weak"]["rank_low"] <= rows["twin"]["rank_high"] and rows["twin"]["rank_low"] <= rows["weak"]["rank_high"]
    # weak and twin sit next to each other on the board (same mean) and are marked tied
    assert "twin" in rows["weak"]["tied_with"] or "weak" in rows["twin"]["tied_with"]
    noise = pair(pairs, "weak", "noisy")                           # noise centred on zero: no difference
    assert noise["ci_low"] < 0 < noise["ci_high"] and noise["significant"] is False


def test_lower_is_better_metric_turns_the_winner_around():
    from tasks.metrics import higher_is_better

    assert higher_is_better(["rating_mae"]) == {"rating_mae": False}
    models = synthetic()
    board, pairs = board_and_pairs({"strong": models["strong"], "weak": models["weak"]}, metric="rating_mae")
    assert pair(pairs, "strong", "weak")["better"] == "weak"
    assert board.filter(pl.col("model") == "weak")["rank_low"][0] == 1


def test_correction_across_pairs_and_too_few_papers():
    models = synthetic()
    _, holm = board_and_pairs(models, settings=CompareSettings(correction="holm"))
    _, raw = board_and_pairs(models, settings=CompareSettings(correction="none"))
    assert (holm["p_adjusted"] >= raw["p_adjusted"] - 1e-12).all()
    assert (raw["p_adjusted"] == raw["p_value"]).all()
    short = {"a": np.array([1.0]), "b": np.array([0.5])}
    _, pairs = board_and_pairs(short)
    row = pairs.row(0, named=True)
    assert row["n_papers"] == 1 and math.isnan(row["p_value"]) and row["significant"] is None
    assert "need at least 2" in row["reason"]


def test_papers_a_model_lacks_are_left_out_of_its_pairs():
    models = synthetic()
    models["partial"] = models["strong"].copy()
    models["partial"][: N_PAPERS // 2] = np.nan
    _, pairs = board_and_pairs(models)
    assert pair(pairs, "partial", "weak")["n_papers"] == N_PAPERS - N_PAPERS // 2
    assert pair(pairs, "partial", "strong")["mean_diff"] == 0


def test_sign_flip_test_is_exact_for_few_papers_and_the_bootstrap_is_seeded():
    assert sign_flip_p(np.ones(5)) == pytest.approx(2 / 2 ** 5)               # all 32 sign patterns
    assert sign_flip_p(np.array([1.0, -1.0, 1.0, -1.0])) == 1.0
    assert sign_flip_p(np.array([3.0, 1.0, 2.0])) == pytest.approx(2 / 8)    # only all-plus and all-minus reach 6
    assert sign_flip_p(np.full(40, 0.5)) == pytest.approx(2 / 2 ** 40)       # beyond the exact range, still exact
    rng = np.random.default_rng(1)
    shifted, centred = rng.normal(0.5, 1.0, 60), rng.normal(0.0, 1.0, 60)
    assert sign_flip_p(shifted) < 0.01 < sign_flip_p(centred)
    assert sign_flip_p(shifted) == pytest.approx(stats.ttest_1samp(shifted, 0.0).pvalue, rel=1e-9)
    assert np.array_equal(resample_counts(7, 50, 3), resample_counts(7, 50, 3))
    assert (resample_counts(7, 50, 3).sum(axis=1) == 7).all()
