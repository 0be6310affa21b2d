"""A model submitted to a scored pipeline leaves every earlier leaderboard row as it was, to
the last digit, under the same release id; so does a rescore. The rank columns (rank, rank_low,
rank_high, tied_with) are the one exception by construction: they place each model among the others.

The pipeline: four papers, three human reviews each, one generated candidate, GEM's raw variant on
the embedded SmolLM2 (in float32 and in bfloat16, whose results depend on batch company) and BLEU; a log-likelihood behind a
published score is computed once and reused bit for bit (tasks/scoring/shards.py), negatives are
drawn per pair (tasks/metrics/negatives.py)."""

from __future__ import annotations

import json

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from flows.pipeline import pipeline_flow
from tasks.core.config import load_config
from tasks.testing.anthropic_server import AnthropicServer
from tasks.testing.openai_server import OpenAIServer
from tests.stages.generate.test_generate import openai_tagged_review
from tests.submit_data import OPENAI_CANDIDATE, good_review, write_config, write_curated

BY_SET = {"rank", "rank_low", "rank_high", "tied_with"}     # a model's place among the others


def board(cfg) -> dict[tuple, dict]:
    """(metric, eval_lm, model) -> the leaderboard row without its rank columns."""
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        cursor = con.execute("select * from leaderboard")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return {(r["metric"], r["eval_lm"], r["model"]): {k: v for k, v in r.items() if k not in BY_SET} for r in rows}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_submitted_model_leaves_every_earlier_row_identical(prefect_harness, tmp_path, monkeypatch, dtype):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-submit-stable")
    monkeypatch.setenv("GREBENCH_TEST_OPENAI_KEY", "sk-test-submit-stable")
    runner = CliRunner()
    with OpenAIServer(openai_tagged_review) as candidate_server, AnthropicServer() as preprocess_server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", preprocess_server.url)
        config = write_config(tmp_path, ["gem_raw", "bleu", "bertscore_minilm"], OPENAI_CANDIDATE.format(base_url=candidate_server.base_url),
                              stages=("preprocess", "generate", "score", "validate", "materialize"))
        config.write_text(config.read_text().replace("baselines = []\n", f'baselines = []\ndtype = "{dtype}"\n', 1))
        cfg = load_config(config).for_pipeline("t")
        write_curated(cfg)
        pipeline_flow(pipeline="t", config_path=str(config))     # outside CliRunner, as in test_submit_flow
        before = board(cfg)
        assert {model for _, _, model in before} == {"human", "gen-model"}
        assert len({row["release_id"] for row in before.values()}) == 1
        gem = [row for (metric, _, _), row in before.items() if metric == "gem_raw"]
        assert len(gem) == 2 and all(row["mean"] is not None and row["eval_lm"].startswith(f"smollm2|{dtype}")
                                     for row in gem)

        reviews = tmp_path / "agent.jsonl"
        reviews.write_text("".join(json.dumps({"paper_id": f"P{k}", "review": good_review(k, k % 2)}) + "\n"
                                   for k in (1, 2, 3)))
        submitted = runner.invoke(app, ["submit", "--reviews", str(reviews), "--name", "agent", "--cutoff",
                                        "2024-03-01", "-c", str(config)])
        assert submitted.exit_code == 0, submitted.output
        after = board(cfg)
        assert {model for _, _, model in after} == {"human", "gen-model", "agent"}
        assert {k: v for k, v in after.items() if k in before} == before     # every digit, the release id too

        rescored = runner.invoke(app, ["run", "t", "--stages", "score,validate,materialize", "-c", str(config)])
        assert rescored.exit_code == 0, rescored.output
        assert board(cfg) == after
