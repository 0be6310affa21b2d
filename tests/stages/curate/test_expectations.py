"""great-expectations validation of curated tables: clean tables pass, each broken property is named."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import tasks.stages.curate.expectations as expectations
from tasks.core.config import Config, CurateConfig
from tasks.core.schema import PAPERS, REVIEWS, conform
from tasks.stages.curate.expectations import CurationValidationError, validate_curated
from tasks.stages.curate.rules import curate_venue

ROOT = Path(__file__).resolve().parents[3]
VENUE = "Test.cc/2024/Conference"   # no venue entry: identity map on the common scale
CFG = Config(curate=CurateConfig(sample_size=2))


def write_ingest(folder: Path) -> None:
    scores = {"a": [(6, 4), (8, 5), (6, 4)], "b": [(5, 4), (6, 5), (6, 4), (5, 5)], "c": [(8, 4)] * 5,
              "d": [(1, 5), (10, 5), (6, 4)], "e": [(6, 3), (6, 4)]}
    papers = [{"paper_id": p, "venue_id": VENUE, "status": "active"} for p in scores]
    reviews = [
        {"review_id": f"{p}{i}", "paper_id": p, "venue_id": VENUE, "rating": r, "confidence": c,
         "review_text": f"Review {i} of paper {p}."}
        for p, pairs in scores.items() for i, (r, c) in enumerate(pairs)
    ]
    folder.mkdir(parents=True)
    conform(pl.DataFrame(papers), PAPERS).write_parquet(folder / "papers.parquet")
    conform(pl.DataFrame(reviews), REVIEWS).write_parquet(folder / "reviews.parquet")


@pytest.fixture(scope="module")
def curated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("curated")
    write_ingest(base / "ingest")
    curate_venue(base / "ingest", VENUE, CFG, base / "curate")   # validates: clean tables pass
    return base / "ingest", base / "curate"


def test_clean_tables_pass(curated: tuple[Path, Path]) -> None:
    ingest_dir, out_dir = curated
    assert pl.read_parquet(out_dir / "papers.parquet")["paper_id"].to_list() == ["a", "b", "c"]
    validate_curated(out_dir, ingest_dir, CFG)


def edit(table: str, change: Callable[[pl.DataFrame], pl.DataFrame]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / f"{table}.parquet"
        change(pl.read_parquet(path)).write_parquet(path)
    return apply


def where(column: str, value: object, **updates: object) -> Callable[[pl.DataFrame], pl.DataFrame]:
    hit = pl.col(column) == value
    return lambda f: f.with_columns(
        **{k: pl.when(hit).then(pl.lit(v, dtype=f.schema[k])).otherwise(pl.col(k)) for k, v in updates.items()}
    )


BREAKS = {
    "duplicate review id": (edit("reviews", lambda f: pl.concat([f, f.head(1)])), "review ids are unique", "a0"),
    "duplicate paper id": (edit("papers", lambda f: pl.concat([f, f.tail(1)])), "paper ids are unique", "c"),
    "rating off the scale": (edit("reviews", where("review_id", "b1", rating=7.0)),
                             "ratings on the common scale", "rating=7.0"),
    "missing rating": (edit("reviews", where("review_id", "b1", rating=None)), "every rating is present", "b1"),
    "low confidence": (edit("reviews", where("review_id", "a1", confidence=3.0)),
                       "confidence in [1, 5] and >= min_confidence 4", "confidence=3.0"),
    "confidence above range": (edit("reviews", where("review_id", "a1", confidence=9.0)),
                               "confidence in [1, 5]", "a1"),
    "empty text": (edit("reviews", where("review_id", "c3", review_text=" \n ")), "review_text is not empty", "c3"),
    "too few reviews": (edit("reviews", lambda f: f.filter(pl.col("review_id") != "a2")),
                        "each kept paper has 3..5 kept reviews", "paper_id=a"),
    "stale review count": (edit("papers", where("paper_id", "b", n_reviews=5)),
                           "papers.n_reviews matches the reviews table", "b"),
    "review of a dropped paper": (edit("reviews", where("review_id", "c0", paper_id="d")),
                                  "every review belongs to a kept paper", "c0"),
    "lost reject": (edit("rejects", lambda f: f.head(f.height - 1)), "kept + rejected = ingested", "review"),
    "report chain broken": (edit("curation_report", where("step", 3, rows_in=99)),
                            "each step starts where the previous one ended", "step=3"),
    "foreign reject": (edit("rejects", lambda f: f.with_columns(stage=pl.lit("ingest"))),
                       "rejects come from the curate stage", "stage"),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_broken_property_fails_with_a_named_report(curated: tuple[Path, Path], tmp_path: Path, name: str) -> None:
    ingest_dir, out_dir = curated
    folder = tmp_path / "curate"
    shutil.copytree(out_dir, folder)
    breaker, check, example = BREAKS[name]
    breaker(folder)
    with pytest.raises(CurationValidationError) as info:
        validate_curated(folder, ingest_dir, CFG)
    report = str(info.value)
    assert check in report and example in report
    assert "expect_" in report and "rows fail, e.g." in report


def test_failed_validation_stops_curation_and_keeps_previous_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_ingest(tmp_path / "ingest")
    out_dir = tmp_path / "curate"
    curate_venue(tmp_path / "ingest", VENUE, CFG, out_dir)
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    real = expectations.validate_curated_apart      # the checks in their child process, as a run does them

    def corrupt_then_validate(folder: Path, ingest_dir: Path, cfg: Config) -> None:
        edit("reviews", where("review_id", "a0", rating=2.0))(folder)   # a fault in the staged table
        real(folder, ingest_dir, cfg)

    monkeypatch.setattr(expectations, "validate_curated_apart", corrupt_then_validate)
    with pytest.raises(CurationValidationError, match="ratings on the common scale"):
        curate_venue(tmp_path / "ingest", VENUE, CFG, out_dir)
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before


def test_report_is_readable(curated: tuple[Path, Path], tmp_path: Path) -> None:
    ingest_dir, out_dir = curated
    folder = tmp_path / "curate"
    shutil.copytree(out_dir, folder)
    edit("reviews", where("paper_id", "c", rating=7.0))(folder)
    with pytest.raises(CurationValidationError) as info:
        validate_curated(folder, ingest_dir, CFG)
    lines = str(info.value).splitlines()
    assert lines[0].endswith("1 expectation(s) failed")
    assert lines[1] == "- reviews: ratings on the common scale [1, 3, 5, 6, 8, 10]"
    assert lines[2].strip().startswith("expect_column_values_to_be_in_set(column=rating")
    assert lines[3].strip().startswith("5 of 12 rows fail, e.g. rating=7.0, review_id=c0")


def test_the_checks_run_in_a_child_and_leave_great_expectations_out_of_the_run(curated: tuple[Path, Path]) -> None:
    """A run's process never imports great-expectations (0.24 GB it would keep under every later peak): the
    checks pass or fail in a child process."""
    ingest_dir, out_dir = curated
    code = ("import sys; from pathlib import Path; from tests.stages.curate.test_expectations import CFG; "
            "from tasks.stages.curate.expectations import validate_curated_apart; "
            f"validate_curated_apart(Path({str(out_dir)!r}), Path({str(ingest_dir)!r}), CFG); "
            "print('great_expectations' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_a_worker_that_died_is_one_line_and_the_next_check_starts_a_new_one(curated: tuple[Path, Path]) -> None:
    import os
    import signal

    from tasks.core.children import apart
    from tasks.core.errors import TransientError

    ingest_dir, out_dir = curated
    expectations.validate_curated_apart(out_dir, ingest_dir, CFG)        # the worker is up
    for pid in list(apart()._processes):
        os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    with pytest.raises(TransientError, match="worker process died"):
        expectations.validate_curated_apart(out_dir, ingest_dir, CFG)
    expectations.validate_curated_apart(out_dir, ingest_dir, CFG)        # a new worker checks again
