"""Scores an LLM evaluator gave to a submitted review that screening flagged at `grebench submit`.

A flagged review (invisible characters, hidden markup, an instruction to the evaluator, a bare
"master key" answer) is kept and scored; the rows of the metrics whose LLM reads the review as part
of its prompt (judges, oracles, readouts, the reviser) say so in `note`, so nobody reads such a score
as earned: "submission_flagged: <kinds>".
"""

from __future__ import annotations

import polars as pl

from tasks.core.config import Config
from tasks.core.submitted import submitted_flags
from tasks.metrics import get
from tasks.metrics.registry import LLM_JUDGE, LLM_ORACLE, LLM_REVISER, LM_READOUT

LLM_READERS = (LLM_JUDGE, LLM_ORACLE, LM_READOUT, LLM_REVISER)   # what a planted instruction can reach


def llm_read_metrics(names: list[str]) -> list[str]:
    """The metrics among `names` whose evaluator is an LLM reading the candidate review in its prompt."""
    return [m.name for m in get(list(dict.fromkeys(names))) if m.needs in LLM_READERS]


def note_flagged(scores: pl.DataFrame, flags: dict[str, list[str]]) -> pl.DataFrame:
    """SCORES with `note` saying "submission_flagged: <kinds>" on the LLM-read metrics' rows of each
    flagged candidate (after any note already there)."""
    if not flags or scores.is_empty():
        return scores
    judged = llm_read_metrics(scores["metric"].unique().to_list())
    notes = pl.DataFrame({"candidate": list(flags), "_flag": [f"submission_flagged: {', '.join(k)}" for k in flags.values()]})
    marked = scores.join(notes, on="candidate", how="left").with_columns(
        pl.when(pl.col("_flag").is_not_null() & pl.col("metric").is_in(judged))
        .then(pl.concat_str([pl.col("note"), pl.col("_flag")], separator="; ", ignore_nulls=True))
        .otherwise(pl.col("note")).alias("note"))
    return marked.drop("_flag").select(scores.columns)


def mark_flagged(cfg: Config, pipeline: str, scores: pl.DataFrame) -> pl.DataFrame:
    return note_flagged(scores, submitted_flags(cfg, pipeline))
