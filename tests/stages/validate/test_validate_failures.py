"""Per-metric failure counts in the shape of the Scoring Rules paper's tables 4-5: the Python table of
`grebench report` and the DuckDB view `metric_failures` agree, on a hand-made validation table."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from tasks.report.validation import write_report
from tasks.stages.validate.failures import failures_markdown, metric_failures

ROWS = [  # metric, strategy, kind, level, passed (None: inconclusive)
    ("gem", "sentence_deletion", "degradation", "judgments", True),
    ("gem", "sentence_deletion", "degradation", "raw", False),
    ("gem", "random_replacement", "degradation", "judgments", False),
    ("gem", "case_upper", "manipulation", "judgments", True),
    ("gem", "prompt_injection", "manipulation", "judgments", False),
    ("bleu", "sentence_deletion", "degradation", "raw", True),
    ("bleu", "case_upper", "manipulation", "raw", None),
    ("tv_fvar_statement", "sentence_deletion", "degradation", "judgments", True),
    ("tv_fvar_statement", "prompt_injection", "manipulation", "judgments", True),
]


def validation() -> pl.DataFrame:
    frame = pl.DataFrame(ROWS, schema={"metric": pl.String, "strategy": pl.String, "kind": pl.String,
                                       "level": pl.String, "passed": pl.Boolean}, orient="row")
    return frame.with_columns(eval_lm=pl.lit("smollm2"), smd=pl.lit(0.0))


EXPECTED = [  # metric, deg failed, deg tested, deg inconclusive, failed degs, man failed, man tested, man inconclusive, failed mans
    ("bleu", "smollm2", 0, 1, 0, [], 0, 0, 1, []),
    ("tv_fvar_statement", "smollm2", 0, 1, 0, [], 0, 1, 0, []),
    ("gem", "smollm2", 2, 3, 0, ["random_replacement", "sentence_deletion (raw)"], 1, 2, 0, ["prompt_injection"]),
]


def test_counts_per_metric_and_kind_with_the_failed_strategies_named() -> None:
    assert metric_failures(validation()).rows() == EXPECTED
    assert metric_failures(pl.DataFrame()).is_empty()


def test_the_duckdb_view_agrees_with_the_report_table() -> None:
    con = duckdb.connect()
    con.execute("CREATE SCHEMA staging")
    con.register("v", validation().to_arrow())
    con.execute("CREATE TABLE staging.validation AS SELECT * FROM v")
    con.execute(Path("sql/marts/metric_failures.sql").read_text())
    assert con.sql("SELECT * FROM metric_failures").fetchall() == [tuple(r) for r in EXPECTED]


def test_report_has_the_section(tmp_path) -> None:
    text = write_report({"validation": validation()}, tmp_path)["summary"].read_text()
    assert "### Failures per metric" in text
    assert "| gem | smollm2 | 2 / 3 | random_replacement, sentence_deletion (raw) | 1 / 2 | prompt_injection |" in text
    assert "| bleu | smollm2 | 0 / 1 | - | 0 / 0 (1 inconclusive) | - |" in text
    assert failures_markdown(validation()).count("\n") == 4   # header, rule, three metrics
