"""A model submitted to a scored pipeline leaves every number published under a release id as it was,
to the last digit: every earlier row of every materialized table with a `release_id` column (found in
information_schema, not listed here), and every `scores` row of the earlier models; so does a rescore.
The rank columns are the one exception by construction: they place each model among the others.

The pipeline: four papers, three human reviews each, one generated candidate, and one metric of every
family that runs offline: GEM and GEM-raw on the embedded SmolLM2 (in float32 and in bfloat16, whose
results depend on batch company), BLEU and ROUGE-L, BERTScore on MiniLM, an f-MI oracle cell read from
the evaluation LM's logits against a drawn negative, a judge panel (SmolLM2 read by its logits, in the
same dtype, beside a chat API behind the local Anthropic-compatible server), RevisEval with that API as
reviser, and the rating outcome. Log-likelihoods are reused by key (tasks/scoring/shards.py), the LLM
metrics by shard, one model's candidates a shard (tasks/scoring/metric_shards.py), a release row and its
models' rows are written once (tasks/stages/validate/releases.py). The API's
judge and reviser answer differently each time they are asked, as a sampled model may: a question
asked again after the submission would move the number it makes."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli.main import app
from flows.pipeline import pipeline_flow
from tasks.core.config import load_config
from tasks.core.prompts import load_prompt
from tasks.testing.anthropic_server import AnthropicServer, heuristic_responder, system_text
from tasks.testing.openai_server import OpenAIServer
from tests.stages.generate.test_generate import openai_tagged_review
from tests.submit_data import OPENAI_CANDIDATE, good_review, write_config, write_curated

# the columns that place a model among the others, per table: the only ones a new model may move
BY_SET = {"leaderboard": {"rank", "rank_low", "rank_high", "tied_with"}}
METRICS = ["gem_raw", "gem", "bleu", "rouge_l", "bertscore_minilm", "kl_fvar_report", "llm_judge",
           "reviseval_rouge_l", "rating_mae"]
# in bfloat16 the families whose numbers the evaluation LM's dtype makes: a log-likelihood, a logit readout
BF16_METRICS = ["gem_raw", "kl_fvar_report", "bleu"]
SCORE = """negatives = 1
[[score.judges]]
backend = "local"
model = "smollm2"
dtype = "{dtype}"
[[score.judges]]
backend = "anthropic"
model = "claude-judge"
use_batches = false
max_retries = 0
[score.reviser]
backend = "anthropic"
model = "claude-judge"
use_batches = false
max_retries = 0
"""


class DriftingAPI:
    """The chat API's answers: judgments and synopses as the heuristic writes them; a judge's rating and a
    revision that differ every time they are asked."""

    def __init__(self) -> None:
        self.asked = itertools.count()
        self.judge, self.reviser = load_prompt("judge-reference-v1"), load_prompt("reviseval-revise-v1")

    def __call__(self, params: dict[str, Any]) -> str:
        system = system_text(params)
        if system.startswith(self.judge[:60]):
            return f"Score: {next(self.asked) % 11}"
        if system.startswith(self.reviser[:60]):
            return f"{heuristic_responder(params)}\nRevision {next(self.asked)}."
        return heuristic_responder(params)


def rated_review(body: dict) -> str:
    """The generated candidate's review, stating a rating (so the rating outcome has one to read)."""
    return f"{openai_tagged_review(body)}\n\nRating: 6"


def exact(value: Any) -> Any:
    """A value compared bit for bit (a float by its hex form, so NaN equals NaN and -0.0 is not 0.0)."""
    if isinstance(value, float):
        return value.hex() if not math.isnan(value) else "nan"
    if isinstance(value, (list, tuple)):
        return tuple(exact(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, exact(v)) for k, v in value.items()))
    return value


def published(cfg) -> dict[str, list[tuple]]:
    """table -> its rows (rank columns left out, sorted) for every table with a release_id column, and the
    `scores` rows."""
    with duckdb.connect(str(cfg.database), read_only=True) as con:
        tables = [t for (t,) in con.execute(
            "SELECT DISTINCT c.table_name FROM information_schema.columns AS c JOIN information_schema.tables AS t "
            "USING (table_catalog, table_schema, table_name) WHERE c.column_name = 'release_id' "
            "AND t.table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
        out = {}
        for table in [*tables, "scores"]:
            cursor = con.execute(f"SELECT * FROM {table}")    # noqa: S608 (names from the catalog)
            names = [d[0] for d in cursor.description]
            keep = [k for k, n in enumerate(names) if n not in BY_SET.get(table, set())]
            out[table] = sorted((tuple((names[k], exact(row[k])) for k in keep) for row in cursor.fetchall()), key=repr)
    return out


def earlier(rows: list[tuple], models: set[str]) -> list[tuple]:
    """The rows that name no model but the given ones (in a `model` or `source` column)."""
    def of(row: tuple) -> bool:
        fields = dict(row)
        named = fields.get("model", fields.get("source"))
        return named is None or named in models
    return [row for row in rows if of(row)]


def unchanged(before: dict[str, list[tuple]], after: dict[str, list[tuple]], models: set[str]) -> dict[str, list]:
    """table -> the earlier rows `after` no longer holds as they were (empty where every row stayed)."""
    return {table: [row for row in earlier(rows, models) if row not in set(after.get(table, []))]
            for table, rows in before.items()}


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("dtype", "metrics"), [("float32", METRICS), ("bfloat16", BF16_METRICS)])
def test_a_submitted_model_leaves_every_published_number_identical(prefect_harness, tmp_path, monkeypatch, dtype,
                                                                    metrics):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-test-key-submit-stable")
    monkeypatch.setenv("GREBENCH_TEST_OPENAI_KEY", "sk-test-submit-stable")
    runner = CliRunner()
    with OpenAIServer(rated_review) as candidate_server, AnthropicServer(DriftingAPI()) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        config = write_config(tmp_path, metrics, OPENAI_CANDIDATE.format(base_url=candidate_server.base_url),
                              stages=("preprocess", "generate", "score", "validate", "materialize"))
        text = config.read_text().replace("baselines = []\n", f'baselines = []\ndtype = "{dtype}"\n{SCORE.format(dtype=dtype)}', 1)
        config.write_text(text.replace(f"[validate]\nmetrics = {json.dumps(metrics)}",
                                       '[validate]\nmetrics = ["gem_raw", "bleu"]'))
        cfg = load_config(config).for_pipeline("t")
        assert set(cfg.score.all_metrics) == set(metrics) and cfg.validate.metrics == ("gem_raw", "bleu")
        write_curated(cfg)
        pipeline_flow(pipeline="t", config_path=str(config))     # outside CliRunner, as in test_submit_flow
        before = published(cfg)
        assert {"leaderboard", "releases", "release_changes"} <= set(before)
        board = [dict(row) for row in before["leaderboard"]]
        assert {row["model"] for row in board} == {"human", "gen-model"}
        assert len({row["release_id"] for row in board}) == 1
        finite = {row["metric"] for row in board if row["mean"] not in (None, "nan") and row["model"] == "gen-model"}
        assert finite == set(metrics)      # every family made a number for the generated model
        assert any(row["eval_lm"].startswith(f"smollm2|{dtype}") for row in board if row["metric"] == "gem_raw")
        judge = {row["predictor"] for row in board if row["metric"] == "llm_judge"}
        # the weighted panel on the board beside each member's own score (Auto-PRE)
        panel = {"judge:readout:local/smollm2+generate:anthropic/claude-judge", "judge:readout:local/smollm2",
                 "judge:generate:anthropic/claude-judge"}
        assert judge == (panel if "llm_judge" in metrics else set()), judge
        asked = api.counts["messages"]

        reviews = tmp_path / "agent.jsonl"
        reviews.write_text("".join(json.dumps({"paper_id": f"P{k}", "review": good_review(k, k % 2), "rating": 6.0})
                                   + "\n" for k in (1, 2, 3)))
        submitted = runner.invoke(app, ["submit", "--reviews", str(reviews), "--name", "agent", "--cutoff",
                                        "2024-03-01", "-c", str(config)])
        assert submitted.exit_code == 0, submitted.output
        after = published(cfg)
        assert {dict(row)["model"] for row in after["leaderboard"]} == {"human", "gen-model", "agent"}
        assert api.counts["messages"] > asked                     # the new model was judged, revised, preprocessed
        assert unchanged(before, after, {"human", "gen-model"}) == {table: [] for table in before}

        rescored = runner.invoke(app, ["run", "t", "--stages", "score,validate,materialize", "-c", str(config)])
        assert rescored.exit_code == 0, rescored.output
        again = published(cfg)
        assert unchanged(after, again, {"human", "gen-model", "agent"}) == {table: [] for table in after}
