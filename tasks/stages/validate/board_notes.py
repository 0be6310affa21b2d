"""What a leaderboard column's numbers rest on: the `qualified` flag and the `note` of each row.

* `qualified`: for a metric whose scores come from a model in a judging role (`judge`, `oracle`,
  `matcher`; tasks/stages/qualify/stage.py), False when a model of that role that failed the exam is among
  the models behind the row (its `eval_lm`), True when the role was examined and none of them
  failed, null when the run had no exam for the role. With `[qualify] on_fail = "report"` or "weigh" a
  failed model stays in the run and its columns say so here (with "drop" it is gone from the row).
* `note`: "not qualified: <role> <model> failed <tests>"; the score pairs an estimator lost
  ("ratio_overflow: 3 of 40 pairs lost", and likewise judge_unanswered / oracle_unanswered), since
  a mean over the pairs that remain is not the mean over all of them; and where valid scores came
  from a stand-in ("assw_from_abstract: 2 of 6 pairs conditioned on an ASSW written from the
  abstract, no PDF text").
"""

from __future__ import annotations

import polars as pl

from tasks.metrics.registry import REGISTRY

LOST = ("ratio_overflow", "judge_unanswered", "oracle_unanswered")
NOTES = {"assw_from_abstract": "conditioned on an ASSW written from the abstract (no PDF text)"}


def role_of(metric: str) -> str | None:
    """The judging role behind a metric's scores, if any."""
    return REGISTRY[metric].judging_role if metric in REGISTRY else None


def failures(qualification: pl.DataFrame | None) -> tuple[set[str], dict[tuple[str, str], list[str]]]:
    """(roles examined, (role, model) -> the tests it failed) from the qualification table."""
    if qualification is None or qualification.is_empty():
        return set(), {}
    failed: dict[tuple[str, str], list[str]] = {}
    for row in qualification.filter(~pl.col("passed").fill_null(True)).iter_rows(named=True):
        failed.setdefault((row["role"], row["model"]), []).append(row["test"])
    return set(qualification["role"].unique().to_list()), failed


def pair_counts(scores: pl.DataFrame | None) -> dict[tuple[str, str | None, str], dict[str, int]]:
    """(metric, eval_lm, model) -> {"pairs": n, <lost reason>: n, <note>: n} from the score rows."""
    if scores is None or scores.is_empty():
        return {}
    note = pl.col("note") if "note" in scores.columns else pl.lit(None, pl.String)
    grouped = (scores.with_columns(note.alias("_note"))
               .group_by("metric", "eval_lm", "source")
               .agg(pl.len().alias("pairs"),
                    *(( pl.col("reason") == r).sum().alias(r) for r in LOST),
                    *((pl.col("_note") == n).sum().alias(n) for n in NOTES)))
    out = {}
    for row in grouped.iter_rows(named=True):
        out[(row["metric"], row["eval_lm"], row["source"])] = {k: int(row[k] or 0) for k in ("pairs", *LOST, *NOTES)}
    return out


def annotate(board: pl.DataFrame, scores: pl.DataFrame | None = None,
             qualification: pl.DataFrame | None = None) -> pl.DataFrame:
    """`board` (LEADERBOARD rows) with `qualified` and `note` filled in from the score rows and the exam."""
    if board.is_empty():
        return board
    examined, failed = failures(qualification)
    counts = pair_counts(scores)
    qualified: list[bool | None] = []
    notes: list[str | None] = []
    for row in board.iter_rows(named=True):
        parts: list[str] = []
        role = role_of(row["metric"])
        flag: bool | None = None
        if role is not None and role in examined:
            lm = row["eval_lm"] or ""
            bad = [(m, t) for (r, m), t in failed.items() if r == role and m and m in lm]
            flag = not bad
            parts += [f"not qualified: {role} {m} failed {', '.join(sorted(t))}" for m, t in bad]
        seen = counts.get((row["metric"], row["eval_lm"], row["model"]), {})
        parts += [f"{r}: {seen[r]} of {seen['pairs']} pairs lost" for r in LOST if seen.get(r)]
        parts += [f"{n}: {seen[n]} of {seen['pairs']} pairs {what}" for n, what in NOTES.items() if seen.get(n)]
        qualified.append(flag)
        notes.append("; ".join(parts) or None)
    return board.with_columns(pl.Series("qualified", qualified, dtype=pl.Boolean),
                              pl.Series("note", notes, dtype=pl.String))
