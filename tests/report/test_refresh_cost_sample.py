"""bench/cost/refresh_cost.py projects the stages after curation over the sample the refresh reads."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("refresh_cost", ROOT / "bench" / "cost" / "refresh_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["refresh_cost"] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _args(**changes) -> argparse.Namespace:
    args = dict(submissions=19_525, venues=2, keep=0.25, candidates=10, negatives=4, oracle_cells=[], judges=0,
                abstract_tokens=250, assw_tokens=200, paper_tokens=15_000, context_tokens=8192, sample_size=100,
                pipeline="refresh-2026", config=str(ROOT / "pipelines.toml"), edited_share=0.0, pdf_history_share=0.0,
                candidate_input_price=3.0, candidate_output_price=15.0, candidate_output_tokens=2048)
    return argparse.Namespace(**{**args, **changes})


def test_preprocess_and_generate_are_projected_over_the_sample_not_every_curated_paper() -> None:
    bench = _bench()
    shape = bench.Shape(reviews_per_paper=4.0, review_tokens=600, lines_per_review=10, line_tokens=15)
    overhead = {"raw": 120, "judgments": 130}
    stages = {s.stage: s for s in bench.project(_args(), shape, overhead)}
    assert bench.sampled_papers(_args()) == 200                       # 2 venues x 100, of 2 x 4,881 curated
    assert stages["preprocess"].requests == 200 * 4 + 200              # every human review's judgments, one ASSW a paper
    assert stages["generate"].requests == 200 * 10 * 2                  # each candidate's review, then its judgments
    every = {s.stage: s for s in bench.project(_args(sample_size=0), shape, overhead)}
    assert every["generate"].requests == pytest.approx(2 * 19_525 * 0.25 * 10 * 2)
    assert every["preprocess"].input_tokens / stages["preprocess"].input_tokens == pytest.approx(2 * 19_525 * 0.25 / 200)
    few = _args(submissions=100, sample_size=100)                      # 25 curated: the sample is all of them
    assert bench.sampled_papers(few) == 50
    _, parts = bench.ingest_plan(_args(), 4.0)
    assert (parts["pdf_scope"], parts["pdfs"]) == ("sample", 200)        # the refresh fetches the sample's PDFs


def test_the_sample_size_comes_from_the_named_pipeline() -> None:
    bench = _bench()
    assert bench.pipeline_config(_args(pipeline="demo")).curate.sample_size == 9
    assert bench.pipeline_config(_args(pipeline="refresh-2026")).curate.sample_size == 100


def test_a_pilot_runs_retries_and_answer_lengths_enter_the_plan(tmp_path: Path) -> None:
    import polars as pl

    from tasks.core import schema

    bench = _bench()
    venue = tmp_path / "Venue" / "curate"
    venue.mkdir(parents=True)
    pl.DataFrame({"paper_id": ["p1", "p2", "p3"], "in_benchmark": [True, True, False]}).write_parquet(
        venue / "papers.parquet")
    pl.DataFrame({"paper_id": ["p1"] * 4 + ["p2"] * 4 + ["p3"] * 3,
                  "review_id": [f"r{k}" for k in range(11)]}).write_parquet(venue / "reviews.parquet")
    for stage, rows in (("preprocess", [("judgments", 10, 640), ("synopses", 0, 0)]),      # 8 reviews, 2 asked again
                        ("generate", [("generate:a", 3, 300), ("generate:b", 2, 100), ("candidate_judgments", 4, 200)])):
        (tmp_path / stage).mkdir()
        schema.conform(pl.DataFrame({"purpose": [p for p, _, _ in rows], "requests": [n for _, n, _ in rows],
                                     "output_tokens": [t for _, _, t in rows]}), schema.USAGE
                       ).write_parquet(tmp_path / stage / "usage.parquet")
    how = bench.measure_behaviour(tmp_path)
    assert how.preprocess_retry == pytest.approx(10 / 8 - 1) and how.judgment_answer_tokens == 64
    assert how.generate_retry == pytest.approx(5 / 4 - 1) and how.review_answer_tokens == 80

    shape = bench.Shape(reviews_per_paper=4.0, review_tokens=600, lines_per_review=3, line_tokens=10)
    overhead = {"raw": 120, "judgments": 130}
    plain = {s.stage: s for s in bench.project(_args(), shape, overhead)}
    piloted = {s.stage: s for s in bench.project(_args(), shape, overhead, how)}
    assert piloted["preprocess"].requests == pytest.approx(200 * 4 * 1.25 + 200)
    assert plain["preprocess"].requests == 200 * 4 + 200
    assert piloted["generate"].requests == pytest.approx(200 * 10 * 1.25 + 200 * 10)   # reviews asked again, lines once
    assert piloted["generate"].output_tokens == pytest.approx(200 * 10 * 1.25 * 80 + 200 * 10 * 64)
    assert plain["generate"].output_tokens == pytest.approx(200 * 10 * 600 + 200 * 10 * 30)
