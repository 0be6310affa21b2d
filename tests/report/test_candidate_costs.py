"""Cost beside quality: tokens and dollars per review per candidate model; an
unknown cost stays unknown (NULL in `candidate_costs`, "unknown" on the site), never 0."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from tasks.report.site.data import model_costs

ROOT = Path(__file__).resolve().parents[2]

CANDIDATES = pl.DataFrame({
    "model": ["api-model", "api-model", "local-model", "agent", "agent"],
    "tokens": [1200, 1000, 900, None, None],
    "cost": [0.02, 0.01, 0.0, None, None],
    "origin": ["generated", "generated", "generated", "submitted", "submitted"],
})


def test_an_unknown_cost_stays_unknown_in_the_table_and_on_the_site():
    sql = (ROOT / "sql" / "marts" / "candidate_costs.sql").read_text()
    with duckdb.connect() as con:
        con.execute("create schema staging")
        con.register("frame", CANDIDATES.to_arrow())
        con.execute("create table staging.candidates as select * from frame")
        con.execute(sql)
        got = {m: (t, u, n) for m, t, u, n in con.execute(
            "select model, tokens_per_review, usd_per_review, cost_unknown from candidate_costs").fetchall()}
    assert got["api-model"] == (1100.0, 0.015, 0)
    assert got["local-model"] == (900.0, 0.0, 0)          # a local model: no API charge, a real 0
    assert got["agent"] == (None, None, 2)                # submitted: unknown, not 0
    site = model_costs(CANDIDATES)
    assert site["agent"] == {"tokens_per_review": None, "usd_per_review": None}
    assert site["api-model"]["usd_per_review"] == 0.015
