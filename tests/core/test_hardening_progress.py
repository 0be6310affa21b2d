"""Progress with an ETA on long steps, also when stderr is not a terminal."""

from __future__ import annotations

import io
import re

import polars as pl
import pytest

from tasks.core.progress import progress, scorer_with_progress
from tests.cli.test_cli_validate import config, invoke, review_file  # noqa: F401 - the fixture is used by name

ETA = re.compile(r"(\d+)/(\d+) \[[0-9:]+<[0-9:?]+")   # done/total [elapsed<remaining


def test_progress_lines_in_a_log_have_counts_and_an_eta(monkeypatch):
    monkeypatch.setenv("GREBENCH_PROGRESS_SECONDS", "0")
    out = io.StringIO()
    with progress(4, "scoring", "request", out) as bar:
        for _ in range(4):
            bar.update(1)
    lines = out.getvalue().splitlines()
    assert lines and all("\r" not in line for line in lines)
    assert any(ETA.search(line) and line.startswith("scoring") for line in lines), lines
    assert ETA.search(lines[-1]).groups() == ("4", "4")


def test_scorer_with_progress_scores_in_chunks_and_keeps_order(monkeypatch):
    monkeypatch.setenv("GREBENCH_PROGRESS_SECONDS", "0")
    calls = []

    def scorer(requests: pl.DataFrame) -> pl.DataFrame:
        calls.append(requests.height)
        return requests.select("key", logprob=-pl.col("key").cast(pl.Float64))

    out = io.StringIO()
    requests = pl.DataFrame({"key": [str(i) for i in range(10)]})
    results = scorer_with_progress(scorer, chunk=4, out=out)(requests)
    assert calls == [4, 4, 2] and results["key"].to_list() == requests["key"].to_list()
    assert "10/10" in out.getvalue()


@pytest.mark.slow
def test_validate_with_gem_shows_scoring_progress(tmp_path, config, embedded_lm, monkeypatch):  # noqa: F811
    monkeypatch.setenv("GREBENCH_PROGRESS_SECONDS", "0")
    result = invoke("validate", "--reviews", review_file(tmp_path, "r.parquet"), "--metric", "gem",
                    "--strategies", "sentence_deletion", "--format", "json", "--config", str(config))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("scoring")]
    assert lines and ETA.search(lines[-1]), result.stderr[-2000:]
