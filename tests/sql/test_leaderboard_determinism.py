"""The leaderboard's `mean_unflagged` and `flagged_shift` are the same, bit for bit, in two identical
recomputations: DuckDB's parallel aggregation adds floats in whatever order its threads finish,
so every mean of the mart is taken over values in a fixed order."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
MART = (ROOT / "sql" / "marts" / "leaderboard.sql").read_text()
BOARD = ("metric VARCHAR, eval_lm VARCHAR, rank INTEGER, rank_low INTEGER, rank_high INTEGER, model VARCHAR, "
         "kind VARCHAR, is_human BOOLEAN, mean DOUBLE, ci_low DOUBLE, ci_high DOUBLE, confidence DOUBLE, "
         "n_papers INTEGER, n_missing INTEGER, n_excluded INTEGER, tied_with VARCHAR[], reason VARCHAR, "
         "predictor VARCHAR, qualified BOOLEAN, note VARCHAR, release_id VARCHAR")


def mart(scores: pl.DataFrame, flags: pl.DataFrame, board: str, free: list[str], query: str) -> list[tuple]:
    """`query` over the leaderboard mart built on these scores, flags and board rows (metric, eval_lm, model,
    kind, is_human), with `free` the reference-free metrics."""
    with duckdb.connect(config={"threads": 4}) as con:
        con.execute("create schema staging")
        con.register("s", scores.to_arrow())
        con.register("f", flags.to_arrow())
        con.execute("create table staging.scores as select * from s")
        con.execute("create table staging.reference_flags as select * from f")
        con.execute("create table staging.negatives (paper_id VARCHAR, candidate VARCHAR, reference VARCHAR, "
                    "draw BIGINT, negative VARCHAR, negative_paper VARCHAR)")
        con.execute(f"create table staging.leaderboard ({BOARD})")
        con.execute(f"insert into staging.leaderboard (metric, eval_lm, model, kind, is_human) values {board}")
        con.execute(MART, {"reference_free_metrics": free, "negative_metrics": []})
        return con.execute(query).fetchall()


def recompute(scores: pl.DataFrame, flags: pl.DataFrame) -> list[tuple]:
    return mart(scores, flags, "('gem', 'lm', 'human', 'human', true), ('gem', 'lm', 'm1', 'generated', false)",
                ["llm_judge_noref"], "select model, mean_unflagged, flagged_shift from leaderboard order by model")


def test_the_human_rows_flag_columns_are_identical_in_two_recomputations():
    rng = np.random.default_rng(3)
    n = 400_000       # several of DuckDB's row groups: the aggregation runs on every thread
    papers = rng.integers(0, 8, n)
    references = rng.integers(0, 5000, n)
    scores = pl.DataFrame({
        "metric": "gem", "eval_lm": "lm", "source": np.where(rng.random(n) < 0.9, "human", "m1"),
        "paper_id": [f"p{p}" for p in papers], "candidate": [f"c{p}-{c}" for p, c in zip(papers, rng.integers(0, 3, n), strict=True)],
        "reference": [f"r{r}" for r in references], "score": rng.normal(0, 1, n) * 10.0 ** rng.integers(-3, 4, n)})
    flags = pl.DataFrame({"paper_id": [f"p{r % 8}" for r in range(5000)], "review_id": [f"r{r}" for r in range(5000)],
                          "flagged": rng.random(5000) < 0.2, "reason": None})
    first = recompute(scores, flags)
    assert all(row[1] is not None for row in first)
    for _ in range(3):
        assert recompute(scores, flags) == first


def test_a_reference_free_metric_keeps_every_paper_on_the_unflagged_board():
    """RevisEval and the pairwise judge read no human review: the registry says so, and their scores (reference
    null) stay in `mean_unflagged` on a paper whose references are all flagged, with no flagged one counted,
    while a judge that reads the references loses that paper."""
    from tasks.metrics import REGISTRY

    free = [m.name for m in REGISTRY.values() if not m.reads_references]
    assert {"reviseval_bleu", "reviseval_judge", "pairwise_judge", "llm_judge_noref"} <= set(free)
    assert REGISTRY["llm_judge"].reads_references
    scores = pl.DataFrame({"metric": ["reviseval_judge", "reviseval_judge", "llm_judge", "llm_judge"],
                           "eval_lm": "lm", "source": "m1", "paper_id": ["p0", "p1", "p0", "p1"],
                           "candidate": ["c0", "c1", "c0", "c1"], "reference": None, "score": [1.0, 3.0, 1.0, 3.0]},
                          schema_overrides={"reference": pl.String})
    flags = pl.DataFrame({"paper_id": ["p0", "p1"], "review_id": ["r0", "r1"], "flagged": [True, False],
                          "reason": None})
    got = dict(mart(scores, flags, "('reviseval_judge', 'lm', 'm1', 'generated', false), "
                    "('llm_judge', 'lm', 'm1', 'generated', false)", free,
                    "select metric, (mean_unflagged, n_flagged) from leaderboard"))
    assert got["reviseval_judge"] == (2.0, 0)     # both papers, nothing flagged read
    assert got["llm_judge"] == (3.0, 1)           # p0's score read its flagged reference: left out
