"""The review-quality tables in the results database: staging, marts (points, point_matches,
review_quality, review_quality_models, rating_relation, focus_categories) and the data test, built by
the real materialize step from the files the score stage writes."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest

from tasks.materialize import DataTestError, build_database
from tasks.review_quality.matching import POINT_MATCHES
from tasks.review_quality.points import POINTS
from tasks.review_quality.stage import write_quality_tables
from tasks.review_quality.work import REVIEW_QUALITY, QualitySettings, QualityWork, ReviewFacts
from tests.test_materialize import make_config, write_outputs

NAN = float("nan")


def work_with(points: list[dict]) -> QualityWork:
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
    work = QualityWork(QualitySettings(), ReviewFacts(pl.DataFrame(), pl.DataFrame()), None)
    work.tables = {"review_quality": quality, "points": pl.DataFrame(points, schema=POINTS), "point_matches": matches}
    return work


def point(source: str, category: str, field: str = "weaknesses", kind: str | None = None, i: int = 0) -> dict:
    return {"review_id": f"{source}-{i}", "paper_id": "p1", "source": source, "field": field, "position": i,
            "category": category, "kind": kind, "text": "A point about the paper."}


def test_marts_and_the_relation_to_rating_error(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    pts = [point("human", "Experiments", i=0), point("human", "Experiments", i=1), point("human", "Clarity", i=2),
           point("A", "Novelty"), point("A", "Soundness", "questions", "Explain")]
    figures = write_quality_tables(cfg, "t", work_with(pts))
    assert figures["review_quality"]["points_rows"] == 5
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


def test_a_point_outside_the_categories_fails_the_build(tmp_path) -> None:
    cfg = make_config(tmp_path)
    write_outputs(cfg)
    write_quality_tables(cfg, "t", work_with([point("human", "Style")]))
    with pytest.raises(DataTestError, match="points_categories"):
        build_database(cfg, "t")
