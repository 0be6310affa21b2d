"""The report renders from frames and from a DuckDB database: valid PNGs and a markdown summary."""

from __future__ import annotations

import math

import duckdb
import polars as pl
import pytest

from tasks.report.validation import TABLES, read_tables, write_report
from tasks.stages.validate.leaderboard import leaderboard
from tasks.stages.validate.stats import validation_table

PNG = b"\x89PNG\r\n\x1a\n"


def frames() -> dict[str, pl.DataFrame]:
    rows = []
    for p in range(5):
        for r in range(3):
            rows.append({"paper_id": f"p{p}", "candidate": f"p{p}/r{r}", "source": "human", "metric": "gem",
                         "eval_lm": "smollm2", "score": 0.2 + 0.05 * p + 0.01 * r})
        for k, model in enumerate(("tiny-lm", "big-lm")):
            rows.append({"paper_id": f"p{p}", "candidate": f"{model}/p{p}", "source": model, "metric": "gem",
                         "eval_lm": "smollm2", "score": 0.1 + 0.2 * k + 0.03 * p})
    pairs = pl.DataFrame({
        "metric": ["gem"] * 8 + ["bleu"] * 8,
        "strategy": (["sentence_deletion"] * 4 + ["meaningless_elongation"] * 4) * 2,
        "kind": (["degradation"] * 4 + ["manipulation"] * 4) * 2,
        "original": [1.0, 1.2, 0.9, 1.1, 1.0, 1.2, 0.9, 1.1] * 2,
        "perturbed": [0.5, 0.6, 0.4, 0.7, 1.0, 1.1, 0.9, 1.0, 0.9, 1.3, 0.8, 1.1, 1.5, 1.8, 1.4, 1.7],
    })
    correlation = pl.DataFrame({"metric": ["gem"], "eval_lm": ["smollm2"], "n": [12], "n_dropped": [0],
                                "rho": [0.41], "p_value": [0.18], "reason": [None]})
    return {"leaderboard": leaderboard(pl.DataFrame(rows), submitted={"big-lm"}), "validation": validation_table(pairs),
            "human_correlation": correlation}


def check_outputs(paths: dict) -> str:
    from PIL import Image

    for name in ("leaderboard", "validation"):
        data = paths[name].read_bytes()
        assert data.startswith(PNG), name
        with Image.open(paths[name]) as image:
            image.verify()
        with Image.open(paths[name]) as image:
            assert image.size[0] > 300 and image.size[1] > 200
    return paths["summary"].read_text()


def test_report_from_frames(tmp_path):
    data = frames()
    assert data["validation"].filter(pl.col("metric") == "bleu")["passed"].to_list() == [False, False]
    text = check_outputs(write_report(data, tmp_path / "out"))
    assert "| metric | eval_lm | rank | model | mean |" in text
    assert "| gem | smollm2 | 1 | big-lm (submitted) |" in text and "| gem | smollm2 | 2 | human |" in text
    assert "*(submitted)*: reviews a system's authors submitted" in text
    assert "### Metrics that fail any test" in text and "- bleu: sentence_deletion, meaningless_elongation" in text
    assert "| gem | smollm2 | 12 | 0.410 |" in text
    assert "![leaderboard](leaderboard.png)" in text


def test_report_from_database_and_empty_tables(tmp_path):
    database = tmp_path / "results.duckdb"
    with duckdb.connect(str(database)) as con:
        for name, frame in frames().items():
            con.register("frame", frame.to_arrow())
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            con.unregister("frame")
    tables = read_tables(database, TABLES)
    assert tables["leaderboard"].height == 3 and tables["validation"].height == 4
    text = check_outputs(write_report(database, tmp_path / "report"))
    assert "tiny-lm" in text
    # a database built before the score and validate stages ran: the report still renders
    bare = tmp_path / "bare.duckdb"
    duckdb.connect(str(bare)).close()
    text = check_outputs(write_report(bare, tmp_path / "bare"))
    assert "No scores yet." in text and "No validation results yet." in text
    with pytest.raises(FileNotFoundError, match="no results database"):
        write_report(tmp_path / "missing.duckdb", tmp_path / "x")
    assert not math.isnan(tables["leaderboard"]["mean"][0])


def test_the_report_opens_with_the_overview(tmp_path):
    """report.md's first section is the `overview` table's: a model per row, a headline metric per column headed
    by its validation status, before the figures and the full leaderboard."""
    from tests.site_data import write_database

    text = write_report(write_database(tmp_path / "r.duckdb"), tmp_path / "report")["summary"].read_text()
    assert text.index("## Overview") < text.index("![leaderboard]") < text.index("## Leaderboard")
    header = next(line for line in text.splitlines() if line.startswith("| model |"))
    assert header.startswith("| model | gem (2 of 2 tests passed; raw level) | bleu (0 of 1 tests passed, 1 failed; ")
    assert "| m-b | 1.900 [1.200, 2.600] #2 | – | 2 | 0.0020 |" in text
