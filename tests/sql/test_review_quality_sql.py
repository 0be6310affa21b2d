"""The review-quality tables in the results database: staging, marts (points, point_matches,
review_quality, review_quality_models, rating_relation, focus_categories) and the data test, built by
the real materialize step from the files the score stage writes."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest

from tasks.core.schema import SCORES
from tasks.metrics import FamilyResult
from tasks.metrics.review_quality.matching import POINT_MATCHES
from tasks.metrics.review_quality.points import POINTS
from tasks.metrics.review_quality.work import REVIEW_QUALITY
from tasks.stages.materialize.build import DataTestError, build_database
from tasks.stages.score.stage import write_scores
from tests.stages.materialize.test_materialize import make_config, write_outputs

NAN = float("nan")


def tables_with(points: list[dict]) -> dict[str, pl.DataFrame]:
    """The review-quality family's side tables, as the score stage gets them."""
    rows = [("A", "rating_mae", 1.0), ("A", "rating_mae", 2.0), ("A", "points_recall_weaknesses", 0.5),
            ("A", "points_recall_weaknesses", 0.5), ("B", "rating_mae", 0.5), ("B", "points_recall_weaknesses", 0.9),
            ("C", "rating_mae", 2.0), ("C", "rating_mae", NAN), ("C", "points_recall_weaknesses", 0.1),
            ("C", "points_recall_weaknesses", 0.3), ("human", "rating_mae", 0.1), ("human", "points_recall_weaknesses", 1.0)]
    quality = pl.DataFrame([{"paper_id": f"p{i}", "candidate": f"{m}/p{i}", "source": m, "metric": metric, "value": v,
                             "reason": "no_rating" if v != v else None} for i, (m, metric, v) in enumerate(rows)],
                           schema=REVIEW_QUALITY)
    matches = pl.DataFrame([{"paper_id": "p1", "candidate": "A/p1", "field": "weaknesses", "a_position": 0,
                             "reference": "r0", "h_position": 0, "similarity": 0.8, "asked": True, "match": 1}],
                           schema=POINT_MATCHES)
    return {"review_quality": quality, "points": pl.DataFrame(points, schema=POINTS), "point_matches": matches}


def write_tables(cfg, tables: dict[str, pl.DataFrame]):
    """The score stage's outputs with these side tables (and no scores)."""
    return write_scores(cfg, "t", FamilyResult(pl.DataFrame(schema=SCORES), tables), {})


def point(source: str, category: str, field: str = "weaknesses", kind: str | None = None, i: int = 0) -> dict:
    return {"review_id": f"{source}-{i}", "paper_id": "p1", "source": source, "field": field, "position": i,
            "category": category, "kind": kind, "text": "A point about the paper."}


def test_marts_and_the_relation_to_rating_error(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    pts = [point("human", "Experiments", i=0), point("human", "Experiments", i=1), point("human", "Clarity", i=2),
           point("A", "Novelty"), point("A", "Soundness", "questions", "Explain")]
    summary = write_tables(cfg, tables_with(pts))
    assert summary.details["tables"]["points"] == 5
    result = build_database(cfg, "t")
    assert {"points", "point_matches", "review_quality", "review_quality_models", "rating_relation",
            "focus_categories"} <= set(result.tables)
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        rel = dict(con.execute("select metric, pearson_r from rating_relation").fetchall())
        models = {(m, mod): (mean, n, miss) for m, mod, mean, n, miss in con.execute(
            "select metric, model, mean, n_papers, n_missing from review_quality_models").fetchall()}
        focus = con.execute("select model, category, share from focus_categories where field = 'weaknesses' "
                            "order by model, category").fetchall()
    expected = float(np.corrcoef([0.5, 0.9, 0.2], [1.5, 0.5, 2.0])[0, 1])
    assert rel == {"points_recall_weaknesses": pytest.approx(expected)}     # humans left out, NaN left out
    assert models[("rating_mae", "C")] == (2.0, 1, 1)
    assert focus == [("A", "Novelty", 1.0), ("human", "Clarity", pytest.approx(1 / 3)),
                     ("human", "Experiments", pytest.approx(2 / 3))]
    # the report draws the focus chart and each metric against rating MAE with r
    from PIL import Image

    from tasks.report.validation import write_report

    paths = write_report(cfg.database, tmp_path / "report")
    for name in ("focus", "rating_relation"):
        with Image.open(paths[name]) as image:
            assert image.size[0] > 300 and image.size[1] > 200
    text = paths["summary"].read_text()
    assert "## Review quality and rating outcomes (Beyond Rating)" in text
    assert f"| points_recall_weaknesses | 3 | {expected:.3f} |" in text


def test_a_point_outside_the_categories_fails_the_build(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    write_tables(cfg, tables_with([point("human", "Style")]))
    with pytest.raises(DataTestError, match="points_categories"):
        build_database(cfg, "t")


def test_a_share_above_one_fails_the_build(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    tables = tables_with([point("human", "Clarity")])
    bad = pl.DataFrame([{"paper_id": "p1", "candidate": "A/p1", "source": "A", "metric": "points_recall_weaknesses",
                         "value": 1.5, "reason": None}], schema=REVIEW_QUALITY)
    tables["review_quality"] = pl.concat([tables["review_quality"], bad])
    write_tables(cfg, tables)
    with pytest.raises(DataTestError, match="review_quality_ranges"):
        build_database(cfg, "t")


def test_config_keys_have_defaults_and_clear_errors(tmp_path) -> None:
    from tasks.core.config import ConfigError, load_config
    from tasks.metrics.quality import settings

    cfg = make_config(tmp_path)
    rq = cfg.score.review_quality
    assert (rq.llm, rq.match_top_k, rq.kl_alpha, rq.chunk_tokens, rq.chunk_overlap, rq.chunk_top_k) == (None, None, 1.0, 512, 128, 5)
    assert settings(cfg).binoculars is None and settings(cfg).rating_scale == (1, 3, 5, 6, 8, 10)
    for bad, message in (("chunk_overlap = 600", "chunk_overlap"), ('binoculars_observer = "a"', "binoculars")):
        (tmp_path / "pipelines.toml").write_text(f"[score.review_quality]\n{bad}\n[pipelines.t]\nvenues = []\n")
        with pytest.raises((ConfigError, ValueError), match=message):
            load_config(tmp_path / "pipelines.toml")
    (tmp_path / "pipelines.toml").write_text('[score]\nbaselines = ["rating_mae", "points_recall_weaknesses"]\n'
                                             '[score.review_quality]\nbinoculars_observer = "a"\nbinoculars_performer = "b"\n')
    cfg = load_config(tmp_path / "pipelines.toml")
    assert settings(cfg).binoculars == ("a", "b") and "rating_mae" in cfg.score.all_metrics
    (tmp_path / "pipelines.toml").write_text('[score.review_quality]\nbinoculars_observer = "a"\nbinoculars_performer = "a"\n')
    assert settings(load_config(tmp_path / "pipelines.toml")).binoculars == ("a", "a")   # the single-model form


def test_score_stage_scores_rating_outcomes_into_the_leaderboard(tmp_path) -> None:
    from tasks.core.config import load_config
    from tasks.core.layout import slug
    from tasks.stages.score.stage import (
        read_inputs,
        score_inputs_each_eval_lm,
        sharded_loglikelihoods,
        shards_details,
    )
    from tasks.stages.validate.leaderboard import leaderboard
    from tests.scoring_data import VENUE, write_pipeline

    config = write_pipeline(tmp_path, n_papers=2, n_reviews=3, metrics=["rating_mae"], baselines=["accept_accuracy"])
    curate = tmp_path / "data" / "t" / slug(VENUE) / "curate"
    reviews = pl.read_parquet(curate / "reviews.parquet").with_columns(rating=pl.Series([3.0, 5.0, 6.0, 6.0, 8.0, 8.0]))
    reviews.write_parquet(curate / "reviews.parquet")
    pl.DataFrame({"paper_id": ["paper0", "paper1"], "decision": ["Reject", "Accept (oral)"],
                  "in_benchmark": [True, True]}).write_parquet(curate / "papers.parquet")
    (tmp_path / "data" / "t" / "generate").mkdir(parents=True)
    pl.DataFrame({"candidate_id": ["m/paper0", "m/paper1"], "paper_id": ["paper0", "paper1"], "model": ["m", "m"],
                  "review": ["## Summary\n\nA paper."] * 2, "rating_answer": ["5", None]}).write_parquet(
        tmp_path / "data" / "t" / "generate" / "candidates.parquet")
    cfg = load_config(config).for_pipeline("t")
    inputs = read_inputs(cfg, "t")
    shards = sharded_loglikelihoods(cfg, "t")
    scored, _ = score_inputs_each_eval_lm(cfg, "t", inputs, shards, llm_cache=tmp_path / "llm")
    summary = write_scores(cfg, "t", scored, shards_details(shards))
    assert summary.details["tables"]["review_quality"] == 2 * 8
    scores = scored.scores
    got = {(c, m): (s, r) for c, m, s, r in scores.select("candidate", "metric", "score", "reason").iter_rows()}
    assert got[("m/paper0", "rating_mae")] == (pytest.approx(abs(5 - 14 / 3)), None)
    assert got[("m/paper0", "accept_accuracy")] == (1.0, None)
    assert got[("m/paper1", "rating_mae")][1] == "no_rating"            # the old prompt gave no rating: a gap
    assert got[("paper1-r0", "accept_accuracy")] == (1.0, None)         # 6 >= 6 on an accepted paper
    assert got[("paper0-r0", "rating_mae")] == (pytest.approx(2.5), None)
    board = leaderboard(pl.read_parquet(stage_dir_of(tmp_path) / "candidate_scores.parquet"))
    mae = {m: (mean, rank) for m, mean, rank in board.filter(pl.col("metric") == "rating_mae")
           .select("model", "mean", "rank").iter_rows()}
    assert mae["m"][0] == pytest.approx(abs(5 - 14 / 3)) and mae["m"][1] == 1     # lower is better: ranked first
    assert set(board.filter(pl.col("metric") == "rating_mae")["predictor"]) == {"review_quality:common_scale"}


def stage_dir_of(root):
    return root / "data" / "t" / "score"
