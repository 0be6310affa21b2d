"""Cost beside quality: tokens and dollars per review in the report, an unknown cost shown
as unknown (never 0) and kept out of the cost-quality figure, in the report (PNG) and on the site (SVG)."""

from __future__ import annotations

import duckdb
import polars as pl

from tasks.report.site import build_site
from tasks.report.trust import cost_axis, cost_quality
from tasks.report.validation import write_report

PNG = b"\x89PNG\r\n\x1a\n"


def board() -> pl.DataFrame:
    rows = [("gem", "human", True, 0.40), ("gem", "big-lm", False, 0.30), ("gem", "small-lm", False, 0.10),
            ("gem", "agent", False, 0.20), ("bleu", "big-lm", False, 5.0)]
    return pl.DataFrame([{"metric": m, "eval_lm": "lm", "model": model, "is_human": h, "mean": v, "ci_low": v - 0.05,
                          "ci_high": v + 0.05, "rank": 1, "n_papers": 3, "n_missing": 0, "n_excluded": 0, "reason": None,
                          "confidence": 0.9} for m, model, h, v in rows])


def costs() -> pl.DataFrame:
    """candidate_costs: two API models with dollars, a submitted system of unknown cost."""
    return pl.DataFrame({"model": ["agent", "big-lm", "small-lm"], "origin": ["submitted", "generated", "generated"],
                         "reviews": [3, 3, 3], "tokens_per_review": [None, 5000.0, 1200.0],
                         "usd_per_review": [None, 0.0420, 0.0031], "usd_total": [None, 0.126, 0.0093],
                         "cost_unknown": [3, 0, 0]},
                        schema_overrides={"tokens_per_review": pl.Float64, "usd_per_review": pl.Float64,
                                          "usd_total": pl.Float64})


def test_the_metric_beside_the_cost_and_the_unknown_kept_apart() -> None:
    frame = cost_quality(board(), costs())
    assert frame["model"].to_list() == ["agent", "big-lm", "small-lm"] and set(frame["metric"]) == {"gem"}
    axis, known, unknown = cost_axis(frame)
    assert axis == "usd_per_review" and known["model"].to_list() == ["big-lm", "small-lm"] and unknown == ["agent"]
    local = costs().with_columns(pl.col("usd_per_review").fill_null(strategy="zero") * 0)   # local models: $0
    assert cost_axis(cost_quality(board(), local))[0] == "tokens_per_review"


def test_the_report_shows_unknown_never_zero_and_draws_the_figure(tmp_path) -> None:
    paths = write_report({"leaderboard": board(), "candidate_costs": costs()}, tmp_path)
    assert paths["cost_quality"].read_bytes().startswith(PNG)
    text = paths["summary"].read_text()
    assert "## Cost beside quality" in text
    assert "| agent | 3 | unknown | unknown | 0.200 |" in text
    assert "| big-lm | 3 | 5000 | 0.0420 | 0.300 |" in text


def test_the_site_draws_the_known_costs_and_names_the_unknown(tmp_path) -> None:
    database = tmp_path / "r.duckdb"
    with duckdb.connect(str(database)) as con:
        for name, frame in (("leaderboard", board()), ("candidate_costs", costs())):
            con.register("frame", frame.to_arrow())
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            con.unregister("frame")
    site = build_site(database, tmp_path / "site")
    chart = site.out_dir / "charts" / "cost-quality.svg"
    assert chart in site.charts and chart.read_text().startswith("<svg")
    page = (site.out_dir / "leaderboard.html").read_text()
    assert "Cost and quality" in page and "Cost unknown, not drawn: agent." in page


def test_the_report_lists_flagged_references_and_the_injection_track(tmp_path) -> None:
    flags = pl.DataFrame({"review_id": ["r1", "r2"], "binoculars": [0.8, 1.2], "threshold": [0.9015] * 2,
                          "flagged": [True, False]})
    shifted = board().with_columns(mean_unflagged=pl.col("mean") + 0.01, flagged_shift=pl.lit(0.01),
                                   n_flagged=pl.when(pl.col("model") == "big-lm").then(1).otherwise(0))
    shifts = pl.DataFrame({"model": ["big-lm"], "variant": ["hidden"], "measure": ["rating"], "n_papers": [2],
                           "shift": [1.5], "ci_low": [0.5], "ci_high": [2.5], "reason": [None]})
    text = write_report({"leaderboard": shifted, "reference_flags": flags, "injection_shifts": shifts},
                        tmp_path)["summary"].read_text()
    assert "1 of 2 human references score below the Binoculars threshold (0.9015" in text
    assert "| gem | big-lm | 0.300 | 0.310 | 0.010 | 1 |" in text and "| gem | small-lm |" not in text
    assert "## Injection track" in text and "| big-lm | hidden | rating | 2 | 1.500 | 0.500 | 2.500 |" in text
