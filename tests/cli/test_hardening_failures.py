"""Failures that used to exit 0: a refused API key, a stage whose every item failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tasks.core import schema
from tasks.core.config import PreprocessConfig
from tasks.core.errors import AuthenticationError, EmptyOutputError
from tasks.judgments.extract import preprocess_reviews
from tasks.lm.anthropic_api import AnthropicLM
from tasks.testing.anthropic_server import AnthropicServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "fake-test-key-0000refused"
VENUE = "Test.cc/2025/Conference"


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def reviews(n: int = 4) -> pl.DataFrame:
    rows = [{"review_id": f"r{i}", "paper_id": "p1", "venue_id": VENUE, "rating": 6.0, "confidence": 4.0,
             "review_text": f"## Summary\n\nThe paper studies thing {i}. The proofs are incomplete."} for i in range(n)]
    return schema.conform(pl.DataFrame(rows), schema.REVIEWS)


def backend(server: AnthropicServer, **settings) -> tuple[AnthropicLM, PreprocessConfig]:
    cfg = PreprocessConfig(backend="anthropic", model="claude-test", max_retries=3, poll_seconds=0.01, **settings)
    return AnthropicLM(cfg, base_url=server.url, sleep=lambda s: None, backoff_seconds=0.01), cfg


@pytest.mark.parametrize("use_batches", [False, True])
def test_401_on_every_call_stops_with_one_line_and_no_retries(api_key, use_batches):
    with AnthropicServer(reject_key=KEY) as server:
        lm, cfg = backend(server, use_batches=use_batches, max_in_flight=1)
        with pytest.raises(AuthenticationError) as raised:
            preprocess_reviews(reviews(), lm, cfg)
    assert "HTTP 401" in str(raised.value) and "\n" not in str(raised.value)
    assert KEY not in str(raised.value)
    assert sum(server.counts.values()) <= 2      # the first refusal ends it (one more may be in flight)


def test_every_review_failing_is_an_error_unless_allowed(api_key):
    with AnthropicServer() as server:
        server.malformed_next("no_text", times=1000)
        lm, cfg = backend(server, use_batches=False)
        with pytest.raises(EmptyOutputError, match="allow_empty"):
            preprocess_reviews(reviews(), lm, cfg)
        lm, cfg = backend(server, use_batches=False, allow_empty=True)
        out = preprocess_reviews(reviews(), lm, cfg)
    assert out.judgments.is_empty() and out.rejects.height == 4


def write_curated(root: Path) -> None:
    folder = root / "data" / "p" / "Test.cc_2025_Conference"
    (folder / "curate").mkdir(parents=True)
    (folder / "ingest").mkdir(parents=True)
    papers = pl.DataFrame({"paper_id": ["p1"], "venue_id": [VENUE], "title": ["T"], "abstract": ["An abstract."]})
    schema.conform(papers, schema.PAPERS).write_parquet(folder / "curate" / "papers.parquet")
    reviews().write_parquet(folder / "curate" / "reviews.parquet")


@pytest.mark.slow
def test_cli_run_with_a_refused_key_exits_non_zero_with_one_error_line(tmp_path):
    write_curated(tmp_path)
    (tmp_path / "pipelines.toml").write_text(
        "[preprocess]\nbackend = 'anthropic'\nmodel = 'claude-test'\nuse_batches = false\n"
        f"[pipelines.p]\nvenues = ['{VENUE}']\nstages = ['preprocess']\n"
    )
    with AnthropicServer(reject_key=KEY) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.url}
        done = subprocess.run([sys.executable, "-m", "flows.cli.main", "run", "p", "-c", str(tmp_path / "pipelines.toml")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: anthropic refused the API key: HTTP 401"), line
    assert not (tmp_path / "data" / "p" / "preprocess" / "judgments.parquet").exists()
