"""`metric_coverage`: one row per registry metric, a number or a one-line reason for its absence."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import polars as pl

from tasks.core import schema
from tasks.core.config import Config, load_config
from tasks.metrics.registry import REGISTRY
from tasks.stages.materialize.build import build_database


def write_scores(tmp_path: Path, baselines: list[str], scores: pl.DataFrame) -> Config:
    """Pipeline t scoring gem and `baselines`, its score stage's output `scores`; its config."""
    (tmp_path / "pipelines.toml").write_text(
        "[pipelines.t]\nvenues = ['Test.cc/2025/Conference']\nstages = ['score', 'materialize']\n"
        f"[pipelines.t.score]\nmetrics = ['gem']\nbaselines = {baselines!r}\n")
    cfg = load_config(tmp_path / "pipelines.toml").for_pipeline("t")
    (cfg.data_dir / "t" / "score").mkdir(parents=True)
    schema.conform(scores, schema.SCORES).write_parquet(cfg.data_dir / "t" / "score" / "scores.parquet")
    return cfg


def test_every_registry_metric_has_a_number_or_a_reason(tmp_path: Path):
    cfg = write_scores(tmp_path, ["bleu", "ai_rate", "rouge_l"], pl.DataFrame({
        "paper_id": ["p1", "p1", "p2", "p1", "p2", "p1"],
        "candidate": ["c1", "c2", "c3", "c1", "c3", "c1"],
        "metric": ["gem", "gem", "gem", "ai_rate", "ai_rate", "bleu"],
        "score": [0.5, math.nan, 1.5, math.nan, math.nan, 0.1],
        "eval_lm": ["smollm2|float32"] * 3 + [None, None, None],
        "reason": [None, "truncated", None, "binoculars_uncalibrated", "binoculars_uncalibrated", None],
        "source": ["human", "m", "m", "m", "m", "m"], "reference": ["r1", "r1", "r2", None, None, "r1"],
    }))

    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database_for("t")), read_only=True) as con:
        rows = {r[0]: r[1:] for r in con.execute(
            "select metric, asked_as, numbers, status, why, eval_lms from metric_coverage").fetchall()}
    assert set(rows) == set(REGISTRY)
    assert rows["gem"][:3] == ("score.metrics, validate.metrics", 2, "number") and rows["gem"][4] == ["smollm2|float32"]
    assert rows["gem"][3] == "some rows without a number: truncated (1 rows)"
    assert rows["bleu"][1:4] == (1, "number", None)
    assert rows["ai_rate"][:3] == ("score.baselines", 0, "absent")
    assert rows["ai_rate"][3] == "every score row lacks a number: binoculars_uncalibrated (2 rows)"
    assert rows["rouge_l"][2] == "absent" and rows["rouge_l"][3].startswith("asked for, but no score row yet")
    assert rows["tvd_mi"][0] is None and rows["tvd_mi"][3].startswith("not asked for")
    assert all(why for status, why in ((r[2], r[3]) for r in rows.values()) if status == "absent")


def test_a_metric_only_the_humans_have_is_not_a_number_for_the_models(tmp_path: Path):
    """A judge that rates every human review and never a model's: per metric "human only", per model "absent"
    with the reason, where the coverage used to say "number"."""
    cfg = write_scores(tmp_path, ["llm_judge"], pl.DataFrame({
        "paper_id": ["p1", "p2", "p1", "p2"], "candidate": ["r1", "r2", "m/p1", "m/p2"],
        "metric": ["llm_judge"] * 4, "score": [6.0, 7.0, math.nan, math.nan], "eval_lm": ["judge"] * 4,
        "reason": [None, None, "judge_unanswered", "judge_unanswered"], "source": ["human", "human", "m", "m"],
        "reference": [None] * 4}))
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database_for("t")), read_only=True) as con:
        status, why = con.execute("select status, why from metric_coverage where metric = 'llm_judge'").fetchone()
        per_model = con.execute("select model, candidates, with_number, status, why from metric_model_coverage "
                                "order by model").fetchall()
    assert status == "human only" and why.startswith("only the human reviews have a number")
    assert per_model == [("human", 2, 2, "number", None), ("m", 2, 0, "absent", "judge_unanswered (2)")]
