"""Per metric: the degradations and manipulations it fails, with counts (the Scoring Rules paper's
tables 4 and 5), from a validation table (tasks/stages/validate/stats.py `validation_table` rows).

A degradation fails when the score does not drop significantly, a manipulation when it rises
significantly (`passed` false); tests without a verdict (`passed` null: fewer pairs than
`min_pairs`) are counted as inconclusive, never as failures. The same table is the DuckDB view
`metric_failures` (sql/marts/metric_failures.sql); `grebench report` prints it.
"""

from __future__ import annotations

import polars as pl

FAILURES = {
    "metric": pl.String, "eval_lm": pl.String,
    "degradations_failed": pl.Int64, "degradations_tested": pl.Int64, "degradations_inconclusive": pl.Int64,
    "failed_degradations": pl.List(pl.String),
    "manipulations_failed": pl.Int64, "manipulations_tested": pl.Int64, "manipulations_inconclusive": pl.Int64,
    "failed_manipulations": pl.List(pl.String),
}


def metric_failures(validation: pl.DataFrame) -> pl.DataFrame:
    """One row per (metric, evaluation LM) of the validation table, metrics that fail nothing included."""
    if validation.is_empty():
        return pl.DataFrame(schema=FAILURES)
    frame = validation
    for name in ("eval_lm", "level"):
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.String).alias(name))
    level = pl.col("level")
    test = pl.col("strategy") + pl.when(level.is_null() | (level == "judgments")).then(pl.lit("")) \
        .otherwise(pl.lit(" (") + level + pl.lit(")"))
    frame = frame.select("metric", pl.col("eval_lm").fill_null(""), "kind", "passed", test.alias("test"))
    aggs = []
    for kind, plural in (("degradation", "degradations"), ("manipulation", "manipulations")):
        is_kind = pl.col("kind") == kind
        aggs += [(is_kind & pl.col("passed").not_()).sum().cast(pl.Int64).alias(f"{plural}_failed"),
                 (is_kind & pl.col("passed").is_not_null()).sum().cast(pl.Int64).alias(f"{plural}_tested"),
                 (is_kind & pl.col("passed").is_null()).sum().cast(pl.Int64).alias(f"{plural}_inconclusive"),
                 pl.col("test").filter(is_kind & pl.col("passed").not_()).sort().alias(f"failed_{plural}")]
    out = frame.group_by("metric", "eval_lm").agg(aggs).select(list(FAILURES)).cast(FAILURES)  # type: ignore[arg-type]
    return out.sort(pl.col("degradations_failed") + pl.col("manipulations_failed"), "metric", "eval_lm")


def failures_markdown(validation: pl.DataFrame) -> str:
    """The table as markdown: "failed / tested" per kind and the failed strategies by name."""
    table = metric_failures(validation)
    lines = ["| metric | eval_lm | degradations failed | failed degradations | manipulations failed | "
             "failed manipulations |", "|---|---|---|---|---|---|"]
    for row in table.iter_rows(named=True):
        cells = [row["metric"], row["eval_lm"]]
        for plural in ("degradations", "manipulations"):
            count = f"{row[f'{plural}_failed']} / {row[f'{plural}_tested']}"
            if row[f"{plural}_inconclusive"]:
                count += f" ({row[f'{plural}_inconclusive']} inconclusive)"
            cells += [count, ", ".join(row[f"failed_{plural}"]) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
