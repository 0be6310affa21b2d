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


def recompute(scores: pl.DataFrame, flags: pl.DataFrame) -> list[tuple]:
    with duckdb.connect(config={"threads": 4}) as con:
        con.execute("create schema staging")
        con.register("s", scores.to_arrow())
        con.register("f", flags.to_arrow())
        con.execute("create table staging.scores as select * from s")
        con.execute("create table staging.reference_flags as select * from f")
        con.execute(f"create table staging.leaderboard ({BOARD})")
        con.execute("insert into staging.leaderboard (metric, eval_lm, model, kind, is_human) values "
                    "('gem', 'lm', 'human', 'human', true), ('gem', 'lm', 'm1', 'generated', false)")
        con.execute(MART, {"reference_free_metrics": ["llm_judge_noref"]})
        return con.execute("select model, mean_unflagged, flagged_shift from leaderboard order by model").fetchall()


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
