"""The corners of the design space (Scoring Rules' f-MI metrics, oracles and judges): gem, tv_fvar_statement and an LLM judge are named in
the full pipeline's [score] and [validate] tables, and (slow) scored, validated and materialized end to
end on a demo-like synthetic pipeline with the embedded SmolLM2 as evaluation LM, oracle and judge: they
reach the leaderboard with the model behind each column, the validation table, the per-metric failure
counts and `llm_usage`."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tasks.core.config import load_config
from tasks.core.layout import stage_dir
from tests.scoring.test_eval_lms import write_generated
from tests.scoring_data import write_pipeline

DEMO_CELLS = {"gem", "tv_fvar_statement", "llm_judge"}


def test_full_scores_and_validates_gem_the_best_oracle_cell_and_a_judge() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "pipelines.toml").for_pipeline("full")
    assert set(cfg.score.all_metrics) >= DEMO_CELLS and set(cfg.validate.metrics) >= DEMO_CELLS
    assert cfg.score.oracle_predictor == "readout" and cfg.score.oracle.backend == "local"   # offline
    # Auto-PRE's weighted panel: two judges, the embedded model on its weights and behind the local
    # OpenAI-compatible server, kept and weighed by the exam whether they pass or not (offline too)
    assert [(j.backend, j.model, j.base_url) for j in cfg.score.judges] == [
        ("local", "smollm2", None), ("openai", "smollm2", "served:smollm2?quantization=int8")]
    assert cfg.qualify.on_fail == "weigh" and "qualify" in cfg.pipelines["full"].stages


@pytest.mark.slow
@pytest.mark.timeout(1800)   # a few minutes on an idle 2-core CPU; more when it is shared
def test_score_validate_materialize_with_the_demo_cells(tmp_path, prefect_harness) -> None:
    import duckdb

    from flows.score import score_flow
    from flows.validate import validate_flow
    from tasks.report.validation import TABLES, read_tables, write_report
    from tasks.stages.materialize.build import build_database

    config = write_pipeline(tmp_path, n_papers=2, n_reviews=2, metrics=["gem", "tv_fvar_statement"],
                            baselines=["llm_judge"], negatives=1)
    with config.open("a") as f:
        f.write('\n[validate]\nmetrics = ["gem", "tv_fvar_statement", "llm_judge"]\n'
                'strategies = ["sentence_deletion", "case_upper"]\nmin_pairs = 2\nbootstrap_resamples = 200\n'
                'level = ["judgments"]\n')
    write_generated(tmp_path)
    cfg = load_config(config).for_pipeline("t")
    scored = score_flow(cfg, "t")
    assert scored.llm_calls > 0                     # the judge's readouts, logged per question
    validate_flow(cfg, "t")
    validation = pl.read_parquet(stage_dir(cfg, "t", "validate") / "validation.parquet")
    assert set(validation["metric"]) == DEMO_CELLS and validation.height == 6
    verdicts = dict(zip(validation["metric"] + "/" + validation["strategy"], validation["verdict"], strict=True))
    assert all(verdicts[f"{m}/{s}"] in ("pass", "fail") for m in ("gem", "tv_fvar_statement")
               for s in ("sentence_deletion", "case_upper"))     # two pairs each reach a verdict
    # the judge is read (G-Eval expectation), so it answers every question and its tests reach a verdict
    assert all(verdicts[f"llm_judge/{s}"] in ("pass", "fail") for s in ("sentence_deletion", "case_upper"))

    for partial in [*(tmp_path / "data" / "t").glob("*/curate/*.parquet"),
                    *(tmp_path / "data" / "t" / "generate").glob("*.parquet")]:
        partial.unlink()   # the fixture's curate and generate files are not full rows (the board is validate's)
    build_database(cfg, "t")
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        board = con.execute("SELECT metric, model, predictor, n_papers FROM leaderboard ORDER BY ALL").fetchall()
        assert {m for m, *_ in board} == DEMO_CELLS
        assert {m: p.split(":")[0] for m, _, p, _ in board} == {"gem": "logprobs", "tv_fvar_statement": "readout",
                                                             "llm_judge": "judge"}
        assert {p for m, _, p, _ in board if m == "llm_judge"} == {"judge:readout:local/smollm2"}   # the method
        models = ("gen-a", "gen-b", "human")
        assert {(m, model) for m, model, _, _ in board} >= {(m, x) for m in DEMO_CELLS for x in models}
        assert {(m, model) for m, model, _, n in board if n == 2} >= {(m, x) for m in ("gem", "tv_fvar_statement")
                                                                       for x in models}
        failures = con.execute("SELECT metric, degradations_tested + degradations_inconclusive, "
                               "manipulations_tested + manipulations_inconclusive FROM metric_failures").fetchall()
        assert sorted(failures) == sorted((m, 1, 1) for m in DEMO_CELLS)
        usage = con.execute("SELECT stage, sum(requests) FROM llm_usage GROUP BY ALL ORDER BY 1").fetchall()
        assert [s for s, _ in usage] == ["score", "validate"] and all(n > 0 for _, n in usage)
    text = write_report(read_tables(cfg.database, TABLES), tmp_path / "report")["summary"].read_text()
    assert "### Failures per metric" in text and "| tv_fvar_statement |" in text
