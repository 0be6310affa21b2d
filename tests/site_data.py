"""A tiny results database for the site tests: the marts the site reads, a few rows each, one
human review carrying HTML payloads that must show as text."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
PAYLOAD_REVIEW = f"## Summary\nThe method is sound. {SCRIPT}\n## Weaknesses\n{IMG} and $\\alpha < \\beta$."
PAPER_TITLE = "Robust <b>Knowledge</b> Distillation"


def _time(minute: int) -> datetime:
    return datetime(2026, 11, 22, 14, minute, tzinfo=UTC)


def tables() -> dict[str, pl.DataFrame]:
    return {
        "papers": pl.DataFrame({
            "paper_id": ["P1", "P2", "P3"], "venue_id": ["V.cc/2025/Conf", "V.cc/2024/Conf", "V.cc/2025/Conf"],
            "title": [PAPER_TITLE, "Second paper", "Not in the sample"],
            "abstract": ["We distil <i>knowledge</i> & more.", "Abstract two.", "Abstract three."],
            "decision": ["Accept", "Reject", "Reject"], "n_reviews": [2, 1, 1], "rating_mean": [6.0, 3.0, 5.0],
            "in_benchmark": [True, True, False]}),
        "reviews": pl.DataFrame({
            "review_id": ["R1", "R2", "R3", "R4"], "paper_id": ["P1", "P1", "P2", "P3"],
            "venue_id": ["V.cc/2025/Conf", "V.cc/2025/Conf", "V.cc/2024/Conf", "V.cc/2025/Conf"],
            "rating": [6.0, 6.0, 3.0, 5.0], "confidence": [4.0, 3.0, 4.0, 4.0],
            "review_text": [PAYLOAD_REVIEW, "A plain review.", "Review of paper two.", "Unsampled."]}),
        "candidates": pl.DataFrame({
            "candidate_id": ["m-a/P1", "m-b/P1", "m-a/P2"], "paper_id": ["P1", "P1", "P2"],
            "venue_id": ["V.cc/2025/Conf", "V.cc/2025/Conf", "V.cc/2024/Conf"], "model": ["m-a", "m-b", "m-a"],
            "model_id": ["model-a", "model-b", "model-a"], "review": [f"Model says {SCRIPT}", "Fine.", "Ok."],
            "truncated": [False, False, False], "cut": [None, None, None], "tokens": [10, 12, 9],
            "cost": [0.001, 0.002, 0.001]}),
        "judgments": pl.DataFrame({
            "review_id": ["R1", "R1"], "position": [0, 1], "stance": ["appreciates", "criticizes"],
            "text": ["The reviewer appreciates soundness.", f"The reviewer criticizes {IMG}"],
            "model": ["smollm2", "smollm2"], "prompt_version": ["v1", "v1"]}),
        "scores": pl.DataFrame({
            "paper_id": ["P1"] * 4, "candidate": ["m-a/P1", "m-a/P1", "R1", "R2"],
            "source": ["m-a", "m-a", "human", "human"], "reference": ["R1", "R2", "R2", "R1"],
            "metric": ["gem"] * 4, "score": [1.5, float("nan"), 2.0, 2.5], "eval_lm": ["lm"] * 4,
            "reason": [None, "no synopsis", None, None]}),
        "leaderboard": pl.DataFrame({
            "metric": ["gem"] * 3 + ["bleu"] * 2, "eval_lm": ["lm"] * 3 + ["sacrebleu"] * 2,
            "rank": [1, 2, 3, 1, 2], "rank_low": pl.Series([None] * 5, dtype=pl.Int64), "rank_high": pl.Series([None] * 5, dtype=pl.Int64),
            "model": ["human", "m-b", "m-a", "human", "m-a"], "kind": ["human", "generated", "generated", "human",
                                                                      "generated"],
            "is_human": [True, False, False, True, False], "mean": [2.25, 1.9, 1.5, 0.4, float("nan")],
            "ci_low": [2.0, 1.2, float("nan"), 0.3, float("nan")], "ci_high": [2.5, 2.6, float("nan"), 0.5, None],
            "confidence": [0.9] * 5, "n_papers": [2, 2, 1, 2, 0], "n_missing": [0, 0, 1, 0, 2],
            "n_excluded": [0, 0, 0, 0, 1], "reason": [None, None, "only 1 value(s)", None, "no scores"]}),
        "validation": pl.DataFrame({
            "metric": ["gem", "gem", "bleu"], "strategy": ["sentence_deletion", "meaningless_elongation",
                                                           "sentence_deletion"],
            "kind": ["degradation", "manipulation", "degradation"], "n": [5, 5, 5], "smd": [-1.2, 0.1, -0.2],
            "ci_low": [-2.0, -0.5, -0.9], "ci_high": [-0.4, 0.7, 0.5], "p_value": [0.01, 0.6, 0.3],
            "passed": [True, True, False], "reason": [None, None, None]}),
        "runs": pl.DataFrame({
            "run_id": ["run-1"] * 2, "pipeline": ["demo"] * 2, "config_hash": ["abc123"] * 2,
            "code_version": ["f00ba4"] * 2, "position": [0, 1], "stage": ["ingest", "generate"],
            "status": ["completed"] * 2, "started_at": [_time(0), _time(1)], "ended_at": [_time(1), _time(3)],
            "duration_s": [60.0, 120.0], "rows_in": [10, 4], "rows_out": [8, 3], "llm_calls": [0, 3],
            "input_tokens": [0, 300], "output_tokens": [0, 90], "cost_usd": [0.0, 0.004], "error": [None, None]}),
    }


def write_database(path: Path, headline: tuple[str, ...] = ("gem", "bleu")) -> Path:
    """The tables above, and the overview the marts build from them with `headline` as [score] headline."""
    with duckdb.connect(str(path)) as con:
        for name, frame in tables().items():
            con.register("frame", frame)
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM frame')
            con.unregister("frame")
        write_overview(con, headline)
    return path


def write_overview(con: duckdb.DuckDBPyConnection, headline: tuple[str, ...], board_level: str = "raw") -> None:
    """The `overview` table of sql/marts (with `candidate_costs`, which it reads) over this database's
    leaderboard, validation rows (at `board_level`) and candidates, as materialize builds it."""
    con.execute("CREATE SCHEMA IF NOT EXISTS staging")
    con.execute("CREATE TABLE staging.validation AS SELECT *, $level AS level FROM validation", {"level": board_level})
    con.execute("CREATE TABLE staging.candidates AS SELECT *, 'generated' AS origin FROM candidates")
    run_marts(con, ("candidate_costs", "headline", "overview"),
              {"headline_metrics": list(headline), "board_level": board_level})


def run_marts(con: duckdb.DuckDBPyConnection, names: tuple[str, ...], values: dict[str, object]) -> None:
    """The files sql/marts/<name>.sql run in this order, their parameters taken from `values`."""
    from tasks.stages.materialize.build import SQL_DIR, _parameters

    for name in names:
        text = (SQL_DIR / "marts" / f"{name}.sql").read_text(encoding="utf-8")
        con.execute(text, _parameters(text, values))
